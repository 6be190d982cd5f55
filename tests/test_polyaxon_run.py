"""The rendered pipeline, run: each worker's and the aggregation's container, as Polyaxon's own
compiler resolves them for each mapped shard (command and plain env values), runs here as a
real process (``pytest`` as ``python -m pytest``; the run outputs path mapped into a temp
folder) against a real S3 store (SeaweedFS) and the simulator. The shards' JUnit rows, the
report in the aggregation's outputs and in the bucket, and the gate's verdict come out; the
``revision`` input reaches each pod and a wrong one stops it (exit 4)."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml
from seaweedkit import EvalgateSeaweed
from suitekit import make_cases, write_suite

from pytest_evalgate.k8s.polyaxon import EvalgatePolyaxonOptions, evalgate_polyaxon_render
from pytest_evalgate.k8s.store import EvalgateS3RenderOptions
from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.store import EvalgateS3Store

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # polyaxon 2.18's pydantic v1-style configs
    from polyaxon._compiler.contexts.contexts import resolve_contexts, resolve_globals_contexts
    from polyaxon.polyaxonfile import (
        CompiledOperationSpecification,
        OperationSpecification,
        check_polyaxonfile,
    )

pytestmark = pytest.mark.filterwarnings("ignore:Support for class-based `config`")
GOOD = "simulated://?accuracy=0.9&seed=5"
OTHER = "simulated://?accuracy=0.7&seed=6"
SHARDS = 2
CASES_PER_CATEGORY = 6
RUN_TIMEOUT_S = 120.0
PLX_ARTIFACTS = "/plx-context/artifacts"  # Polyaxon's mount of the run's artifacts


def _resolve(path: Path, params: dict[str, Any], run_path: str) -> Any:
    """The container of ``path`` as Polyaxon's compiler resolves it for one run."""
    op = check_polyaxonfile(polyaxonfile=str(path), params=params, is_cli=False, to_op=True)
    compiled = OperationSpecification.compile_operation(op)
    now = datetime.datetime.now(datetime.UTC)
    run = {"namespace": "ns", "owner_name": "o", "project_name": "p", "project_uuid": "u",
           "run_uuid": run_path, "run_name": run_path, "run_path": run_path, "iteration": 0,
           "created_at": now, "compiled_at": now}  # fmt: skip
    globals_ = resolve_globals_contexts(**run, plugins=compiled.plugins)
    compiled = CompiledOperationSpecification.apply_params(compiled, op.params, globals_)
    compiled = CompiledOperationSpecification.apply_operation_contexts(compiled, contexts=globals_)
    contexts = resolve_contexts(
        **run, compiled_operation=compiled, artifacts_store=None, connection_by_names={}
    )
    return CompiledOperationSpecification.apply_runtime_contexts(compiled, contexts).run.container


def _plain_env(container: Any) -> dict[str, str]:
    """The container's env entries with a plain value (Polyaxon gives dicts or V1EnvVar)."""
    found = {}
    for item in container.env:
        entry = item if isinstance(item, dict) else item.to_dict()
        if entry.get("value") is not None:
            found[entry["name"]] = str(entry["value"])
    return found


def _run(container: Any, root: Path, seaweed: EvalgateSeaweed, **env: str) -> tuple[int, str]:
    """Run the resolved container's command here; (exit status, output)."""
    command = [word.replace(PLX_ARTIFACTS, str(root / "artifacts")) for word in container.command]
    assert command[0] == "pytest"
    values = _plain_env(container)
    steering = ("JOB_COMPLETION_INDEX", "PYTEST_EVALGATE_", "PYTEST_ADDOPTS", "AWS_")
    base = {k: v for k, v in os.environ.items() if not k.startswith(steering)}
    # keys never come from files: the credentials are the test server's, as a Secret would give
    merged = {**base, **values, **seaweed.env(), "HOME": str(root), **env}
    merged["AWS_ENDPOINT_URL"] = values["AWS_ENDPOINT_URL"]  # the rendered endpoint is used
    (root / "artifacts").mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", *command], cwd=root, env=merged, capture_output=True,
        text=True, timeout=RUN_TIMEOUT_S, check=False,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def _testcases(path: Path) -> list[ET.Element]:
    return [
        case
        for case in ET.parse(path).iter("testcase")
        if "evalgate.gate" not in str(case.get("classname"))
    ]


def test_the_rendered_pipeline_runs_shards_then_gates_on_s3(
    tmp_path: Path, seaweed: EvalgateSeaweed
) -> None:
    suite = write_suite(
        tmp_path / "suite",
        {"candidate": GOOD, "baseline": OTHER},
        cases=make_cases(["alpha", "beta"], CASES_PER_CATEGORY),
        shards=SHARDS,
    )
    manifest = evalgate_load_manifest(str(suite))
    location = seaweed.new_store()
    s3 = EvalgateS3RenderOptions(store=location, endpoint=seaweed.endpoint, workload_identity=True)
    options = EvalgatePolyaxonOptions(suite_path="suite", s3=s3)
    files = evalgate_polyaxon_render(manifest, SHARDS, "registry.example/evalgate:1", options)
    for name, body in files.items():
        (tmp_path / name).write_text(yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
    matrix = files["pipeline.yaml"]["run"]["operations"][0]["matrix"]["values"]
    rows: list[tuple[str | None, str | None]] = []
    for values in matrix:  # the mapping: one worker run per value
        run_path = f"runs/shard-{values['shard']}"
        container = _resolve(tmp_path / "worker.yaml", values, run_path)
        status, output = _run(container, tmp_path, seaweed)
        assert status == 0, output[-3000:]
        junit = tmp_path / "artifacts" / run_path / "outputs" / f"junit-shard-{values['shard']}.xml"
        rows += [(case.get("classname"), case.get("name")) for case in _testcases(junit)]
    # every identity (2 categories x 6 cases x 2 candidates), each in exactly one shard's rows
    assert len(rows) == len(set(rows)) == 2 * CASES_PER_CATEGORY * 2
    container = _resolve(tmp_path / "aggregate.yaml", {}, "runs/aggregate")
    status, output = _run(container, tmp_path, seaweed)
    assert status == 0, output[-3000:]
    report = tmp_path / "artifacts" / "runs" / "aggregate" / "outputs" / "report"
    decision = json.loads((report / "decision.json").read_text())
    assert decision["verdict"] == "pass"
    assert decision["counts"]["completed"] == decision["counts"]["expected"] == len(rows)
    bucket = EvalgateS3Store(location, client=seaweed.client())
    (kept,) = bucket.evalgate_children(f"{manifest.suite}/decisions")
    prefix = f"{manifest.suite}/reports/{kept.removesuffix('.json')}"
    assert bucket.evalgate_read(f"{prefix}/report.md") == (report / "report.md").read_bytes()


def test_a_worker_rendered_for_another_revision_stops_before_any_request(
    tmp_path: Path, seaweed: EvalgateSeaweed
) -> None:
    suite = write_suite(tmp_path / "suite", {"candidate": GOOD, "baseline": OTHER}, shards=SHARDS)
    manifest = evalgate_load_manifest(str(suite))
    location = seaweed.new_store()
    s3 = EvalgateS3RenderOptions(store=location, endpoint=seaweed.endpoint, workload_identity=True)
    options = EvalgatePolyaxonOptions(suite_path="suite", s3=s3)
    files = evalgate_polyaxon_render(manifest, SHARDS, "registry.example/evalgate:1", options)
    (tmp_path / "worker.yaml").write_text(yaml.safe_dump(files["worker.yaml"]), encoding="utf-8")
    params = {"shard": 0, "revision": "f" * 16}  # the pipeline's input, overridden at submit
    container = _resolve(tmp_path / "worker.yaml", params, "runs/shard-0")
    assert _plain_env(container)["PYTEST_EVALGATE_DEFINITION"] == "f" * 16
    status, output = _run(container, tmp_path, seaweed)
    assert status == 4
    assert f"but it was rendered for {'f' * 16}" in output
    bucket = EvalgateS3Store(location, client=seaweed.client())
    assert bucket.evalgate_list("") == []  # nothing was written: no request, no record
