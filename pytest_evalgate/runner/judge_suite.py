"""A judged suite as the judging stage holds it, and its golden set's judge requests.

``EvalgateJudgeSuite`` is one judged suite of this process: its judge, its judge endpoint (none
in aggregate mode), its pair (pairwise only), its stored judgments (read and verified once, at
load) and its cases. ``evalgate_golden_rows`` reads the suite's golden set (``judge.golden``);
``evalgate_golden_requests`` turns each row into the (key, answers, messages) of one judge
request (calibration, SPEC section 10), which the stage (``runner/judging.py``) sends like any
other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_evalgate.client import EvalgateEndpoint
from pytest_evalgate.formats.canonical import evalgate_sha256_hex
from pytest_evalgate.judge.golden import (
    EvalgateGoldenPairwise,
    EvalgateGoldenPointwise,
    evalgate_load_golden,
)
from pytest_evalgate.judge.prompt import (
    evalgate_judge_input_text,
    evalgate_pairwise_messages,
    evalgate_pointwise_messages,
)
from pytest_evalgate.manifest.dataset import EvalgateCase
from pytest_evalgate.manifest.judge import EvalgateJudged
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.store import EvalgateStoreBackend
from pytest_evalgate.store.judgments import (
    EVALGATE_GOLDEN_ORDER,
    EvalgateJudgmentContext,
    EvalgateJudgmentKey,
    EvalgateJudgmentView,
    evalgate_judgment_prefix,
    evalgate_read_judgments,
)


@dataclass
class EvalgateJudgeSuite:
    """One judged suite of this process: its judge, endpoint, pair and stored judgments."""

    manifest: EvalgateManifest
    judged: EvalgateJudged
    endpoint: EvalgateEndpoint | None
    pair: tuple[str, str] | None
    context: EvalgateJudgmentContext
    prefix: str
    stored: EvalgateJudgmentView = field(default_factory=EvalgateJudgmentView)
    cases: dict[str, EvalgateCase] = field(default_factory=dict)

    @classmethod
    def evalgate_load(
        cls,
        backend: EvalgateStoreBackend,
        manifest: EvalgateManifest,
        endpoint: EvalgateEndpoint | None,
        pair: tuple[str, str] | None,
        writer: str,
    ) -> EvalgateJudgeSuite:
        """The suite with its stored judgments read (and verified) from ``backend``."""
        judged = manifest.judged
        assert judged is not None
        context = EvalgateJudgmentContext(judged.key, manifest.definition_digest, writer)
        prefix = evalgate_judgment_prefix(manifest.suite, manifest.definition_digest, judged.key)
        stored = evalgate_read_judgments(backend, prefix, context)
        suite = cls(manifest, judged, endpoint, pair, context, prefix, stored)
        suite.cases = manifest.evalgate_case_index()
        return suite


def evalgate_golden_rows(
    suite: EvalgateJudgeSuite,
) -> tuple[EvalgateGoldenPointwise, ...] | tuple[EvalgateGoldenPairwise, ...]:
    """The suite's golden rows (none without ``judge.golden``)."""
    path = suite.judged.judge.golden_path
    if path is None:
        return ()
    return evalgate_load_golden(path, suite.judged.evaluator, set(suite.cases))


def evalgate_golden_requests(
    suite: EvalgateJudgeSuite,
) -> list[tuple[EvalgateJudgmentKey, list[str], list[dict[str, str]]]]:
    """(key, answers, messages) of each golden row: the key's case id is ``golden:<line>``,
    its candidate ``golden``, its order ``golden``; ``answers`` is the digest of the row."""
    revision = suite.manifest.dataset_revision
    evaluator = suite.judged.evaluator
    requests = []
    for row in evalgate_golden_rows(suite):
        case = suite.cases[row.case_id]
        text = evalgate_judge_input_text(case.prompt)
        case_id = f"golden:{row.line}"
        key = EvalgateJudgmentKey(revision, case_id, "golden", 0, EVALGATE_GOLDEN_ORDER)
        if isinstance(row, EvalgateGoldenPointwise):
            messages = evalgate_pointwise_messages(evaluator, text, row.output, case.target or None)
            body: list[Any] = [row.case_id, row.output, row.label]
        else:
            messages = evalgate_pairwise_messages(evaluator, text, row.output_a, row.output_b)
            body = [row.case_id, row.output_a, row.output_b, row.preferred]
        requests.append((key, [evalgate_sha256_hex(body)], messages))
    return requests
