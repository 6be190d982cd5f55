"""Shards without a shared volume (issue 15): 4 shard processes write one S3 store (a real
SeaweedFS); one is SIGKILLed mid-run and restarted with the same command; aggregation then reads
S3 only. Every identity is stored exactly once, and the decision equals the one a single process
reaches on a folder store (tests/test_shards.py is the folder version).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from assertkit import evalgate_decision_exit
from seaweedkit import EvalgateSeaweed
from suitekit import make_cases, write_suite
from test_shards import (
    CATEGORIES,
    NO_CACHE,
    POLICY,
    REPETITIONS,
    RUN_TIMEOUT_S,
    _decision,
    _expected_identities,
    _same_decision,
    _shard_identities,
    _wait_for,
    _whole,
)

from pytest_evalgate.aggregate.combine import EvalgateSelection, evalgate_aggregate
from pytest_evalgate.manifest.load import EvalgateManifest, evalgate_load_manifest
from pytest_evalgate.store import EvalgateIdentity, EvalgateS3Store

SHARDS = 4
CANDIDATE = "simulated://?accuracy=0.9&accuracy.gamma=0.7&seed=11&latency_ms=60"
BASELINE = "simulated://?accuracy=0.8&seed=12&latency_ms=60"


def _env(seaweed: EvalgateSeaweed) -> dict[str, str]:
    steering = ("JOB_COMPLETION_INDEX", "PYTEST_EVALGATE_", "PYTEST_ADDOPTS", "AWS_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(steering)}
    return {**env, **seaweed.env()}


def _start(root: Path, name: str, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "pytest", "--evalgate", "suite", *NO_CACHE, "-q", *args]
    with open(root / f"{name}.out", "wb") as out:
        return subprocess.Popen(
            argv, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _committed(store: EvalgateS3Store, shard_dir: str = "") -> list[bytes]:
    lines: list[bytes] = []
    for relpath in store.evalgate_list(""):
        if f"/{shard_dir}" in relpath and "/seg-" in relpath:
            lines += store.evalgate_read(relpath).splitlines()
    return lines


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    os.killpg(process.pid, signal.SIGKILL)  # pytest and the simulators it spawned, as a pod
    process.wait(RUN_TIMEOUT_S)


def test_shards_on_s3_survive_a_killed_shard(seaweed: EvalgateSeaweed, tmp_path: Path) -> None:
    suite = write_suite(
        tmp_path / "suite",
        {"candidate": CANDIDATE, "baseline": BASELINE},
        cases=make_cases(CATEGORIES, 10),
        repetitions=REPETITIONS,
        shards=SHARDS,
        budget={"max_concurrency": SHARDS, "max_attempts": 3, "timeout_s": 10},
        policy=POLICY,
    )
    manifest = evalgate_load_manifest(str(suite))
    location = seaweed.new_store()
    store = EvalgateS3Store(location, client=seaweed.client())
    env = _env(seaweed)
    started: list[subprocess.Popen[bytes]] = []
    try:
        single = _start(tmp_path, "single", env, "--evalgate-store=folder-store",
                        "--evalgate-report=folder-report")  # fmt: skip
        started.append(single)
        shards = {
            i: _start(tmp_path, f"shard{i}", env, f"--evalgate-shard={i}/{SHARDS}",
                      f"--evalgate-store={location}")
            for i in range(SHARDS)
        }  # fmt: skip
        started += shards.values()
        victim_dir = f"shard-1-of-{SHARDS}"
        seen = _wait_for(lambda: bool(_committed(store, victim_dir)), shards[1])
        assert seen, "shard 1 ended before its first commit: make the simulator slower"
        _kill_group(shards[1])
        at_kill = len(_committed(store, victim_dir))
        assert 0 < at_kill < _shard_identities(manifest, 1, SHARDS), "not killed mid-run"
        shards[1] = _start(tmp_path, "shard1-again", env, f"--evalgate-shard=1/{SHARDS}",
                           f"--evalgate-store={location}")  # fmt: skip
        started.append(shards[1])
        for index, process in shards.items():
            out = (tmp_path / f"shard{index}.out").read_text()[-3000:]
            assert process.wait(RUN_TIMEOUT_S) == 0, f"shard {index} failed:\n{out}"
        _assert_exactly_once(store, manifest)
        gate = _start(tmp_path, "gate", env, "--evalgate-aggregate",
                      f"--evalgate-store={location}", "--evalgate-report=s3-report")  # fmt: skip
        started.append(gate)
        gate_exit = gate.wait(RUN_TIMEOUT_S)
        single_exit = single.wait(RUN_TIMEOUT_S)
    finally:
        for process in started:
            if process.poll() is None:
                _kill_group(process)
    implied = evalgate_decision_exit(_decision(tmp_path / "folder-report"))
    assert single_exit == implied, (tmp_path / "single.out").read_text()[-3000:]
    assert gate_exit == single_exit, (tmp_path / "gate.out").read_text()[-3000:]
    decision = _decision(tmp_path / "s3-report")
    _whole(decision, len(_expected_identities(manifest)), "S3 shards")
    _same_decision(_decision(tmp_path / "folder-report"), decision, "S3 shards, one killed")


def _assert_exactly_once(store: EvalgateS3Store, manifest: EvalgateManifest) -> None:
    lines = Counter(
        EvalgateIdentity.evalgate_from(json.loads(line)["identity"]) for line in _committed(store)
    )
    expected = _expected_identities(manifest)
    assert set(lines) == expected
    assert max(lines.values()) == 1, [key for key, n in lines.items() if n > 1]
    selection = EvalgateSelection(
        tuple(manifest.candidates), tuple(case.case_id for case in manifest.cases)
    )
    aggregate = evalgate_aggregate(store, manifest, selection, None)
    assert aggregate.status == "complete", aggregate.problems
    assert aggregate.completed == aggregate.expected == len(expected)
    assert aggregate.duplicates == 0
