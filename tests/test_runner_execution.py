"""The runner's execution stage (``runner/execution.py``): real sandboxes on the child's loop,
the share of ``sandbox.max_concurrency``, the grade of a code record, the wire and record
members it adds."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from sandboxkit import prepared

from pytest_evalgate.errors import EvalgateConfigError, EvalgateError
from pytest_evalgate.manifest.code import EvalgateSandboxBlock
from pytest_evalgate.manifest.schema import EvalgateEvaluatorSchema
from pytest_evalgate.runner.execution import (
    EvalgateExecutionStage,
    evalgate_code_grade,
    evalgate_code_scorer,
    evalgate_execution_request,
    evalgate_execution_settings,
    evalgate_sandbox_spec,
)
from pytest_evalgate.runner.wire import (
    EvalgateWireRequest,
    EvalgateWireResult,
    evalgate_decode_for_child,
    evalgate_decode_for_parent,
    evalgate_encode,
)
from pytest_evalgate.sandbox import EvalgateSandboxSpec
from pytest_evalgate.store import (
    EVALGATE_RECORD_FIELDS,
    EvalgateIdentity,
    EvalgateOutcome,
    evalgate_checksum_ok,
    evalgate_record,
)
from pytest_evalgate.store.records import evalgate_has_fields

pytestmark = pytest.mark.slow

SANDBOX = EvalgateSandboxBlock(
    isolation="auto", max_concurrency=4, timeout_s=5.0, memory_mb=512, cpu_s=5,
    processes=32, open_files=64, file_size_mb=16, work_mb=64, runtime_class=None,
)  # fmt: skip
CODE = EvalgateEvaluatorSchema(revision="r1", scorer="code", extract="fenced")


def _outcome(output: str | None, error: dict[str, Any] | None = None) -> EvalgateOutcome:
    return {
        "output": output,
        "finish_reason": "stop",
        "attempts": 1,
        "error": error,  # type: ignore[typeddict-item]
        "timing": {
            "queued_s": 0.0,
            "ttft_s": 0.01,
            "tpot_s": 0.001,
            "e2e_s": 0.02,
            "itl_p95_s": None,
        },
        "usage": {"prompt_tokens": 3, "completion_tokens": 5},
        "started_at": "t0",
        "finished_at": "t1",
    }


def _execution(spec: EvalgateSandboxSpec, tests: str, share: int = 2) -> dict[str, Any]:
    settings = evalgate_execution_settings(
        spec, SANDBOX.model_copy(update={"max_concurrency": share}), CODE,
        hide=(), stage="suite", parts=1, index=0,
    )  # fmt: skip
    request = evalgate_execution_request(settings, tests)
    assert request is not None
    return request


async def _run_stage(
    jobs: list[tuple[dict[str, Any] | None, EvalgateWireResult]],
) -> tuple[list[EvalgateWireResult], int, list[int]]:
    """Feed ``jobs`` to a stage; (emitted in order, peak executions at once, emitted right
    after each ``evalgate_after`` returned)."""
    emitted: list[EvalgateWireResult] = []
    died: list[BaseException] = []

    async def die(exc: BaseException) -> None:
        died.append(exc)

    stage = EvalgateExecutionStage(emitted.append, die)
    peak = 0
    right_after = []
    for execution, message in jobs:
        stage.evalgate_after(execution, message)
        right_after.append(len(emitted))
    drained = asyncio.create_task(stage.evalgate_drain())
    while not drained.done():
        peak = max(peak, stage.running)
        await asyncio.sleep(0.005)
    assert died == []
    return emitted, peak, right_after


def _result(index: int, outcome: EvalgateOutcome) -> EvalgateWireResult:
    return EvalgateWireResult(index, 0, False, outcome)


def test_an_answer_runs_in_the_sandbox_and_comes_back_with_its_facts() -> None:
    spec = prepared("bwrap")
    answer = "Sure:\n```python\ndef double(x):\n    return 2 * x\n```\n"
    wrong = "```python\ndef double(x):\n    return x\n```\n"
    tests = "assert double(2) == 4\nassert double(21) == 42\n"
    jobs = [(_execution(spec, tests), _result(0, _outcome(answer))),
            (_execution(spec, tests), _result(1, _outcome(wrong)))]  # fmt: skip
    emitted, _, right_after = asyncio.run(_run_stage(jobs))
    assert right_after == [0, 0]  # nothing waited for an execution: the worker went on
    by_index = {message.index: message.outcome for message in emitted}
    good, bad = by_index[0]["sandbox"], by_index[1]["sandbox"]
    assert (good["outcome"], good["exit_status"], good["message"]) == ("passed", 0, "")
    assert good["isolation"] == "bwrap" and good["sandboxed"] is True
    assert good["start_s"] > 0 and good["run_s"] > 0
    assert bad["outcome"] == "tests_failed"
    assert bad["message"] == "tests line 1: assert double(2) == 4 (AssertionError)"
    assert "return x" not in bad["message"]  # the answer's code never reaches the message
    assert by_index[0]["output"] == answer  # the rest of the outcome is kept


def test_an_endpoint_error_or_a_plain_work_is_reported_at_once_without_a_sandbox() -> None:
    spec = prepared("bwrap")
    failed = _outcome(None, {"category": "timeout", "status": None, "message": "slow"})
    jobs = [(_execution(spec, "assert True\n"), _result(0, failed)),
            (None, _result(1, _outcome("4")))]  # fmt: skip
    emitted, peak, right_after = asyncio.run(_run_stage(jobs))
    assert right_after == [1, 2] and peak == 0
    assert all("sandbox" not in message.outcome for message in emitted)


def test_a_sandbox_that_cannot_be_set_up_is_an_error_of_category_sandbox() -> None:
    spec = prepared("bwrap").replace(interpreter="/usr/bin/evalgate-no-such-python")
    jobs = [(_execution(spec, "assert True\n"), _result(0, _outcome("X = 1\n")))]
    emitted, _, _ = asyncio.run(_run_stage(jobs))
    outcome = emitted[0].outcome
    assert "sandbox" not in outcome
    assert outcome["error"] is not None and outcome["error"]["category"] == "sandbox"
    assert "could not be set up" in outcome["error"]["message"]


def test_executions_stay_within_the_share() -> None:
    spec = prepared("bwrap")
    answer = "```python\nimport time\ntime.sleep(0.4)\n```\n"
    jobs = [(_execution(spec, "assert True\n", share=2), _result(i, _outcome(answer)))
            for i in range(6)]  # fmt: skip
    emitted, peak, _ = asyncio.run(_run_stage(jobs))
    assert peak == 2  # reached, never passed
    assert sorted(m.index for m in emitted) == list(range(6))
    assert all(m.outcome["sandbox"]["outcome"] == "passed" for m in emitted)


# -- the pytest side --------------------------------------------------------------------------


def test_the_share_of_sandbox_max_concurrency_is_split_like_the_endpoint_budget() -> None:
    spec = EvalgateSandboxSpec(isolation="bwrap", interpreter="/usr/bin/python3")
    shares = [
        evalgate_execution_settings(spec, SANDBOX, CODE, hide=(), stage="s", parts=3, index=i)[
            "share"
        ]
        for i in range(3)
    ]
    assert shares == [2, 1, 1] and sum(shares) == SANDBOX.max_concurrency
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_execution_settings(spec, SANDBOX, CODE, hide=(), stage="s", parts=5, index=0)
    assert info.value.key == "sandbox.max_concurrency"


def test_the_settings_hide_the_store_and_carry_the_prepared_spec() -> None:
    spec = EvalgateSandboxSpec(isolation="unshare", interpreter="/usr/bin/python3", hide=("/k",))
    settings = evalgate_execution_settings(
        spec, SANDBOX, CODE, hide=("/store",), stage="s", parts=1, index=0
    )
    assert settings["spec"]["hide"] == ("/k", "/store")
    assert settings["spec"]["isolation"] == "unshare" and settings["extract"] == "fenced"
    request = evalgate_execution_request(settings, "assert True\n")
    assert request is not None and request["tests"] == "assert True\n"
    assert evalgate_execution_request(None, "assert True\n") is None


def test_the_unprepared_spec_takes_the_limits_and_not_the_transport() -> None:
    spec = evalgate_sandbox_spec(SANDBOX.model_copy(update={"timeout_s": 3.0, "isolation": "none"}))
    assert (spec.timeout_s, spec.isolation, spec.processes) == (3.0, "none", 32)
    assert not spec.prepared


def test_a_code_record_is_graded_by_its_outcome_not_its_text() -> None:
    facts = {"outcome": "passed", "message": "", "exit_status": 0, "start_s": 0.05,
             "run_s": 0.01, "isolation": "bwrap", "sandboxed": True}  # fmt: skip
    outcome: EvalgateOutcome = {**_outcome("anything"), "sandbox": facts}  # type: ignore[typeddict-item]
    assert evalgate_code_grade(outcome)("ignored") == (1.0, True)
    for failed in ("tests_failed", "timeout", "memory", "crashed"):
        wrong: EvalgateOutcome = {**outcome, "sandbox": {**facts, "outcome": failed}}  # type: ignore[typeddict-item]
        assert evalgate_code_grade(wrong)("ignored") == (0.0, False)
    with pytest.raises(EvalgateError, match="without its sandbox execution"):
        evalgate_code_grade(_outcome("x"))


def test_the_code_scorer_takes_no_options_and_is_never_called() -> None:
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_code_scorer({"threshold": 0.5}, "suite.yaml")
    assert info.value.key == "evaluator.options"
    with pytest.raises(EvalgateError, match="grades executions"):
        evalgate_code_scorer({}, "suite.yaml")("out", "tests")


def test_a_code_record_keeps_its_sandbox_member_and_verifies() -> None:
    facts = {"outcome": "timeout", "message": "wall-clock timeout of 2 s: the sandbox was killed",
             "exit_status": None, "start_s": 0.05, "run_s": 1.95, "isolation": "unshare",
             "sandboxed": True}  # fmt: skip
    outcome: EvalgateOutcome = {**_outcome("code"), "sandbox": facts}  # type: ignore[typeddict-item]
    record = evalgate_record(
        EvalgateIdentity("r", "c", "cand", 0), outcome, evalgate_code_grade(outcome),
        definition_digest="d" * 64, candidate_key="cand-x", category="k", cluster="c",
        shard=0, writer="w",
    )  # fmt: skip
    assert record["sandbox"] == facts and (record["score"], record["passed"]) == (0.0, False)
    assert set(record) == EVALGATE_RECORD_FIELDS | {"sandbox"}
    line = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    assert evalgate_checksum_ok(line, record)
    assert evalgate_has_fields(record, EVALGATE_RECORD_FIELDS)
    assert not evalgate_has_fields({**record, "judge": 1}, EVALGATE_RECORD_FIELDS)
    assert not evalgate_has_fields(
        {k: v for k, v in record.items() if k != "output"}, EVALGATE_RECORD_FIELDS
    )


def test_a_code_work_crosses_the_wire_and_a_plain_one_does_not_carry_the_member() -> None:
    execution = {"stage": "s", "extract": "fenced", "spec": {"isolation": "bwrap"}, "share": 2,
                 "tests": "assert True\n"}  # fmt: skip
    work = EvalgateWireRequest(1, 0, 0, {"prompt": "p"}, "id", 3, False, execution)
    assert evalgate_decode_for_child(evalgate_encode(work)) == work
    plain = EvalgateWireRequest(2, 0, 0, {"prompt": "p"}, "id", 3, False)
    assert b"execution" not in evalgate_encode(plain)
    assert evalgate_decode_for_child(evalgate_encode(plain)) == plain
    facts = {"outcome": "passed", "message": "", "exit_status": 0, "start_s": 0.1, "run_s": 0.1,
             "isolation": "bwrap", "sandboxed": True}  # fmt: skip
    result = EvalgateWireResult(1, 0, False, {**_outcome("x"), "sandbox": facts})  # type: ignore[typeddict-item]
    assert evalgate_decode_for_parent(evalgate_encode(result)) == result
