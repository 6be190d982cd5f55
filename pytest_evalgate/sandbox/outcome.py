"""The outcome of one execution, decided from what the harness observed of the sandbox.

Outcomes of the answer (wrong answers, never errors): ``passed``, ``tests_failed`` (the message
names the first failing line of the TESTS and its text, never the answer's code), ``timeout``
(wall clock, or the CPU limit's SIGXCPU), ``memory`` (MemoryError under the address-space
limit), ``crashed`` (the code raised, did not compile, exited early, or the process died).
A sandbox that never started the driver is ``EvalgateSandboxError`` (category ``sandbox``).

``passed`` needs all of: the driver's report from the original driver process, carrying the
job's nonce, saying ``passed``, and exit status 0. Anything less is not a pass.
"""

from __future__ import annotations

import json
import signal
from dataclasses import asdict, dataclass

from pytest_evalgate.errors import EvalgateSandboxError

EVALGATE_OUTCOMES = ("passed", "tests_failed", "timeout", "memory", "crashed")
"""Every outcome an execution can have."""

_DRIVER_OUTCOMES = frozenset({"passed", "tests_failed", "memory", "crashed"})
_STDERR_HINT_CHARS = 200


@dataclass(frozen=True)
class EvalgateExecution:
    """One execution's result; ``as_builtins()`` is what crosses processes and enters records.

    - ``outcome`` / ``message``: see the module docstring (``message`` is empty when passed).
    - ``exit_status``: the sandbox's exit status (128 + N when signal N ended it); ``None``
      when the harness killed it at the wall-clock timeout.
    - ``start_s``: sandbox start time, from spawn until the driver ran inside it.
    - ``run_s``: from then until the sandbox was gone.
    - ``isolation``: ``bwrap``, ``unshare`` or ``none``; ``sandboxed`` is False for ``none``.
    - ``sandbox_uid``: the host uid the code ran as (unique per execution for a root harness).
    - ``stdout`` / ``stderr``: the first bytes the code wrote (bounded), decoded leniently.
    """

    outcome: str
    message: str
    exit_status: int | None
    start_s: float
    run_s: float
    isolation: str
    sandbox_uid: int
    stdout: str
    stderr: str

    @property
    def passed(self) -> bool:
        """True when the tests ran to their end without a failure."""
        return self.outcome == "passed"

    @property
    def sandboxed(self) -> bool:
        """False for ``isolation: none``: such a decision is never signed as a pass."""
        return self.isolation != "none"

    def as_builtins(self) -> dict[str, object]:
        """The fields as a dict of builtins."""
        return asdict(self)


@dataclass(frozen=True)
class EvalgateObservation:
    """What the harness saw: the report pipe's text, whether ``started`` arrived, the exit
    status (``None`` when killed at the timeout), the stderr text, and the limits in force."""

    report: str
    started: bool
    exit_status: int | None
    stderr: str
    nonce: str
    timeout_s: float
    cpu_s: int


def evalgate_classify(seen: EvalgateObservation) -> tuple[str, str]:
    """(outcome, message) for ``seen``; raises ``EvalgateSandboxError`` if the driver never
    started (the sandbox could not be set up, or did not start before the timeout)."""
    if not seen.started:
        raise EvalgateSandboxError(_setup_failure(seen))
    report = _genuine_report(seen)
    if report is not None and (report[0] != "passed" or seen.exit_status == 0):
        return report
    if seen.exit_status is None:
        return "timeout", f"wall-clock timeout of {seen.timeout_s:g} s: the sandbox was killed"
    return _without_report(seen)


def _setup_failure(seen: EvalgateObservation) -> str:
    if seen.exit_status is None:
        return f"the sandbox did not start within the {seen.timeout_s:g} s timeout"
    detail = _last_line(seen.stderr) or "no message"
    return f"the sandbox could not be set up (exit status {seen.exit_status}): {detail}"


def _genuine_report(seen: EvalgateObservation) -> tuple[str, str] | None:
    """The last report line that carries the nonce and a driver outcome."""
    found = None
    for line in seen.report.splitlines()[1:]:
        try:
            report = json.loads(line)
        except ValueError:
            continue
        if _is_genuine(report, seen.nonce):
            found = (report["outcome"], str(report.get("message", "")))
    return found


def _is_genuine(report: object, nonce: str) -> bool:
    return (
        isinstance(report, dict)
        and report.get("nonce") == nonce
        and report.get("outcome") in _DRIVER_OUTCOMES
    )


def _without_report(seen: EvalgateObservation) -> tuple[str, str]:
    """The process ended before the driver reported: a signal, or an early exit."""
    status = seen.exit_status
    assert status is not None
    if status > 128 and status - 128 == signal.SIGXCPU:
        return "timeout", f"CPU time limit of {seen.cpu_s} s exceeded (SIGXCPU)"
    if status > 128:
        return "crashed", f"killed by {_signal_name(status - 128)}{_hint(seen)}"
    return "crashed", f"exited with status {status} before the tests finished{_hint(seen)}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _hint(seen: EvalgateObservation) -> str:
    line = _last_line(seen.stderr)
    return f": {line[:_STDERR_HINT_CHARS]}" if line else ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
