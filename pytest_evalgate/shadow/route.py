"""The shadow stage's HTTPRoute: every request to stable, a share mirrored to the candidate.

Gateway API's ``RequestMirror`` filter copies a share of the route's requests to the candidate's
InferencePool and drops the mirror's answers (the gateway never returns them). A whole percent
renders as ``percent``; any other share as ``fraction`` (numerator over 10000), since the CRD's
``percent`` is an integer. The gateway mirrors every turn: for tool loops whose later turns must
not reach the candidate, put ``evalgate shadow serve`` (first turns only) behind the route instead.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from pytest_evalgate.canary.analysis import EVALGATE_MANAGED_BY
from pytest_evalgate.errors import EvalgateConfigError

_POOL_GROUP = "inference.networking.k8s.io"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_FRACTION_DENOMINATOR = 10_000


@dataclass(frozen=True)
class EvalgateShadowRouteOptions:
    """What the rendered route names; ``percent`` is the mirrored share in 0..100."""

    stable_pool: str
    candidate_pool: str
    route: str
    gateway: str
    percent: float
    app: str
    namespace: str | None = None


def evalgate_check_shadow_route(options: EvalgateShadowRouteOptions) -> None:
    """Refuse names that are not DNS labels, equal pools, and a share outside (0, 100]."""
    for key in ("stable_pool", "candidate_pool", "route", "gateway"):
        value = getattr(options, key)
        if len(value) > 63 or not _DNS_LABEL.match(value):
            reason = f"a lowercase DNS label of at most 63 characters (got {value!r})"
            raise EvalgateConfigError("shadow render", key, reason)
    if options.stable_pool == options.candidate_pool:
        raise EvalgateConfigError("shadow render", "candidate", "must differ from --stable")
    share = options.percent
    if not math.isfinite(share) or not 0.0 < share <= 100.0:
        raise EvalgateConfigError("shadow render", "percent", f"in (0, 100] (got {share!r})")
    if share * 100 != round(share * 100):
        reason = f"at most two decimals: 0.01 % steps (got {share!r})"
        raise EvalgateConfigError("shadow render", "percent", reason)


def evalgate_mirror_share(percent: float) -> dict[str, Any]:
    """``{"percent": P}`` for a whole percent, else ``{"fraction": {...}}`` over 10000."""
    if percent == int(percent):
        return {"percent": int(percent)}
    numerator = round(percent * _FRACTION_DENOMINATOR / 100)
    return {"fraction": {"numerator": numerator, "denominator": _FRACTION_DENOMINATOR}}


def evalgate_shadow_route(options: EvalgateShadowRouteOptions) -> dict[str, Any]:
    """The HTTPRoute: one rule, stable as its backend, the candidate's pool as its mirror."""
    evalgate_check_shadow_route(options)
    mirror = {
        "backendRef": {
            "group": _POOL_GROUP,
            "kind": "InferencePool",
            "name": options.candidate_pool,
        },
        **evalgate_mirror_share(options.percent),
    }
    rule = {
        "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
        "filters": [{"type": "RequestMirror", "requestMirror": mirror}],
        "backendRefs": [
            {"group": _POOL_GROUP, "kind": "InferencePool", "name": options.stable_pool}
        ],
    }
    metadata: dict[str, Any] = {"name": options.route}
    if options.namespace:
        metadata["namespace"] = options.namespace
    metadata["labels"] = {**EVALGATE_MANAGED_BY, "app.kubernetes.io/part-of": options.app}
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": metadata,
        "spec": {"parentRefs": [{"name": options.gateway}], "rules": [rule]},
    }
