"""Canary renderers: PromQL per rule, the AnalysisTemplate, Rollout, HTTPRoute, InferencePools,
the rollback line, and their validation against the Argo Rollouts, Gateway API and Inference
Extension CRDs in ``../shared/crds`` (strict: unknown fields are rejected; skipped with a reason
where that folder is absent)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import shlex
from pathlib import Path
from typing import Any

import crdkit
import jsonschema
import pytest

from pytest_evalgate.canary import (
    EvalgateRolloutOptions,
    evalgate_analysis_template,
    evalgate_rollback_command,
    evalgate_rollout_objects,
    evalgate_rule_query,
    evalgate_selector,
    evalgate_traffic_query,
)
from pytest_evalgate.canary.analysis import evalgate_conditions
from pytest_evalgate.canary.rollout import evalgate_rollback_patch
from pytest_evalgate.errors import EvalgateConfigError, EvalgatePolicyError
from pytest_evalgate.policy import load as gate_policy
from pytest_evalgate.policy import values as policy_values
from pytest_evalgate.policy.online import EVALGATE_ONLINE_METRICS, EvalgateOnlineRule

REPO = Path(__file__).resolve().parents[1]
CRDS = REPO.parent / "shared" / "crds"
SUPPORT_GATE = REPO / "suites" / "support" / "gate.yaml"
JSON = dict[str, Any]
Validators = dict[tuple[str, str], jsonschema.protocols.Validator]
ADDRESS = "http://prometheus.monitoring.svc:9090"
OPTIONS = EvalgateRolloutOptions(
    stable_pool="support-stable",
    canary_pool="support-canary",
    rollout="support",
    deployment="support-vllm",
    route="support",
    gateway="inference-gateway",
    analysis_template="support-online",
    app="support-vllm",
    namespace="serve-support",
    bakes=("40m", "20m", "10m", "10m"),
)


CANARY_CRDS = [
    "analysis-template-crd.yaml",
    "rollout-crd.yaml",
    "gateway.networking.k8s.io_httproutes.yaml",
    "inference.networking.k8s.io_inferencepools.yaml",
]


@pytest.fixture(scope="module")
def schemas() -> Validators:
    """A validator per (apiVersion, kind) of the canary's kinds."""
    if not CRDS.is_dir():
        pytest.skip(f"{CRDS} is absent (a plain clone has no shared/crds): canary CRDs unchecked")
    return crdkit.crd_validators(CRDS, CANARY_CRDS)


def validate(obj: JSON, schemas: Validators) -> None:
    schemas[(obj["apiVersion"], obj["kind"])].validate(obj)


def support_policy() -> policy_values.EvalgatePolicy:
    return gate_policy.evalgate_load_policy(SUPPORT_GATE)


def template(**kwargs: Any) -> JSON:
    return evalgate_analysis_template(support_policy(), "support-online", ADDRESS, **kwargs)


def rollout_objects() -> dict[str, JSON]:
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in evalgate_rollout_objects(OPTIONS)}


# --------------------------------------------------------------------------- PromQL


def rule(metric: str, window: str = "10m") -> EvalgateOnlineRule:
    bound = EVALGATE_ONLINE_METRICS[metric]
    return EvalgateOnlineRule(metric, bound, 1.1 if bound == "max" else -0.01, window=window)


VLLM_NAMES = {
    "error_rate_delta": ["http_requests_total{", 'status=~"5.."'],
    "ttft_p95_ratio": ["vllm:time_to_first_token_seconds_bucket{", "histogram_quantile(0.95, "],
    "tpot_p95_ratio": ["vllm:time_per_output_token_seconds_bucket{", "histogram_quantile(0.95, "],
    "output_length_ratio": ["vllm:generation_tokens_total{", "vllm:request_success_total{"],
    "judge_score_delta": ["evalgate_online_judge_score_sum{", "evalgate_online_judge_score_count{"],
    "refusal_rate_delta": ["evalgate_online_refusals_total{", "evalgate_online_answers_total{"],
    "length_stop_share_delta": ['finished_reason="length"', "vllm:request_success_total{"],
    "tool_call_failure_delta": ['outcome="error"', "evalgate_tool_calls_total{"],
}


@pytest.mark.parametrize("metric", list(EVALGATE_ONLINE_METRICS))
def test_each_query_compares_canary_with_stable_over_one_window(metric: str) -> None:
    query = evalgate_rule_query(rule(metric, "7m"))
    for name in VLLM_NAMES[metric]:
        assert name in query
    canary, stable = query.count('version="canary"'), query.count('version="stable"')
    assert canary == stable >= 1
    selectors = query.count("{")
    assert selectors == canary + stable  # every selector names one side
    assert query.count("[7m]") == selectors  # and the same window
    assert query.index('version="canary"') < query.index('version="stable"')  # canary first


@pytest.mark.parametrize("metric", list(EVALGATE_ONLINE_METRICS))
def test_empty_sides_give_nan_not_an_empty_vector(metric: str) -> None:
    query = evalgate_rule_query(rule(metric))
    fallback = "or vector(NaN)" if "p95" in metric else "or vector(0)"
    assert query.count(fallback) == query.count("{")


def test_ratios_and_deltas_put_canary_over_or_minus_stable() -> None:
    ttft = evalgate_rule_query(rule("ttft_p95_ratio"))
    left, right = ttft.split(") / (histogram_quantile")
    assert 'version="canary"' in left and 'version="stable"' in right
    judge = evalgate_rule_query(rule("judge_score_delta"))
    left, right = judge.split(" - ")
    assert 'version="canary"' in left and 'version="stable"' in right


def test_selector_goes_into_every_side_and_the_window_can_be_overridden() -> None:
    selector = evalgate_selector('namespace="serve-a" , model_name=~"support-.*"')
    assert selector == 'namespace="serve-a",model_name=~"support-.*"'
    query = evalgate_rule_query(rule("output_length_ratio"), "30s", selector)
    assert query.count(selector + "}") == 4
    assert "[30s]" in query and "[10m]" not in query


def test_traffic_queries_count_independent_samples() -> None:
    assert (
        evalgate_traffic_query(rule("ttft_p95_ratio"), "canary", "5m", 'ns="a"')
        == 'sum(increase(vllm:time_to_first_token_seconds_count{version="canary",ns="a"}[5m]))'
        " or vector(0)"
    )
    tpot = evalgate_traffic_query(rule("tpot_p95_ratio"), "stable")
    assert tpot.startswith('sum(increase(vllm:request_success_total{version="stable"}[10m]))')
    judge = evalgate_traffic_query(rule("judge_score_delta"), "canary")
    assert "evalgate_online_judge_score_count{" in judge


@pytest.mark.parametrize(
    "text",
    ["", "   ", None],
)
def test_no_selector_is_empty(text: str | None) -> None:
    assert evalgate_selector(text) == ""


def test_commas_inside_quotes_stay_inside_one_matcher() -> None:
    assert evalgate_selector('path="/a,b",x!~"y"') == 'path="/a,b",x!~"y"'


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("namespace=serve-a", "not a label matcher"),
        ('namespace="serve-a', "not a label matcher"),
        ('9ns="a"', "not a label matcher"),
        ('ns=="a"', "not a label matcher"),
        ('version="canary"', "version is set by each query"),
        ('ns="a",version!="stable"', "version is set by each query"),
        ('ns="a"} or vector(1) or {x="', "not a label matcher"),
    ],
)
def test_bad_selectors_are_refused(text: str, reason: str) -> None:
    with pytest.raises(EvalgateConfigError, match=reason) as caught:
        evalgate_selector(text)
    assert caught.value.source == "selector"
    assert caught.value.key in text  # the offending matcher


# --------------------------------------------------------------------------- AnalysisTemplate


def test_template_has_one_metric_per_rule_with_its_numbers() -> None:
    policy = support_policy()
    rendered = template(namespace="serve-support")
    assert rendered["apiVersion"] == "argoproj.io/v1alpha1"
    assert rendered["kind"] == "AnalysisTemplate"
    assert rendered["metadata"]["namespace"] == "serve-support"
    annotations = rendered["metadata"]["annotations"]
    assert annotations["evalgate.dev/policy-digest"] == policy_values.evalgate_policy_digest(policy)
    metrics = rendered["spec"]["metrics"]
    assert [m["name"] for m in metrics] == [r.metric for r in policy.online]
    for metric, online in zip(metrics, policy.online, strict=True):
        assert metric["interval"] == online.interval
        assert metric["initialDelay"] == online.window
        assert metric["failureLimit"] == online.failure_limit
        assert metric["provider"]["prometheus"]["address"] == ADDRESS
        assert metric["provider"]["prometheus"]["query"] == evalgate_rule_query(online)
    judge = metrics[-1]
    assert (judge["interval"], judge["initialDelay"], judge["failureLimit"]) == ("15m", "2h", 1)


def test_template_window_and_selector_reach_every_query() -> None:
    rendered = template(window="3m", selector='namespace="serve-support"')
    for metric, online in zip(rendered["spec"]["metrics"], support_policy().online, strict=True):
        query = metric["provider"]["prometheus"]["query"]
        assert query == evalgate_rule_query(online, "3m", 'namespace="serve-support"')
        assert metric["initialDelay"] == "3m"


@pytest.mark.parametrize(
    ("online", "value", "phase"),
    [
        (EvalgateOnlineRule("ttft_p95_ratio", "max", 1.1), 1.05, "Successful"),
        (EvalgateOnlineRule("ttft_p95_ratio", "max", 1.1), 1.1, "Successful"),
        (EvalgateOnlineRule("ttft_p95_ratio", "max", 1.1), 1.2, "Failed"),
        (EvalgateOnlineRule("ttft_p95_ratio", "max", 1.1), math.nan, "Inconclusive"),
        (EvalgateOnlineRule("error_rate_delta", "max", 0.002), 0.0021, "Failed"),
        (EvalgateOnlineRule("error_rate_delta", "max", 0.002), -0.01, "Successful"),
        (EvalgateOnlineRule("judge_score_delta", "min", -0.01), -0.02, "Failed"),
        (EvalgateOnlineRule("judge_score_delta", "min", -0.01), 0.03, "Successful"),
        (EvalgateOnlineRule("judge_score_delta", "min", -0.01), math.nan, "Inconclusive"),
    ],
)
def test_conditions_decide_like_the_rule_and_nan_is_inconclusive(
    online: EvalgateOnlineRule, value: float, phase: str
) -> None:
    # Argo's expressions here are plain comparisons on result[0]; Python reads them the same.
    success, failure = evalgate_conditions(online)
    assert success.startswith("result[0] ") and failure.startswith("result[0] ")
    passed, failed = (bool(eval(c, {"result": [value]})) for c in (success, failure))
    # Argo's phase when both conditions are given: failure wins, neither is inconclusive.
    got = "Failed" if failed else "Successful" if passed else "Inconclusive"
    assert got == phase
    assert got == (
        "Inconclusive" if math.isnan(value) else "Successful" if online.holds(value) else "Failed"
    )


def test_a_policy_without_online_rules_renders_nothing() -> None:
    policy = dataclasses.replace(support_policy(), online=())
    with pytest.raises(EvalgatePolicyError, match="no online rules") as caught:
        evalgate_analysis_template(policy, "x", ADDRESS)
    assert caught.value.key == "online"


def test_template_validates_against_the_crd(schemas: Validators) -> None:
    validate(template(namespace="serve-support", selector='namespace="serve-support"'), schemas)


# --------------------------------------------------------------------------- Rollout and route


def test_rollout_steps_bake_then_wait_for_a_person() -> None:
    canary = rollout_objects()["Rollout/support"]["spec"]["strategy"]["canary"]
    assert canary["steps"] == [
        {"setWeight": 1}, {"pause": {"duration": "40m"}},
        {"setWeight": 5}, {"pause": {"duration": "20m"}},
        {"setWeight": 25}, {"pause": {"duration": "10m"}},
        {"setWeight": 50}, {"pause": {"duration": "10m"}},
        {"pause": {}},
    ]  # fmt: skip
    assert canary["analysis"] == {
        "templates": [{"templateName": "support-online"}],
        "startingStep": 1,
    }


def test_rollout_labels_routes_and_services_name_the_pools() -> None:
    objects = rollout_objects()
    spec = objects["Rollout/support"]["spec"]
    canary = spec["strategy"]["canary"]
    assert spec["workloadRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "support-vllm",
    }
    assert (canary["canaryService"], canary["stableService"]) == (
        "support-canary",
        "support-stable",
    )
    assert canary["canaryMetadata"] == {"labels": {"version": "canary"}}
    assert canary["stableMetadata"] == {"labels": {"version": "stable"}}
    plugin = canary["trafficRouting"]["plugins"]["argoproj-labs/gatewayAPI"]
    assert plugin == {"httpRoute": "support", "namespace": "serve-support"}
    for name, version in (("support-stable", "stable"), ("support-canary", "canary")):
        pool = objects[f"InferencePool/{name}"]["spec"]
        assert pool["selector"]["matchLabels"] == {"app": "support-vllm", "version": version}
        assert pool["targetPorts"] == [{"number": 8000}]
        assert pool["endpointPickerRef"] == {"name": f"{name}-epp", "port": {"number": 9002}}
    # the same version values are what the PromQL tells apart
    assert 'version="canary"' in evalgate_rule_query(rule("ttft_p95_ratio"))


def test_route_keeps_opted_out_tenants_on_stable_and_starts_at_zero() -> None:
    route = rollout_objects()["HTTPRoute/support"]
    assert route["spec"]["parentRefs"] == [{"name": "inference-gateway"}]
    opt_out, weighted = route["spec"]["rules"]
    assert opt_out["matches"] == [
        {
            "path": {"type": "PathPrefix", "value": "/"},
            "headers": [{"type": "Exact", "name": "x-evalgate-canary", "value": "opt-out"}],
        }
    ]
    pool = {"group": "inference.networking.k8s.io", "kind": "InferencePool"}
    assert opt_out["backendRefs"] == [{**pool, "name": "support-stable"}]
    assert weighted["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
    assert weighted["backendRefs"] == [
        {**pool, "name": "support-stable", "weight": 100},
        {**pool, "name": "support-canary", "weight": 0},
    ]


def test_every_rendered_object_validates(schemas: Validators) -> None:
    objects = evalgate_rollout_objects(OPTIONS)
    assert sorted(o["kind"] for o in objects) == [
        "HTTPRoute",
        "InferencePool",
        "InferencePool",
        "Rollout",
    ]
    for obj in objects:
        validate(obj, schemas)
    no_namespace = evalgate_rollout_objects(dataclasses.replace(OPTIONS, namespace=None))
    for obj in no_namespace:
        assert "namespace" not in obj["metadata"]
        validate(obj, schemas)


UNKNOWN_FIELDS = [
    ("AnalysisTemplate", ["spec", "metrics", 0], "sucessCondition"),
    ("AnalysisTemplate", ["spec", "metrics", 0, "provider", "prometheus"], "qurey"),
    ("Rollout", ["spec", "strategy", "canary"], "stepz"),
    ("Rollout", ["spec", "strategy", "canary", "analysis"], "startStep"),
    ("HTTPRoute", ["spec", "rules", 1, "backendRefs", 0], "wieght"),
    ("HTTPRoute", ["spec", "rules", 0, "matches", 0, "headers", 0], "exact"),
    ("InferencePool", ["spec"], "selectr"),
    ("InferencePool", ["spec", "endpointPickerRef"], "portNumber"),
]


@pytest.mark.parametrize(("kind", "path", "field"), UNKNOWN_FIELDS)
def test_unknown_fields_are_rejected(
    kind: str, path: list[str | int], field: str, schemas: Validators
) -> None:
    everything = [template(), *evalgate_rollout_objects(OPTIONS)]
    obj = copy.deepcopy(next(o for o in everything if o["kind"] == kind))
    validate(obj, schemas)
    holder: Any = obj
    for part in path:
        holder = holder[part]
    holder[field] = "x"
    with pytest.raises(jsonschema.ValidationError, match=field):
        validate(obj, schemas)


def test_wrong_types_are_rejected(schemas: Validators) -> None:
    rollout = rollout_objects()["Rollout/support"]
    rollout["spec"]["strategy"]["canary"]["steps"][0]["setWeight"] = "1"
    with pytest.raises(jsonschema.ValidationError):
        validate(rollout, schemas)
    pool = rollout_objects()["InferencePool/support-stable"]
    pool["spec"]["targetPorts"] = [{"number": 70000}]
    with pytest.raises(jsonschema.ValidationError):
        validate(pool, schemas)


def _apply_replace(doc: JSON, patch: list[JSON]) -> None:
    for op in patch:
        assert op["op"] == "replace"
        *parents, last = op["path"].split("/")[1:]
        holder: Any = doc
        for part in parents:
            holder = holder[int(part)] if isinstance(holder, list) else holder[part]
        key: Any = int(last) if isinstance(holder, list) else last
        assert key in holder or isinstance(holder, list), f"{op['path']} is not in the route"
        holder[key] = op["value"]


def test_rollback_line_aborts_and_puts_all_weight_on_stable(
    schemas: Validators,
) -> None:
    line = evalgate_rollback_command(OPTIONS)
    assert "\n" not in line
    abort, patch_cmd = (shlex.split(part) for part in line.split(" && "))
    assert abort == ["kubectl", "argo", "rollouts", "abort", "support", "-n", "serve-support"]
    assert patch_cmd[:7] == [
        "kubectl",
        "-n",
        "serve-support",
        "patch",
        "httproute",
        "support",
        "--type=json",
    ]
    assert patch_cmd[7] == "-p"
    patch = json.loads(patch_cmd[8])
    assert patch == evalgate_rollback_patch(OPTIONS)
    route = rollout_objects()["HTTPRoute/support"]
    mid_rollout = copy.deepcopy(route)
    for ref, weight in zip(mid_rollout["spec"]["rules"][1]["backendRefs"], (75, 25), strict=True):
        ref["weight"] = weight
    _apply_replace(mid_rollout, patch)
    weights = {r["name"]: r["weight"] for r in mid_rollout["spec"]["rules"][1]["backendRefs"]}
    assert weights == {"support-stable": 100, "support-canary": 0}
    assert mid_rollout == route  # back to the rendered starting point, opt-out rule untouched
    validate(mid_rollout, schemas)


def test_rollback_without_namespace_has_no_namespace_flag() -> None:
    line = evalgate_rollback_command(dataclasses.replace(OPTIONS, namespace=None))
    assert "-n" not in shlex.split(line)


@pytest.mark.parametrize(
    ("change", "key", "reason"),
    [
        ({"canary_pool": "support-stable"}, "canary_pool", "must differ"),
        ({"stable_pool": "Support"}, "stable_pool", "DNS label"),
        ({"route": "a" * 64}, "route", "at most 63"),
        ({"gateway": "gw_1"}, "gateway", "DNS label"),
        ({"bakes": ("10m", "10m")}, "bakes", "one bake per weight"),
        ({"bakes": ("10m", "10m", "1 h", "10m")}, "bakes", "a duration like 30s, 10m or 2h"),
        ({"target_port": 0}, "target_port", "a port"),
        ({"epp_port": 65536}, "epp_port", "a port"),
        ({"opt_out_header": "x canary"}, "opt_out_header", "an HTTP header name"),
        ({"opt_out_value": ""}, "opt_out_value", "1 to 4096"),
    ],
)
def test_bad_rollout_options_are_refused(change: JSON, key: str, reason: str) -> None:
    with pytest.raises(EvalgateConfigError, match=reason) as caught:
        evalgate_rollout_objects(dataclasses.replace(OPTIONS, **change))
    assert caught.value.key == key
