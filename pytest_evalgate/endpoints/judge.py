"""The judge's endpoint: its base URL resolved, and the simulated judge started for it.

A ``simulated://?judge=1&...`` judge URL starts the built-in simulator as a judge (its own
process on 127.0.0.1) with the hidden truth written from the suite: the cases' targets as
references and, when the suite names a golden set, the people's labels. A real URL is used as
it is; its key comes from ``judge.api_key_env``. Timeouts and attempts are ``judge.budget``'s,
never the candidates'. The pool stops every simulator it started.
"""

from __future__ import annotations

import os

from pytest_evalgate.client import EvalgateEndpoint
from pytest_evalgate.endpoints.simulators import (
    EvalgateSimulatorPool,
    evalgate_check_proxy,
    evalgate_env_key,
)
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.judge.golden import (
    EvalgateGoldenPairwise,
    EvalgateGoldenPointwise,
    evalgate_load_golden,
)
from pytest_evalgate.judge.prompt import evalgate_judge_input_text
from pytest_evalgate.manifest.judge import EvalgateJudged
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.manifest.url import evalgate_check_base_url
from pytest_evalgate.simulated import evalgate_parse_simulated_url
from pytest_evalgate.simulated.judge_style import evalgate_write_judge_truth

EVALGATE_JUDGE_BASE_URL_ENV = "PYTEST_EVALGATE_JUDGE_BASE_URL"


class EvalgateJudgeEndpoints:
    """Builds judge endpoints and owns the simulated judges it spawned."""

    def __init__(self, request_log: str | None = None) -> None:
        self._pool = EvalgateSimulatorPool(request_log, "evalgate-judge-")

    def evalgate_endpoint(self, manifest: EvalgateManifest) -> EvalgateEndpoint:
        """The judge endpoint of a judged suite (``PYTEST_EVALGATE_JUDGE_BASE_URL`` overrides
        its base URL: transport only, the judge key does not change)."""
        judged = manifest.judged
        assert judged is not None
        judge = judged.judge
        url = os.environ.get(EVALGATE_JUDGE_BASE_URL_ENV) or judge.base_url
        if url.startswith("simulated://"):
            url = self._simulated(manifest, judged, url)
        budget = judge.budget
        evalgate_check_proxy(url)
        return EvalgateEndpoint(
            base_url=url.rstrip("/"),
            model=judge.model,
            api="chat",
            api_key=_api_key(manifest, judge.api_key_env),
            timeout_s=budget.timeout_s,
            max_attempts=budget.max_attempts,
            stream=False,
        )

    def evalgate_close(self) -> None:
        """Stop every simulated judge this pool started."""
        self._pool.evalgate_close()

    def _simulated(self, manifest: EvalgateManifest, judged: EvalgateJudged, url: str) -> str:
        config = evalgate_parse_simulated_url(url)
        if not config.judge:
            reason = f"a simulated judge URL needs judge=1: {url}"
            raise EvalgateConfigError(manifest.path, "judge.base_url", reason)

        def truth(path: str) -> None:
            inputs = {c.case_id: evalgate_judge_input_text(c.prompt) for c in manifest.cases}
            references = [(inputs[c.case_id], c.target) for c in manifest.cases if c.target]
            evalgate_write_judge_truth(path, references, evalgate_golden_truth(manifest, inputs))

        return self._pool.evalgate_base_url((manifest.path, url), config, "truth", truth)


def evalgate_check_judge_endpoint(manifest: EvalgateManifest) -> None:
    """Refuse, before any request, a judge endpoint that cannot work: a base URL override
    that is no usable URL, a simulated judge URL whose knobs do not parse or lack ``judge=1``,
    a ``judge.api_key_env`` naming an unset variable (``EvalgateConfigError``, with the key)."""
    judged = manifest.judged
    if judged is None:
        return
    override = os.environ.get(EVALGATE_JUDGE_BASE_URL_ENV)
    if override:
        evalgate_check_base_url(EVALGATE_JUDGE_BASE_URL_ENV, "judge.base_url", override)
    url = override or judged.judge.base_url
    if url.startswith("simulated://") and not evalgate_parse_simulated_url(url).judge:
        reason = f"a simulated judge URL needs judge=1: {url}"
        raise EvalgateConfigError(manifest.path, "judge.base_url", reason)
    _api_key(manifest, judged.judge.api_key_env)


def evalgate_golden_truth(
    manifest: EvalgateManifest, inputs: dict[str, str]
) -> list[tuple[str, str, float]]:
    """The golden set's people's labels as ``(case input, answer, quality)`` rows (none without
    a golden set): a label's 0..1 value; a preferred answer 1, the other 0, 0.5 each on a tie."""
    judged = manifest.judged
    if judged is None or judged.judge.golden_path is None:
        return []
    rows: list[tuple[str, str, float]] = []
    evaluator = judged.evaluator
    for row in evalgate_load_golden(judged.judge.golden_path, evaluator, set(inputs)):
        case_input = inputs[row.case_id]
        if isinstance(row, EvalgateGoldenPointwise):
            assert evaluator.scale is not None
            rows.append((case_input, row.output, evaluator.scale.evalgate_normalise(row.label)))
        elif isinstance(row, EvalgateGoldenPairwise):
            first, second = {"A": (1.0, 0.0), "B": (0.0, 1.0), "tie": (0.5, 0.5)}[row.preferred]
            rows += [(case_input, row.output_a, first), (case_input, row.output_b, second)]
    return rows


def _api_key(manifest: EvalgateManifest, name: str | None) -> str | None:
    return evalgate_env_key(manifest.path, "judge.api_key_env", name)
