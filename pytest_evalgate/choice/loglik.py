"""A choice's log-likelihood from an echoed completion, and the picks ``acc`` and ``acc_norm``.

Pure arithmetic, as lm-evaluation-harness 0.4 computes it for ``output_type: multiple_choice``
over a ``local-completions`` model:

- The request's prompt is the context (the rendered case), then the continuation (the target
  delimiter and the choice). The server echoes the prompt's tokens with ``logprobs``:
  ``tokens``, ``token_logprobs`` and ``text_offset`` (each token's first character in the
  prompt). The continuation's tokens are those whose ``text_offset >= len(context)`` and
  ``< len(prompt)`` (a token generated after the echo, sent when ``max_tokens`` is 1, starts at
  ``len(prompt)`` and is left out, as lm-eval drops the last token). A token straddling the
  boundary starts before it and counts with the context.
- ``is_greedy``: every continuation token's log-probability equals the highest of its
  ``top_logprobs`` entry (lm-eval's test); None when the server sent no ``top_logprobs``.
- ``acc`` picks the index of the highest sum; ``acc_norm`` the highest sum divided by the
  length of the choice **in characters**, without the delimiter: lm-eval 0.4's
  ``process_results`` divides by ``float(len(choice))`` (its documentation says "per byte";
  the code counts characters, and parity means the code). Ties go to the first index, as
  ``numpy.argmax`` does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_evalgate.errors import EvalgateAnswerError


@dataclass(frozen=True)
class EvalgateChoiceLoglik:
    """One choice's log-likelihood (sum over its tokens), its token count and greediness."""

    loglikelihood: float
    tokens: int
    greedy: bool | None


def _malformed(reason: str) -> EvalgateAnswerError:
    return EvalgateAnswerError("malformed_response", f"logprobs: {reason}", retry=False)


def evalgate_logprobs_lists(
    logprobs: Mapping[str, object],
) -> tuple[list[object], list[object], list[object]]:
    """``(tokens, token_logprobs, text_offset)`` of a completion's ``logprobs``, equal in
    length; ``EvalgateAnswerError`` (``malformed_response``) otherwise."""
    lists = [logprobs.get(k) for k in ("tokens", "token_logprobs", "text_offset")]
    if not all(isinstance(value, list) for value in lists):
        raise _malformed("tokens, token_logprobs and text_offset must be lists")
    tokens, values, offsets = (list(v) for v in lists if isinstance(v, list))
    if not len(tokens) == len(values) == len(offsets):
        raise _malformed("tokens, token_logprobs and text_offset differ in length")
    return tokens, values, offsets


def evalgate_choice_loglik(
    logprobs: Mapping[str, object], context_chars: int, prompt_chars: int
) -> EvalgateChoiceLoglik:
    """The continuation's log-likelihood: tokens with ``context_chars <= text_offset <
    prompt_chars`` (module docstring). A continuation without a token, a missing (null) or
    non-finite log-probability in it, or an offset that is no integer is ``malformed_response``."""
    _tokens, values, offsets = evalgate_logprobs_lists(logprobs)
    tops = logprobs.get("top_logprobs")
    total, count, greedy = 0.0, 0, isinstance(tops, list) and len(tops) == len(values)
    for index, (value, offset) in enumerate(zip(values, offsets, strict=True)):
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise _malformed(f"text_offset[{index}] is not an integer")
        if not context_chars <= offset < prompt_chars:
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise _malformed(f"token_logprobs[{index}] of the choice is not a finite number")
        total += float(value)
        count += 1
        if greedy and isinstance(tops, list):
            greedy = _is_top(float(value), tops[index])
    if count == 0:
        raise _malformed(f"no token at or after the context's {context_chars} characters")
    return EvalgateChoiceLoglik(total, count, greedy if isinstance(tops, list) else None)


def _is_top(value: float, top: object) -> bool:
    if not isinstance(top, dict) or not top:
        return False
    best = max(v for v in top.values() if isinstance(v, int | float))
    return value == best


def evalgate_argmax(values: Sequence[float]) -> int:
    """The index of the largest value, the first one on a tie (``numpy.argmax``)."""
    best = 0
    for index, value in enumerate(values):
        if value > values[best]:
            best = index
    return best


def evalgate_acc_pick(logliks: Sequence[float]) -> int:
    """``acc``'s pick: the choice with the highest log-likelihood."""
    return evalgate_argmax(logliks)


def evalgate_acc_norm_pick(logliks: Sequence[float], choices: Sequence[str]) -> int:
    """``acc_norm``'s pick: the highest log-likelihood per character of the choice (module
    docstring: lm-eval 0.4 divides by ``len(choice)``, the choice without its delimiter)."""
    return evalgate_argmax([ll / float(len(c)) for ll, c in zip(logliks, choices, strict=True)])
