"""Write small judged suites (SPEC section 10) into a test folder and read what a run did.

The candidates and the judge are ``simulated://`` URLs, so a run spawns real simulators; the
request log (``--evalgate-request-log``) of all of them is one file, one JSON line a request,
told apart by model and identity header (judge requests' identities start with ``judge/``).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from inprockit import run_cli_inprocess as run_cli_inprocess
from suitekit import make_cases, write_suite

from pytest_evalgate.store import EvalgateLocalStore

JUDGE_MODEL = "judge-model"
RUN_TIMEOUT_S = 120.0
POINTWISE = {"scale": {"min": 1, "max": 5, "pass": 4}}


def judge_block(url: str, **overrides: Any) -> dict[str, Any]:
    """A ``judge:`` block for ``url`` (a ``simulated://?judge=1...`` URL)."""
    block: dict[str, Any] = {
        "model": JUDGE_MODEL,
        "base_url": url,
        "revision": "judge-prompt-v1",
        "temperature": 0,
        "seed": 0,
        "pins": {"family": "judge-family", "training_run": "judge-run-1"},
        "budget": {"max_concurrency": 8, "max_attempts": 3, "timeout_s": 10},
    }
    block.update(overrides)
    return block


def golden_rows(cases: Sequence[Mapping[str, Any]], mode: str) -> list[dict[str, Any]]:
    """People's labels: per case the target (5 / preferred), a vague reply (3), a wrong one (1)."""
    rows: list[dict[str, Any]] = []
    for case in cases:
        good, vague, bad = case["target"], f"maybe {case['target']}, not sure", "no idea at all"
        if mode == "pointwise":
            rows += [
                {"case_id": case["id"], "output": good, "label": 5},
                {"case_id": case["id"], "output": vague, "label": 3},
                {"case_id": case["id"], "output": bad, "label": 1},
            ]
        else:
            rows += [
                {"case_id": case["id"], "output_a": good, "output_b": bad, "preferred": "A"},
                {"case_id": case["id"], "output_a": bad, "output_b": good, "preferred": "B"},
            ]
    return rows


def write_judged_suite(
    folder: Path,
    *,
    mode: str = "pointwise",
    candidate: str = "simulated://?accuracy=0.9&seed=1",
    baseline: str = "simulated://?accuracy=0.9&seed=2",
    judge_url: str = "simulated://?judge=1&accuracy=0.9&seed=5",
    judge: Mapping[str, Any] | None = None,
    cases: Sequence[Mapping[str, Any]] | None = None,
    rules: Sequence[Mapping[str, Any]] | None = None,
    golden: bool = True,
    rubric: str | None = "Grade the reply: 5 right, 1 wrong.\n",
    candidate_pins: Mapping[str, Any] | None = None,
    models: Mapping[str, str] | None = None,
) -> Path:
    """A pinned judged suite; returns its manifest path. ``rubric=None`` writes no rubric."""
    rows = list(cases if cases is not None else make_cases(["alpha", "beta"], 10))
    block = judge_block(judge_url, **dict(judge or {}))
    folder.mkdir(parents=True, exist_ok=True)
    if golden:
        text = "".join(json.dumps(row) + "\n" for row in golden_rows(rows, mode))
        (folder / "golden.jsonl").write_text(text)
        block.setdefault("golden", "golden.jsonl")
    if rubric is not None:
        (folder / "rubric.md").write_text(rubric)
    evaluator: dict[str, Any] = {"revision": "e1", "scorer": "judge", "mode": mode}
    evaluator.update(rubric="rubric.md", **(POINTWISE if mode == "pointwise" else {}))
    default_rules = [{"slice": "all", "rule": "pairwise" if mode == "pairwise" else "non_inferior",
                      "margin": 0.2}]  # fmt: skip
    policy = {
        "version": "judge-gate-v1",
        "bootstrap": {"resamples": 2000, "seed": 0},
        "rules": list(rules if rules is not None else default_rules),
    }
    path = write_suite(
        folder,
        {"candidate": candidate, "baseline": baseline},
        cases=rows,
        policy=policy,
        extra={"evaluator": evaluator, "judge": block},
        models=models,
    )
    if candidate_pins:
        raw = yaml.safe_load(path.read_text())
        raw["candidates"]["candidate"]["pins"].update(candidate_pins)
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def set_judge(path: Path, **changes: Any) -> None:
    """Change keys of the manifest's judge block in place."""
    raw = yaml.safe_load(path.read_text())
    raw["judge"].update(changes)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


def _pytest_args(suite: Path, store: Path, log: Path, *extra: str) -> list[str]:
    """The arguments of ``pytest --evalgate SUITE`` with the request log (both runners)."""
    return [
        "--evalgate", str(suite), "-q", "-p", "no:cacheprovider", "-rN", "--tb=no",
        f"--evalgate-store={store}", f"--evalgate-request-log={log}", *extra,
    ]  # fmt: skip


def run_pytest(
    suite: Path, store: Path, log: Path, *extra: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``pytest --evalgate SUITE`` in a subprocess, with the request log."""
    command = [sys.executable, "-m", "pytest", *_pytest_args(suite, store, log, *extra)]
    return subprocess.run(
        command, cwd=cwd or suite.parent, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )


def run_pytest_inprocess(
    pytester: pytest.Pytester, suite: Path, store: Path, log: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    """The same run as :func:`run_pytest`, in this process (pytester's in-process run), with
    its exit status and its pytest output as a completed process. It saves the start of a
    Python with the plugin's imports (tests/conftest.py pre-imports numpy and the rest); the
    simulators, the runner's child and xdist workers are still processes of their own. A test
    that kills or signals the pytest process itself needs :func:`run_pytest`."""
    argv = _pytest_args(suite, store, log, *extra)
    with contextlib.chdir(suite.parent):  # where run_pytest runs: the same rootdir and node ids
        result = pytester.runpytest_inprocess(*argv)
    return subprocess.CompletedProcess(
        argv, int(result.ret), result.stdout.str(), result.stderr.str()
    )


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``evalgate ARGS`` in a subprocess."""
    command = [sys.executable, "-m", "pytest_evalgate.cli", *args]
    env = dict(os.environ)
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env
    )


def requests(log: Path) -> list[dict[str, Any]]:
    """Every completion request logged so far (all simulators of the runs)."""
    if not log.exists():
        return []
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [row for row in rows if row.get("identity")]


def split(rows: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(candidate-side identities, judge identities) of logged requests."""
    judge = [row["identity"] for row in rows if str(row["identity"]).startswith("judge/")]
    answers = [row["identity"] for row in rows if not str(row["identity"]).startswith("judge/")]
    return answers, judge


def judgment_lines(store: Path) -> list[dict[str, Any]]:
    """Every committed judgment record in the store (any judge key)."""
    backend = EvalgateLocalStore(str(store))
    found = []
    for relpath in backend.evalgate_list(""):
        if "/judge-" not in relpath:
            continue
        found += [json.loads(line) for line in backend.evalgate_read(relpath).splitlines()]
    return found


def judgment_counts(store: Path, judge_key_prefix: str | None = None) -> Counter[str]:
    """Judgment label -> committed lines holding it (of one judge key when given)."""
    counts: Counter[str] = Counter()
    for record in judgment_lines(store):
        if judge_key_prefix and not record["judge_key"].startswith(judge_key_prefix):
            continue
        part = record["judgment"]
        counts[f"{part['candidate']}/{part['case_id']}/r{part['repetition']}/{part['order']}"] += 1
    return counts


def decision(report: Path) -> dict[str, Any]:
    """The decision.json a run wrote."""
    return dict(json.loads((report / "decision.json").read_text()))
