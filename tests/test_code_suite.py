"""The code example suite and ``scorer: code`` through the whole plugin.

- ``scripts/make_code_suite.py`` is deterministic and gives at least 60 tasks whose tests the
  simulator's right code passes (and its wrong code fails) in a real sandbox.
- ``pytest --evalgate suites/code`` (a real subprocess against the simulator and the real
  sandbox) gates on pass@k per case: the rule's estimate equals the unbiased estimator computed
  here from the stored records; decision.json and the terminal carry the sandbox facts; the
  signed decision verifies.
- ``isolation: none`` runs, marks the decision unsandboxed and is never signed.
- Under ``-n 2`` each worker gets its share of ``sandbox.max_concurrency``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import defaultdict
from math import comb
from pathlib import Path
from typing import Any

import pytest
from sandboxkit import prepared
from suitekit import write_suite

from pytest_evalgate.sandbox import evalgate_sandbox_run
from pytest_evalgate.simulated.code_style import evalgate_sim_code, evalgate_sim_test_table

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
SUITE = REPO / "suites" / "code"
CODE_URL = "simulated://?code=1&accuracy={accuracy}&ttft_ms=1&tpot_ms=0.1&seed={seed}"


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_generator_rewrites_the_committed_dataset_byte_for_byte(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "make_code_suite.py"), "--out", str(tmp_path)],
        check=True, capture_output=True,
    )  # fmt: skip
    assert (tmp_path / "cases.jsonl").read_bytes() == (SUITE / "cases.jsonl").read_bytes()


def test_the_suite_has_sixty_tasks_or_more_with_assert_tests() -> None:
    rows = _rows(SUITE / "cases.jsonl")
    assert len(rows) >= 60 and len({row["id"] for row in rows}) == len(rows)
    for row in rows:
        assert row["target"].count("assert ") == 4, row["id"]
        assert evalgate_sim_test_table(row["target"]), row["id"]  # every line has that form
        assert "assert" not in row["input"]  # the tests stay hidden from the model
    assert len({row["category"] for row in rows}) == 4 and (SUITE / "README.md").exists()


def test_right_code_passes_and_wrong_code_fails_every_task_in_the_sandbox() -> None:
    spec = prepared("bwrap")
    rows = _rows(SUITE / "cases.jsonl")

    async def run_all(kind: str) -> list[str]:
        slots = asyncio.Semaphore(4)

        async def one(tests: str) -> str:
            async with slots:
                ran = await evalgate_sandbox_run(evalgate_sim_code(kind, tests), tests, spec)
            return ran.outcome

        return list(await asyncio.gather(*(one(row["target"]) for row in rows)))

    assert asyncio.run(run_all("right")) == ["passed"] * len(rows)
    assert asyncio.run(run_all("wrong")) == ["tests_failed"] * len(rows)


def _pytest(
    tmp_path: Path, target: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pytest", "--evalgate", str(target), "-p", "no:cacheprovider",
               "-q", "--tb=no", "-rN", f"--evalgate-store={tmp_path / 'store'}", *args]  # fmt: skip
    return subprocess.run(
        command, cwd=tmp_path, env={**os.environ, **(env or {})}, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip


def _keys(tmp_path: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pytest_evalgate.cli", "keygen", "--dir", str(tmp_path / "keys")],
        check=True, capture_output=True,
    )  # fmt: skip
    return tmp_path / "keys"


def _records(store: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for seg in sorted(store.rglob("*.jsonl")) for line in
            seg.read_text().splitlines()]  # fmt: skip


def _pass_at_k(n: int, c: int, k: int) -> float:
    return 1.0 - comb(n - c, k) / comb(n, k)  # Chen et al. 2021, directly


def test_the_example_suite_gates_on_pass_at_k_with_sandbox_facts(tmp_path: Path) -> None:
    keys = _keys(tmp_path)
    report = tmp_path / "report"
    result = _pytest(
        tmp_path, SUITE, f"--evalgate-report={report}", f"--evalgate-sign-key={keys}/evalgate.key"
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    decision = json.loads((report / "decision.json").read_text())
    records = _records(tmp_path / "store")
    assert len(records) == 64 * 2 * 3 and all("sandbox" in r for r in records)

    passes: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for record in records:
        assert record["passed"] is (record["sandbox"]["outcome"] == "passed")
        passes[(record["identity"]["candidate"], record["identity"]["case_id"])].append(
            record["passed"]
        )
    cases = sorted({case for _, case in passes})
    diffs = [
        _pass_at_k(3, sum(passes[("candidate", c)]), 2)
        - _pass_at_k(3, sum(passes[("baseline", c)]), 2)
        for c in cases
    ]
    rule = next(r for r in decision["rules"] if r["rule"] == "non_inferior")
    assert rule["estimate"] == pytest.approx(sum(diffs) / len(diffs), abs=1e-12)
    mean_diff = sum(
        sum(passes[("candidate", c)]) / 3 - sum(passes[("baseline", c)]) / 3 for c in cases
    ) / len(cases)
    assert rule["estimate"] != pytest.approx(mean_diff, abs=1e-9)  # pass@2, not the mean

    facts = decision["sandbox"]
    assert facts["sandboxed"] is True and facts["pass_at_k"] == 2
    assert facts["executions"] == 384 and facts["isolation"] in (["bwrap"], ["unshare"])
    assert sum(facts["outcomes"]["baseline"].values()) == 192
    assert facts["outcomes"]["baseline"]["passed"] == sum(
        r["passed"] for r in records if r["identity"]["candidate"] == "baseline"
    )
    assert decision["attestable"] is True and (report / "decision.dsse.json").exists()
    assert "sandbox: isolation " in result.stdout and "scores are pass@2 per case" in result.stdout
    assert "sandbox outcomes baseline: " in result.stdout


def _small_code_suite(tmp_path: Path, sandbox: dict[str, Any], **kwargs: Any) -> Path:
    rows = _rows(SUITE / "cases.jsonl")[:12]
    return write_suite(
        tmp_path / "suite",
        {"candidate": CODE_URL.format(accuracy=1.0, seed=1),
         "baseline": CODE_URL.format(accuracy=0.7, seed=2)},
        cases=rows,
        extra={
            "evaluator": {"revision": "t1", "scorer": "code"},
            "sandbox": sandbox,
            "generation": {"temperature": 0.0, "max_tokens": 1024},
        },
        **kwargs,
    )  # fmt: skip


def test_isolation_none_is_marked_unsandboxed_and_never_signed(tmp_path: Path) -> None:
    manifest = _small_code_suite(tmp_path, {"isolation": "none", "timeout_s": 5})
    report = tmp_path / "report"
    keys = _keys(tmp_path)
    result = _pytest(
        tmp_path, manifest.parent, f"--evalgate-report={report}",
        f"--evalgate-sign-key={keys}/evalgate.key",
    )  # fmt: skip
    decision = json.loads((report / "decision.json").read_text())
    assert decision["sandbox"]["sandboxed"] is False
    assert decision["sandbox"]["isolation"] == ["none"]
    assert decision["sandbox"]["unsandboxed_executions"] == 24
    assert decision["attestable"] is False
    assert not (report / "decision.dsse.json").exists()
    assert "decision not signed" in result.stdout
    assert "UNSANDBOXED: 24 executions" in result.stdout
    assert all(r["sandbox"]["sandboxed"] is False for r in _records(tmp_path / "store"))


def test_xdist_workers_share_the_sandbox_budget_and_agree(tmp_path: Path) -> None:
    manifest = _small_code_suite(tmp_path, {"max_concurrency": 2, "timeout_s": 5})
    report = tmp_path / "report"
    result = _pytest(tmp_path, manifest.parent, "-n", "2", f"--evalgate-report={report}")
    assert "passed" in result.stdout, result.stdout[-3000:] + result.stderr[-2000:]
    decision = json.loads((report / "decision.json").read_text())
    assert decision["counts"]["completed"] == 24 and decision["sandbox"]["executions"] == 24
    assert decision["sandbox"]["outcomes"]["candidate"] == {"passed": 12}


def test_a_sandbox_budget_smaller_than_the_processes_is_a_usage_error(tmp_path: Path) -> None:
    # Two shards (pods) share one sandbox slot: refused at collection, before any request.
    manifest = _small_code_suite(tmp_path, {"max_concurrency": 1})
    result = _pytest(tmp_path, manifest.parent, "--evalgate-shard=0/2")
    assert result.returncode == 4
    assert "sandbox.max_concurrency: 1 is less than the 2 processes" in result.stderr
    assert not (tmp_path / "store").exists() or _records(tmp_path / "store") == []
