"""The Rollout, HTTPRoute and InferencePools of a canary, and the one-line rollback.

Shape (``evalgate canary rollout``), one Argo Rollouts ``Rollout`` over the serving Deployment
(``workloadRef``), two InferencePools selecting its pods by ``version`` and one HTTPRoute:

- The Rollout's canary pods carry ``version: canary``, its stable pods ``version: stable``
  (``canaryMetadata`` / ``stableMetadata``); the pools select ``app`` plus that label, and the
  same label tells the two apart in Prometheus (``promql.py``).
- Steps: weight 1, 5, 25, 50 %, each followed by its bake, then a pause with no duration that
  a person ends (``kubectl argo rollouts promote``) before 100 %. The AnalysisTemplate runs in
  the background from step 1 (the bake at 1 %) to the end.
- Traffic: the Gateway API plugin of Argo Rollouts (``argoproj-labs/gatewayAPI``) sets the
  weights of the HTTPRoute's two InferencePool backendRefs, which carry the pools' names; Argo
  requires ``canaryService`` / ``stableService``, which are given those names too.
- The HTTPRoute's first rule sends requests with the opt-out header to the stable pool only
  (more header matches win in Gateway API, whatever the weights of the second rule).
- Stickiness (``sticky_header``, SPEC 21): the weighted rule gets ``sessionPersistence`` of
  type ``Header`` on the header naming the conversation, so the gateway keeps a conversation on
  the version it first reached while the weights move. The field is in Gateway API's
  experimental channel only: such a route needs the experimental HTTPRoute CRD installed.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any

from pytest_evalgate.canary.analysis import EVALGATE_MANAGED_BY
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.policy.online import evalgate_duration

EVALGATE_CANARY_WEIGHTS = (1, 5, 25, 50)
_POOL_GROUP = "inference.networking.k8s.io"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$")
_WEIGHTED_RULE = 1  # index of the weighted rule in the HTTPRoute


@dataclass(frozen=True)
class EvalgateRolloutOptions:
    """What the rendered objects name; ``bakes`` holds one duration per canary weight."""

    stable_pool: str
    canary_pool: str
    rollout: str
    deployment: str
    route: str
    gateway: str
    analysis_template: str
    app: str
    namespace: str | None = None
    bakes: tuple[str, ...] = ("10m", "10m", "10m", "10m")
    target_port: int = 8000
    epp_port: int = 9002
    opt_out_header: str = "x-evalgate-canary"
    opt_out_value: str = "opt-out"
    sticky_header: str | None = None  # sessionPersistence on this header (experimental channel)


def evalgate_check_rollout_options(options: EvalgateRolloutOptions) -> None:
    """Refuse names that are not DNS labels, equal pools, bad bakes, ports or header names."""
    source = "canary rollout"
    for key in ("stable_pool", "canary_pool", "rollout", "deployment", "route", "gateway"):
        _dns(source, key, getattr(options, key))
    _dns(source, "analysis_template", options.analysis_template)
    if options.stable_pool == options.canary_pool:
        raise EvalgateConfigError(source, "canary_pool", "the canary pool must differ from stable")
    if len(options.bakes) != len(EVALGATE_CANARY_WEIGHTS):
        reason = f"one bake per weight {EVALGATE_CANARY_WEIGHTS} (got {len(options.bakes)})"
        raise EvalgateConfigError(source, "bakes", reason)
    for bake in options.bakes:
        evalgate_duration(bake, source, "bakes")
    _ports_and_header(source, options)


def _dns(source: str, key: str, value: str) -> None:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        reason = f"a lowercase DNS label of at most 63 characters (got {value!r})"
        raise EvalgateConfigError(source, key, reason)


def _ports_and_header(source: str, options: EvalgateRolloutOptions) -> None:
    for key in ("target_port", "epp_port"):
        if not 1 <= getattr(options, key) <= 65535:
            raise EvalgateConfigError(source, key, "a port in 1..65535")
    if not _HEADER.match(options.opt_out_header):
        reason = f"an HTTP header name (got {options.opt_out_header!r})"
        raise EvalgateConfigError(source, "opt_out_header", reason)
    if not 1 <= len(options.opt_out_value) <= 4096:
        raise EvalgateConfigError(source, "opt_out_value", "1 to 4096 characters")
    sticky = options.sticky_header
    if sticky is not None and (len(sticky) > 256 or not _HEADER.match(sticky)):
        raise EvalgateConfigError(source, "sticky_header", f"an HTTP header name (got {sticky!r})")


def evalgate_rollout_objects(options: EvalgateRolloutOptions) -> list[dict[str, Any]]:
    """Rollout, HTTPRoute and the stable and canary InferencePools, in apply order."""
    evalgate_check_rollout_options(options)
    return [
        _pool(options, options.stable_pool, "stable"),
        _pool(options, options.canary_pool, "canary"),
        _http_route(options),
        _rollout(options),
    ]


def _metadata(options: EvalgateRolloutOptions, name: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if options.namespace:
        meta["namespace"] = options.namespace
    meta["labels"] = {**EVALGATE_MANAGED_BY, "app.kubernetes.io/part-of": options.app}
    return meta


def _pool(options: EvalgateRolloutOptions, name: str, version: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{_POOL_GROUP}/v1",
        "kind": "InferencePool",
        "metadata": _metadata(options, name),
        "spec": {
            "selector": {"matchLabels": {"app": options.app, "version": version}},
            "targetPorts": [{"number": options.target_port}],
            "endpointPickerRef": {"name": f"{name}-epp", "port": {"number": options.epp_port}},
        },
    }


def _pool_ref(name: str, weight: int | None) -> dict[str, Any]:
    ref: dict[str, Any] = {"group": _POOL_GROUP, "kind": "InferencePool", "name": name}
    if weight is not None:
        ref["weight"] = weight
    return ref


def _http_route(options: EvalgateRolloutOptions) -> dict[str, Any]:
    everything = {"path": {"type": "PathPrefix", "value": "/"}}
    opt_out = {"type": "Exact", "name": options.opt_out_header, "value": options.opt_out_value}
    rules: list[dict[str, Any]] = [
        {
            "matches": [{**everything, "headers": [opt_out]}],
            "backendRefs": [_pool_ref(options.stable_pool, None)],
        },
        {
            "matches": [everything],
            "backendRefs": [_pool_ref(options.stable_pool, 100), _pool_ref(options.canary_pool, 0)],
        },
    ]
    if options.sticky_header:
        # one conversation, one version: the gateway pins a header value to the backend it
        # first chose, across weight changes (Gateway API experimental channel)
        persistence: dict[str, Any] = {"type": "Header", "header": {"name": options.sticky_header}}
        rules[_WEIGHTED_RULE]["sessionPersistence"] = persistence
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": _metadata(options, options.route),
        "spec": {"parentRefs": [{"name": options.gateway}], "rules": rules},
    }


def _steps(options: EvalgateRolloutOptions) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    for weight, bake in zip(EVALGATE_CANARY_WEIGHTS, options.bakes, strict=True):
        steps += [{"setWeight": weight}, {"pause": {"duration": bake}}]
    return [*steps, {"pause": {}}]  # the final pause: a person promotes to 100 %


def _rollout(options: EvalgateRolloutOptions) -> dict[str, Any]:
    plugin: dict[str, Any] = {"httpRoute": options.route}
    if options.namespace:
        plugin["namespace"] = options.namespace
    canary = {
        "canaryService": options.canary_pool,
        "stableService": options.stable_pool,
        "canaryMetadata": {"labels": {"version": "canary"}},
        "stableMetadata": {"labels": {"version": "stable"}},
        "trafficRouting": {"plugins": {"argoproj-labs/gatewayAPI": plugin}},
        "analysis": {"templates": [{"templateName": options.analysis_template}], "startingStep": 1},
        "steps": _steps(options),
    }
    workload = {"apiVersion": "apps/v1", "kind": "Deployment", "name": options.deployment}
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Rollout",
        "metadata": _metadata(options, options.rollout),
        "spec": {"workloadRef": workload, "strategy": {"canary": canary}},
    }


def evalgate_rollback_patch(options: EvalgateRolloutOptions) -> list[dict[str, Any]]:
    """JSON patch (RFC 6902) putting the HTTPRoute's weighted rule back to 100 % stable."""
    base = f"/spec/rules/{_WEIGHTED_RULE}/backendRefs"
    return [
        {"op": "replace", "path": f"{base}/0/weight", "value": 100},
        {"op": "replace", "path": f"{base}/1/weight", "value": 0},
    ]


def evalgate_rollback_command(options: EvalgateRolloutOptions) -> str:
    """One shell line: abort the Rollout (so its controller stops shifting weight) and put the
    HTTPRoute's weight back on the stable pool at once."""
    namespace = ["-n", options.namespace] if options.namespace else []
    abort = ["kubectl", "argo", "rollouts", "abort", options.rollout, *namespace]
    patch = json.dumps(evalgate_rollback_patch(options), separators=(",", ":"))
    route = ["kubectl", *namespace, "patch", "httproute", options.route, "--type=json", "-p", patch]
    return f"{shlex.join(abort)} && {shlex.join(route)}"
