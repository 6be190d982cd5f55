"""The simulated judge (``judge=1``): a judge request in, the judge's verdict text out.

Its decisions are ``judge.simjudge``'s (accuracy against a hidden truth, position bias,
verbosity bias, unparseable verdicts); this module is only the seam between that and the
simulator's HTTP side. The hidden truth travels in the simulator's answer key (never in the
request), written by ``evalgate_write_judge_truth``:

- a reference row (``["evalgate-judge-reference", case input]`` -> the case's target): an
  answer equal to the target after folding case, punctuation and spaces has quality 1, any
  other 0 (how the simulated candidate answers);
- a truth row (``["evalgate-judge-truth", case input, answer]`` -> a quality in [0, 1] as
  text): people's labels of a golden set; it wins over the reference.

Every reason the judge gives says it is a simulator. The ``salt`` of the unparseable draw is
the number of times this server saw the same request, so a retry may succeed.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from pytest_evalgate.judge.simjudge import (
    EvalgateSimJudgeKnobs,
    EvalgateSimTruth,
    evalgate_sim_judge_respond,
)
from pytest_evalgate.simulated.answers import (
    EvalgateSimKey,
    evalgate_prompt_digest,
    evalgate_write_answer_key,
)
from pytest_evalgate.simulated.knobs import EvalgateSimConfig


class EvalgateSimJudgeAsk(Protocol):
    """What the judge style reads of a request (``styles.EvalgateSimAsk`` has it)."""

    @property
    def prompt(self) -> Any:
        """The chat messages as sent."""
        ...  # pragma: no cover

    @property
    def digest(self) -> str:
        """The messages' digest."""
        ...  # pragma: no cover


_REFERENCE = "evalgate-judge-reference"
_TRUTH = "evalgate-judge-truth"
_FOLD = re.compile(r"[^\w]+")


def evalgate_sim_judge_config_knobs(config: EvalgateSimConfig) -> EvalgateSimJudgeKnobs:
    """The judge's knobs of a simulator config (``accuracy`` is the judge's accuracy)."""
    return EvalgateSimJudgeKnobs(
        accuracy=config.accuracy,
        position_bias=config.position_bias,
        verbosity_bias=config.verbosity_bias,
        unparseable_rate=config.unparseable_rate,
        seed=config.seed,
    )


def evalgate_write_judge_truth(
    path: str,
    references: Iterable[tuple[str, str]],
    truths: Iterable[tuple[str, str, float]] = (),
) -> int:
    """Write the hidden truth as an answer key: ``(case input, target)`` references and
    ``(case input, answer, quality)`` rows (an answer given twice averages)."""
    sums: dict[tuple[str, str], list[float]] = {}
    for case_input, answer, quality in truths:
        entry = sums.setdefault((case_input, answer), [0.0, 0.0])
        entry[0] += float(quality)
        entry[1] += 1.0
    rows: list[tuple[Any, str, str]] = [
        ([_REFERENCE, text], target, "judge") for text, target in dict(references).items()
    ]
    rows += [([_TRUTH, *pair], repr(total / n), "judge") for pair, (total, n) in sums.items()]
    return evalgate_write_answer_key(path, rows)


def _fold(text: str) -> str:
    return " ".join(_FOLD.sub(" ", text.casefold()).split())


def evalgate_sim_key_truth(key: EvalgateSimKey) -> EvalgateSimTruth:
    """The hidden truth of an answer key written by ``evalgate_write_judge_truth``."""

    def truth(case_input: str, answer: str) -> float | None:
        row = key.get(evalgate_prompt_digest([_TRUTH, case_input, answer]))
        if row is not None:
            return float(row[0])
        reference = key.get(evalgate_prompt_digest([_REFERENCE, case_input]))
        return None if reference is None else float(_fold(answer) == _fold(reference[0]))

    return truth


def evalgate_sim_judge_answerer(
    config: EvalgateSimConfig, key: EvalgateSimKey
) -> Callable[[EvalgateSimJudgeAsk], str]:
    """The simulated judge's answer logic for ``config`` and the truth in ``key``."""
    knobs = evalgate_sim_judge_config_knobs(config)
    truth = evalgate_sim_key_truth(key)
    seen: Counter[str] = Counter()

    def answer(ask: EvalgateSimJudgeAsk) -> str:
        salt = str(seen[ask.digest]) if seen[ask.digest] else ""
        seen[ask.digest] += 1
        return evalgate_sim_judge_respond(ask.prompt, knobs, truth, salt)

    return answer
