"""What a pytest process imports, and when: promises observed in real ``pytest`` processes.

- Without ``--evalgate`` the plugin is inert, and cheap: pytest imports the entry point in every
  run of every project that installs the package, so such a run loads the entry point and the
  hook specs, nothing heavy and nothing else of ours.
- With ``--evalgate``, the runner starts its requests before the gate's modules are imported
  (``decide``, the gate, the reports, the attestation, scipy, cryptography, matplotlib): they
  cost about half a second, and ``session/preload.py`` imports them in a thread while the
  requests are out. After a gating run they are there.

Each run is a subprocess (this test process has imported everything long ago). No hook fires
when the runner starts, so an observer plugin (``-p``) wraps ``EvalgateRunner.evalgate_start``,
the runner's own start, on its class: it records ``sys.modules`` whichever session step calls
it, and would record nothing (the test fails) if the runner stopped being started there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Third-party packages that cost start-up time; a plain pytest run pays for none of them.
HEAVY = ("numpy", "scipy", "matplotlib", "aiohttp", "cryptography", "pydantic", "yaml", "httptools")
# What the ``pytest11`` entry point may load of the package without ``--evalgate``.
ENTRY_POINT = {"pytest_evalgate", "pytest_evalgate.plugin", "pytest_evalgate.hookspecs"}
# What a gating session needs only after the last answer (session/preload.py).
GATE_SIDE = ("pytest_evalgate.decision", "pytest_evalgate.gate", "pytest_evalgate.report")
GATE_SIDE_TOO = ("pytest_evalgate.attest", "scipy", "matplotlib", "cryptography")

RECORDER = """
import json
import sys


def pytest_sessionfinish(session):
    with open({out!r}, "w", encoding="utf-8") as file:
        json.dump(sorted(sys.modules), file)
"""

OBSERVER = """
import json
import sys

import pytest

OUT = {out!r}


def _record(moment):
    with open(f"{{OUT}}/{{moment}}.json", "x", encoding="utf-8") as file:  # "x": once
        json.dump(sorted(sys.modules), file)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    # The session imports this module at configure anyway (it holds the runner's class).
    from pytest_evalgate.runner.parent import EvalgateRunner

    start = EvalgateRunner.evalgate_start

    def observed(self):
        _record("runner_start")
        return start(self)

    EvalgateRunner.evalgate_start = observed


def pytest_unconfigure(config):
    _record("end")
"""


def _under(modules: set[str], prefixes: tuple[str, ...]) -> set[str]:
    """The modules that are one of ``prefixes`` or inside one of them."""
    return {m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)}


def _observed(tmp_path: Path, suite: str, *extra: str) -> tuple[dict[str, set[str]], str]:
    """Run ``pytest --evalgate suites/<suite>`` from the repo root (its conftest holds a scorer
    the example suites use) into a fresh store; the modules at each moment, and the output."""
    (tmp_path / "evalgate_observer.py").write_text(OBSERVER.format(out=str(tmp_path)), "utf-8")
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    argv = [sys.executable, "-m", "pytest", "-p", "evalgate_observer", "-p", "no:cacheprovider"]
    argv += ["--evalgate", f"suites/{suite}", f"--evalgate-store={tmp_path / 'store'}", *extra]
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    moments = {
        moment: set(json.loads((tmp_path / f"{moment}.json").read_text(encoding="utf-8")))
        for moment in ("runner_start", "end")
    }
    return moments, done.stdout


def test_the_under_helper_matches_whole_names() -> None:
    modules = {"scipy", "scipy.special", "scipyx", "pytest_evalgate.gate", "pytest_evalgate.gates"}
    assert _under(modules, ("scipy", "pytest_evalgate.gate")) == {
        "scipy",
        "scipy.special",
        "pytest_evalgate.gate",
    }


@pytest.mark.slow
def test_without_evalgate_the_plugin_loads_the_entry_point_only(pytester: pytest.Pytester) -> None:
    out = pytester.path / "modules.json"
    pytester.makeconftest(RECORDER.format(out=str(out)))
    pytester.makepyfile(test_trivial="def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    modules = set(json.loads(out.read_text(encoding="utf-8")))
    assert _under(modules, ("pytest_evalgate",)) == ENTRY_POINT
    assert _under(modules, HEAVY) == set()


@pytest.mark.slow
def test_the_runner_starts_before_the_gate_is_imported(tmp_path: Path) -> None:
    # The example suite, one slice (a gating run all the same: verdict "partial"). Its perf
    # block makes collection import the load phase, hence numpy and the aggregation; the
    # suite without one (below) shows that those wait too when no load phase needs them.
    moments, stdout = _observed(tmp_path, "support", "-k", "billing")
    assert "verdict PARTIAL" in stdout
    start, end = moments["runner_start"], moments["end"]
    assert "pytest_evalgate.session" in start  # a session was on: the observation means something
    assert _under(start, GATE_SIDE + GATE_SIDE_TOO) == set()
    wanted = {"pytest_evalgate.decision.decide", "pytest_evalgate.gate.rules", "scipy.special"}
    assert wanted <= end  # the gate ran, with what the preload thread imported


@pytest.mark.slow
def test_without_a_load_phase_numpy_and_the_aggregation_wait_too(tmp_path: Path) -> None:
    moments, stdout = _observed(tmp_path, "tiny")
    assert "verdict" in stdout
    start, end = moments["runner_start"], moments["end"]
    later = ("numpy", "pytest_evalgate.aggregate.combine", "pytest_evalgate.stats")
    assert _under(start, GATE_SIDE + GATE_SIDE_TOO + later) == set()
    assert {"numpy", "pytest_evalgate.aggregate.combine", "pytest_evalgate.decision.decide"} <= end
