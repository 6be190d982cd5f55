"""Shards from outside (issue 7): the verdict does not depend on how the work was split, and the
rendered Kubernetes pod command, run locally, survives a killed index.

1. One suite decided five ways (``-n 0``, ``-n 2``, ``-n 4``, and 4 shard processes into one
   store then ``--evalgate-aggregate``) gives one decision record.
2. The worker Job's pod command from ``evalgate_render`` runs as N local processes (the kubelet's
   ``$(VAR)`` expansion, ``/store`` mapped to a tmp folder); one index is SIGKILLed mid-run and
   restarted with the same command and env; the aggregation Job's command then gives the same
   decision as a single-process run, and every identity is in the store exactly once.
3. ``--evalgate-shard=auto/N`` reads ``JOB_COMPLETION_INDEX``; without it, a usage error.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from assertkit import evalgate_decision_exit
from suitekit import make_cases, write_answer_key, write_suite

from pytest_evalgate.aggregate.combine import EvalgateSelection, evalgate_aggregate
from pytest_evalgate.k8s.render import evalgate_render
from pytest_evalgate.k8s.render_types import EVALGATE_STORE_MOUNT, EvalgateRenderOptions
from pytest_evalgate.manifest.load import (
    EvalgateManifest,
    evalgate_base_url_env,
    evalgate_load_manifest,
)
from pytest_evalgate.shard.plan import shard_for
from pytest_evalgate.simulated.knobs import evalgate_parse_simulated_url
from pytest_evalgate.simulated.server import EvalgateSimServer
from pytest_evalgate.store import EvalgateIdentity, EvalgateLocalStore

# Candidate better than baseline on average, with a weak category, so that rules differ.
CANDIDATE = "simulated://?accuracy=0.9&accuracy.gamma=0.7&seed=11"
BASELINE = "simulated://?accuracy=0.8&seed=12"
CATEGORIES = ("alpha", "beta", "gamma")
REPETITIONS = 2
POLICY: dict[str, Any] = {
    "version": "shards-gate-v1",
    "confidence": 0.95,
    "correction": "holm",
    "bootstrap": {"resamples": 2000, "seed": 0},
    "rules": [
        {"slice": "all", "rule": "non_inferior", "margin": 0.05},
        {"slice": "beta", "rule": "non_inferior", "margin": 0.02},
        {"slice": "*", "rule": "no_regression"},
        {"slice": "gamma", "rule": "floor", "max_rate": 0.2},
        {"metric": "error_rate", "rule": "max_delta", "max_delta": 0.01},
    ],
}
DECISION_KEYS = ("verdict", "counts", "rates", "rules", "definition_digest")
RUN_TIMEOUT_S = 60.0
NO_CACHE = ("-p", "no:cacheprovider")


def _decision(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "decision.json").read_text())  # type: ignore[no-any-return]


def _same_decision(reference: Mapping[str, Any], other: Mapping[str, Any], how: str) -> None:
    for key in DECISION_KEYS:
        assert other[key] == reference[key], f"{how}: {key} differs"


def _whole(decision: Mapping[str, Any], expected: int, how: str) -> None:
    counts = decision["counts"]
    assert counts["expected"] == counts["completed"] == expected, how
    assert counts["duplicates_collapsed"] == 0, how
    assert counts["missing"] == 0 and counts["problem_count"] == 0, how


# --- 1. verdict invariance ----------------------------------------------------------------------


def _clean_env() -> dict[str, str]:
    """This environment without what would steer a run (a shard index, base URL overrides)."""
    steering = ("JOB_COMPLETION_INDEX", "PYTEST_EVALGATE_", "PYTEST_ADDOPTS")
    return {k: v for k, v in os.environ.items() if not k.startswith(steering)}


def _start_pytest(
    root: Path, name: str, *args: str, env: Mapping[str, str]
) -> subprocess.Popen[bytes]:
    """``pytest --evalgate suite ARGS`` in ``root`` with ``env`` added to the clean environment;
    output to ``<name>.out`` (read on failure)."""
    argv = [sys.executable, "-m", "pytest", "--evalgate", "suite", *NO_CACHE, "-q", *args]
    with open(root / f"{name}.out", "wb") as out:
        return subprocess.Popen(
            argv, cwd=root, env={**_clean_env(), **env}, stdout=out, stderr=subprocess.STDOUT
        )


def _finish(root: Path, runs: Mapping[str, subprocess.Popen[bytes]]) -> dict[str, int]:
    """Wait for every run; their exit codes (2 and up: a crash or usage error, shown)."""
    codes = {name: process.wait(RUN_TIMEOUT_S) for name, process in runs.items()}
    for name, code in codes.items():
        assert code in (0, 1), (root / f"{name}.out").read_text()[-3000:]
    return codes


def _requested(root: Path, names: Sequence[str]) -> Counter[str]:
    """identity -> completion requests the simulators logged, over the runs ``names``."""
    sent: Counter[str] = Counter()
    for name in names:
        for line in (root / f"{name}.log").read_text().splitlines():
            identity = json.loads(line).get("identity")
            if identity:  # readiness probes carry no identity
                sent[identity] += 1
    return sent


def _write_four_shard_suite(pytester: pytest.Pytester) -> list[dict[str, Any]]:
    """The suite both the invariance and the early-aggregation tests use; returns its cases."""
    cases = make_cases(CATEGORIES, 10)
    write_suite(
        pytester.path / "suite",
        {"candidate": CANDIDATE, "baseline": BASELINE},
        cases=cases,
        repetitions=REPETITIONS,
        shards=4,
        policy=POLICY,
    )
    return cases


Serve = Callable[[str], dict[str, str]]


@pytest.fixture
def simulators(pytester: pytest.Pytester) -> Iterator[Serve]:
    """``serve(name)``: CANDIDATE's and BASELINE's simulators as loopback servers of this
    process, logging to ``<name>.log``; returns the environment that points a run at them
    (``PYTEST_EVALGATE_BASE_URL_*``: transport, outside the definition and candidate keys).

    With the manifest's ``simulated://`` URLs each of the invariance test's pytest processes
    (and xdist workers) started two simulator processes of its own: 22 of them, ~1.3 s of the
    test's ~14 s of CPU, ~1 s of its wall time here. The simulator's answers are hashes of the
    request (simulated/draws.py), so these answer each run as the spawned ones did; the suite's
    answer key does not depend on the URLs."""
    key = pytester.path / "answers.jsonl"
    with ExitStack() as stack:

        def serve(name: str) -> dict[str, str]:
            if not key.exists():  # the suite is written by then
                write_answer_key(pytester.path / "suite" / "evalgate.yaml", key)
            env = {}
            for candidate, url in (("candidate", CANDIDATE), ("baseline", BASELINE)):
                server = EvalgateSimServer(
                    evalgate_parse_simulated_url(url),
                    answers=key,
                    request_log=pytester.path / f"{name}.log",
                )
                stack.enter_context(server)
                env[evalgate_base_url_env(candidate)] = server.base_url
            return env

        yield serve


def test_verdict_is_the_same_however_the_work_is_split(
    pytester: pytest.Pytester, simulators: Serve
) -> None:
    cases = _write_four_shard_suite(pytester)
    root = pytester.path
    # Every configuration at once, each with its own store and simulators; the 4 shards share
    # one store and one pair of simulators, as the pods of an Indexed Job do.
    runs = {
        f"n{k}": _start_pytest(root, f"n{k}", "-n", k, f"--evalgate-store=store-n{k}",
                               f"--evalgate-report=report-n{k}", env=simulators(f"n{k}"))
        for k in ("0", "2", "4")
    }  # fmt: skip
    shared = simulators("shards")
    shards = {
        f"shard{i}": _start_pytest(root, f"shard{i}", f"--evalgate-shard={i}/4",
                                   "--evalgate-store=store-sharded", env=shared)
        for i in range(4)
    }  # fmt: skip
    assert set(_finish(root, shards).values()) == {0}  # wrong answers never fail a shard
    runs["sharded"] = _start_pytest(
        root, "sharded", "--evalgate-aggregate", "--evalgate-store=store-sharded",
        "--evalgate-report=report-sharded", env=simulators("sharded"),
    )  # fmt: skip
    codes = _finish(root, runs)
    wanted = {
        f"test-v1/{name}/{case['id']}/r{repetition}"
        for name in ("candidate", "baseline")
        for case in cases
        for repetition in range(REPETITIONS)
    }
    for name in ("n0", "n2", "n4", "shards"):
        sent = _requested(root, [name])
        assert set(sent) == wanted and max(sent.values()) == 1, f"{name}: not requested once each"
    assert (root / "sharded.log").read_text() == ""  # aggregation sends no request
    expected = len(cases) * 2 * REPETITIONS
    reference = _decision(root / "report-n0")
    _whole(reference, expected, "-n 0")
    # the rules must have something to agree on: several, and not all of one outcome
    assert len(reference["rules"]) >= 5
    assert {rule["passed"] for rule in reference["rules"]} == {True, False}
    for name in ("n2", "n4", "sharded"):
        decision = _decision(root / f"report-{name}")
        _whole(decision, expected, name)
        _same_decision(reference, decision, name)
    assert len(set(codes.values())) == 1, codes


def test_aggregate_before_every_shard_is_done_is_incomplete(pytester: pytest.Pytester) -> None:
    """A store holding one shard whose cases miss some categories: the aggregation Job says
    ``incomplete`` (exit 1), not a usage error about the policy's slices (exit 4)."""
    cases = _write_four_shard_suite(pytester)
    held = {i: {c["category"] for c in cases if shard_for(str(c["id"]), 4) == i} for i in range(4)}
    index = min(held, key=lambda i: len(held[i]))
    assert held[index] < set(CATEGORIES)  # the suite must give a shard without some category
    ran = pytester.runpytest("--evalgate", "suite", *NO_CACHE, f"--evalgate-shard={index}/4")
    assert ran.ret == 0
    result = pytester.runpytest(
        "--evalgate", "suite", *NO_CACHE, "--evalgate-aggregate", "--evalgate-report=rep"
    )
    assert result.ret == 1
    decision = _decision(pytester.path / "rep")
    shard_cases = sum(1 for c in cases if shard_for(str(c["id"]), 4) == index)
    assert decision["verdict"] == "incomplete"
    assert decision["counts"]["completed"] == shard_cases * 2 * REPETITIONS
    assert decision["counts"]["missing"] == (len(cases) - shard_cases) * 2 * REPETITIONS
    assert not decision["attestable"]


# --- 2. the rendered pod command, run locally ---------------------------------------------------

SUITE_PATH = "suites/shards"
POD_SHARDS = 3
# The killed index holds 9 cases (36 identities); at one request in flight (max_concurrency 3
# over 3 shards) they take over 1.4 s: long enough to see a first segment committed (after
# ~0.5 s) and kill the index then, with the index's last 0.9 s of requests still to come.
POD_CANDIDATE = "simulated://?accuracy=0.9&accuracy.gamma=0.7&seed=11&latency_ms=40"
POD_BASELINE = "simulated://?accuracy=0.8&seed=12&latency_ms=40"
_KUBELET_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_POD_PATH = re.compile("=" + re.escape(EVALGATE_STORE_MOUNT) + r"(?=/|$)")


def kubelet_expand(text: str, env: Mapping[str, str]) -> str:
    """Expand ``$(VAR)`` from ``env`` as the kubelet does for command and args: ``$$`` is a
    literal ``$``; a reference to an undefined variable stays as written."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _KUBELET_REF.sub(one, text)


class Pod:
    """A rendered container run as a local process group (a pod's processes die together)."""

    def __init__(self, container: Mapping[str, Any], host: Path, store: Path) -> None:
        self.container = container
        self.host = host
        self.store = store
        self.started: list[subprocess.Popen[bytes]] = []

    def env(self, index: int | None) -> dict[str, str]:
        """The container's env (``/tmp`` mapped), plus the index the Job controller injects."""
        env = {"PATH": os.environ.get("PATH", "")}
        for entry in self.container.get("env", []):
            if "value" in entry:  # secretKeyRef entries are optional and this suite has no keys
                env[entry["name"]] = entry["value"].replace("/tmp", str(self.host / "podtmp"))
        if index is not None:
            env["JOB_COMPLETION_INDEX"] = str(index)
        return env

    def argv(self, env: Mapping[str, str]) -> list[str]:
        words = [*self.container["command"], *self.container.get("args", [])]
        words = [_POD_PATH.sub("=" + str(self.store), kubelet_expand(w, env)) for w in words]
        assert words[0] == "pytest"
        return [sys.executable, "-m", "pytest", *words[1:]]

    def start(self, index: int | None) -> subprocess.Popen[bytes]:
        env = self.env(index)
        (self.host / "podtmp").mkdir(exist_ok=True)
        process = subprocess.Popen(
            self.argv(env),
            cwd=self.host,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.started.append(process)
        return process

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        """SIGKILL the whole group: pytest and the simulators it spawned, as a dying pod."""
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(RUN_TIMEOUT_S)

    def cleanup(self) -> None:
        for process in self.started:
            if process.poll() is None:  # a process that ended by itself stopped its simulators
                self.kill(process)


@pytest.fixture
def pods() -> Iterator[list[Pod]]:
    made: list[Pod] = []
    yield made
    for pod in made:
        pod.cleanup()


def _committed_lines(store: Path, shard_dir: str = "") -> list[bytes]:
    lines = []
    for segment in sorted(store.rglob("seg-*.jsonl")):
        if shard_dir in segment.parent.name:
            lines += segment.read_bytes().splitlines()
    return lines


def _wait_for(condition: Callable[[], bool], process: subprocess.Popen[bytes]) -> bool:
    """Poll until ``condition``; False if the process ended first (bounded)."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        if condition():
            return True
        time.sleep(0.01)
    return False


def _expected_identities(manifest: EvalgateManifest) -> set[EvalgateIdentity]:
    return {
        EvalgateIdentity(manifest.dataset_revision, case.case_id, name, repetition)
        for name in manifest.candidates
        for case in manifest.cases
        for repetition in range(manifest.repetitions)
    }


def _shard_identities(manifest: EvalgateManifest, index: int, count: int) -> int:
    cases = sum(1 for case in manifest.cases if shard_for(case.case_id, count) == index)
    return cases * len(manifest.candidates) * manifest.repetitions


def _start_single(host: Path) -> subprocess.Popen[bytes]:
    """The same suite in one plain process, into its own store: the reference decision."""
    argv = [sys.executable, "-m", "pytest", "--evalgate", SUITE_PATH, *NO_CACHE, "-q"]
    argv += ["--evalgate-store=single-store", "--evalgate-report=single-report"]
    with open(host / "single.out", "wb") as out:
        return subprocess.Popen(
            argv, cwd=host, env=_clean_env(), stdout=out, stderr=subprocess.STDOUT
        )


def _render(manifest: EvalgateManifest) -> tuple[dict[str, Any], dict[str, Any]]:
    options = EvalgateRenderOptions(suite_path=SUITE_PATH)
    workers, aggregate = evalgate_render(manifest, POD_SHARDS, "harness:test", options=options)
    assert workers["spec"]["completionMode"] == "Indexed"
    assert workers["spec"]["completions"] == workers["spec"]["parallelism"] == POD_SHARDS
    return workers["spec"]["template"]["spec"]["containers"][0], aggregate["spec"]["template"][
        "spec"
    ]["containers"][0]


def _assert_exactly_once(store: Path, manifest: EvalgateManifest) -> None:
    lines = Counter(
        EvalgateIdentity.evalgate_from(json.loads(line)["identity"])
        for line in _committed_lines(store)
    )
    expected = _expected_identities(manifest)
    assert set(lines) == expected
    assert max(lines.values()) == 1, [key for key, n in lines.items() if n > 1]
    selection = EvalgateSelection(
        tuple(manifest.candidates), tuple(case.case_id for case in manifest.cases)
    )
    aggregate = evalgate_aggregate(EvalgateLocalStore(str(store)), manifest, selection, None)
    assert aggregate.status == "complete", aggregate.problems
    assert aggregate.completed == aggregate.expected == len(expected)
    assert aggregate.duplicates == 0


def test_rendered_pod_command_survives_a_killed_index(tmp_path: Path, pods: list[Pod]) -> None:
    host = tmp_path / "image"
    suite = write_suite(
        host / SUITE_PATH,
        {"candidate": POD_CANDIDATE, "baseline": POD_BASELINE},
        cases=make_cases(CATEGORIES, 10),
        repetitions=REPETITIONS,
        shards=POD_SHARDS,
        budget={"max_concurrency": POD_SHARDS, "max_attempts": 3, "timeout_s": 10},
        policy=POLICY,
    )
    manifest = evalgate_load_manifest(str(suite))
    worker, aggregator = _render(manifest)
    assert f"--evalgate-shard=$(JOB_COMPLETION_INDEX)/{POD_SHARDS}" in worker["command"]
    assert "--evalgate-aggregate" in aggregator["command"]
    store = tmp_path / "store"
    workers = Pod(worker, host, store)
    pods.append(workers)
    single = _start_single(host)  # alongside the pods: it waits on its simulators too
    running = {index: workers.start(index) for index in range(POD_SHARDS)}
    victim = 1
    victim_dir = f"shard-{victim}-of-{POD_SHARDS}"
    seen = _wait_for(lambda: bool(_committed_lines(store, victim_dir)), running[victim])
    assert seen, "index 1 ended before its first commit: make the simulator slower"
    workers.kill(running[victim])
    at_kill = len(_committed_lines(store, victim_dir))
    print(f"at kill: {at_kill} of {_shard_identities(manifest, victim, POD_SHARDS)} committed")
    assert 0 < at_kill < _shard_identities(manifest, victim, POD_SHARDS), "not killed mid-run"
    running[victim] = workers.start(victim)  # the Job controller's retry: same command, same env
    for index, process in running.items():
        assert process.wait(RUN_TIMEOUT_S) == 0, f"index {index} failed"
    _assert_exactly_once(store, manifest)
    aggregate_pod = Pod(aggregator, host, store)
    pods.append(aggregate_pod)
    gate_exit = aggregate_pod.start(None).wait(RUN_TIMEOUT_S)
    single_exit = single.wait(RUN_TIMEOUT_S)
    single_decision = _decision(host / "single-report")
    assert single_exit == evalgate_decision_exit(single_decision), (
        host / "single.out"
    ).read_text()[-3000:]
    decision = _decision(store / "report")
    _whole(decision, len(_expected_identities(manifest)), "pods")
    _same_decision(single_decision, decision, "pods with a killed index")
    assert gate_exit == single_exit


def test_kubelet_expand_follows_the_kubelet() -> None:
    env = {"JOB_COMPLETION_INDEX": "2"}
    assert kubelet_expand("--evalgate-shard=$(JOB_COMPLETION_INDEX)/4", env) == (
        "--evalgate-shard=2/4"
    )
    assert kubelet_expand("$$(JOB_COMPLETION_INDEX)", env) == "$(JOB_COMPLETION_INDEX)"
    assert kubelet_expand("$(UNSET)/4", env) == "$(UNSET)/4"


# --- 3. auto/N ----------------------------------------------------------------------------------


def _collected(result: pytest.RunResult) -> set[str]:
    return {line.split("::")[2].split("[")[0] for line in result.outlines if "::" in line}


def _auto_suite(pytester: pytest.Pytester) -> list[str]:
    cases = make_cases(CATEGORIES, 8)  # every one of 4 shards gets cases
    write_suite(
        pytester.path / "suite",
        {"candidate": CANDIDATE, "baseline": BASELINE},
        cases=cases,
        shards=4,
    )
    return [str(case["id"]) for case in cases]


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_auto_shard_reads_job_completion_index(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, index: int
) -> None:
    case_ids = _auto_suite(pytester)
    monkeypatch.setenv("JOB_COMPLETION_INDEX", str(index))
    log = pytester.path / "requests.jsonl"
    result = pytester.runpytest(
        "--evalgate", "suite", "--evalgate-shard=auto/4", "--collect-only", "-q", *NO_CACHE,
        f"--evalgate-request-log={log}",
    )  # fmt: skip
    assert result.ret == 0
    mine = {case_id for case_id in case_ids if shard_for(case_id, 4) == index}
    assert mine and _collected(result) == mine
    # listing a shard's items sends nothing and commits nothing
    assert not log.exists() and not (pytester.path / ".evalgate").exists()


@pytest.mark.parametrize("value", [None, ""])
def test_auto_shard_without_job_completion_index_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    _auto_suite(pytester)
    if value is None:
        monkeypatch.delenv("JOB_COMPLETION_INDEX", raising=False)
    else:
        monkeypatch.setenv("JOB_COMPLETION_INDEX", value)
    result = pytester.runpytest("--evalgate", "suite", "--evalgate-shard=auto/4", *NO_CACHE)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--evalgate-shard*auto/4*JOB_COMPLETION_INDEX*"])
