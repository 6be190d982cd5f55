"""Permanent per-case errors are named as suite defects (issue 37, First use): a case whose
request the endpoint refuses as such (longer than the context: a 400 that names the request)
fails the same way on every run and kept the verdict incomplete forever. The terminal names
the case, the error and what to change, down to the ``dataset.exclude`` entry that leaves it
out; with it the next run decides. A real loopback server and real ``pytest --evalgate`` runs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from inprockit import run_pytest_inprocess
from suitekit import make_cases, write_suite
from test_bad_request_scope import LONG, _Server, serve  # noqa: F401  (serve: the fixture)

pytestmark = pytest.mark.slow


def _pytest(
    pytester: pytest.Pytester, suite: Path, tmp_path: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    # in this process (tests/inprockit.py): the endpoint is a thread here either way
    argv = ["--evalgate", str(suite), "-p", "no:cacheprovider", "-q",
            f"--evalgate-store={tmp_path / 'store'}", *extra]  # fmt: skip
    return run_pytest_inprocess(pytester, *argv, cwd=tmp_path)


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_a_case_longer_than_the_context_is_named_a_suite_defect(
    tmp_path: Path,
    serve: list[_Server],  # noqa: F811
    xdist: list[str],
    pytester: pytest.Pytester,
) -> None:
    server = _Server({"Question 1 about a:": LONG})
    server.thread.start()
    serve.append(server)
    suite = write_suite(
        tmp_path / "suite",
        {"candidate": server.base_url, "baseline": server.base_url},
        cases=make_cases(["a", "b"], 5),
        budget={"max_concurrency": 2, "max_attempts": 2, "timeout_s": 10},
        extra={"stream": False},
    ).parent
    done = _pytest(pytester, suite, tmp_path, *xdist)
    out = done.stdout + done.stderr
    assert done.returncode == 1 and "verdict INCOMPLETE" in out, out[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("suite defect")]
    assert lines == [
        "suite defect: case a-001 (baseline, candidate): the endpoint refuses its request on every"
        " run (bad_request, HTTP 400: This model's maximum context length is 2048 tokens. However,"
        " you requested 9000 tokens.); shorten or split the case, or leave it out with"
        " dataset.exclude: [{case: a-001, reason: ...}]"
    ], done.stdout[-3000:]
    # Done as the line says, the next run decides: nothing of a-001 is asked again.
    path = suite / "evalgate.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["dataset"]["exclude"] = [{"case": "a-001", "reason": "longer than the 2k context"}]
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    asked = server.asked
    again = _pytest(pytester, suite, tmp_path, *xdist)
    assert "verdict PASS" in again.stdout, again.stdout[-3000:]
    assert "suite defect" not in again.stdout and server.asked == asked
