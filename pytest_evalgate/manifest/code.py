"""The manifest's code-scoring keys (SPEC section 11): the ``sandbox:`` block and the code
evaluator's ``language``, ``extract`` and ``pass_at_k``.

Kept apart from ``manifest.py`` so the loader only gains a few lines. Contracts:

- ``evaluator: {scorer: code, language: python, extract: fenced, pass_at_k: k}``: ``language``
  defaults to ``python`` (the only one), ``extract`` to ``fenced``; ``pass_at_k`` (optional)
  must be ``<= repetitions``. These keys under any other scorer are refused, and so is a
  ``sandbox:`` block without ``scorer: code``.
- ``sandbox: {isolation, max_concurrency, timeout_s, memory_mb, cpu_s, processes, open_files,
  file_size_mb, work_mb, runtime_class}``: unknown keys and out-of-range values are refused with
  the file and the key. ``isolation`` defaults to ``auto``; ``none`` must be written out.
- The definition digest of a code suite holds the language, extract and pass@k and every limit
  that changes what a result means (``timeout_s``, ``memory_mb``, ``cpu_s``, ``processes``,
  ``open_files``, ``file_size_mb``, ``work_mb``). ``isolation``, ``max_concurrency`` and
  ``runtime_class`` are transport: they decide where and how fast code runs, not whether an
  answer is right. (An unsandboxed result stays marked as such in its record, and a decision
  over such records is never signed.) Suites of any other scorer get nothing new: their
  definition, and so their digest, is what it was before code scoring existed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.formats.strictmodel import EVALGATE_STRICT_MODEL

EVALGATE_CODE_SCORER = "code"
EVALGATE_CODE_LANGUAGES = ("python",)
EVALGATE_CODE_EVALUATOR_KEYS = ("language", "extract", "pass_at_k")
EVALGATE_SANDBOX_TRANSPORT_KEYS = frozenset({"isolation", "max_concurrency", "runtime_class"})
"""Sandbox keys left out of the definition digest (where and how fast, not what)."""


class EvalgateSandboxBlock(BaseModel):
    """The manifest's ``sandbox:`` block, validated (bounds are sanity, not policy)."""

    model_config = EVALGATE_STRICT_MODEL

    isolation: Literal["auto", "bwrap", "unshare", "none"] = "auto"
    max_concurrency: int = Field(default=4, ge=1)
    timeout_s: float = Field(default=10.0, gt=0, le=3600)
    memory_mb: int = Field(default=512, ge=32)
    cpu_s: int = Field(default=10, ge=1)
    processes: int = Field(default=64, ge=1)
    open_files: int = Field(default=64, ge=16)
    file_size_mb: int = Field(default=16, ge=1)
    work_mb: int = Field(default=64, ge=1)
    runtime_class: str | None = Field(default=None, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def evalgate_check_code_keys(
    path: str,
    evaluator: Mapping[str, object],
    sandbox: EvalgateSandboxBlock | None,
    repetitions: int,
) -> None:
    """Refuse code keys that do not fit (``EvalgateConfigError`` with file, key, reason)."""
    is_code = evaluator["scorer"] == EVALGATE_CODE_SCORER
    if not is_code:
        _refuse_outside_code(path, evaluator, sandbox)
        return
    _check_choice(path, "language", evaluator.get("language"), EVALGATE_CODE_LANGUAGES)
    _check_choice(path, "extract", evaluator.get("extract"), ("fenced",))
    _check_pass_at_k(path, evaluator.get("pass_at_k"), repetitions)


def _refuse_outside_code(
    path: str, evaluator: Mapping[str, object], sandbox: EvalgateSandboxBlock | None
) -> None:
    for key in EVALGATE_CODE_EVALUATOR_KEYS:
        if evaluator.get(key) is not None:
            reason = f"only for scorer: code (this suite's scorer is {evaluator['scorer']!r})"
            raise EvalgateConfigError(path, f"evaluator.{key}", reason)
    if sandbox is not None:
        raise EvalgateConfigError(path, "sandbox", "a sandbox block is only for scorer: code")


def _check_choice(path: str, key: str, value: object, allowed: tuple[str, ...]) -> None:
    if value is not None and value not in allowed:
        reason = f"must be one of {', '.join(allowed)}, got {value!r}"
        raise EvalgateConfigError(path, f"evaluator.{key}", reason)


def _check_pass_at_k(path: str, value: object, repetitions: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise EvalgateConfigError(path, "evaluator.pass_at_k", "must be an integer >= 1")
    if value > repetitions:
        reason = (
            f"pass@{value} needs at least {value} repetitions per case; "
            f"repetitions is {repetitions}"
        )
        raise EvalgateConfigError(path, "evaluator.pass_at_k", reason)


def evalgate_evaluator_definition(evaluator: Mapping[str, object]) -> dict[str, Any]:
    """The evaluator as the definition digest sees it: the code keys (with their defaults) for
    a code suite, and none of them for any other suite (its digest is unchanged)."""
    base = {k: v for k, v in evaluator.items() if k not in EVALGATE_CODE_EVALUATOR_KEYS}
    if evaluator["scorer"] != EVALGATE_CODE_SCORER:
        return base
    return {**base, **evalgate_code_settings(evaluator)}


def evalgate_code_settings(evaluator: Mapping[str, object]) -> dict[str, Any]:
    """``language``, ``extract`` and ``pass_at_k`` of a code evaluator, defaults filled in."""
    return {
        "language": evaluator.get("language") or "python",
        "extract": evaluator.get("extract") or "fenced",
        "pass_at_k": evaluator.get("pass_at_k"),
    }


def evalgate_sandbox_block(
    scorer: str, sandbox: EvalgateSandboxBlock | None
) -> EvalgateSandboxBlock | None:
    """The whole ``sandbox`` block of a code suite (defaults filled in), else None."""
    if scorer != EVALGATE_CODE_SCORER:
        return None
    return sandbox or EvalgateSandboxBlock()


def evalgate_sandbox_settings(
    scorer: str, sandbox: EvalgateSandboxBlock | None
) -> dict[str, Any] | None:
    """``evalgate_sandbox_block`` dumped (the mapping the definition digest is computed from)."""
    block = evalgate_sandbox_block(scorer, sandbox)
    return None if block is None else block.model_dump()


def evalgate_sandbox_definition(settings: Mapping[str, object] | None) -> dict[str, Any]:
    """``{"sandbox": <limits>}`` for the definition digest of a code suite, ``{}`` otherwise."""
    if settings is None:
        return {}
    limits = {k: v for k, v in settings.items() if k not in EVALGATE_SANDBOX_TRANSPORT_KEYS}
    return {"sandbox": limits}
