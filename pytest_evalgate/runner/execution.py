"""The runner's execution stage (``scorer: code``, SPEC section 11): an answer's code runs in a
fresh sandbox as soon as the answer arrives, inside this process's share of the run-wide
``sandbox.max_concurrency``.

Both sides of the runner import this module; it imports only the sandbox package, the wire and
the record types (never the manifest, scoring or pytest: tests/test_layering.py).

- The pytest side (``evalgate_prepare_sandbox`` once per code suite and process, at collection;
  ``evalgate_execution_settings`` for its share; ``evalgate_execution_request`` per work) sends
  each code work with an ``execution`` member: the case's tests, the extract mode, the prepared
  sandbox spec (the store folder hidden) and the share.
- The child (``EvalgateExecutionStage``) takes each answer of such a work off the generation
  worker at once (the worker goes on to its next request: generation and execution overlap),
  runs it in its own task under a semaphore of the share, and only then reports the result,
  with the record's ``sandbox`` member (``EvalgateSandboxFacts``). A sandbox that cannot be
  set up makes the identity an error of category ``sandbox`` (no result; the next run retries).
- The pytest side grades a code record by its outcome (``evalgate_code_grade``): 1.0 and
  passed for ``passed``; 0.0 and failed for ``tests_failed``, ``timeout``, ``memory``,
  ``crashed`` (wrong answers, never errors).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from pytest_evalgate.client.budget import evalgate_share
from pytest_evalgate.errors import EvalgateConfigError, EvalgateError, EvalgateSandboxError
from pytest_evalgate.runner.wire import EvalgateWireResult
from pytest_evalgate.sandbox import (
    EvalgateExecution,
    EvalgateSandboxSpec,
    evalgate_extract_code,
    evalgate_sandbox_prepare,
    evalgate_sandbox_run,
)
from pytest_evalgate.store.records import EvalgateGrade, EvalgateOutcome, EvalgateSandboxFacts

EVALGATE_SANDBOX_CATEGORY = "sandbox"

# -- the pytest side ---------------------------------------------------------------------------


class EvalgateSandboxSettings(Protocol):
    """What this stage reads of a manifest's ``sandbox`` block (``manifest.code``'s
    ``EvalgateSandboxBlock`` is one; named here so this module never imports the manifest)."""

    @property
    def isolation(self) -> str: ...
    @property
    def max_concurrency(self) -> int: ...
    @property
    def timeout_s(self) -> float: ...
    @property
    def memory_mb(self) -> int: ...
    @property
    def cpu_s(self) -> int: ...
    @property
    def processes(self) -> int: ...
    @property
    def open_files(self) -> int: ...
    @property
    def file_size_mb(self) -> int: ...
    @property
    def work_mb(self) -> int: ...


class EvalgateCodeEvaluator(Protocol):
    """What this stage reads of a code suite's ``evaluator`` block: its ``extract`` mode."""

    @property
    def extract(self) -> str | None: ...


def evalgate_sandbox_spec(sandbox: EvalgateSandboxSettings) -> EvalgateSandboxSpec:
    """The unprepared spec of a manifest's ``sandbox`` settings (transport keys left out)."""
    return EvalgateSandboxSpec(
        isolation=sandbox.isolation,
        timeout_s=sandbox.timeout_s,
        memory_mb=sandbox.memory_mb,
        cpu_s=sandbox.cpu_s,
        processes=sandbox.processes,
        open_files=sandbox.open_files,
        file_size_mb=sandbox.file_size_mb,
        work_mb=sandbox.work_mb,
    )


def evalgate_prepare_sandbox(sandbox: EvalgateSandboxSettings) -> EvalgateSandboxSpec:
    """Choose and probe the isolation once (a real sandbox runs); raises
    ``EvalgateSandboxUnavailableError`` (a configuration error: exit 4) when none works."""
    return asyncio.run(evalgate_sandbox_prepare(evalgate_sandbox_spec(sandbox)))


def evalgate_execution_settings(
    prepared: EvalgateSandboxSpec,
    sandbox: EvalgateSandboxSettings,
    evaluator: EvalgateCodeEvaluator,
    *,
    hide: tuple[str, ...],
    stage: str,
    parts: int,
    index: int,
) -> dict[str, Any]:
    """What every code work of one suite carries to the child (builtins): the prepared spec
    with ``hide`` added, the extract mode, the stage's name and this process's ``share`` of
    ``sandbox.max_concurrency`` over ``parts`` processes (as the endpoint budget is split)."""
    spec = prepared.replace(hide=tuple(sorted({*prepared.hide, *hide})))
    total = sandbox.max_concurrency
    share = evalgate_share(total, parts, index, integer=True, key="sandbox.max_concurrency")
    return {
        "stage": stage,
        "extract": evaluator.extract or "fenced",
        "spec": dataclasses.asdict(spec),
        "share": int(share),
    }


def evalgate_execution_request(
    settings: Mapping[str, object] | None, tests: str
) -> dict[str, Any] | None:
    """The ``execution`` member of one work: the suite's settings plus the case's tests
    (``None`` for a suite that does not score code)."""
    if settings is None:
        return None
    return {**settings, "tests": tests}


def evalgate_code_grade(outcome: EvalgateOutcome) -> EvalgateGrade:
    """The grade of a code outcome: by its sandbox outcome, never by the answer's text."""
    facts = outcome.get("sandbox")
    if facts is None:
        raise EvalgateError("a code answer reached grading without its sandbox execution")
    passed = facts["outcome"] == "passed"

    def grade(output: str) -> tuple[float, bool]:
        return (1.0 if passed else 0.0), passed

    return grade


def evalgate_code_scorer(options: Mapping[str, object], source: str) -> Callable[[str, str], float]:
    """The scorer of ``scorer: code`` suites: it takes no options, and it is never called
    (code records are graded by ``evalgate_code_grade``)."""
    if options:
        reason = f"scorer 'code' takes no options, got {sorted(options)}"
        raise EvalgateConfigError(source, "evaluator.options", reason)

    def code(output: str, target: str) -> float:
        raise EvalgateError("scorer 'code' grades executions, not texts")

    return code


# -- the child side ----------------------------------------------------------------------------

EvalgateEmit = Callable[[EvalgateWireResult], None]
EvalgateDie = Callable[[BaseException], Awaitable[None]]


class EvalgateExecutionStage:
    """Runs the code of answered works, each in its own task, at most ``share`` at once per
    stage (suite); results go to ``emit`` as they finish. A bug reaches ``die``."""

    def __init__(self, emit: EvalgateEmit, die: EvalgateDie) -> None:
        self._emit = emit
        self._die = die
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._specs: dict[str, EvalgateSandboxSpec] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.running = 0

    def evalgate_after(
        self, execution: Mapping[str, object] | None, message: EvalgateWireResult
    ) -> None:
        """Report ``message`` now, or, for an answered code work, once its code has run."""
        if execution is None or message.outcome["error"] is not None:
            self._emit(message)
            return
        task = asyncio.create_task(self._guarded(execution, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def evalgate_drain(self) -> None:
        """Wait until every execution started so far has reported."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks))

    async def _guarded(self, execution: Mapping[str, object], message: EvalgateWireResult) -> None:
        try:
            await self._run(execution, message)
        except Exception as exc:  # never raised for what the code did: a bug, reported at once
            await self._die(exc)

    async def _run(self, execution: Mapping[str, Any], message: EvalgateWireResult) -> None:
        stage = str(execution["stage"])
        slots = self._slots.setdefault(stage, asyncio.Semaphore(int(execution["share"])))
        async with slots:
            self.running += 1
            try:
                outcome = await _executed(message.outcome, execution, self._spec(execution))
            finally:
                self.running -= 1
        self._emit(dataclasses.replace(message, outcome=outcome))

    def _spec(self, execution: Mapping[str, Any]) -> EvalgateSandboxSpec:
        stage = str(execution["stage"])
        if stage not in self._specs:
            fields = dict(execution["spec"])
            fields["hide"] = tuple(fields.get("hide") or ())
            self._specs[stage] = EvalgateSandboxSpec(**fields)
        return self._specs[stage]


async def _executed(
    outcome: EvalgateOutcome, execution: Mapping[str, object], spec: EvalgateSandboxSpec
) -> EvalgateOutcome:
    """``outcome`` with its ``sandbox`` member, or with a ``sandbox`` error."""
    code = evalgate_extract_code(outcome["output"] or "", str(execution["extract"]))
    try:
        ran = await evalgate_sandbox_run(code, str(execution["tests"]), spec)
    except EvalgateSandboxError as error:
        failed = {"category": EVALGATE_SANDBOX_CATEGORY, "status": None, "message": error.message}
        return {**outcome, "error": failed}  # type: ignore[typeddict-item]
    return {**outcome, "sandbox": evalgate_sandbox_facts(ran)}


def evalgate_sandbox_facts(execution: EvalgateExecution) -> EvalgateSandboxFacts:
    """What a record keeps of an execution (its printed output stays out of the store)."""
    return {
        "outcome": execution.outcome,
        "message": execution.message,
        "exit_status": execution.exit_status,
        "start_s": round(execution.start_s, 6),
        "run_s": round(execution.run_s, 6),
        "isolation": execution.isolation,
        "sandboxed": execution.sandboxed,
    }
