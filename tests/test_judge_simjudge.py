"""judge/simjudge.py: the simulated judge's knobs, its truth, and its biases by Monte Carlo.

Every response goes through the real prompt builder and the real parser, and pairs through the
real combination and statistics, so these tests show the properties the issue asks for on the
pure core: position bias is removed by the swap and measured as inconsistency; verbosity bias
is not; lowering accuracy lowers kappa's bound. Seeded and deterministic.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.judge import agreement, pairwise, parse, prompt, simjudge, spec
from pytest_evalgate.judge.golden import EvalgateGoldenPairwise, EvalgateGoldenPointwise

SAYS = simjudge.EVALGATE_SIM_JUDGE_SAYS
Knobs = simjudge.EvalgateSimJudgeKnobs
RUBRIC = "Prefer the answer that resolves the customer's problem correctly.\n"
SCALE = spec.EvalgateJudgeScale(1, 5, 4)
POINTWISE = spec.EvalgateJudgedEvaluator(
    "rubric-v1", "pointwise", "rubric.md", RUBRIC, spec.evalgate_rubric_digest(RUBRIC), SCALE
)
PAIRWISE = dataclasses.replace(POINTWISE, mode="pairwise", scale=None)


def _pair_verdict(
    messages: list[dict[str, str]], knobs: Knobs, truth: simjudge.EvalgateSimTruth
) -> pairwise.EvalgateWinner:
    verdict = parse.evalgate_parse_pairwise(
        simjudge.evalgate_sim_judge_respond(messages, knobs, truth)
    )
    assert isinstance(verdict, parse.EvalgatePairwiseVerdict), verdict
    assert verdict.reason.startswith(SAYS)
    return verdict.winner


def _point_verdict(
    messages: list[dict[str, str]], knobs: Knobs, truth: simjudge.EvalgateSimTruth
) -> parse.EvalgatePointwiseVerdict:
    text = simjudge.evalgate_sim_judge_respond(messages, knobs, truth)
    verdict = parse.evalgate_parse_pointwise(text, SCALE)
    assert isinstance(verdict, parse.EvalgatePointwiseVerdict), verdict
    assert verdict.reason.startswith(SAYS)
    return verdict


@dataclasses.dataclass(frozen=True)
class _Duel:
    """A judged run of candidate against baseline, one repetition per case."""

    first_only: list[pairwise.EvalgatePairJudgment]  # candidate first, taken at its word
    swapped: list[pairwise.EvalgatePairJudgment]  # both orders combined

    @property
    def one_order_net(self) -> float:
        return float(np.mean([j.outcome.net for j in self.first_only]))

    def net_win_rate(self, one_order: bool = False) -> pairwise.EvalgateNetWinRate:
        cases = pairwise.evalgate_pairwise_cases(self.first_only if one_order else self.swapped)
        return pairwise.evalgate_net_win_rate(cases, resamples=2000, seed=0, confidence=0.95)

    def inconsistency(self) -> dict[str, pairwise.EvalgateInconsistency]:
        return pairwise.evalgate_inconsistency_by_slice(self.swapped)


def _duel(
    inputs: Sequence[str],
    candidate: Sequence[str],
    baseline: Sequence[str],
    knobs: Knobs,
    truth: simjudge.EvalgateSimTruth,
) -> _Duel:
    first_only, swapped = [], []
    for i, (question, cand, base) in enumerate(zip(inputs, candidate, baseline, strict=True)):
        cand_first, base_first = prompt.evalgate_pairwise_orders(PAIRWISE, question, cand, base)
        one = _pair_verdict(cand_first, knobs, truth)
        two = _pair_verdict(base_first, knobs, truth)
        case, category, cluster = f"case-{i:05d}", f"s{i % 4}", f"k{i // 2}"
        alone = pairwise.EvalgatePairOutcome(_AS_RESULT[one], inconsistent=False)
        both = pairwise.evalgate_pair_outcome(one, two)
        first_only.append(pairwise.EvalgatePairJudgment(case, category, cluster, 0, alone))
        swapped.append(pairwise.EvalgatePairJudgment(case, category, cluster, 0, both))
    return _Duel(first_only, swapped)


_AS_RESULT: dict[str, pairwise.EvalgatePairResult] = {"A": "win", "tie": "tie", "B": "loss"}


def _equal_quality(
    n: int, seed: int
) -> tuple[list[str], list[str], list[str], simjudge.EvalgateSimTruth]:
    """Two candidates whose answers to each case are different texts of the same quality."""
    rng = np.random.default_rng(seed)
    quality = rng.choice([0.0, 0.5, 1.0], n)
    inputs = [f"Customer question {i}: where is parcel {i}?" for i in range(n)]
    cand = [f"Your parcel {i} is at the depot." for i in range(n)]
    base = [f"Parcel {i} left the depot today." for i in range(n)]
    rows = [(q, a, float(v)) for q, a, v in zip(inputs, cand, quality, strict=True)]
    rows += [(q, b, float(v)) for q, b, v in zip(inputs, base, quality, strict=True)]
    return inputs, cand, base, simjudge.evalgate_sim_truth_table(rows)


def _within(observed: float, expected: float, n: int, variance: float | None = None) -> bool:
    """``observed``, a mean of n draws, lies within 4 Monte Carlo standard errors of ``expected``.

    The variance of one draw is Bernoulli's ``p(1 - p)`` unless given (a net in {-1, 0, 1}
    has variance at most 1).
    """
    per_draw = expected * (1 - expected) if variance is None else variance
    return abs(observed - expected) <= 4.0 * math.sqrt(max(per_draw, 1e-12) / n)


# --------------------------------------------------------------------------- the showcase


N = 2000


def test_position_bias_one_order_is_biased_and_the_swap_removes_and_measures_it() -> None:
    inputs, cand, base, truth = _equal_quality(N, seed=1)
    duel = _duel(inputs, cand, base, Knobs(accuracy=0.9, position_bias=0.3), truth)
    # One order only: the candidate, always shown first, gains about the bias.
    assert _within(duel.one_order_net, 0.3, N, variance=1.0)
    # Both orders: nothing left to tell the two apart ...
    summary = duel.net_win_rate()
    assert summary.lo <= 0.0 <= summary.hi
    assert abs(summary.estimate) < 0.05
    # ... and the inconsistency rate estimates the simulated bias, overall and per slice.
    by_slice = duel.inconsistency()
    assert _within(by_slice["all"].rate, 0.3, N)
    for name in ("s0", "s1", "s2", "s3"):
        assert by_slice[name].pairs == N // 4
        assert _within(by_slice[name].rate, 0.3, N // 4)


def test_the_one_order_bias_is_significant_where_the_swapped_rate_is_not() -> None:
    inputs, cand, base, truth = _equal_quality(600, seed=2)
    duel = _duel(inputs, cand, base, Knobs(position_bias=0.3), truth)
    biased = duel.net_win_rate(one_order=True)
    assert biased.lo > 0.15  # one order alone would wrongly call the candidate better
    swapped = duel.net_win_rate()
    assert swapped.lo < 0.0 < swapped.hi


def test_without_position_bias_the_orders_never_disagree() -> None:
    inputs, cand, base, truth = _equal_quality(500, seed=3)
    duel = _duel(inputs, cand, base, Knobs(accuracy=0.7, position_bias=0.0), truth)
    assert duel.inconsistency()["all"].inconsistent == 0
    assert _within(duel.one_order_net, 0.0, 500, variance=1.0)


def test_inconsistency_follows_how_often_the_judge_is_unsure() -> None:
    # Independent answers of equal expected quality: where one is truly better, a judge of
    # accuracy 0.8 knows it 80 % of the time; the bias strikes only when it is unsure.
    n = 2000
    rng = np.random.default_rng(4)
    inputs = [f"q{i}" for i in range(n)]
    targets = [f"answer {i}" for i in range(n)]
    cand = [t if rng.random() < 0.7 else f"wrong {i}" for i, t in enumerate(targets)]
    base = [t if rng.random() < 0.7 else f"nope {i}" for i, t in enumerate(targets)]
    truth = simjudge.evalgate_sim_truth_references(dict(zip(inputs, targets, strict=True)))
    decisive = sum((c == t) != (b == t) for c, b, t in zip(cand, base, targets, strict=True))
    unsure = ((n - decisive) + 0.2 * decisive) / n
    duel = _duel(inputs, cand, base, Knobs(accuracy=0.8, position_bias=0.4), truth)
    assert _within(duel.inconsistency()["all"].rate, 0.4 * unsure, n)


def test_verbosity_bias_survives_the_swap_and_is_not_position_inconsistency() -> None:
    inputs, _, base, truth = _equal_quality(800, seed=5)
    padded = [f"{b} Thank you for your patience, we truly value you as a customer." for b in base]
    truth = simjudge.evalgate_sim_truth_chain(
        truth,
        simjudge.evalgate_sim_truth_table(
            (q, p, truth(q, b) or 0.0) for q, p, b in zip(inputs, padded, base, strict=True)
        ),
    )
    duel = _duel(inputs, padded, base, Knobs(accuracy=0.9, verbosity_bias=0.5), truth)
    assert duel.inconsistency()["all"].inconsistent == 0  # the same preference in both orders
    # Unsure (always: equal quality): half the time it takes the longer answer; else it guesses
    # without regard to order (a third each: tie, one, the other), worth 0 on average.
    summary = duel.net_win_rate()
    assert summary.lo > 0.3
    assert _within(summary.estimate, 0.5, 800, variance=1.0)


def test_a_knowing_judge_is_not_swayed_by_position() -> None:
    n = 400
    inputs = [f"q{i}" for i in range(n)]
    truth = simjudge.evalgate_sim_truth_references({q: f"right {q}" for q in inputs})
    cand = [f"right {q}" for q in inputs]
    base = [f"wrong {q}" for q in inputs]
    duel = _duel(inputs, cand, base, Knobs(accuracy=1.0, position_bias=1.0), truth)
    summary = duel.net_win_rate()
    assert (summary.estimate, summary.lo) == (1.0, 1.0)
    assert duel.inconsistency()["all"].inconsistent == 0


# --------------------------------------------------------------------------- pointwise and kappa


def _golden(n: int, seed: int) -> tuple[list[EvalgateGoldenPointwise], dict[str, str]]:
    rng = np.random.default_rng(seed)
    labels = rng.choice(SCALE.evalgate_points(), n, p=[0.1, 0.2, 0.3, 0.25, 0.15])
    golden = [
        EvalgateGoldenPointwise(f"case-{i // 2:03d}", f"answer {i}", int(label), i + 1)
        for i, label in enumerate(labels)
    ]
    inputs = {row.case_id: f"Question of {row.case_id}" for row in golden}
    return golden, inputs


def _judge_golden(
    golden: Sequence[EvalgateGoldenPointwise], inputs: dict[str, str], knobs: Knobs
) -> agreement.EvalgateAgreement:
    truth = simjudge.evalgate_sim_truth_golden(golden, inputs, SCALE)
    scores = [
        _point_verdict(
            prompt.evalgate_pointwise_messages(POINTWISE, inputs[row.case_id], row.output, None),
            knobs,
            truth,
        ).score
        for row in golden
    ]
    return agreement.evalgate_pointwise_agreement(golden, scores, SCALE, resamples=2000, seed=0)


def test_lowering_accuracy_lowers_kappa_until_the_bound_fails_min_kappa() -> None:
    golden, inputs = _golden(240, seed=7)
    results = {
        acc: _judge_golden(golden, inputs, Knobs(accuracy=acc)) for acc in (1.0, 0.9, 0.6, 0.3)
    }
    assert results[1.0].kappa == 1.0 and results[1.0].raw_agreement == 1.0
    bounds = [results[acc].lo for acc in (1.0, 0.9, 0.6, 0.3)]
    assert bounds == sorted(bounds, reverse=True)
    min_kappa = 0.6
    assert results[0.9].lo >= min_kappa  # a calibrated judge passes judge_agreement ...
    assert results[0.3].lo < min_kappa  # ... a careless one fails it
    assert results[0.3].raw_agreement < 0.6


def test_a_guessing_judge_agrees_by_chance_only() -> None:
    golden, inputs = _golden(400, seed=8)
    result = _judge_golden(golden, inputs, Knobs(accuracy=0.0))
    assert result.lo < 0.0 < result.hi
    assert _within(result.raw_agreement, 0.2, 400)  # a uniform guess on five points


def test_pointwise_truth_from_references_and_verbosity() -> None:
    reference = "Open Orders and press Refund."
    truth = simjudge.evalgate_sim_truth_references({"How do I get a refund?": reference})

    def score(answer: str, knobs: Knobs) -> float:
        messages = prompt.evalgate_pointwise_messages(
            POINTWISE, "How do I get a refund?", answer, reference
        )
        return _point_verdict(messages, knobs, truth).score

    assert score("open orders, and press REFUND", Knobs(accuracy=1.0)) == 5
    assert score("Call us.", Knobs(accuracy=1.0)) == 1
    long_wrong = "Call us. We are always glad to help, any day of the week, night or day."
    assert score(long_wrong, Knobs(accuracy=0.0, verbosity_bias=1.0)) == 5
    scores = {score(f"Call {k}.", Knobs(accuracy=0.0, verbosity_bias=1.0)) for k in range(60)}
    assert scores == {1, 2, 3, 4, 5}  # short answers: guesses over the whole scale


def test_unknown_truth_means_unsure() -> None:
    truth = simjudge.evalgate_sim_truth_table([])
    messages = prompt.evalgate_pointwise_messages(POINTWISE, "q", "a", None)
    texts = {
        simjudge.evalgate_sim_judge_respond(messages, Knobs(accuracy=1.0, seed=s), truth)
        for s in range(30)
    }
    assert all("unsure" in text for text in texts) and len(texts) > 1


# --------------------------------------------------------------------------- answers and knobs


def test_every_answer_says_it_is_a_simulator_and_is_deterministic() -> None:
    inputs, cand, base, truth = _equal_quality(300, seed=9)
    knobs = Knobs(accuracy=0.5, position_bias=0.2, verbosity_bias=0.2, unparseable_rate=0.3)
    texts = []
    for q, c, b in zip(inputs, cand, base, strict=True):
        for messages in (
            *prompt.evalgate_pairwise_orders(PAIRWISE, q, c, b),
            prompt.evalgate_pointwise_messages(POINTWISE, q, c, b),
        ):
            text = simjudge.evalgate_sim_judge_respond(messages, knobs, truth)
            assert text == simjudge.evalgate_sim_judge_respond(messages, knobs, truth)
            texts.append(text)
    assert all(SAYS in text for text in texts)
    assert any(text.startswith("```json") for text in texts)  # the parser's cases all occur
    assert any(text.startswith("Here is my verdict") for text in texts)
    assert any(text.startswith("{") for text in texts)


def test_the_unparseable_rate_and_a_salt_that_lets_a_retry_succeed() -> None:
    inputs, cand, base, truth = _equal_quality(1500, seed=10)
    knobs = Knobs(unparseable_rate=0.2)
    requests = [
        prompt.evalgate_pairwise_messages(PAIRWISE, q, c, b)
        for q, c, b in zip(inputs, cand, base, strict=True)
    ]

    def unusable(salt: str) -> list[bool]:
        out = []
        for messages in requests:
            text = simjudge.evalgate_sim_judge_respond(messages, knobs, truth, salt=salt)
            out.append(
                isinstance(parse.evalgate_parse_pairwise(text), parse.EvalgateJudgeUnparseable)
            )
        return out

    first, retry = unusable("attempt-1"), unusable("attempt-2")
    assert _within(float(np.mean(first)), 0.2, 1500)
    both = float(np.mean([a and b for a, b in zip(first, retry, strict=True)]))
    assert _within(both, 0.04, 1500)  # independent draws: a retry usually succeeds
    never = Knobs(unparseable_rate=0.0)
    assert all(
        isinstance(
            parse.evalgate_parse_pairwise(simjudge.evalgate_sim_judge_respond(m, never, truth)),
            parse.EvalgatePairwiseVerdict,
        )
        for m in requests[:200]
    )


def test_every_kind_of_unusable_answer_is_unparseable_in_both_modes() -> None:
    truth = simjudge.evalgate_sim_truth_table([])
    always = Knobs(unparseable_rate=1.0)
    reasons: set[str] = set()
    for i in range(60):
        pair = prompt.evalgate_pairwise_messages(PAIRWISE, f"q{i}", "a", "b")
        point = prompt.evalgate_pointwise_messages(POINTWISE, f"q{i}", "a", None)
        bad_pair = parse.evalgate_parse_pairwise(
            simjudge.evalgate_sim_judge_respond(pair, always, truth)
        )
        bad_point = parse.evalgate_parse_pointwise(
            simjudge.evalgate_sim_judge_respond(point, always, truth), SCALE
        )
        assert isinstance(bad_pair, parse.EvalgateJudgeUnparseable)
        assert isinstance(bad_point, parse.EvalgateJudgeUnparseable)
        reasons |= {bad_pair.reason, bad_point.reason}
    assert any("no JSON object" in r for r in reasons)
    assert any("outside the scale" in r for r in reasons)
    assert any("not A, B or tie" in r for r in reasons)


def test_a_request_not_built_by_the_prompt_module_gets_an_unparseable_answer() -> None:
    text = simjudge.evalgate_sim_judge_respond(
        [{"role": "user", "content": "What is 2 + 2?"}],
        Knobs(),
        simjudge.evalgate_sim_truth_table([]),
    )
    assert SAYS in text
    assert isinstance(parse.evalgate_parse_pairwise(text), parse.EvalgateJudgeUnparseable)


def test_the_seed_knob_changes_the_judges_draws() -> None:
    inputs, cand, base, truth = _equal_quality(200, seed=11)
    one = _duel(inputs, cand, base, Knobs(position_bias=0.5, seed=0), truth)
    two = _duel(inputs, cand, base, Knobs(position_bias=0.5, seed=1), truth)
    flags_one = [j.outcome.inconsistent for j in one.swapped]
    flags_two = [j.outcome.inconsistent for j in two.swapped]
    assert flags_one != flags_two


@pytest.mark.parametrize(
    ("values", "key", "reason"),
    [
        ({"acuracy": 0.9}, "acuracy", "unknown knob"),
        ({"accuracy": 1.5}, "accuracy", "within [0, 1]"),
        ({"position_bias": -0.1}, "position_bias", "within [0, 1]"),
        ({"verbosity_bias": "lots"}, "verbosity_bias", "within [0, 1]"),
        ({"unparseable_rate": True}, "unparseable_rate", "within [0, 1]"),
        ({"seed": -1}, "seed", "integer >= 0"),
        ({"seed": "1.5"}, "seed", "integer >= 0"),
    ],
)
def test_bad_knobs_are_refused(values: dict[str, Any], key: str, reason: str) -> None:
    with pytest.raises(EvalgateConfigError) as caught:
        simjudge.evalgate_sim_judge_knobs(values, source="simulated://?judge=1")
    assert (caught.value.source, caught.value.key) == ("simulated://?judge=1", key)
    assert reason in caught.value.reason


def test_knobs_from_text_and_numbers() -> None:
    knobs = simjudge.evalgate_sim_judge_knobs(
        {"accuracy": "0.75", "position_bias": 0.3, "verbosity_bias": "0", "seed": "4"}
    )
    assert knobs == Knobs(accuracy=0.75, position_bias=0.3, verbosity_bias=0.0, seed=4)
    assert isinstance(knobs.seed, int)
    assert simjudge.evalgate_sim_judge_knobs({}) == Knobs()


# --------------------------------------------------------------------------- truths


def test_truth_builders() -> None:
    table = simjudge.evalgate_sim_truth_table([("q", "a", 1.0), ("q", "a", 0.0), ("q", "b", 0.25)])
    assert (table("q", "a"), table("q", "b"), table("q", "c"), table("r", "a")) == (
        0.5,
        0.25,
        None,
        None,
    )
    refs = simjudge.evalgate_sim_truth_references({"q": "Open Orders!"})
    assert (refs("q", "open   orders"), refs("q", "open"), refs("other", "x")) == (1.0, 0.0, None)
    chain = simjudge.evalgate_sim_truth_chain(table, refs)
    assert (chain("q", "a"), chain("q", "Open Orders"), chain("z", "z")) == (0.5, 1.0, None)
    pairs = [
        EvalgateGoldenPairwise("c1", "x", "y", "A", 1),
        EvalgateGoldenPairwise("c2", "x", "y", "tie", 2),
    ]
    golden = simjudge.evalgate_sim_truth_golden(pairs, {"c1": "q1", "c2": "q2"})
    assert (golden("q1", "x"), golden("q1", "y"), golden("q2", "x"), golden("q2", "y")) == (
        1.0,
        0.0,
        0.5,
        0.5,
    )
    points = [EvalgateGoldenPointwise("c1", "x", 4, 1)]
    assert simjudge.evalgate_sim_truth_golden(points, {"c1": "q"}, SCALE)("q", "x") == 0.75
    with pytest.raises(ValueError, match="scale"):
        simjudge.evalgate_sim_truth_golden(points, {"c1": "q"})
