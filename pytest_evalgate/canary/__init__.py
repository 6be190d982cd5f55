"""The online canary (SPEC section 15): from ``gate.yaml``'s ``online:`` rules to a rollout.

- ``promql``: one PromQL string per rule over vLLM's metric names, canary against stable.
- ``analysis``: the Argo Rollouts AnalysisTemplate holding those strings.
- ``rollout``: the Rollout (1, 5, 25, 50 % with bakes, a final manual pause), the HTTPRoute over
  two InferencePools with an opt-out header rule, the pools, and the one-line rollback.
- ``check``: the same strings evaluated now against a Prometheus HTTP API.
- ``plan``: the bake time that detects an effect at a given traffic (formula and assumptions).

Renderers and the check sit at the edge: they read the policy and never change it. The online
rules themselves are validated with the policy (``pytest_evalgate.policy.online``).
"""

from __future__ import annotations

from pytest_evalgate.canary.analysis import evalgate_analysis_template, evalgate_online_rules_of
from pytest_evalgate.canary.check import (
    EvalgateCanaryCheck,
    EvalgatePrometheus,
    EvalgateRuleCheck,
    evalgate_canary_check,
    evalgate_check_lines,
)
from pytest_evalgate.canary.plan import (
    EvalgatePlan,
    EvalgatePlanAssumptions,
    evalgate_plan,
    evalgate_traffic_scale,
)
from pytest_evalgate.canary.promql import (
    evalgate_rule_query,
    evalgate_selector,
    evalgate_traffic_query,
)
from pytest_evalgate.canary.rollout import (
    EvalgateRolloutOptions,
    evalgate_rollback_command,
    evalgate_rollout_objects,
)

__all__ = [
    "EvalgateCanaryCheck",
    "EvalgatePlan",
    "EvalgatePlanAssumptions",
    "EvalgatePrometheus",
    "EvalgateRolloutOptions",
    "EvalgateRuleCheck",
    "evalgate_analysis_template",
    "evalgate_canary_check",
    "evalgate_check_lines",
    "evalgate_online_rules_of",
    "evalgate_plan",
    "evalgate_rollback_command",
    "evalgate_rollout_objects",
    "evalgate_rule_query",
    "evalgate_selector",
    "evalgate_traffic_query",
    "evalgate_traffic_scale",
]
