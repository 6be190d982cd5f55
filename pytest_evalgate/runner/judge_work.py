"""One judge request of the judging stage: what it asks, and the judgment record its answer makes.

A judge work is built from a case's answers (``evalgate_pointwise_work``: one per answer;
``evalgate_pairwise_works``: both orders of a (case, repetition) pair) or a golden row, and sent
as a wire request (``evalgate_judge_request``). The judge's raw answer is parsed (``judge.parse``)
into a verdict and sealed as a judgment record (``evalgate_judgment_of``, ``store.judgments``);
a judgment that cannot exist is a stand-in (``evalgate_judge_stand_in``). ``runner.judging``
decides when each work is sent and what is reused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_evalgate.dialogue.transcript import evalgate_transcript_text
from pytest_evalgate.judge.parse import (
    evalgate_parse_pairwise,
    evalgate_parse_pointwise,
    evalgate_verdict_json,
)
from pytest_evalgate.judge.prompt import (
    EVALGATE_JUDGE_ORDERS,
    evalgate_judge_body,
    evalgate_judge_input_text,
    evalgate_pairwise_orders,
    evalgate_pointwise_messages,
)
from pytest_evalgate.manifest.dataset import EvalgateCase
from pytest_evalgate.runner.judge_suite import (
    EvalgateJudgeSuite,
    evalgate_golden_requests,
    evalgate_golden_rows,
)
from pytest_evalgate.runner.wire import EvalgateWireRequest
from pytest_evalgate.store import EvalgateIdentity, EvalgateOutcome
from pytest_evalgate.store.judgments import (
    EVALGATE_GOLDEN_ORDER,
    EvalgateJudgmentKey,
    evalgate_judgment_record,
)

EvalgateAnswers = Mapping[str, Any]
"""A generation record (or a stand-in with an error), as the judging stage is fed it."""


def evalgate_judged_answer(record: EvalgateAnswers) -> str:
    """What the judge reads as the answer: the output, or for a conversation or tool loop its
    whole transcript (later user turns, every answer, each tool call and result; SPEC 17)."""
    facts = record.get("dialogue")
    if facts is not None:
        return evalgate_transcript_text(facts)
    return str(record.get("output") or "")


@dataclass(frozen=True)
class EvalgateJudgeWork:
    """One judge request: the suite (at ``path``), the judgment's key, the checksums of the
    answers it judges, the baseline of a pair, and the messages sent."""

    path: str
    suite: EvalgateJudgeSuite
    key: EvalgateJudgmentKey
    answers: list[str]
    baseline: str | None
    messages: list[dict[str, str]]


def evalgate_pointwise_work(
    path: str, suite: EvalgateJudgeSuite, identity: EvalgateIdentity, record: EvalgateAnswers
) -> EvalgateJudgeWork:
    """The pointwise judge work of one answer (``record``, of ``identity``)."""
    case = suite.cases[identity.case_id]
    evaluator = suite.judged.evaluator
    text = evalgate_judge_input_text(case.prompt)
    messages = evalgate_pointwise_messages(
        evaluator, text, evalgate_judged_answer(record), case.target or None
    )
    key = EvalgateJudgmentKey(*identity, None)
    return EvalgateJudgeWork(path, suite, key, [record["checksum"]], None, messages)


def evalgate_pairwise_works(
    path: str,
    suite: EvalgateJudgeSuite,
    mine: EvalgateIdentity,
    first: EvalgateAnswers,
    second: EvalgateAnswers,
) -> list[EvalgateJudgeWork]:
    """The two judge works (candidate first, baseline first) of the pair whose candidate
    identity is ``mine``: ``first`` the candidate's answer, ``second`` the baseline's."""
    assert suite.pair is not None
    baseline = suite.pair[1]
    case = suite.cases[mine.case_id]
    text = evalgate_judge_input_text(case.prompt)
    both = evalgate_pairwise_orders(
        suite.judged.evaluator,
        text,
        evalgate_judged_answer(first),
        evalgate_judged_answer(second),
    )
    answers = [first["checksum"], second["checksum"]]
    return [
        EvalgateJudgeWork(
            path, suite, EvalgateJudgmentKey(*mine, order), answers, baseline, messages
        )
        for order, messages in zip(EVALGATE_JUDGE_ORDERS, both, strict=True)
    ]


def evalgate_judge_request(work: EvalgateJudgeWork, index: int, halt: int) -> EvalgateWireRequest:
    """``work`` as wire request ``index`` on the judge endpoint's stop channel ``halt`` (the
    endpoint's own number): tokens estimated at 4 characters a token plus 256 for the answer."""
    body = evalgate_judge_body(work.suite.judged.judge, work.messages)
    header = f"judge/{work.key.evalgate_label()}"
    tokens = sum(len(m["content"]) for m in work.messages) // 4 + 256
    return EvalgateWireRequest(index, halt, halt, body, header, tokens, False)


def evalgate_judgment_of(
    work: EvalgateJudgeWork, outcome: EvalgateOutcome
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The sealed judgment record of ``work`` for the judge's call ``outcome``, and its verdict
    (``{"verdict", "error"}``: an errored call is ``judge_<category>``)."""
    verdict = _verdict(work, outcome)
    case = work.suite.cases.get(work.key.case_id) or _golden_case(work)
    facts = {
        "baseline": work.baseline,
        "category": case.category,
        "cluster": case.cluster,
        "output": outcome["output"],
        "attempts": outcome["attempts"],
        "e2e_s": outcome["timing"]["e2e_s"],
        "started_at": outcome["started_at"],
        "finished_at": outcome["finished_at"],
    }
    record = evalgate_judgment_record(work.suite.context, work.key, work.answers, facts, verdict)
    return record, verdict


def evalgate_judge_stand_in(category: str, message: str) -> dict[str, Any]:
    """A judgment that does not exist (never stored): no verdict, the error says why."""
    return {"verdict": None, "error": {"category": category, "status": None, "message": message}}


def _golden_case(work: EvalgateJudgeWork) -> EvalgateCase:
    for key, _answers, _messages in evalgate_golden_requests(work.suite):
        if key == work.key:
            line = int(key.case_id.removeprefix("golden:"))
            for row in evalgate_golden_rows(work.suite):
                if row.line == line:
                    return work.suite.cases[row.case_id]
    raise KeyError(work.key.case_id)


def _verdict(work: EvalgateJudgeWork, outcome: Mapping[str, Any]) -> dict[str, Any]:
    error = outcome["error"]
    if error is not None:
        category = f"judge_{error['category']}"
        return {"verdict": None, "error": {**error, "category": category}}
    text = outcome["output"]
    if work.key.order is None or (
        work.key.order == EVALGATE_GOLDEN_ORDER and work.suite.judged.mode == "pointwise"
    ):
        scale = work.suite.judged.evaluator.scale
        assert scale is not None
        return evalgate_verdict_json(evalgate_parse_pointwise(text, scale))
    return evalgate_verdict_json(evalgate_parse_pairwise(text))
