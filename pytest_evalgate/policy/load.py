"""The gate policy as data: ``gate.yaml``'s schema, its loader, and its checks against a suite
(SPEC sections 6-7 and 12). No numbers are computed here (``gate`` and its rule modules
evaluate), so loading a policy at collection, before any request, imports neither numpy nor
scipy.

``evalgate_load_policy`` validates the file and returns an ``EvalgatePolicy`` (every refusal
names the file, the key as ``rules[3].margin``, and the reason); ``evalgate_load_suite_policy``
adds the checks against the suite's manifest (candidates, slices, private categories). The
frozen values are ``policy.values``, the checks of single-model and gap rules and of slice
names ``policy.checks``.

Most of what stays here is the schema, one pydantic model per rule kind, which the loader's
error messages (``_describe``) and the frozen values (``EvalgateRule``) must agree with; the
models stay with the loader so those two halves of one contract stay together.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import pydantic
from pydantic_core import ErrorDetails

from pytest_evalgate.errors import EvalgatePolicyError
from pytest_evalgate.formats.strictmodel import EVALGATE_STRICT_MODEL, EvalgateUnit
from pytest_evalgate.formats.yamlread import EvalgateYamlError, evalgate_load_yaml
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.perf.metrics import EVALGATE_PERF_RULE_METRICS, MAX_RATE_AT_SLO
from pytest_evalgate.policy.checks import (
    evalgate_check_gap_lists,
    evalgate_check_gap_rules,
    evalgate_check_single,
    evalgate_unknown_category,
)
from pytest_evalgate.policy.online import evalgate_online_rules
from pytest_evalgate.policy.shadow import evalgate_shadow_rules
from pytest_evalgate.policy.values import EVALGATE_LIMIT_KEYS, EvalgatePolicy, EvalgateRule

EVALGATE_POLICY_NAME = "gate.yaml"
_Strict = EVALGATE_STRICT_MODEL  # the one schema configuration (finite numbers included)
_Unit = EvalgateUnit
_Names = Annotated[list[str], pydantic.Field(min_length=1)]


# --------------------------------------------------------------------------- policy schema


class EvalgateMinRateSpec(pydantic.BaseModel):
    """``{slice: S, rule: min_rate, min: r}`` as written in ``gate.yaml``."""

    model_config = _Strict
    rule: Literal["min_rate"]
    slice: str
    min: _Unit


class EvalgateMaxRateSpec(pydantic.BaseModel):
    """``{metric: error_rate, rule: max_rate, max: r}`` as written in ``gate.yaml``."""

    model_config = _Strict
    rule: Literal["max_rate"]
    metric: Literal["error_rate"]
    max: _Unit


class EvalgateGapSpec(pydantic.BaseModel):
    """``{rule: public_private_gap, public: [..], private: [..], max_gap: g}`` in ``gate.yaml``."""

    model_config = _Strict
    rule: Literal["public_private_gap"]
    public: _Names
    private: _Names
    max_gap: EvalgateUnit


class _NonInferior(pydantic.BaseModel):
    model_config = _Strict
    rule: Literal["non_inferior"]
    slice: str
    margin: _Unit


class _MustImprove(pydantic.BaseModel):
    model_config = _Strict
    rule: Literal["must_improve"]
    slice: str
    target: Annotated[float, pydantic.Field(ge=-1.0, le=1.0)]


class _NoRegression(pydantic.BaseModel):
    model_config = _Strict
    rule: Literal["no_regression"]
    slice: str


class _Floor(pydantic.BaseModel):
    model_config = _Strict
    rule: Literal["floor"]
    slice: str
    max_rate: _Unit


class _PerfRatio(pydantic.BaseModel):
    model_config = _Strict
    rule: Literal["perf_ratio"]
    metric: Literal[EVALGATE_PERF_RULE_METRICS]  # type: ignore[valid-type]
    max_ratio: Annotated[float, pydantic.Field(gt=0.0)]


class _Slo(pydantic.BaseModel):
    model_config = _Strict
    ttft_p95_s: Annotated[float, pydantic.Field(gt=0.0)]
    tpot_p95_s: Annotated[float, pydantic.Field(gt=0.0)]


class _PerfRatioMin(pydantic.BaseModel):
    """``{metric: max_rate_at_slo, rule: perf_ratio_min, min_ratio: r, slo: {...}}``: the
    candidate's highest swept rate meeting the SLO is at least r x the baseline's."""

    model_config = _Strict
    rule: Literal["perf_ratio_min"]
    metric: Literal["max_rate_at_slo"]
    min_ratio: Annotated[float, pydantic.Field(gt=0.0)]
    slo: _Slo


class _MaxDelta(pydantic.BaseModel):
    model_config = _Strict
    rule: Literal["max_delta"]
    metric: Literal["error_rate"]
    max_delta: _Unit


class _Pairwise(pydantic.BaseModel):
    model_config = _Strict
    rule: Literal["pairwise"]
    slice: str
    margin: _Unit


class _JudgeAgreement(pydantic.BaseModel):
    model_config = _Strict
    rule: Literal["judge_agreement"]
    metric: Literal["kappa"] = "kappa"
    min_kappa: Annotated[float, pydantic.Field(ge=-1.0, le=1.0)]


_AnyRule = Annotated[
    _NonInferior
    | _MustImprove
    | _NoRegression
    | _Floor
    | _PerfRatio
    | _PerfRatioMin
    | _MaxDelta
    | _Pairwise
    | _JudgeAgreement
    | EvalgateMinRateSpec
    | EvalgateMaxRateSpec
    | EvalgateGapSpec,
    pydantic.Field(discriminator="rule"),
]


class _Bootstrap(pydantic.BaseModel):
    model_config = _Strict
    resamples: Annotated[int, pydantic.Field(ge=100, le=1_000_000)] = 10_000
    seed: Annotated[int, pydantic.Field(ge=0)] = 0


class _Policy(pydantic.BaseModel):
    model_config = _Strict
    version: str
    confidence: Annotated[float, pydantic.Field(gt=0.5, lt=1.0)] = 0.95
    correction: Literal["none", "bonferroni", "holm", "bh"] = "holm"
    bootstrap: _Bootstrap = _Bootstrap()
    candidate: str = "candidate"
    baseline: str | None = "baseline"
    rules: Annotated[list[_AnyRule], pydantic.Field(min_length=1)]
    online: Any = None  # validated by online.evalgate_online_rules (its own keys and messages)
    shadow: Any = None  # validated by shadow.evalgate_shadow_rules


EVALGATE_POLICY_SCHEMA: type[pydantic.BaseModel] = _Policy
"""The policy's top-level schema (``policy.reference`` documents it)."""
EVALGATE_RULE_MODELS: tuple[type[pydantic.BaseModel], ...] = get_args(get_args(_AnyRule)[0])
"""One model per rule kind of ``rules:``, in the order they are tried."""


def evalgate_load_policy(path: str | Path) -> EvalgatePolicy:
    """Read and validate ``gate.yaml``; raise ``EvalgatePolicyError(file, key, reason)`` if wrong.

    Unknown keys, rules or metrics, wrong types (no string-to-number coercion), out-of-range
    values, a missing ``version`` or an empty ``rules`` list are refused. Slices are checked
    against the suite's categories later, by ``evalgate_evaluate``. ``online:`` rules (SPEC
    section 15) are checked by ``online.evalgate_online_rules``, with keys like ``online[1].max``.
    """
    source = str(path)
    try:
        raw = evalgate_load_yaml(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise EvalgatePolicyError(source, "<file>", f"cannot read: {error}") from None
    except EvalgateYamlError as error:
        raise EvalgatePolicyError(source, "<yaml>", error.reason) from None
    if not isinstance(raw, dict):
        raise EvalgatePolicyError(source, "<root>", "the policy must be a mapping")
    try:
        model = _Policy.model_validate(raw)
    except pydantic.ValidationError as error:
        key, reason = _describe(error.errors()[0])
        raise EvalgatePolicyError(source, key, reason) from None
    policy = _to_policy(model, source)
    evalgate_check_single(source, policy.baseline, policy.rules)
    evalgate_check_gap_lists(source, policy.rules)
    return policy


def _describe(error: ErrorDetails) -> tuple[str, str]:
    """Turn pydantic's first error into ``("rules[3].margin", reason)``."""
    parts: list[str] = []
    previous: Any = None
    for part in error["loc"]:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif not (isinstance(previous, int) and part in EVALGATE_LIMIT_KEYS):
            parts.append(f".{part}")  # the discriminator's tag (after an index) is not a key
        previous = part
    key = "".join(parts).lstrip(".") or "<root>"
    kind = error["type"]
    if kind == "union_tag_invalid":
        expected = ", ".join(EVALGATE_LIMIT_KEYS)
        return f"{key}.rule", f"unknown rule {error['input'].get('rule')!r}; expected {expected}"
    if kind == "union_tag_not_found":
        return f"{key}.rule", "missing required key"
    if kind == "extra_forbidden":
        return key, "unknown key"
    if kind == "missing":
        return key, "missing required key"
    return key, f"{error['msg']} (got {error['input']!r})"


def _to_policy(model: _Policy, source: str) -> EvalgatePolicy:
    rules = tuple(_to_rule(index, item) for index, item in enumerate(model.rules))
    return EvalgatePolicy(
        version=model.version,
        rules=rules,
        confidence=model.confidence,
        correction=model.correction,
        resamples=model.bootstrap.resamples,
        seed=model.bootstrap.seed,
        candidate=model.candidate,
        baseline=model.baseline,
        source=source,
        online=evalgate_online_rules(model.online, source),
        shadow=evalgate_shadow_rules(model.shadow, source),
    )


def _to_rule(index: int, item: pydantic.BaseModel) -> EvalgateRule:
    values = item.model_dump()
    key = EVALGATE_LIMIT_KEYS[values["rule"]]
    limit = None if key is None else float(values[key])
    groups = {key: tuple(values.get(key, ())) for key in ("public", "private")}
    slo = values.get("slo")
    return EvalgateRule(
        values["rule"], index, values.get("slice"), values.get("metric"), limit, **groups,
        slo=None if slo is None else (float(slo["ttft_p95_s"]), float(slo["tpot_p95_s"])),
    )  # fmt: skip


# --------------------------------------------------------------------------- against a suite


@dataclass(frozen=True)
class EvalgateSuitePolicy(EvalgatePolicy):
    """A policy checked against its suite's manifest (``evalgate_check_policy``).

    ``pair`` is the (candidate, baseline) names it compares, computed once by that check (a
    single-model policy pairs the candidate with itself). Not part of ``to_dict`` or the digest.
    """

    pair: tuple[str, str] = field(kw_only=True)


def evalgate_policy_path(manifest: EvalgateManifest, override: str | None) -> str:
    """``override`` if given, else the suite's gate.yaml."""
    return override or os.path.join(manifest.suite_dir, EVALGATE_POLICY_NAME)


def evalgate_load_suite_policy(
    manifest: EvalgateManifest, override: str | None
) -> EvalgateSuitePolicy:
    """Load the policy for ``manifest`` (its gate.yaml unless ``override``) and check it against
    the suite (``evalgate_check_policy``)."""
    return evalgate_check_policy(
        manifest, evalgate_load_policy(evalgate_policy_path(manifest, override))
    )


def evalgate_check_policy(
    manifest: EvalgateManifest, policy: EvalgatePolicy
) -> EvalgateSuitePolicy:
    """``policy`` checked against ``manifest``: the compared candidates exist, slices name the
    suite's categories. Returns it with the (candidate, baseline) pair it compares, so no caller
    recomputes the pair. Raises ``EvalgatePolicyError`` naming the role or ``rules[i].slice``.
    """
    pair = _pair(manifest, policy)
    evalgate_check_slices(manifest, policy)
    _check_sweep(manifest, policy)
    fields = {f.name: getattr(policy, f.name) for f in dataclasses.fields(EvalgatePolicy)}
    return EvalgateSuitePolicy(**fields, pair=pair)


def _check_sweep(manifest: EvalgateManifest, policy: EvalgatePolicy) -> None:
    """A ``max_rate_at_slo`` rule needs the manifest's capacity sweep (``perf.sweep``)."""
    for rule in policy.rules:
        if rule.metric == MAX_RATE_AT_SLO and (manifest.perf is None or not manifest.perf.sweep):
            reason = f"max_rate_at_slo needs perf.sweep (arrival rates) in {manifest.path}"
            raise EvalgatePolicyError(policy.source, f"rules[{rule.index}].metric", reason)


def _pair(manifest: EvalgateManifest, policy: EvalgatePolicy) -> tuple[str, str]:
    """(candidate, baseline) names the policy compares, checked against the manifest.

    A single-model policy (``baseline: null``) pairs the candidate with itself: its paired rules
    are refused at load, and ``evalgate_decide`` blanks the mirrored baseline side."""
    baseline = policy.candidate if policy.baseline is None else policy.baseline
    for role, name in (("candidate", policy.candidate), ("baseline", baseline)):
        if name not in manifest.candidates:
            known = ", ".join(manifest.candidates)
            reason = f"{role} {name!r} is not a candidate of {manifest.path} ({known})"
            raise EvalgatePolicyError(policy.source, role, reason)
    return (policy.candidate, baseline)


def evalgate_check_slices(manifest: EvalgateManifest, policy: EvalgatePolicy) -> None:
    """A slice must name a category of the suite (not only of what the store holds so far)."""
    known = sorted({case.category for case in manifest.cases})
    for rule in policy.rules:
        if rule.slice in (None, "*", "all"):
            continue
        reason = evalgate_unknown_category(str(rule.slice), known)
        if reason is not None:
            raise EvalgatePolicyError(policy.source, f"rules[{rule.index}].slice", reason)
    evalgate_check_gap_rules(policy.source, policy.rules, known, manifest.private, manifest.path)
