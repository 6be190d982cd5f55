"""Cells: cells.yaml read and refused, ``canary rollout --cells`` rendering per-cell
AnalysisTemplates, InferencePools, HTTPRoutes and Rollouts (each validated against its CRD in
``../shared/crds``, skipped with a reason where absent) and a wave plan that reads in order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import crdkit
import pytest
import yaml

from pytest_evalgate.canary.cells import evalgate_load_cells
from pytest_evalgate.cli import main
from pytest_evalgate.errors import EvalgateConfigError

REPO = Path(__file__).resolve().parents[1]
CRDS = REPO.parent / "shared" / "crds"
SUPPORT = REPO / "suites" / "support"
THREE = """cells:
  - {name: use1a, route: support-use1a, namespace: serve-use1a,
     pools: {stable: support-stable, canary: support-canary}}
  - {name: use1b, route: support-use1b, namespace: serve-use1b,
     pools: {stable: support-stable, canary: support-canary}, selector: 'cell="use1b"'}
  - {name: euw1a, route: support-euw1a, namespace: serve-euw1a,
     pools: {stable: eu-stable, canary: eu-canary}}
cross_cell_bake: 2h
"""
Capsys = pytest.CaptureFixture[str]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cells.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def validators() -> dict[tuple[str, str], Any]:
    if not CRDS.is_dir():
        pytest.skip(f"{CRDS} is absent (a plain clone has no shared/crds): cell objects unchecked")
    files = ["analysis-template-crd.yaml", "rollout-crd.yaml",
             "gateway.networking.k8s.io_httproutes.yaml",
             "inference.networking.k8s.io_inferencepools.yaml"]  # fmt: skip
    return crdkit.crd_validators(CRDS, files)


def rollout(tmp_path: Path, capsys: Capsys) -> tuple[list[dict[str, Any]], list[str]]:
    argv = ["canary", "rollout", str(SUPPORT), "--cells", str(write(tmp_path, THREE)),
            "--bake", "10m"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    comments = [line[2:] for line in out.splitlines() if line.startswith("# ")]
    return [obj for obj in yaml.safe_load_all(out) if obj], comments


def test_three_cells_render_valid_objects(
    tmp_path: Path, capsys: Capsys, validators: dict[tuple[str, str], Any]
) -> None:
    objects, _ = rollout(tmp_path, capsys)
    assert len(objects) == 3 * 5
    for obj in objects:
        validators[(obj["apiVersion"], obj["kind"])].validate(obj)
    by_cell: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        by_cell.setdefault(obj["metadata"]["labels"]["evalgate.dev/cell"], []).append(obj)
    assert list(by_cell) == ["use1a", "use1b", "euw1a"]  # wave order
    for cell, group in by_cell.items():
        assert {obj["metadata"]["namespace"] for obj in group} == {f"serve-{cell}"}
        kinds = [obj["kind"] for obj in group]
        assert kinds == [
            "AnalysisTemplate",
            "InferencePool",
            "InferencePool",
            "HTTPRoute",
            "Rollout",
        ]
    rollouts = [obj for obj in objects if obj["kind"] == "Rollout"]
    assert [r["metadata"]["name"] for r in rollouts] == [
        "support-eval-use1a", "support-eval-use1b", "support-eval-euw1a",
    ]  # fmt: skip
    assert [r["spec"].get("paused", False) for r in rollouts] == [False, True, True]
    routes = [obj for obj in objects if obj["kind"] == "HTTPRoute"]
    eu = routes[2]["spec"]["rules"][1]["backendRefs"]
    assert [ref["name"] for ref in eu] == ["eu-stable", "eu-canary"]


def test_each_cells_analysis_reads_its_own_metrics(tmp_path: Path, capsys: Capsys) -> None:
    objects, _ = rollout(tmp_path, capsys)
    templates = [obj for obj in objects if obj["kind"] == "AnalysisTemplate"]
    queries = [[m["provider"]["prometheus"]["query"] for m in t["spec"]["metrics"]]
               for t in templates]  # fmt: skip
    assert all('namespace="serve-use1a"' in q for q in queries[0])
    assert all('cell="use1b"' in q and "serve-use1b" not in q for q in queries[1])
    assert all('namespace="serve-euw1a"' in q for q in queries[2])


def test_the_wave_plan_reads_in_order(tmp_path: Path, capsys: Capsys) -> None:
    _, comments = rollout(tmp_path, capsys)
    plan = [line for line in comments if line.startswith(("wave", "bake"))]
    assert [line.split(":")[0] for line in plan] == [
        "wave 1", "bake 2h across cells", "wave 2", "bake 2h across cells", "wave 3",
    ]  # fmt: skip
    assert "cell use1a (starts at once)" in plan[0]
    assert "1 % for 10m, 5 % for 10m, 25 % for 10m, 50 % for 10m, then promote" in plan[0]
    assert "kubectl argo rollouts resume support-eval-use1b -n serve-use1b" in plan[2]
    assert "canary check --cell use1a passing, before wave 2" in plan[1]
    rollbacks = [line for line in comments if line.startswith("rollback of cell")]
    assert [line.split(":")[0] for line in rollbacks] == [
        "rollback of cell use1a", "rollback of cell use1b", "rollback of cell euw1a",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "text, key",
    [
        ("cells: []\n", "cells"),
        ("cells:\n  - {name: A, route: r, namespace: n, pools: {stable: s, canary: c}}\n",
         "cells[0].name"),
        ("cells:\n  - {name: a, route: r, namespace: n, pools: {stable: s, canary: s}}\n",
         "cells[0].pools.canary"),
        ("cells:\n  - {name: a, route: r, namespace: n, pools: {stable: s}}\n",
         "cells[0].pools.canary"),
        ("cells:\n  - {name: a, route: r, namespace: n, pools: {stable: s, canary: c}, x: 1}\n",
         "cells[0].x"),
        ("cells:\n  - {name: a, route: r, namespace: n, pools: {stable: s, canary: c},"
         " selector: 'version=\"x\"'}\n", "cells[0].selector"),
        ("cells:\n  - {name: a, route: r, namespace: n, pools: {stable: s, canary: c}}\n"
         "  - {name: a, route: q, namespace: n, pools: {stable: s, canary: c}}\n",
         "cells[1].name"),
        ("cells:\n  - {name: a, route: r, namespace: n, pools: {stable: s, canary: c}}\n"
         "cross_cell_bake: soon\n", "cross_cell_bake"),
    ],
)  # fmt: skip
def test_bad_cells_are_refused_naming_file_and_key(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(EvalgateConfigError) as raised:
        evalgate_load_cells(path)
    assert (raised.value.source, raised.value.key) == (str(path), key)


def test_bad_cells_exit_4(tmp_path: Path, capsys: Capsys) -> None:
    path = write(tmp_path, "cells: [{name: a}]\n")
    assert main(["canary", "rollout", str(SUPPORT), "--cells", str(path)]) == 4
    assert str(path) in capsys.readouterr().err


def test_rollout_needs_pools_or_cells(capsys: Capsys) -> None:
    assert main(["canary", "rollout", str(SUPPORT)]) == 4
    assert "--cells" in capsys.readouterr().err


def test_an_unknown_cell_and_a_cell_without_cells(tmp_path: Path, capsys: Capsys) -> None:
    path = write(tmp_path, THREE)
    argv = ["canary", "check", str(SUPPORT), "--prometheus", "http://127.0.0.1:9"]
    assert main([*argv, "--cells", str(path), "--cell", "nope"]) == 4
    assert "no cell 'nope' (cells: use1a, use1b, euw1a)" in capsys.readouterr().err
    assert main([*argv, "--cell", "use1a"]) == 4
    assert "--cells" in capsys.readouterr().err
