"""The gate policy's frozen values: ``EvalgateRule`` (one rule as ``gate.yaml`` writes it) and
``EvalgatePolicy`` (a validated policy), the boundary a rule's number sets on its estimate's
scale (``evalgate_bound``), the policy's digest, and the names of the rule kinds the gate
dispatches on.

``policy.load`` builds these values from ``gate.yaml`` (and ``EvalgateSuitePolicy``, one checked
against its suite); ``policy.checks`` holds the checks of their rules. Nothing here imports
pydantic, numpy or scipy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_evalgate.formats.canonical import evalgate_sha256_hex
from pytest_evalgate.policy.online import EvalgateOnlineRule
from pytest_evalgate.policy.shadow import EvalgateShadowRule

EVALGATE_GAP_RULE = "public_private_gap"
EVALGATE_SINGLE_RULES = frozenset({"min_rate", "max_rate", "floor"})

EVALGATE_QUALITY_RULES = ("non_inferior", "must_improve", "no_regression")
EVALGATE_VERDICTS = ("pass", "fail", "incomplete", "invalid", "partial")
EVALGATE_LIMIT_KEYS = {
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
        return EVALGATE_LIMIT_KEYS[self.rule]

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


def evalgate_policy_digest(policy: EvalgatePolicy) -> str:
    """Hex sha256 of the canonical JSON of ``policy.to_dict()``; comments and layout don't count."""
    return evalgate_sha256_hex(policy.to_dict())
