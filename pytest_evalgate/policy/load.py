"""The gate policy as data: ``gate.yaml``'s schema, its frozen values, and its checks against
a suite (SPEC sections 6-7 and 12). No numbers are computed here (``gate`` and its rule modules
evaluate), so loading a policy at collection, before any request, imports neither numpy nor
scipy.

``evalgate_load_policy`` validates the file and returns an ``EvalgatePolicy`` (every refusal
names the file, the key as ``rules[3].margin``, and the reason); ``evalgate_load_suite_policy``
adds the checks against the suite's manifest (candidates, slices, private categories).

Why one module of ~500 lines: most of it is the schema, one pydantic model per rule kind, which
the loader's error messages (``_describe``) and the frozen values (``EvalgateRule``) must agree
with; splitting the models from the loader would put those two halves of one contract apart.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import pydantic
from pydantic_core import ErrorDetails

from pytest_evalgate.errors import EvalgatePolicyError
from pytest_evalgate.formats.canonical import evalgate_sha256_hex
from pytest_evalgate.formats.strictmodel import EVALGATE_STRICT_MODEL, EvalgateUnit
from pytest_evalgate.formats.yamlread import EvalgateYamlError, evalgate_load_yaml
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.perf.metrics import EVALGATE_PERF_RULE_METRICS, MAX_RATE_AT_SLO
from pytest_evalgate.policy.online import EvalgateOnlineRule, evalgate_online_rules
from pytest_evalgate.policy.shadow import EvalgateShadowRule, evalgate_shadow_rules

EVALGATE_POLICY_NAME = "gate.yaml"
EVALGATE_GAP_RULE = "public_private_gap"
EVALGATE_SINGLE_RULES = frozenset({"min_rate", "max_rate", "floor"})
_Strict = EVALGATE_STRICT_MODEL  # the one schema configuration (finite numbers included)
_Unit = EvalgateUnit
_Names = Annotated[list[str], pydantic.Field(min_length=1)]

EVALGATE_QUALITY_RULES = ("non_inferior", "must_improve", "no_regression")
EVALGATE_VERDICTS = ("pass", "fail", "incomplete", "invalid", "partial")
_LIMIT_KEYS = {
    "non_inferior": "margin",
    "must_improve": "target",
    "no_regression": None,
    "floor": "max_rate",
    "perf_ratio": "max_ratio",
    "perf_ratio_min": "min_ratio",
    "max_delta": "max_delta",
    "pairwise": "margin",
    "judge_agreement": "min_kappa",
    "min_rate": "min",
    "max_rate": "max",
    "public_private_gap": "max_gap",
}
# Rules whose number is a margin of slack: the estimate's lower bound must exceed -margin.
EVALGATE_MARGIN_RULES = frozenset({"non_inferior", "pairwise"})


# --------------------------------------------------------------------------- policy values


@dataclass(frozen=True)
class EvalgateRule:
    """One rule as written in ``gate.yaml`` (before ``"*"`` expands); ``index`` is its position.

    ``limit`` is the rule's number exactly as gate.yaml writes it, sign included, under the key
    ``limit_key`` names (``margin``, ``target``, ``max_rate``, ...); None for ``no_regression``,
    which has none. It keeps that sign through the gate's results; ``evalgate_bound`` gives the
    boundary it sets on the estimate's scale.
    """

    rule: str
    index: int
    slice: str | None = None
    metric: str | None = None
    limit: float | None = None
    public: tuple[str, ...] = ()  # public_private_gap only (gate_private.py)
    private: tuple[str, ...] = ()
    slo: tuple[float, float] | None = None  # perf_ratio_min: (ttft_p95_s, tpot_p95_s)

    @property
    def limit_key(self) -> str | None:
        """The gate.yaml key of ``limit`` for this kind of rule (None for ``no_regression``)."""
        return _LIMIT_KEYS[self.rule]

    def to_dict(self) -> dict[str, str | float | list[str] | None]:
        """The rule in its ``gate.yaml`` form (builtins only)."""
        out: dict[str, str | float | list[str] | None] = {"rule": self.rule}
        if self.rule == EVALGATE_GAP_RULE:
            out.update(public=list(self.public), private=list(self.private))
        else:
            out.update({"slice": self.slice} if self.slice is not None else {"metric": self.metric})
        if self.limit_key is not None:
            out[self.limit_key] = self.limit
        if self.slo is not None:
            out["slo"] = {"ttft_p95_s": self.slo[0], "tpot_p95_s": self.slo[1]}  # type: ignore[assignment]
        return out


def evalgate_bound(rule: str, limit: float) -> float:
    """The boundary a rule's ``limit`` sets on its estimate's scale: ``-margin`` for the margin
    rules (``non_inferior``, ``pairwise``: the lower bound must exceed it), the limit itself for
    every other rule. The gate compares against it, and decision.json's ``threshold`` is it."""
    return -limit if rule in EVALGATE_MARGIN_RULES else limit


@dataclass(frozen=True)
class EvalgatePolicy:
    """A validated gate policy. ``source`` (the file) is for messages and not part of the digest.

    ``online`` holds the canary rules (``online.py``), ``shadow`` the shadow stage's
    (``shadow.py``); the offline verdict never reads either.
    """

    version: str
    rules: tuple[EvalgateRule, ...]
    confidence: float = 0.95
    correction: str = "holm"
    resamples: int = 10_000
    seed: int = 0
    candidate: str = "candidate"
    baseline: str | None = "baseline"  # None: a single-model policy (gate_single.py)
    source: str = "gate.yaml"
    online: tuple[EvalgateOnlineRule, ...] = ()
    shadow: tuple[EvalgateShadowRule, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The normalised policy (defaults filled in) as builtins, without ``source``; ``online``
        and ``shadow`` only when there are such rules (so policies without them keep their
        digest)."""
        out = {
            "version": self.version,
            "confidence": self.confidence,
            "correction": self.correction,
            "bootstrap": {"resamples": self.resamples, "seed": self.seed},
            "candidate": self.candidate,
            "baseline": self.baseline,
            "rules": [rule.to_dict() for rule in self.rules],
        }
        if self.online:
            out["online"] = [rule.to_dict() for rule in self.online]
        if self.shadow:
            out["shadow"] = [rule.to_dict() for rule in self.shadow]
        return out


@dataclass(frozen=True)
class EvalgateSuitePolicy(EvalgatePolicy):
    """A policy checked against its suite's manifest (``evalgate_check_policy``).

    ``pair`` is the (candidate, baseline) names it compares, computed once by that check (a
    single-model policy pairs the candidate with itself). Not part of ``to_dict`` or the digest.
    """

    pair: tuple[str, str] = field(kw_only=True)


def evalgate_policy_digest(policy: EvalgatePolicy) -> str:
    """Hex sha256 of the canonical JSON of ``policy.to_dict()``; comments and layout don't count."""
    return evalgate_sha256_hex(policy.to_dict())


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
        elif not (isinstance(previous, int) and part in _LIMIT_KEYS):
            parts.append(f".{part}")  # the discriminator's tag (after an index) is not a key
        previous = part
    key = "".join(parts).lstrip(".") or "<root>"
    kind = error["type"]
    if kind == "union_tag_invalid":
        expected = ", ".join(_LIMIT_KEYS)
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
    key = _LIMIT_KEYS[values["rule"]]
    limit = None if key is None else float(values[key])
    groups = {key: tuple(values.get(key, ())) for key in ("public", "private")}
    slo = values.get("slo")
    return EvalgateRule(
        values["rule"], index, values.get("slice"), values.get("metric"), limit, **groups,
        slo=None if slo is None else (float(slo["ttft_p95_s"]), float(slo["tpot_p95_s"])),
    )  # fmt: skip


# ------------------------------------------------------------ single-model and gap rules


def evalgate_check_single(source: str, baseline: str | None, rules: Iterable[EvalgateRule]) -> None:
    """Refuse, naming the rule, a rule that needs a baseline in a policy with ``baseline: null``.

    ``rules`` are ``policy.EvalgateRule`` values (``rule`` and ``index`` are read). Raises
    ``EvalgatePolicyError(source, "rules[i].rule", reason)`` for the first such rule.
    """
    if baseline is not None:
        return
    for rule in rules:
        if rule.rule not in EVALGATE_SINGLE_RULES:
            allowed = ", ".join(sorted(EVALGATE_SINGLE_RULES))
            reason = (
                f"rule {rule.rule!r} compares the candidate with a baseline, and the policy has "
                f"baseline: null; a single-model policy may use {allowed}"
            )
            raise EvalgatePolicyError(source, f"rules[{rule.index}].rule", reason)


def evalgate_check_gap_lists(source: str, rules: Iterable[EvalgateRule]) -> None:
    """Refuse, naming ``rules[i].public[j]`` or ``rules[i].private[j]``, a category given twice
    in one list or in both lists of a ``public_private_gap`` rule (``policy.EvalgateRule``
    values)."""
    for rule in rules:
        if rule.rule != EVALGATE_GAP_RULE:
            continue
        for key, names in (("public", rule.public), ("private", rule.private)):
            for position, name in enumerate(names):
                where = f"rules[{rule.index}].{key}[{position}]"
                if name in names[:position]:
                    raise EvalgatePolicyError(source, where, f"{name!r} is listed twice")
                if key == "private" and name in rule.public:
                    reason = f"{name!r} is both public and private"
                    raise EvalgatePolicyError(source, where, reason)


def evalgate_check_gap_rules(
    source: str,
    rules: Iterable[EvalgateRule],
    categories: Collection[str],
    private: Collection[str],
    manifest: str,
) -> None:
    """Check every ``public_private_gap`` rule of a policy against its suite.

    ``rules`` are ``policy.EvalgateRule`` values (``rule``, ``index``, ``public``, ``private``);
    ``categories`` the suite's, ``private`` the manifest's held-out ones. Raises
    ``EvalgatePolicyError(source, "rules[i].public[j]", reason)`` for the first wrong entry.
    """
    for rule in rules:
        if rule.rule != EVALGATE_GAP_RULE:
            continue
        for key, names in (("public", rule.public), ("private", rule.private)):
            for position, name in enumerate(names):
                reason = _entry_problem(key, name, categories, private, manifest)
                if reason:
                    raise EvalgatePolicyError(
                        source, f"rules[{rule.index}].{key}[{position}]", reason
                    )


def evalgate_unknown_category(name: str, categories: Collection[str]) -> str | None:
    """Why ``name`` is not a slice of the suite (the reason lists its categories), or None.

    The one check of a slice name: ``evalgate_check_slices`` (rules' slices against the suite),
    the ``public_private_gap`` lists, and ``gate.rules`` (slices against the gate input's
    categories) all ask it, so the three refusals read alike.
    """
    if name in categories:
        return None
    return f"no category {name!r} in the suite; categories: {', '.join(sorted(categories))}"


def _entry_problem(
    key: str, name: str, categories: Collection[str], private: Collection[str], manifest: str
) -> str | None:
    unknown = evalgate_unknown_category(name, categories)
    if unknown is not None:
        return unknown
    declared = ", ".join(sorted(private)) or "none"
    if key == "private" and name not in private:
        return f"{name!r} is not declared private in {manifest} (private: {declared})"
    if key == "public" and name in private:
        return f"{name!r} is declared private in {manifest}: a held-out set is not a public slice"
    return None


# --------------------------------------------------------------------------- against a suite


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
