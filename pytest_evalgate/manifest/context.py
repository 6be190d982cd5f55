"""Long context (SPEC 18): the prompt tokens of a case's requests, estimated, and the refusal of a
case longer than a candidate's ``pins.max_model_len`` before any request.

- **Estimate**: ``ceil(characters / 4)`` per request prompt (chat: the messages' contents), a
  stated estimate, not a tokenizer's count: a pinned ``pins.tokenizer`` is not loaded (the
  project carries no tokenizer library), so the refusal says "about N tokens (characters / 4)".
  A multiple-choice identity by log-likelihood has one request per choice (the case, the
  delimiter and the choice); every other identity one request (the prompt as sent).
- **Refusal**: for each candidate pinning ``max_model_len`` (a whole number >= 1), a case whose
  longest request's estimate plus its output tokens (``generation.max_tokens``; 1 for
  log-likelihood requests, the most a server needing ``max_tokens: 1`` is asked) exceeds it is an
  ``EvalgateConfigError`` naming the dataset file, the line and case id, the candidate and the
  numbers. A ``max_model_len`` that is not a whole number >= 1 is refused naming its key.
- ``evalgate_prefill_tokens(cases, ...)``: the estimated prompt tokens of one repetition of every
  case (``evalgate plan`` prints them next to the output tokens).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from pytest_evalgate.errors import EvalgateConfigError

EVALGATE_CHARS_PER_TOKEN_ESTIMATE = 4
EVALGATE_ESTIMATE_NOTE = "characters / 4, an estimate"


class EvalgateContextCase(Protocol):
    """What the estimate reads of a case (``manifest.dataset.EvalgateCase``)."""

    @property
    def case_id(self) -> str: ...
    @property
    def line(self) -> int: ...
    @property
    def choices(self) -> tuple[str, ...]: ...
    @property
    def prompt(self) -> tuple[Mapping[str, str], ...] | str: ...


def evalgate_estimated_tokens(text: str) -> int:
    """``ceil(len(text) / 4)``: the stated estimate of a prompt's tokens."""
    return math.ceil(len(text) / EVALGATE_CHARS_PER_TOKEN_ESTIMATE)


def evalgate_request_prompts(case: EvalgateContextCase, delimiter: str | None) -> list[str]:
    """The prompt text of each request of one identity (``delimiter`` None: not by
    log-likelihood, one request)."""
    prompt = case.prompt
    text = prompt if isinstance(prompt, str) else "".join(m["content"] for m in prompt)
    if delimiter is None or not case.choices:
        return [text]
    return [text + delimiter + choice for choice in case.choices]


def evalgate_prefill_tokens(cases: Iterable[EvalgateContextCase], delimiter: str | None) -> int:
    """Estimated prompt tokens of one repetition of ``cases`` (every request of each)."""
    return sum(
        evalgate_estimated_tokens(text)
        for case in cases
        for text in evalgate_request_prompts(case, delimiter)
    )


def evalgate_check_context(
    path: str,
    dataset_path: str,
    cases: Sequence[EvalgateContextCase],
    pins: Mapping[str, Mapping[str, object]],
    delimiter: str | None,
    output_tokens: int,
) -> None:
    """Refuse a case longer than a candidate's ``max_model_len`` (module docstring)."""
    limits = {name: _limit(path, name, p) for name, p in pins.items() if "max_model_len" in p}
    if not limits:
        return
    name, limit = min(limits.items(), key=lambda item: item[1])
    for case in cases:
        longest = max(
            evalgate_estimated_tokens(t) for t in evalgate_request_prompts(case, delimiter)
        )
        if longest + output_tokens > limit:
            where = f"line {case.line}: id {case.case_id!r}"
            reason = (
                f"about {longest} prompt tokens ({EVALGATE_ESTIMATE_NOTE}) + {output_tokens}"
                f" output tokens exceed candidates.{name}.pins.max_model_len {limit}:"
                " refused before any request"
            )
            raise EvalgateConfigError(dataset_path, where, reason)


def _limit(path: str, name: str, pins: Mapping[str, object]) -> int:
    value = pins["max_model_len"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        key = f"candidates.{name}.pins.max_model_len"
        raise EvalgateConfigError(path, key, f"must be a whole number >= 1, got {value!r}")
    return value
