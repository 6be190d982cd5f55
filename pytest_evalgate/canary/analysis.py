"""The Argo Rollouts AnalysisTemplate of a policy's online rules (``evalgate canary template``).

One metric per rule, named after the rule's metric, with the Prometheus provider and the
rule's PromQL (``promql.evalgate_rule_query``: the very string ``check`` sends). A rule with a
``max`` succeeds on ``result[0] <= max`` and fails on ``result[0] > max`` (a ``min`` mirrors
it); because both conditions are given, a NaN result (a side without traffic) is neither and
Argo counts the measurement inconclusive, which pauses the rollout for a person instead of
rolling back. ``interval`` and ``failureLimit`` come from the rule; ``initialDelay`` is the
window, so the first measurement sees a whole window of canary traffic.
"""

from __future__ import annotations

from typing import Any

from pytest_evalgate.canary.promql import evalgate_rule_query
from pytest_evalgate.errors import EvalgatePolicyError
from pytest_evalgate.policy.online import EvalgateOnlineRule
from pytest_evalgate.policy.values import EvalgatePolicy, evalgate_policy_digest

EVALGATE_MANAGED_BY = {"app.kubernetes.io/managed-by": "evalgate"}


def evalgate_online_rules_of(policy: EvalgatePolicy) -> tuple[EvalgateOnlineRule, ...]:
    """The policy's online rules; ``EvalgatePolicyError`` naming ``online`` when it has none."""
    if not policy.online:
        reason = "no online rules (SPEC section 15): nothing to render or check"
        raise EvalgatePolicyError(policy.source, "online", reason)
    return policy.online


def evalgate_analysis_template(
    policy: EvalgatePolicy,
    name: str,
    address: str,
    *,
    selector: str = "",
    window: str | None = None,
    namespace: str | None = None,
) -> dict[str, Any]:
    """The AnalysisTemplate (``argoproj.io/v1alpha1``) for ``policy``'s online rules, querying
    the Prometheus at ``address``; ``window`` overrides every rule's window."""
    metrics = [
        _metric(rule, address, selector, window) for rule in evalgate_online_rules_of(policy)
    ]
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "AnalysisTemplate",
        "metadata": _metadata(name, namespace, policy),
        "spec": {"metrics": metrics},
    }


def _metadata(name: str, namespace: str | None, policy: EvalgatePolicy) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = dict(EVALGATE_MANAGED_BY)
    meta["annotations"] = {
        "evalgate.dev/policy-version": policy.version,
        "evalgate.dev/policy-digest": evalgate_policy_digest(policy),
    }
    return meta


def _metric(
    rule: EvalgateOnlineRule, address: str, selector: str, window: str | None
) -> dict[str, Any]:
    success, failure = evalgate_conditions(rule)
    return {
        "name": rule.metric,
        "interval": rule.interval,
        "initialDelay": window or rule.window,
        "failureLimit": rule.failure_limit,
        "successCondition": success,
        "failureCondition": failure,
        "provider": {
            "prometheus": {
                "address": address,
                "query": evalgate_rule_query(rule, window, selector),
            }
        },
    }


def evalgate_conditions(rule: EvalgateOnlineRule) -> tuple[str, str]:
    """(successCondition, failureCondition) of ``rule`` in Argo's expression language."""
    bound = repr(rule.threshold)
    if rule.bound == "max":
        return f"result[0] <= {bound}", f"result[0] > {bound}"
    return f"result[0] >= {bound}", f"result[0] < {bound}"
