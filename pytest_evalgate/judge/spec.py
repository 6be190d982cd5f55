"""A judge's value types, the manifest blocks it is configured by, and its key.

Contracts
---------
- ``EvalgateJudgeConfig`` is the pydantic model of the manifest's ``judge:`` block and
  ``EvalgateJudgedEvaluatorConfig`` that of the judged evaluator's ``mode``, ``rubric`` and
  ``scale`` (both ``extra="forbid"``). The manifest embeds them; ``evalgate_judge_config`` and
  ``evalgate_judged_evaluator_config`` validate a raw mapping on their own and turn pydantic's
  errors into ``EvalgateConfigError(source, "judge.<key>" | "evaluator.<key>", reason)``.
- ``EvalgateJudge`` and ``EvalgateJudgedEvaluator`` are the frozen values the rest of the package
  uses; they are built by ``evalgate_judge`` and ``evalgate_judged_evaluator`` (which reads the
  rubric, so a missing or empty rubric is refused there).
- The **judge key** (``evalgate_judge_key``) is the sha256 of the canonical JSON of
  ``evalgate_judge_key_material``: judge model, pins, prompt revision, temperature, seed, the
  evaluator's revision, the rubric's text digest, mode, scale and the built-in prompt format.
  Transport (base URL, key env var, budget), the golden set and ``allow_sampling`` stay out:
  moving the judge to another host or raising its concurrency keeps every judgment valid.
- The refusals, pure functions that raise ``EvalgateConfigError`` naming the file and the key,
  live in ``judge.refusals`` (``evalgate_check_judge`` runs them all before any request).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.formats.canonical import evalgate_sha256_hex
from pytest_evalgate.formats.strictmodel import (
    EVALGATE_STRICT_MODEL,
    EvalgateBudgetSchema,
    EvalgateRequestSeed,
)

# The built-in judge prompt's format. Bump it whenever ``prompt.py`` changes a word the judge
# sees: it is part of the judge key, so stored judgments are re-judged, never silently mixed.
EVALGATE_JUDGE_PROMPT_FORMAT = "evalgate-judge-prompt-1"
EVALGATE_JUDGE_MODES = ("pointwise", "pairwise")
# The judge's answer bound when ``judge.max_tokens`` is not written: a verdict with its reasons
# fits many times over; a judge that rambles past it is an error of that judgment, not a verdict.
EVALGATE_JUDGE_MAX_TOKENS = 1024
EvalgateJudgeMode = Literal["pointwise", "pairwise"]
_Model = TypeVar("_Model", bound=BaseModel)


class _Strict(BaseModel):
    model_config = EVALGATE_STRICT_MODEL


class EvalgateJudgeScaleConfig(_Strict):
    """``scale: {min, max, pass}``: integer points ``min..max``; an item passes at ``pass``."""

    model_config = ConfigDict(**EVALGATE_STRICT_MODEL, populate_by_name=True)

    min: int = Field(strict=True)
    max: int = Field(strict=True)
    pass_: float = Field(alias="pass", strict=True)

    @model_validator(mode="after")
    def _ordered(self) -> EvalgateJudgeScaleConfig:
        if self.min >= self.max:
            raise ValueError(f"min ({self.min}) must be below max ({self.max})")
        if not self.min <= self.pass_ <= self.max:
            raise ValueError(f"pass ({self.pass_:g}) must lie within [{self.min}, {self.max}]")
        return self


class EvalgateJudgeConfig(_Strict):
    """The manifest's ``judge:`` block (SPEC section 10)."""

    model: str = Field(min_length=1)
    base_url: str = Field(min_length=1)
    api_key_env: str | None = None
    revision: str = Field(min_length=1)
    temperature: float = Field(default=0.0, ge=0)
    seed: EvalgateRequestSeed | None = None
    # The judge's answer length: unbounded, a chatty judge made 40 judgments take minutes. The
    # default bound is sent with every judge request; only a written value enters the judge key
    # (judgments stored before the key existed keep their key: a verdict is parsed whole or the
    # judgment is an error, so a bound never changes what a stored verdict means).
    max_tokens: int | None = Field(default=None, ge=1)
    top_p: float | None = Field(default=None, gt=0, le=1)
    pins: dict[str, str | int | float | bool] = Field(default_factory=dict)
    # the judge's own run-wide budget, counted apart from the candidates'
    budget: EvalgateBudgetSchema = Field(default_factory=EvalgateBudgetSchema)
    golden: str | None = None
    allow_sampling: bool = False


class EvalgateJudgedEvaluatorConfig(_Strict):
    """The judged evaluator's own keys: ``mode``, ``rubric`` (a file) and ``scale``.

    A pointwise judge needs a scale; a pairwise judge has none (its verdict is A, B or tie).
    """

    mode: EvalgateJudgeMode = "pointwise"
    rubric: str = Field(min_length=1)
    scale: EvalgateJudgeScaleConfig | None = Field(default=None, validate_default=True)

    @field_validator("scale")
    @classmethod
    def _scale_fits_mode(
        cls, scale: EvalgateJudgeScaleConfig | None, info: ValidationInfo
    ) -> EvalgateJudgeScaleConfig | None:
        mode = info.data.get("mode")
        if mode == "pointwise" and scale is None:
            raise ValueError("pointwise judging needs a scale: {min, max, pass}")
        if mode == "pairwise" and scale is not None:
            raise ValueError("pairwise judging has no scale (its verdict is A, B or tie)")
        return scale


@dataclass(frozen=True)
class EvalgateJudgeScale:
    """Integer points ``min..max``; ``pass_score`` is the lowest passing score."""

    min: int
    max: int
    pass_score: float

    def evalgate_normalise(self, score: float) -> float:
        """Map a score on the scale to 0..1: ``(score - min) / (max - min)``."""
        return (score - self.min) / (self.max - self.min)

    def evalgate_passes(self, score: float) -> bool:
        """True when ``score >= pass``."""
        return score >= self.pass_score

    def evalgate_points(self) -> tuple[int, ...]:
        """The scale's points ``min, min + 1, ..., max`` (the categories for agreement)."""
        return tuple(range(self.min, self.max + 1))

    def evalgate_json(self) -> dict[str, float]:
        """``{"min", "max", "pass"}`` as builtins, as the manifest writes it."""
        return {"min": self.min, "max": self.max, "pass": self.pass_score}


@dataclass(frozen=True)
class EvalgateJudge:
    """A pinned judge. ``golden_path`` is resolved against the suite folder (None: no golden)."""

    model: str
    base_url: str
    api_key_env: str | None
    revision: str
    temperature: float
    seed: int | None
    pins: Mapping[str, Any]
    budget: EvalgateBudgetSchema  # validated, frozen; transport (outside the judge key)
    golden_path: str | None
    allow_sampling: bool
    max_tokens: int | None = None  # None: EVALGATE_JUDGE_MAX_TOKENS is sent
    top_p: float | None = None

    @property
    def family(self) -> Any:
        """``pins.family`` or None."""
        return self.pins.get("family")

    @property
    def training_run(self) -> Any:
        """``pins.training_run`` or None."""
        return self.pins.get("training_run")


@dataclass(frozen=True)
class EvalgateJudgedEvaluator:
    """What the judge is asked: mode, the rubric (path, text, digest of the text) and scale."""

    revision: str
    mode: EvalgateJudgeMode
    rubric_path: str
    rubric_text: str
    rubric_sha256: str
    scale: EvalgateJudgeScale | None


# --------------------------------------------------------------------------- validation


def evalgate_judge_config(source: str, raw: object) -> EvalgateJudgeConfig:
    """Validate a raw ``judge:`` mapping; errors name ``judge.<key>``."""
    return _validated(source, "judge", EvalgateJudgeConfig, raw)


def evalgate_judged_evaluator_config(source: str, raw: object) -> EvalgateJudgedEvaluatorConfig:
    """Validate a raw ``{mode, rubric, scale}`` mapping; errors name ``evaluator.<key>``."""
    return _validated(source, "evaluator", EvalgateJudgedEvaluatorConfig, raw)


def _validated(source: str, prefix: str, model: type[_Model], raw: object) -> _Model:
    if not isinstance(raw, Mapping):
        raise EvalgateConfigError(source, prefix, "must be a mapping")
    try:
        return model.model_validate(dict(raw))
    except ValidationError as exc:
        problems = [_describe(prefix, error) for error in exc.errors()]
        key, reason = problems[0]
        rest = "".join(f"; {other}: {why}" for other, why in problems[1:])
        raise EvalgateConfigError(source, key, reason + rest) from None


def _describe(prefix: str, error: Mapping[str, Any]) -> tuple[str, str]:
    key = ".".join([prefix, *(str(part) for part in error["loc"])])
    if error["type"] == "extra_forbidden":
        return key, "unknown key"
    if error["type"] == "missing":
        return key, "missing required key"
    return key, str(error["msg"]).removeprefix("Value error, ")


# --------------------------------------------------------------------------- values


def evalgate_judge(suite_dir: str, config: EvalgateJudgeConfig) -> EvalgateJudge:
    """The frozen judge of a validated block; ``golden`` is joined to ``suite_dir``."""
    golden = os.path.join(suite_dir, config.golden) if config.golden else None
    return EvalgateJudge(
        model=config.model,
        base_url=config.base_url,
        api_key_env=config.api_key_env,
        revision=config.revision,
        temperature=float(config.temperature),
        seed=config.seed,
        pins=dict(config.pins),
        max_tokens=config.max_tokens,
        top_p=config.top_p,
        budget=config.budget,
        golden_path=golden,
        allow_sampling=config.allow_sampling,
    )


def evalgate_judged_evaluator(
    source: str, suite_dir: str, revision: str, config: EvalgateJudgedEvaluatorConfig
) -> EvalgateJudgedEvaluator:
    """The frozen evaluator; reads the rubric (a missing or empty file is refused)."""
    path = os.path.join(suite_dir, config.rubric)
    text = evalgate_read_rubric(source, path)
    scale = config.scale
    return EvalgateJudgedEvaluator(
        revision=revision,
        mode=config.mode,
        rubric_path=path,
        rubric_text=text,
        rubric_sha256=evalgate_rubric_digest(text),
        scale=None if scale is None else EvalgateJudgeScale(scale.min, scale.max, scale.pass_),
    )


def evalgate_read_rubric(source: str, path: str) -> str:
    """The rubric's text (universal newlines); ``evaluator.rubric`` errors when absent or empty."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        reason = f"cannot read the rubric {path}: {exc.strerror}"
        raise EvalgateConfigError(source, "evaluator.rubric", reason) from None
    except UnicodeDecodeError:
        raise EvalgateConfigError(source, "evaluator.rubric", f"{path} is not UTF-8") from None
    if not text.strip():
        raise EvalgateConfigError(source, "evaluator.rubric", f"the rubric {path} is empty")
    return text


def evalgate_rubric_digest(text: str) -> str:
    """Hex sha256 of the rubric's UTF-8 text as read (CRLF already folded to LF)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- the judge key


def evalgate_judge_key_material(
    judge: EvalgateJudge, evaluator: EvalgateJudgedEvaluator
) -> dict[str, Any]:
    """Everything that changes what a judgment means, as builtins (see the module contract)."""
    scale = evaluator.scale
    return {
        "prompt_format": EVALGATE_JUDGE_PROMPT_FORMAT,
        "model": judge.model,
        "pins": dict(judge.pins),
        "revision": judge.revision,
        "temperature": float(judge.temperature),
        "seed": judge.seed,
        "evaluator_revision": evaluator.revision,
        "rubric_sha256": evaluator.rubric_sha256,
        "mode": evaluator.mode,
        "scale": None if scale is None else scale.evalgate_json(),
        # written generation settings only (see EvalgateJudgeConfig.max_tokens)
        **{
            name: value
            for name, value in (("max_tokens", judge.max_tokens), ("top_p", judge.top_p))
            if value is not None
        },
    }


def evalgate_judge_key(judge: EvalgateJudge, evaluator: EvalgateJudgedEvaluator) -> str:
    """The judge key: hex sha256 of the canonical JSON of ``evalgate_judge_key_material``."""
    return evalgate_sha256_hex(evalgate_judge_key_material(judge, evaluator))
