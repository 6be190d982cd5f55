"""Hand-written decision records for the report tests: fixed numbers, every key a real
decision has (and variants: a failing rule, judge and sandbox facts, a load phase)."""

from __future__ import annotations

import copy
from typing import Any

WEIGHTS_CAND = "sha256:" + "c1" * 32
WEIGHTS_BASE = "sha256:" + "b0" * 32


def _rule(name: str, kind: str, slice_name: str | None, **numbers: Any) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "name": name, "rule": kind, "passed": True, "reason": "passes", "slice": slice_name,
        "metric": None, "evaluated": True, "n_cases": 0, "n_clusters": 0, "estimate": None,
        "lo": None, "hi": None, "se": None, "t_lo": None, "t_hi": None, "threshold": None,
        "p_value": None, "p_adjusted": None,
    }  # fmt: skip
    rule.update(numbers)
    return rule


def _side(name: str, model: str, weights: str, quantization: str) -> dict[str, Any]:
    pins = {
        "weights_digest": weights,
        "serving_image": "registry.example/vllm@sha256:" + "5e" * 32,
        "tokenizer": "tok-v5",
        "chat_template": "sha256:" + "7a" * 32,
        "quantization": quantization,
        "tensor_parallel": 2,
    }
    return {"name": name, "key": f"{name}-{weights[7:19]}", "model": model, "pins": pins}


def _quantiles(base: float) -> dict[str, Any]:
    points = {"p0": 0.80, "p5": 0.85, "p25": 0.95, "p50": 1.0, "p75": 1.05, "p95": 1.2,
              "p99": 1.3, "p100": 1.5}  # fmt: skip
    quantiles = {key: round(base * factor, 6) for key, factor in points.items()}
    return {"n": 200, "p50": quantiles["p50"], "p95": quantiles["p95"], "quantiles": quantiles}


def sample_decision() -> dict[str, Any]:
    """A passing decision over two categories, with perf figures and flips."""
    flips = [
        {"case_id": "alpha-003", "category": "alpha", "baseline": 0.0, "candidate": 1.0},
        {"case_id": "alpha-007", "category": "alpha", "baseline": 1.0, "candidate": 0.0},
        {"case_id": "beta-001", "category": "beta", "baseline": 0.0, "candidate": 1.0},
    ]
    rules = [
        _rule("non_inferior[all]", "non_inferior", "all", n_cases=40, n_clusters=20,
              estimate=0.025, lo=-0.05, hi=0.1, threshold=-0.1,
              reason="passes: lower bound -0.0500 > -0.1000"),
        _rule("non_inferior[alpha]", "non_inferior", "alpha", n_cases=20, n_clusters=10,
              estimate=0.0, lo=-0.1, hi=0.1, threshold=-0.15,
              reason="passes: lower bound -0.1000 > -0.1500"),
        _rule("no_regression[alpha]", "no_regression", "alpha", n_cases=20, n_clusters=10,
              estimate=0.0, lo=-0.1, hi=0.1, threshold=0.05, p_value=0.5, p_adjusted=1.0,
              reason="no significant drop (adjusted p 1 >= 0.05, holm)"),
        _rule("must_improve[beta]", "must_improve", "beta", n_cases=20, n_clusters=10,
              estimate=0.05, lo=0.01, hi=0.12, threshold=0.0,
              reason="passes: lower bound +0.0100 > +0.0000"),
        _rule("floor[beta]", "floor", "beta", n_cases=20, estimate=0.0, lo=0.0, hi=0.1391,
              threshold=0.2, reason="passes: 0/20 failed, upper bound 0.1391 <= 0.2"),
        _rule("perf_ratio[ttft_p95]", "perf_ratio", None, metric="ttft_p95", n_cases=200,
              estimate=1.02, lo=0.99, hi=1.04, threshold=1.05,
              reason="passes: ratio upper bound 1.0400 <= 1.05"),
        _rule("max_delta[error_rate]", "max_delta", None, metric="error_rate", estimate=0.0,
              threshold=0.002, reason="passes: error rate delta +0.0000 <= 0.002"),
    ]  # fmt: skip
    return {
        "verdict": "pass",
        "attestable": True,
        "suite": "demo-suite",
        "definition_digest": "d" * 64,
        "definition_parts": {
            "api": "chat",
            "dataset.revision": "demo-v1",
            "dataset.sha256": "e" * 64,
            "evaluator.revision": "rubric-v1",
            "evaluator.scorer": "exact",
            "generation.max_tokens": 64,
            "generation.seed": 7,
            "generation.temperature": 0.0,
            "judge": None,
            "prompt.revision": "prompt-v1",
            "prompt.system": "be brief",
            "prompt.template": "{input}",
            "repetitions": 2,
        },
        "dataset": {"revision": "demo-v1", "sha256": "e" * 64},
        "policy": {"version": "gate-v1", "digest": "f" * 64},
        "candidate": _side("candidate", "model-r2", WEIGHTS_CAND, "fp8"),
        "baseline": _side("baseline", "model-r1", WEIGHTS_BASE, "bf16"),
        "counts": {
            "expected": 160,
            "completed": 160,
            "missing": 0,
            "errors": {},
            "duplicates_collapsed": 0,
            "problems": [],
            "problem_count": 0,
        },
        "rates": {
            "candidate": {
                "all": {"passed": 70, "scored": 80, "rate": 0.875},
                "alpha": {"passed": 34, "scored": 40, "rate": 0.85},
                "beta": {"passed": 36, "scored": 40, "rate": 0.9},
            },
            "baseline": {
                "all": {"passed": 68, "scored": 80, "rate": 0.85},
                "alpha": {"passed": 34, "scored": 40, "rate": 0.85},
                "beta": {"passed": 34, "scored": 40, "rate": 0.85},
            },
        },
        "slices": {
            "all": {"n_cases": 40, "n_clusters": 20},
            "alpha": {"n_cases": 20, "n_clusters": 10},
            "beta": {"n_cases": 20, "n_clusters": 10},
        },
        "rules": rules,
        "perf": {
            metric: {"candidate": _quantiles(scale * 1.01), "baseline": _quantiles(scale)}
            for metric, scale in (("ttft", 0.03), ("tpot", 0.004), ("itl", 0.0045), ("e2e", 0.1))
        },
        "flipped": {"count": len(flips), "cases": flips},
        "canary_hits": 0,
        "partial": False,
        "evalgate_version": "0.1.0",
        "created_at": "2026-01-02T03:04:05+00:00",
        "perf_phase": None,
    }


def failing_decision() -> dict[str, Any]:
    """The sample with a regression on alpha (two rules fail) and endpoint errors counted."""
    decision = sample_decision()
    decision["verdict"] = "fail"
    for rule in decision["rules"]:
        if rule["slice"] == "alpha":
            rule.update(passed=False, estimate=-0.2, lo=-0.3, hi=-0.1)
    decision["rules"][1]["reason"] = "fails: lower bound -0.3000 <= -0.1500 (a regression)"
    decision["rules"][2]["reason"] = "drop detected (adjusted p 0.001 < 0.05, holm)"
    decision["counts"]["errors"] = {"timeout": 2, "server_error": 1}
    return decision


def with_facts(decision: dict[str, Any]) -> dict[str, Any]:
    """``decision`` with judge and sandbox blocks of the kind later stages add."""
    out = copy.deepcopy(decision)
    out["judge"] = {
        "model": "judge-70b", "revision": "judge-prompt-v1",
        "agreement": {"kappa": 0.81234, "lo": 0.7, "raw": 0.9}, "position_inconsistency": 0.04,
    }  # fmt: skip
    out["sandbox"] = {"isolation": "bwrap", "sandboxed": True, "outcomes": {"passed": 30}}
    return out
