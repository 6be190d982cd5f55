"""One identity's work as the runner sends it: the suite run it belongs to, its request, its seal.

``EvalgateSuiteRun`` is everything the runner needs about one suite in this process;
``EvalgateWork`` is one identity of it (case, candidate, repetition, shard), graded and sealed
here once its outcome returns (``evalgate_seal_line``: the suite's scorer, a code suite's
execution, a conversation's or a multiple-choice case's own grade). The request the child sends
for it is built here too: its body (``evalgate_request_body``), its ``x-evalgate-identity``
header (``evalgate_identity_header``, also its journal key) and its token estimate
(``evalgate_estimate_tokens``). ``runner.parent`` decides when each work is sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_evalgate.client import EvalgateEndpoint
from pytest_evalgate.manifest.choice import evalgate_by_loglikelihood
from pytest_evalgate.runner.choice import evalgate_choice_errored, evalgate_choice_graded
from pytest_evalgate.runner.dialogue import evalgate_dialogue_graded, evalgate_tools_body
from pytest_evalgate.runner.execution import evalgate_code_grade
from pytest_evalgate.scoring import EvalgateScorer, evalgate_passed
from pytest_evalgate.store import (
    EvalgateIdentity,
    EvalgateOutcome,
    EvalgateRecord,
    evalgate_record_line,
)

if TYPE_CHECKING:  # types only: the suite's manifest is loaded by the session
    from pytest_evalgate.manifest.dataset import EvalgateCase
    from pytest_evalgate.manifest.load import EvalgateManifest

__all__ = [
    "EvalgateSuiteRun",
    "EvalgateWork",
    "evalgate_estimate_tokens",
    "evalgate_identity_header",
    "evalgate_request_body",
]


@dataclass
class EvalgateSuiteRun:
    """Everything the runner needs about one suite in this process."""

    manifest: EvalgateManifest
    scorer: EvalgateScorer
    threshold: float
    endpoints: dict[str, EvalgateEndpoint]
    prefixes: dict[str, str]
    keys: dict[str, str]
    sandbox: dict[str, Any] | None = None  # scorer: code (runner.execution settings)
    tools: dict[str, Any] | None = None  # a tool suite's fixture for the child (with services)
    # multiple choice by log-likelihood (SPEC 18): candidate -> the max_tokens its probe chose
    choice_max_tokens: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EvalgateWork:
    """One identity to request: a case, a candidate, a repetition, and its shard."""

    key: EvalgateIdentity
    suite: EvalgateSuiteRun = field(compare=False, hash=False)
    case: EvalgateCase = field(compare=False, hash=False)
    candidate: str
    repetition: int
    shard: int

    def evalgate_grade(self, output: str) -> tuple[float | None, bool | None]:
        """(score, passed) of ``output`` against the case's target, by the suite's scorer;
        (None, None) for a judged suite, whose grade is the judgment record's."""
        if self.suite.manifest.judged is not None:
            return None, None
        score = float(self.suite.scorer(output, self.case.target))
        return score, evalgate_passed(score, self.suite.threshold)

    def evalgate_seal(self, outcome: EvalgateOutcome, writer: str) -> EvalgateRecord:
        """This identity's sealed record of ``outcome`` (scored unless it is an error)."""
        return self.evalgate_seal_line(outcome, writer)[0]

    def evalgate_seal_line(
        self, outcome: EvalgateOutcome, writer: str
    ) -> tuple[EvalgateRecord, bytes]:
        """``evalgate_seal`` and the record's segment line (``store.evalgate_record_line``)."""
        code = "sandbox" in outcome  # scorer: code: graded by its execution, not its text
        grade = evalgate_code_grade(outcome) if code else self.evalgate_grade
        judged = self.suite.manifest.judged is not None  # its judge reads the transcript
        if self.case.choices and outcome["error"] is None:  # multiple choice (SPEC 18)
            outcome, grade = evalgate_choice_graded(self.case, self.suite.manifest, outcome)
        elif self.case.choices and "choice" in outcome:  # an error: no picks, nothing graded
            outcome = evalgate_choice_errored(self.case, outcome)
        elif "dialogue" in outcome and outcome["error"] is None and not judged:
            suite = self.suite
            outcome, grade = evalgate_dialogue_graded(
                self.case, suite.manifest, suite.scorer, suite.threshold, outcome
            )
        return evalgate_record_line(
            self.key,
            outcome,
            grade,
            definition_digest=self.suite.manifest.definition_digest,
            candidate_key=self.suite.keys[self.candidate],
            category=self.case.category,
            cluster=self.case.cluster,
            shard=self.shard,
            writer=writer,
        )


def evalgate_request_body(work: EvalgateWork) -> dict[str, Any]:
    """The request body (without model/stream): prompt plus generation settings.

    A fixed ``seed`` is offset by the repetition, so a deliberate re-sample differs when the
    temperature allows it; a transport retry resends the same body.
    """
    manifest = work.suite.manifest
    body: dict[str, Any] = manifest.generation.evalgate_request_fields()
    if manifest.generation.seed is not None:
        body["seed"] = manifest.generation.seed + work.repetition
    prompt = work.case.evalgate_prompt_json()
    body["prompt" if isinstance(prompt, str) else "messages"] = prompt
    return evalgate_tools_body(work.suite.manifest, body)


def evalgate_identity_header(work: EvalgateWork) -> str:
    """The ``x-evalgate-identity`` header value: ``revision/candidate/case/rN``."""
    revision, case_id, candidate, repetition = work.key
    return f"{revision}/{candidate}/{case_id}/r{repetition}"


def evalgate_estimate_tokens(work: EvalgateWork) -> int:
    """Tokens to reserve from the tokens-per-minute budget: prompt size (4 chars a token) plus
    ``max_tokens``; corrected by the response's ``usage`` afterwards."""
    prompt = work.case.evalgate_prompt_json()
    chars = len(prompt) if isinstance(prompt, str) else sum(len(m["content"]) for m in prompt)
    loglik = work.case.choices and evalgate_by_loglikelihood(work.suite.manifest.evaluator)
    if loglik and isinstance(prompt, str):  # one echoed request per choice (SPEC 18)
        return chars // 4 + 1 + max(len(c) for c in work.case.choices) // 4 + 2
    return chars // 4 + 1 + work.suite.manifest.generation.max_tokens
