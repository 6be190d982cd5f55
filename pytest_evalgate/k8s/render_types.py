"""What the Kubernetes renderers share: the mount points and the sidecar's port, what rendering
needs of a manifest and of a candidate (``EvalgateManifestLike``, ``EvalgateCandidateLike``), the
render's knobs that are not in the manifest (``EvalgateRenderOptions``) and the hardened
security context of every evalgate container.

``k8s.render`` renders the Jobs and their pod, ``k8s.serving`` the serving sidecar and the
weights it serves; both build on these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

_JSON = dict[str, Any]

EVALGATE_STORE_MOUNT = "/store"
EVALGATE_SIDECAR_PORT = 8000
EVALGATE_WEIGHTS_MOUNT = "/weights"
EVALGATE_TRUST_MOUNT = "/etc/evalgate/trust"
EVALGATE_RUN_MOUNT = "/var/run/evalgate"
EVALGATE_VERIFIED_RECORD = f"{EVALGATE_RUN_MOUNT}/weights-verified.json"


class EvalgateCandidateLike(Protocol):
    """What rendering needs of a candidate (``manifest.EvalgateCandidate`` fits)."""

    @property
    def name(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def api_key_env(self) -> str | None: ...
    @property
    def pins(self) -> Mapping[str, Any]: ...


class EvalgateManifestLike(Protocol):
    """What rendering needs of a manifest (``manifest.EvalgateManifest`` fits)."""

    @property
    def path(self) -> str: ...
    @property
    def suite(self) -> str: ...
    @property
    def suite_dir(self) -> str: ...
    @property
    def definition_digest(self) -> str: ...
    @property
    def candidates(self) -> Mapping[str, EvalgateCandidateLike]: ...


@dataclass(frozen=True)
class EvalgateRenderOptions:
    """Knobs of a render that are not in the manifest; the defaults match ``k8s/base``."""

    namespace: str = "evalgate"
    queue: str | None = "evalgate"
    priority_class: str = "evalgate"
    store_claim: str = "evalgate-store"
    service_account: str = "evalgate"
    api_key_secret: str = "evalgate-api-keys"
    backoff_limit_per_index: int = 3
    sidecar_candidate: str = "candidate"
    suite_path: str | None = None
    weights_claim: str | None = None
    trust_configmap: str = "evalgate-trust"  # holds trust.yaml (weights verification)
    # Kueue (k8s/kueue.py): the GPU serving queue of sidecar workers (CPU Jobs use ``queue``),
    # the tier a run narrows to, its WorkloadPriorityClass (None: checkpoint for a tier run,
    # release candidate for the full suite) and the serving SKU's node labels (nodeSelector)
    serving_queue: str = "evalgate-serving"
    tier: str | None = None
    priority: str | None = None
    node_selector: Mapping[str, str] | None = None


def evalgate_container_security() -> _JSON:
    """The hardened container security context every evalgate container carries."""
    return {
        "runAsNonRoot": True,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
