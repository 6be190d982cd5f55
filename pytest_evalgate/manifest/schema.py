"""The manifest's schema: the pydantic models an ``evalgate.yaml`` is validated against.

Each block is a strict model (``strictmodel``: unknown keys, wrong types and non-finite numbers
are refused) with its defaults and ranges. Only shapes live here: what needs more than one key
or a file (safe names, base URLs, the dataset pin, the judge, ``scorer: code``, weights pins) is
checked by the loader (``manifest``), which also names the file and key of every refusal.
"""

from __future__ import annotations

import itertools
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator

from pytest_evalgate.formats.strictmodel import (
    EVALGATE_STRICT_MODEL,
    EvalgateBudgetSchema,
    EvalgateRequestSeed,
)
from pytest_evalgate.judge.spec import EvalgateJudgeConfig
from pytest_evalgate.manifest.code import EvalgateSandboxBlock


class _Strict(BaseModel):
    model_config = EVALGATE_STRICT_MODEL


class EvalgateExclusionSchema(_Strict):
    """One ``dataset.exclude`` entry: a case left out of the suite, and why."""

    case: str
    reason: str


class _Dataset(_Strict):
    path: str
    revision: str
    sha256: str | None = None
    exclude: list[EvalgateExclusionSchema] = Field(default_factory=list)


class _Prompt(_Strict):
    revision: str
    system: str | None = None
    template: str = "{input}"


class EvalgateEvaluatorSchema(_Strict):
    """The ``evaluator`` block: revision, scorer and its options, code and judge keys."""

    revision: str
    scorer: str
    options: dict[str, Any] = Field(default_factory=dict)
    language: str | None = None  # scorer: code only (manifest_code.py), like the two below
    extract: str | None = None
    pass_at_k: int | None = None
    # conversations (SPEC 17): "share" of passing turns (the default) or "all" must pass
    turns: Literal["share", "all"] | None = None
    # scorer: choice only (manifest.choice, SPEC 18): log-likelihoods of the choices, or a letter
    method: Literal["loglikelihood", "generate"] | None = None
    # scorer: judge only (validated by manifest_judge); absent keys stay out of every dump
    mode: Any = None
    rubric: Any = None
    scale: Any = None


class EvalgateGenerationSchema(_Strict):
    """The ``generation`` block: sampling settings sent with every request (``None`` ones are
    left out of request bodies and of the definition digest: ``evalgate_request_fields``)."""

    temperature: float = 0.0
    max_tokens: int = Field(default=256, ge=1)
    seed: EvalgateRequestSeed | None = None
    top_p: float | None = None
    stop: list[str] | None = None

    def evalgate_request_fields(self) -> dict[str, float | int | list[str]]:
        """The settings every request body carries: the block without its ``None`` keys (the
        same mapping the definition digest holds as ``generation``)."""
        return self.model_dump(exclude_none=True)


class EvalgateCandidateSchema(_Strict):
    """One ``candidates.<name>`` block: the model id, its endpoint(s), key env var and pins.

    ``model_rewrite: true`` says the endpoint (a gateway) answers under another model name than
    ``model``: the reported name is recorded, never compared (SPEC 20). Not part of the
    candidate key: it changes no request and no answer.
    """

    model: str
    base_url: str | list[str]
    api_key_env: str | None = None
    pins: dict[str, str | int | float | bool] = Field(default_factory=dict)
    model_rewrite: bool = False

    @field_validator("base_url")
    @classmethod
    def _non_empty(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and not value:
            raise ValueError("needs at least one URL")
        return value


class EvalgatePerfSchema(_Strict):
    """The ``perf`` block: the open-loop load phase's prompts, rate, length, profile and seed."""

    prompts: str
    rate: float = Field(gt=0)
    duration_s: float = Field(gt=0)
    profile: Literal["constant", "poisson"] = "constant"
    warmup_s: float = Field(default=0.0, ge=0)
    seed: int = 0
    max_tokens: int | None = Field(default=None, ge=1)
    # the capacity sweep (SPEC section 22): one more window per rate, increasing
    sweep: list[Annotated[float, Field(gt=0)]] | None = Field(default=None, min_length=1)

    @field_validator("sweep")
    @classmethod
    def _increasing(cls, rates: list[float] | None) -> list[float] | None:
        if rates is not None and any(b <= a for a, b in itertools.pairwise(rates)):
            raise ValueError(f"the rates must increase, got {rates}")
        return rates


class EvalgateToolsSchema(_Strict):
    """The ``tools`` block (SPEC 17): the fixture file and revision, and the loop's limits."""

    fixture: str
    revision: str
    max_steps: int = Field(default=8, ge=1, le=1000)
    max_tool_calls: int = Field(default=16, ge=1, le=10_000)
    timeout_s: float = Field(default=120.0, gt=0, le=3600)


class EvalgateTierSchema(_Strict):
    """One ``tiers.<name>`` block: the tier's fraction of cases, its draw seed and policy."""

    fraction: float = Field(gt=0, le=1)
    seed: int = Field(default=0, ge=0)
    policy: str | None = None


class EvalgateManifestSchema(_Strict):
    """A whole ``evalgate.yaml``, as validated (defaults filled in) before the loader's checks."""

    evalgate: Literal[1]
    suite: str  # a safe name (evalgate_check_name): it is the store's first path component
    dataset: _Dataset
    prompt: _Prompt
    evaluator: EvalgateEvaluatorSchema
    repetitions: int = Field(default=1, ge=1)
    shards: int = 1
    shard_plan: str | None = None
    api: Literal["chat", "completions"] = "chat"
    stream: bool = True
    generation: EvalgateGenerationSchema = Field(default_factory=EvalgateGenerationSchema)
    candidates: dict[str, EvalgateCandidateSchema]
    budget: EvalgateBudgetSchema = Field(default_factory=EvalgateBudgetSchema)
    judge: EvalgateJudgeConfig | None = None
    perf: EvalgatePerfSchema | None = None
    canary: str | None = None
    tiers: dict[str, EvalgateTierSchema] = Field(default_factory=dict)
    private: list[str] = Field(default_factory=list)  # held-out categories (manifest_private)
    sandbox: EvalgateSandboxBlock | None = None
    tools: EvalgateToolsSchema | None = None
