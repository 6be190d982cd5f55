"""The manifest's multiple-choice keys (SPEC 18), refused under the wrong scorer.

- ``evaluator: {scorer: choice, method: loglikelihood | generate, options: {target_delimiter:
  " ", metric: acc | acc_norm}}``: ``method`` defaults to ``loglikelihood``; ``target_delimiter``
  (default one space, as lm-evaluation-harness) goes between the rendered case and each choice;
  ``metric`` (default ``acc``) names the pick that decides pass or fail (``acc_norm``: only for
  ``loglikelihood``). ``method`` under another scorer is refused, so is a row with ``choices``.
- ``method: loglikelihood`` needs ``api: completions`` (log-probabilities of an echoed prompt)
  and ``stream: false`` (a whole answer carries them).
- Every row of a choice suite has ``input``, ``choices`` (at least two distinct non-empty
  strings) and ``target``: the index of the right choice (an integer) or its text; never
  ``messages``, ``turns`` or ``expect``. Refusals name the dataset file, the line and case id
  and the key.
- ``method: generate`` renders the case, then the lettered choices (``A. ...``), then
  ``Answer:``; the answer's letter (``evalgate_letter_index``) is compared with the right one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pytest_evalgate.errors import EvalgateConfigError

if TYPE_CHECKING:  # types only: the schema module imports nothing of this one
    from pytest_evalgate.manifest.schema import EvalgateEvaluatorSchema, EvalgateManifestSchema

EVALGATE_CHOICE_SCORER = "choice"
EVALGATE_CHOICE_METRICS = ("acc", "acc_norm")
EVALGATE_DEFAULT_DELIMITER = " "
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_NOT_IN_A_CHOICE_ROW = ("messages", "turns", "expect")


def evalgate_choice_method(model: EvalgateManifestSchema) -> str | None:
    """``loglikelihood`` or ``generate`` for a choice suite, None for any other suite."""
    if model.evaluator.scorer != EVALGATE_CHOICE_SCORER:
        return None
    return model.evaluator.method or "loglikelihood"


def evalgate_by_loglikelihood(evaluator: EvalgateEvaluatorSchema) -> bool:
    """Whether an evaluator scores multiple choice by log-likelihood (one request a choice)."""
    return evaluator.scorer == EVALGATE_CHOICE_SCORER and (
        (evaluator.method or "loglikelihood") == "loglikelihood"
    )


def evalgate_check_choice_keys(path: str, model: EvalgateManifestSchema) -> None:
    """Refuse the choice keys that do not fit (module docstring), naming the file and key."""
    method = evalgate_choice_method(model)
    if method is None:
        if model.evaluator.method is not None:
            reason = f"only for scorer: choice (this suite's scorer is {model.evaluator.scorer!r})"
            raise EvalgateConfigError(path, "evaluator.method", reason)
        return
    options = model.evaluator.options
    delimiter = options.get("target_delimiter", EVALGATE_DEFAULT_DELIMITER)
    if not isinstance(delimiter, str):
        raise EvalgateConfigError(path, "evaluator.options.target_delimiter", "must be a string")
    metric = options.get("metric", "acc")
    if metric not in EVALGATE_CHOICE_METRICS:
        reason = f"must be one of {', '.join(EVALGATE_CHOICE_METRICS)}, got {metric!r}"
        raise EvalgateConfigError(path, "evaluator.options.metric", reason)
    if method == "generate":
        if metric != "acc":
            reason = "acc_norm is a log-likelihood pick; method: generate is scored by acc"
            raise EvalgateConfigError(path, "evaluator.options.metric", reason)
        return
    if model.api != "completions":
        reason = "method: loglikelihood needs api: completions (an echoed prompt's logprobs)"
        raise EvalgateConfigError(path, "api", reason)
    if model.stream:
        reason = "method: loglikelihood needs stream: false (a whole answer carries logprobs)"
        raise EvalgateConfigError(path, "stream", reason)


def evalgate_choice_delimiter(options: Mapping[str, object]) -> str:
    """The target delimiter of a choice suite's ``evaluator.options``."""
    value = options.get("target_delimiter", EVALGATE_DEFAULT_DELIMITER)
    return value if isinstance(value, str) else EVALGATE_DEFAULT_DELIMITER


def evalgate_row_choices(
    source: str, where: str, row: Mapping[str, object], model: EvalgateManifestSchema
) -> tuple[str, ...]:
    """A row's ``choices`` (empty for a suite of another scorer), checked (module docstring)."""
    if evalgate_choice_method(model) is None:
        if "choices" in row:
            reason = f"only for scorer: choice (this suite's scorer is {model.evaluator.scorer!r})"
            raise EvalgateConfigError(source, f"{where}: choices", reason)
        return ()
    for key in _NOT_IN_A_CHOICE_ROW:
        if key in row:
            raise EvalgateConfigError(source, f"{where}: {key}", "a choices row has input only")
    value = row.get("choices")
    if not isinstance(value, list) or not all(isinstance(c, str) and c for c in value):
        reason = "scorer: choice needs choices: a list of non-empty strings"
        raise EvalgateConfigError(source, f"{where}: choices", reason)
    if len(value) < 2:
        raise EvalgateConfigError(source, f"{where}: choices", "needs at least 2 choices")
    if len(value) > len(_LETTERS):
        raise EvalgateConfigError(source, f"{where}: choices", "at most 26 choices")
    seen: dict[str, int] = {}
    for index, choice in enumerate(value):
        if choice in seen:
            reason = f"choice {index} repeats choice {seen[choice]} ({choice[:40]!r})"
            raise EvalgateConfigError(source, f"{where}: choices", reason)
        seen[choice] = index
    return tuple(value)


def evalgate_target_index(source: str, where: str, target: object, choices: Sequence[str]) -> int:
    """The right choice's index: ``target`` as an index, or as the text of one choice."""
    key = f"{where}: target"
    if isinstance(target, bool) or not isinstance(target, int | str):
        raise EvalgateConfigError(source, key, "must be a choice's index or its text")
    if isinstance(target, int):
        if not 0 <= target < len(choices):
            reason = (
                f"index {target} is not one of the {len(choices)} choices (0..{len(choices) - 1})"
            )
            raise EvalgateConfigError(source, key, reason)
        return target
    if target not in choices:
        raise EvalgateConfigError(source, key, f"{target[:40]!r} is none of the choices")
    return list(choices).index(target)


def evalgate_lettered_prompt(text: str, choices: Sequence[str]) -> str:
    """``method: generate``'s prompt: the case, the lettered choices, ``Answer:``."""
    lines = [f"{_LETTERS[index]}. {choice}" for index, choice in enumerate(choices)]
    return "\n".join([text, *lines, "Answer:"])


def evalgate_letter_index(answer: str, count: int) -> int | None:
    """The choice an answer names: its first character after stripping, a capital letter of
    one of the ``count`` choices not followed by another letter (``B``, ``B.``, ``B) 42``;
    never ``Blue`` or ``b``), else None (a wrong answer)."""
    stripped = answer.strip()
    if not stripped or stripped[0] not in _LETTERS[:count]:
        return None
    if len(stripped) > 1 and stripped[1].isalpha():
        return None
    return _LETTERS.index(stripped[0])
