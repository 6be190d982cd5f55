"""SIGKILL during judging, then rerun (issue 11): every judgment is committed exactly once and
no answer is generated again.

The candidates answer at once; the judge takes 100 ms a request with 4 in flight, so a run
spends about 3 s judging 120 stored answers. The run is killed once a third of the judgments
are committed (every answer is committed by then), and rerun to the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from assertkit import evalgate_decided_exit, evalgate_descendants, evalgate_wait_gone
from judgekit import judgment_counts, requests, run_pytest, split, write_judged_suite
from suitekit import make_cases

from pytest_evalgate.store import EvalgateLocalStore

pytestmark = pytest.mark.slow

ANSWERS = 120
DEADLINE_S = 60.0


def _answers_committed(store: Path) -> int:
    backend = EvalgateLocalStore(str(store))
    paths = [p for p in backend.evalgate_list("") if "/judge-" not in p]
    return sum(len(backend.evalgate_read(p).splitlines()) for p in paths)


def _wait(condition: object, process: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline and process.poll() is None:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.005)
    return False


def test_sigkill_while_judging_then_rerun_judges_each_answer_once(tmp_path: Path) -> None:
    path = write_judged_suite(
        tmp_path / "suite",
        cases=make_cases(["alpha", "beta"], 30),
        golden=False,
        judge_url="simulated://?judge=1&accuracy=0.9&latency_ms=100&seed=5",
        judge={"budget": {"max_concurrency": 4, "max_attempts": 3, "timeout_s": 10}},
    )
    store, log = tmp_path / "store", tmp_path / "requests.jsonl"
    command = [
        sys.executable, "-m", "pytest", "--evalgate", str(path.parent), "-q",
        "-p", "no:cacheprovider", f"--evalgate-store={store}", f"--evalgate-request-log={log}",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )

    def answered_and_a_third_judged() -> bool:
        # judging starts while answers still commit: under load a third can be judged before
        # the last answer is in, so the kill waits for both (judging 120 answers takes ~3 s)
        judged = sum(judgment_counts(store).values()) >= ANSWERS // 3
        return judged and _answers_committed(store) == ANSWERS

    try:
        assert _wait(answered_and_a_third_judged, process), "the run ended before the kill"
        below = evalgate_descendants(process.pid)  # the runner child and its judge
        os.kill(process.pid, signal.SIGKILL)
        process.wait(DEADLINE_S)
    finally:
        if process.poll() is None:
            process.kill()
    at_kill = judgment_counts(store)
    assert ANSWERS // 3 <= len(at_kill) < ANSWERS
    evalgate_wait_gone(below)  # what was on the wire reaches the log (children exit on EOF)
    first = requests(log)
    done = run_pytest(path.parent, store, log)
    assert done.returncode == evalgate_decided_exit(done.stdout)
    answers_then, _ = split(first)
    answers_now, judged_now = split(requests(log)[len(first) :])
    assert len(answers_then) == ANSWERS and answers_now == []  # no answer regenerated
    final = judgment_counts(store)
    assert len(final) == ANSWERS and set(final.values()) == {1}  # each judgment exactly once
    # The rerun judged exactly what was not committed, each once.
    assert Counter(judged_now).most_common(1)[0][1] == 1
    assert {_label(identity) for identity in judged_now} == set(final) - set(at_kill)


def _label(header: str) -> str:
    """``judge/<rev>/<candidate>/<case>[rN]`` as ``judgment_counts`` names it."""
    rest = header.removeprefix("judge/").split("/", 1)[1]
    return rest.replace("[r", "/r").replace("]", "/None")
