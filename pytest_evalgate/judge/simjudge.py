"""The simulated judge: pure, deterministic decisions with known biases. It is a simulator.

``evalgate_sim_judge_respond(messages, knobs, truth)`` is the whole judge: it reads a request
built by ``prompt.py`` and returns the text a judge model would answer. The simulator's HTTP app
can serve it as the message content of a chat completion. Every reason it gives starts with
``EVALGATE_SIM_JUDGE_SAYS``, and so does every unparseable answer it gives.

The hidden truth
----------------
``truth(case_input, answer) -> quality in [0, 1] | None`` says how good an answer really is
(None: unknown). It is given, never read from the request, so the judge can be wrong about it.
Builders: ``evalgate_sim_truth_table`` (explicit ``(input, answer, quality)`` rows; repeated
rows average), ``evalgate_sim_truth_references`` (1 when the answer equals the case's target
after case, punctuation and space folding, else 0: exactly how the simulated candidate model
answers, right = the target), ``evalgate_sim_truth_golden`` (a golden set's human labels) and
``evalgate_sim_truth_chain`` (the first that knows).

The model of the judge (``u(...)`` are uniforms from sha256 of the knobs' seed and the request's
material; the pairwise draws take the two answers as an unordered pair, so that the **only**
thing that depends on the order is the position bias)
-------------------------------------------------------------------------------------------
- pointwise: with the quality known and ``u_know < accuracy`` the judge gives the true score
  ``min + round(q * (max - min))``. Otherwise it is unsure: with ``u_verb < verbosity_bias``
  an answer longer than the reference (in words) gets the top score; else a uniform guess.
- pairwise: with both qualities known and different and ``u_know < accuracy``, the better
  answer wins. Otherwise (equal or unknown quality, or not known this time) it is unsure: with
  ``u_pos < position_bias`` it prefers the first answer (``A``); else with ``u_verb <
  verbosity_bias`` the longer one (when the word counts differ); else a guess that ignores the
  order (tie, or one answer chosen by content, each a third).

  So with two candidates of equal quality, one order alone gives a net win rate of
  ``position_bias`` in expectation, and judged in both orders a pair is inconsistent exactly
  when the position bias struck: the inconsistency rate estimates ``position_bias``.
- with ``u_bad < unparseable_rate`` (drawn per request *as ordered*, with ``salt``) the answer
  is unusable: prose without JSON, JSON cut short, or a verdict off the scale.
- The answer's wrapping (bare JSON, a fenced block, prose around it) varies by request; the
  parser must cope with all three.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.formats.canonical import evalgate_sha256_hex
from pytest_evalgate.judge.golden import EvalgateGoldenPairwise, EvalgateGoldenPointwise
from pytest_evalgate.judge.parse import EvalgateWinner
from pytest_evalgate.judge.prompt import EvalgateJudgeRequestParts, evalgate_judge_request_parts
from pytest_evalgate.judge.spec import EvalgateJudgeScale

EVALGATE_SIM_JUDGE_SAYS = "evalgate simulated judge (a simulator, not a model)"
EvalgateSimTruth = Callable[[str, str], float | None]

_UNIT_KNOBS = ("accuracy", "position_bias", "verbosity_bias", "unparseable_rate")
_FOLD = re.compile(r"[^\w]+")


@dataclass(frozen=True)
class EvalgateSimJudgeKnobs:
    """The simulated judge's knobs; rates and probabilities in [0, 1]."""

    accuracy: float = 0.9
    position_bias: float = 0.0
    verbosity_bias: float = 0.0
    unparseable_rate: float = 0.0
    seed: int = 0


def evalgate_sim_judge_knobs(
    values: Mapping[str, object], source: str = "simulated judge"
) -> EvalgateSimJudgeKnobs:
    """Knobs from ``name -> value`` (numbers or their text); errors name the source and knob."""
    known = {f.name for f in fields(EvalgateSimJudgeKnobs)}
    parsed: dict[str, Any] = {}
    for name, value in values.items():
        if name not in known:
            raise EvalgateConfigError(
                source, name, f"unknown knob (known: {', '.join(sorted(known))})"
            )
        parsed[name] = _knob(source, name, value)
    return EvalgateSimJudgeKnobs(**parsed)


def _knob(source: str, name: str, value: object) -> float | int:
    number = math.nan
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        with contextlib.suppress(ValueError):  # not a number: stays NaN, refused below
            number = float(value)
    if name in _UNIT_KNOBS and not 0.0 <= number <= 1.0:
        raise EvalgateConfigError(source, name, f"must be a number within [0, 1], got {value!r}")
    if name == "seed" and not (number >= 0 and number == int(number)):
        raise EvalgateConfigError(source, name, f"must be an integer >= 0, got {value!r}")
    return int(number) if name == "seed" else number


# --------------------------------------------------------------------------- the hidden truth


def _fold(text: str) -> str:
    return " ".join(_FOLD.sub(" ", text.casefold()).split())


def _pair_digest(case_input: str, answer: str) -> str:
    return evalgate_sha256_hex([case_input, answer])


def evalgate_sim_truth_table(rows: Iterable[tuple[str, str, float]]) -> EvalgateSimTruth:
    """Truth from ``(case_input, answer, quality)`` rows; an answer given twice averages."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for case_input, answer, quality in rows:
        entry = sums[_pair_digest(case_input, answer)]
        entry[0] += float(quality)
        entry[1] += 1.0
    table = {digest: total / count for digest, (total, count) in sums.items()}

    def truth(case_input: str, answer: str) -> float | None:
        return table.get(_pair_digest(case_input, answer))

    return truth


def evalgate_sim_truth_references(references: Mapping[str, str]) -> EvalgateSimTruth:
    """Truth from ``case_input -> target``: 1 for the target (folded), 0 otherwise."""
    folded = {case_input: _fold(target) for case_input, target in references.items()}

    def truth(case_input: str, answer: str) -> float | None:
        target = folded.get(case_input)
        return None if target is None else float(_fold(answer) == target)

    return truth


def evalgate_sim_truth_golden(
    golden: Sequence[EvalgateGoldenPointwise] | Sequence[EvalgateGoldenPairwise],
    inputs: Mapping[str, str],
    scale: EvalgateJudgeScale | None = None,
) -> EvalgateSimTruth:
    """Truth from people: a pointwise label's 0..1 value; a preferred answer 1, the other 0,
    both 0.5 on a tie. ``inputs`` maps each golden ``case_id`` to the input the judge sees."""
    rows: list[tuple[str, str, float]] = []
    for row in golden:
        case_input = inputs[row.case_id]
        if isinstance(row, EvalgateGoldenPointwise):
            if scale is None:
                raise ValueError("pointwise golden rows need the scale")
            rows.append((case_input, row.output, scale.evalgate_normalise(row.label)))
        else:
            first, second = {"A": (1.0, 0.0), "B": (0.0, 1.0), "tie": (0.5, 0.5)}[row.preferred]
            rows += [(case_input, row.output_a, first), (case_input, row.output_b, second)]
    return evalgate_sim_truth_table(rows)


def evalgate_sim_truth_chain(*truths: EvalgateSimTruth) -> EvalgateSimTruth:
    """The first truth that knows the answer (None when none does)."""

    def truth(case_input: str, answer: str) -> float | None:
        for one in truths:
            quality = one(case_input, answer)
            if quality is not None:
                return quality
        return None

    return truth


# --------------------------------------------------------------------------- deciding


def _uniform(*parts: object) -> float:
    """Uniform in [0, 1) from sha256 of the parts joined by U+001F."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def _words(text: str) -> int:
    return len(text.split())


def _pointwise(
    parts: EvalgateJudgeRequestParts, knobs: EvalgateSimJudgeKnobs, truth: EvalgateSimTruth
) -> tuple[float, str]:
    low, high = parts.scale or (0, 1)
    answer = parts.answers[0]
    key = (knobs.seed, "pointwise", parts.rubric, parts.case_input, answer)
    quality = truth(parts.case_input, answer)
    if quality is not None and _uniform(*key, "know") < knobs.accuracy:
        return low + math.floor(quality * (high - low) + 0.5), "knew the answer's quality"
    reference = parts.reference
    longer = reference is not None and _words(answer) > _words(reference)
    if longer and _uniform(*key, "verbosity") < knobs.verbosity_bias:
        return high, "verbosity bias: the answer is longer than the reference"
    guess = low + math.floor(_uniform(*key, "guess") * (high - low + 1))
    return min(guess, high), "unsure: a guess"


def _pairwise(
    parts: EvalgateJudgeRequestParts, knobs: EvalgateSimJudgeKnobs, truth: EvalgateSimTruth
) -> tuple[EvalgateWinner, str]:
    first, second = parts.answers
    key = (knobs.seed, "pairwise", parts.rubric, parts.case_input, *sorted((first, second)))
    better = _better(parts.case_input, first, second, truth)
    if better is not None and _uniform(*key, "know") < knobs.accuracy:
        return better, "knew which answer is better"
    if _uniform(*key, "position") < knobs.position_bias:
        return "A", "position bias: preferred the first answer"
    lengths = (_words(first), _words(second))
    if lengths[0] != lengths[1] and _uniform(*key, "verbosity") < knobs.verbosity_bias:
        return ("A" if lengths[0] > lengths[1] else "B"), "verbosity bias: preferred the longer"
    return _order_free_guess(first, second, _uniform(*key, "guess")), "unsure: a guess"


def _better(
    case_input: str, first: str, second: str, truth: EvalgateSimTruth
) -> EvalgateWinner | None:
    """The truly better answer's position; None when equal or unknown (nothing to know)."""
    qa, qb = truth(case_input, first), truth(case_input, second)
    if qa is None or qb is None or qa == qb:
        return None
    return "A" if qa > qb else "B"


def _order_free_guess(first: str, second: str, draw: float) -> EvalgateWinner:
    if first == second or draw < 1.0 / 3.0:
        return "tie"
    chosen = sorted((first, second))[0 if draw < 2.0 / 3.0 else 1]
    return "A" if chosen == first else "B"


# --------------------------------------------------------------------------- answering


def evalgate_sim_judge_respond(
    messages: object, knobs: EvalgateSimJudgeKnobs, truth: EvalgateSimTruth, salt: str = ""
) -> str:
    """The simulated judge's answer text to one request (see the module contract).

    ``salt`` enters only the unparseable draw (pass the attempt or run to let a retry of an
    unusable answer succeed); a request that was not built by ``prompt.py`` gets an
    unparseable answer saying so.
    """
    parts = evalgate_judge_request_parts(messages)
    if parts is None:
        return f"{EVALGATE_SIM_JUDGE_SAYS}: this is not a judge request I can read."
    request = evalgate_sha256_hex([knobs.seed, messages, salt])
    if _uniform(request, "unparseable") < knobs.unparseable_rate:
        return _unusable(parts, _uniform(request, "which"))
    if parts.mode == "pairwise":
        winner, why = _pairwise(parts, knobs, truth)
        verdict: dict[str, Any] = {"winner": winner}
    else:
        score, why = _pointwise(parts, knobs, truth)
        verdict = {"score": score}
    verdict["reason"] = f"{EVALGATE_SIM_JUDGE_SAYS}: {why}."
    return _wrapped(json.dumps(verdict), _uniform(request, "style"))


def _wrapped(text: str, draw: float) -> str:
    if draw < 0.6:
        return text
    if draw < 0.8:
        return f"```json\n{text}\n```"
    return f"Here is my verdict.\n{text}\nI hope this helps."


def _unusable(parts: EvalgateJudgeRequestParts, draw: float) -> str:
    """Prose without JSON, JSON cut short, or a verdict off the scale; each says who it is."""
    if draw < 1.0 / 3.0:
        return f"{EVALGATE_SIM_JUDGE_SAYS}: I would rather not commit to a verdict here."
    top = (parts.scale or (0, 1))[1]
    verdict: dict[str, Any] = {"winner": "C"} if parts.mode == "pairwise" else {"score": top + 10}
    text = json.dumps({**verdict, "reason": f"{EVALGATE_SIM_JUDGE_SAYS}: unusable."})
    return text if draw < 2.0 / 3.0 else text[: -len('."}')]  # cut inside the reason
