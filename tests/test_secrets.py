"""Secrets stay secret (issue 19): a suite whose endpoints (candidate and judge) echo the key in
every error is run for real (``pytest --evalgate`` in a subprocess, real simulators on
127.0.0.1); then every file the run wrote (store, JUnit, reports, log file, request log) and its
captured output are searched for each key value and for any unredacted ``Bearer <token>``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from judgekit import run_pytest, write_judged_suite

from pytest_evalgate.client.redact import EVALGATE_REDACTED

KEYS = {
    "EVALGATE_TEST_CANDIDATE_KEY": "sk-cand-7f3a9c1e5b2d4f60aa11",
    "EVALGATE_TEST_BASELINE_KEY": "sk-base-0d9e8c7b6a5f4e3d2c1b",
    "EVALGATE_TEST_JUDGE_KEY": "sk-judge-51aa62bb73cc84dd95ee",
}
BEARER = re.compile(r"bearer\s+(?!\[REDACTED\])\S+", re.IGNORECASE)


def _suite(folder: Path) -> Path:
    path = write_judged_suite(
        folder,
        candidate="simulated://?accuracy=0.9&seed=1&fault=echo_key",
        baseline="simulated://?accuracy=0.9&seed=2",
        judge_url="simulated://?judge=1&accuracy=0.9&seed=5&fault=echo_key",
        judge={"api_key_env": "EVALGATE_TEST_JUDGE_KEY"},
    )
    raw = yaml.safe_load(path.read_text())
    raw["candidates"]["candidate"]["api_key_env"] = "EVALGATE_TEST_CANDIDATE_KEY"
    raw["candidates"]["baseline"]["api_key_env"] = "EVALGATE_TEST_BASELINE_KEY"
    raw["budget"]["max_attempts"] = 2
    raw["judge"]["budget"]["max_attempts"] = 2
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_no_key_reaches_any_file_or_line_of_a_run_whose_endpoints_echo_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    suite = _suite(tmp_path / "suite")
    out = tmp_path / "out"
    out.mkdir()
    done = run_pytest(
        suite.parent,
        out / "store",
        out / "requests.jsonl",
        f"--evalgate-report={out / 'report'}",
        f"--junitxml={out / 'junit.xml'}",
        f"--log-file={out / 'run.log'}",
        "--log-file-level=DEBUG",
        "--log-cli-level=INFO",
        "-rA",
        "--tb=short",
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stdout + done.stderr  # incomplete: errors everywhere
    written = {p: p.read_text(errors="replace") for p in out.rglob("*") if p.is_file()}
    assert any(p.suffix == ".jsonl" and "store" in p.parts for p in written)
    assert {"junit.xml", "run.log", "requests.jsonl"} <= {p.name for p in written}
    texts = {**{str(p): t for p, t in written.items()}, "stdout": done.stdout}
    texts["stderr"] = done.stderr
    for where, text in texts.items():
        for value in KEYS.values():
            assert value not in text, f"a key value in {where}"
        assert not BEARER.search(text), f"a bearer token in {where}: {BEARER.search(text)}"
    # The endpoints did echo the keys: the candidate's and the judge's errors say so, redacted.
    stored = "".join(t for p, t in written.items() if "store" in p.parts)
    assert f"Authorization: Bearer {EVALGATE_REDACTED}" in stored
    assert f"key {EVALGATE_REDACTED} is unknown" in stored
    assert "judge_server_error" in stored
    assert f"Bearer {EVALGATE_REDACTED}" in done.stdout
    assert f"Bearer {EVALGATE_REDACTED}" in written[out / "junit.xml"]
