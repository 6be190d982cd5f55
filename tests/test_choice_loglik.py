"""The log-likelihood arithmetic of multiple choice (SPEC 18), against hand-computed values."""

from __future__ import annotations

import pytest

from pytest_evalgate.choice.loglik import (
    evalgate_acc_norm_pick,
    evalgate_acc_pick,
    evalgate_argmax,
    evalgate_choice_loglik,
)
from pytest_evalgate.errors import EvalgateAnswerError


def _echo(pieces: list[tuple[str, float | None]], top: bool = False) -> dict[str, object]:
    """A completion's logprobs over ``pieces`` (token text, its log-probability)."""
    offsets, at = [], 0
    for text, _ in pieces:
        offsets.append(at)
        at += len(text)
    out: dict[str, object] = {
        "tokens": [t for t, _ in pieces],
        "token_logprobs": [v for _, v in pieces],
        "text_offset": offsets,
    }
    if top:
        out["top_logprobs"] = [None if v is None else {t: v} for t, v in pieces]
    return out


def test_the_boundary_at_the_delimiter_counts_the_delimiter_token_with_the_choice() -> None:
    # "Q: sky?" + " blue": the token " blue" starts at 7 == len(context)
    logprobs = _echo([("Q:", None), (" sky", -2.0), ("?", -0.5), (" blue", -0.25)])
    got = evalgate_choice_loglik(logprobs, len("Q: sky?"), len("Q: sky? blue"))
    assert (got.loglikelihood, got.tokens) == (-0.25, 1)


def test_a_multi_token_choice_sums_every_token_of_it() -> None:
    logprobs = _echo([("Q", None), ("?", -1.0), (" dark", -0.5), (" blue", -0.75), ("!", -0.125)])
    got = evalgate_choice_loglik(logprobs, 2, len("Q? dark blue!"))
    assert (got.loglikelihood, got.tokens) == (-1.375, 3)


def test_a_token_straddling_the_boundary_counts_with_the_context() -> None:
    # context "ab", token "bc" starts at 1 (< 2): it is the context's, as text_offset says
    logprobs = _echo([("a", None), ("bc", -3.0), ("d", -0.5)])
    got = evalgate_choice_loglik(logprobs, 2, 4)
    assert (got.loglikelihood, got.tokens) == (-0.5, 1)


def test_the_generated_token_of_max_tokens_1_is_left_out() -> None:
    # the prompt is "Q? x" (4 characters); the server added one generated token at offset 4
    logprobs = _echo([("Q", None), ("?", -1.0), (" x", -0.5), (" y", -9.0)])
    got = evalgate_choice_loglik(logprobs, 2, 4)
    assert (got.loglikelihood, got.tokens) == (-0.5, 1)


def test_greedy_compares_each_token_with_its_top_logprob() -> None:
    logprobs = _echo([("Q", None), ("?", -1.0), (" x", -0.5)], top=True)
    assert evalgate_choice_loglik(logprobs, 2, 4).greedy is True
    logprobs["top_logprobs"] = [None, {"?": -1.0}, {" z": -0.1, " x": -0.5}]
    assert evalgate_choice_loglik(logprobs, 2, 4).greedy is False
    del logprobs["top_logprobs"]
    assert evalgate_choice_loglik(logprobs, 2, 4).greedy is None


@pytest.mark.parametrize(
    ("logprobs", "words"),
    [
        ({"tokens": ["a"], "token_logprobs": [None]}, "must be lists"),
        ({"tokens": ["a", "b"], "token_logprobs": [None], "text_offset": [0]}, "differ"),
        ({"tokens": ["a", "b"], "token_logprobs": [None, None], "text_offset": [0, 1]}, "finite"),
        ({"tokens": ["a"], "token_logprobs": [None], "text_offset": [0]}, "no token"),
        ({"tokens": ["a", "b"], "token_logprobs": [None, -1], "text_offset": [0, "1"]}, "integer"),
    ],
)
def test_malformed_logprobs_are_refused(logprobs: dict[str, object], words: str) -> None:
    with pytest.raises(EvalgateAnswerError, match=words) as caught:
        evalgate_choice_loglik(logprobs, 1, 2)
    assert caught.value.category == "malformed_response"


def test_acc_takes_the_highest_sum_and_acc_norm_the_highest_per_character() -> None:
    choices = ["a", "bbbbbbbbbb"]
    logliks = [-1.0, -2.0]  # per character: -1.0 against -0.2
    assert evalgate_acc_pick(logliks) == 0
    assert evalgate_acc_norm_pick(logliks, choices) == 1


def test_acc_norm_counts_characters_not_bytes_as_lm_eval_0_4_does() -> None:
    # "é" is 1 character and 2 bytes: per character -0.6 > -0.7 (per byte it would be -0.3)
    assert evalgate_acc_norm_pick([-0.6, -0.7], ["é", "x"]) == 0
    assert evalgate_acc_norm_pick([-1.4, -0.7], ["é", "x"]) == 1


def test_ties_go_to_the_first_index_like_numpy() -> None:
    assert evalgate_argmax([-1.0, -0.5, -0.5]) == 1
    assert evalgate_argmax([-0.5, -0.5]) == 0
    assert evalgate_acc_norm_pick([-1.0, -2.0], ["x", "yy"]) == 0
