"""Kubernetes: render a suite's Indexed Job and aggregation Job as API objects.

``evalgate_render`` is pure: manifest in, plain dicts (the API objects) out. Each worker pod runs
``pytest --evalgate SUITE --evalgate-shard=$(JOB_COMPLETION_INDEX)/N`` against a shared store
volume; one aggregation pod then gates what the store holds. With ``serving_sidecar`` the
candidate is served inside each pod by a native sidecar (an initContainer with
``restartPolicy: Always``) whose startup probe holds the harness back until the model is ready;
it loads the weights the way production does, from an OCI image volume pinned by digest
(``pins.weights_image``, mounted read-only at ``/weights``; Kubernetes 1.31+ with the
``ImageVolume`` feature gate, on by default from 1.35) or, with ``weights_claim``, from a
read-only PVC a digest-checking Job prepared (docs/kubernetes.md).

Running the objects through the API is ``k8s_run``'s job.

Why one module of ~420 lines: its job is one set of objects rendered from one manifest (the
Indexed Job, the aggregation Job, their pod, volumes and the serving sidecar), and the sidecar
shares the render types, the security context and the mount constants with the pod. Moving the
sidecar out needs a module of those shared types first: left for the sidecar's next change.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.k8s import kueue
from pytest_evalgate.k8s.sandbox import evalgate_sandbox_pod
from pytest_evalgate.manifest.load import evalgate_base_url_env
from pytest_evalgate.manifest.pins import EVALGATE_WEIGHTS_VERIFIED_ENV, evalgate_weights_image
from pytest_evalgate.manifest.tiers import evalgate_tier_spec

EVALGATE_STORE_MOUNT = "/store"
EVALGATE_SIDECAR_PORT = 8000
EVALGATE_WEIGHTS_MOUNT = "/weights"
EVALGATE_TRUST_MOUNT = "/etc/evalgate/trust"
EVALGATE_RUN_MOUNT = "/var/run/evalgate"
EVALGATE_VERIFIED_RECORD = f"{EVALGATE_RUN_MOUNT}/weights-verified.json"
EVALGATE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
_DIGEST_IMAGE = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}$")
_JSON = dict[str, Any]


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


# --- rendering ---------------------------------------------------------------------------------


def evalgate_render(
    manifest: EvalgateManifestLike,
    shards: int,
    image: str,
    serving_sidecar: bool = False,
    store_claim: str = "evalgate-store",
    namespace: str = "evalgate",
    queue: str | None = "evalgate",
    options: EvalgateRenderOptions | None = None,
) -> list[_JSON]:
    """The worker Indexed Job and the aggregation Job for ``manifest``, as API dicts.

    ``shards`` is N (completions = parallelism = N). ``serving_sidecar`` adds the GPU serving
    sidecar for ``options.sidecar_candidate``, whose ``pins.serving_image`` must be pinned by
    digest (``EvalgateConfigError`` otherwise). ``queue=None`` leaves Kueue out.
    """
    if shards < 1:
        raise EvalgateConfigError(manifest.path, "shards", f"need at least 1 shard, got {shards}")
    opts = dataclasses.replace(
        options or EvalgateRenderOptions(),
        store_claim=store_claim,
        namespace=namespace,
        queue=queue,
    )
    if opts.tier is not None:  # an unknown tier would make every pod exit 4
        evalgate_tier_spec(getattr(manifest, "tiers", {}), opts.tier, manifest.path)
    sidecar = _sidecar(manifest, opts) if serving_sidecar else None
    return [
        _worker_job(manifest, shards, image, opts, sidecar),
        _aggregate_job(manifest, image, opts, verify=serving_sidecar),
    ]


def _tier_args(opts: EvalgateRenderOptions) -> list[str]:
    return [] if opts.tier is None else [f"--evalgate-tier={opts.tier}"]


def evalgate_suite_slug(suite: str) -> str:
    """The suite name as a DNS-1123 label of at most 40 characters (room for prefixes and
    suffixes such as ``evalgate-...-aggregate``): lowercase, other characters become ``-``."""
    return re.sub(r"[^a-z0-9-]+", "-", suite.lower()).strip("-")[:40] or "suite"


def evalgate_job_names(manifest: EvalgateManifestLike) -> tuple[str, str]:
    """(worker Job name, aggregation Job name): DNS-1123 labels derived from the suite name."""
    slug = evalgate_suite_slug(manifest.suite)
    return f"evalgate-{slug}", f"evalgate-{slug}-aggregate"


def _suite_path(manifest: EvalgateManifestLike, opts: EvalgateRenderOptions) -> str:
    # The pod sees the image's filesystem: keep the path relative to where render was invoked.
    if opts.suite_path:
        return opts.suite_path
    relative = os.path.relpath(manifest.suite_dir)
    return manifest.suite_dir if relative.startswith("..") else relative


def _worker_job(
    manifest: EvalgateManifestLike,
    n: int,
    image: str,
    opts: EvalgateRenderOptions,
    sidecar: _JSON | None,
) -> _JSON:
    command = [
        "pytest",
        "--evalgate",
        _suite_path(manifest, opts),
        f"--evalgate-shard=$(JOB_COMPLETION_INDEX)/{n}",
        *_tier_args(opts),
        f"--evalgate-store={EVALGATE_STORE_MOUNT}",
        "-p",
        "no:cacheprovider",
    ]
    pod = _pod_spec(manifest, image, command, opts, sidecar)
    if sidecar is not None and opts.node_selector:
        pod["nodeSelector"] = dict(opts.node_selector)
    pod = evalgate_sandbox_pod(pod, getattr(manifest, "sandbox", None))  # scorer: code only
    spec = {
        "completionMode": "Indexed",
        "completions": n,
        "parallelism": n,
        "backoffLimitPerIndex": opts.backoff_limit_per_index,
        "maxFailedIndexes": n,
        "podFailurePolicy": _pod_failure_policy(),
        "template": _template(manifest, opts, "worker", pod),
    }
    queue = opts.serving_queue if sidecar is not None else opts.queue
    name = evalgate_job_names(manifest)[0]
    return _job(
        name, manifest, dataclasses.replace(opts, queue=opts.queue and queue), "worker", spec
    )


def _aggregate_job(
    manifest: EvalgateManifestLike, image: str, opts: EvalgateRenderOptions, *, verify: bool
) -> _JSON:
    """The aggregation Job; with ``verify`` (a sidecar run whose candidate pins a weights
    signature) it verifies the same weights image by digest first, so the decision it makes
    can say ``binding: verified`` (the workers served that digest: the same reference)."""
    command = [
        "pytest",
        "--evalgate",
        _suite_path(manifest, opts),
        "--evalgate-aggregate",
        *_tier_args(opts),
        f"--evalgate-store={EVALGATE_STORE_MOUNT}",
        f"--evalgate-report={EVALGATE_STORE_MOUNT}/report",
        "-p",
        "no:cacheprovider",
    ]
    pod = _pod_spec(manifest, image, command, opts, None)
    check = _verify_weights(manifest, image, opts) if verify else None
    if check is not None:
        pod["initContainers"] = [check]
        pod["volumes"] = [*pod["volumes"], _weights_volume(manifest, opts)]
        _with_verification(pod, opts)
    spec = {
        "completions": 1,
        "parallelism": 1,
        # exit 1 is a verdict (the gate failed), not a crash: retrying cannot change it
        "backoffLimit": 0,
        "template": _template(manifest, opts, "aggregate", pod),
    }
    return _job(evalgate_job_names(manifest)[1], manifest, opts, "aggregate", spec)


def _labels(manifest: EvalgateManifestLike, role: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "evalgate",
        "app.kubernetes.io/component": role,
        "evalgate.dev/suite": evalgate_job_names(manifest)[0][len("evalgate-") :],
    }


def _job(
    name: str, manifest: EvalgateManifestLike, opts: EvalgateRenderOptions, role: str, spec: _JSON
) -> _JSON:
    labels = _labels(manifest, role)
    if opts.queue:
        labels[EVALGATE_QUEUE_LABEL] = opts.queue
        labels[kueue.PRIORITY_LABEL] = kueue.priority_for(opts.tier, opts.priority)
        # Kueue admits a suspended Job by unsuspending it; created running, it would bypass quota
        spec = {**spec, "suspend": True}
    metadata = {
        "name": name,
        "namespace": opts.namespace,
        "labels": labels,
        "annotations": {"evalgate.dev/definition-digest": manifest.definition_digest},
    }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}


def _template(
    manifest: EvalgateManifestLike, opts: EvalgateRenderOptions, role: str, pod: _JSON
) -> _JSON:
    return {"metadata": {"labels": _labels(manifest, role)}, "spec": pod}


def _pod_failure_policy() -> _JSON:
    """Evictions and preemptions do not count against the index; a usage error (4) is final."""
    return {
        "rules": [
            {
                "action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            },
            {
                "action": "FailIndex",
                "onExitCodes": {"containerName": "evalgate", "operator": "In", "values": [4]},
            },
        ]
    }


def _pod_spec(
    manifest: EvalgateManifestLike,
    image: str,
    command: list[str],
    opts: EvalgateRenderOptions,
    sidecar: _JSON | None,
) -> _JSON:
    harness = {
        "name": "evalgate",
        "image": image,
        "command": command,
        "env": _harness_env(manifest, opts, sidecar is not None),
        "resources": {
            "requests": {"cpu": "500m", "memory": "512Mi"},
            "limits": {"cpu": "2", "memory": "2Gi"},
        },
        "securityContext": evalgate_container_security(),
        "volumeMounts": [
            {"name": "store", "mountPath": EVALGATE_STORE_MOUNT},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    pod: _JSON = {
        "serviceAccountName": opts.service_account,
        "automountServiceAccountToken": False,
        "restartPolicy": "Never",
        "priorityClassName": opts.priority_class,
        "securityContext": _pod_security(),
        "containers": [harness],
        "volumes": _volumes(opts, None if sidecar is None else _weights_volume(manifest, opts)),
    }
    if sidecar is not None:
        pod["initContainers"] = [sidecar]
        verify = _verify_weights(manifest, image, opts)
        if verify is not None:  # runs to completion before the server starts (SPEC section 20)
            pod["initContainers"] = [verify, sidecar]
            _with_verification(pod, opts)
    return pod


def _with_verification(pod: _JSON, opts: EvalgateRenderOptions) -> None:
    """The trust file and the record's folder in ``pod``; the harness reads the record."""
    pod["volumes"] = [*pod["volumes"], *_verification_volumes(opts)]
    harness = pod["containers"][0]
    run = {"name": "evalgate-run", "mountPath": EVALGATE_RUN_MOUNT, "readOnly": True}
    harness["volumeMounts"] = [*harness["volumeMounts"], run]
    record = {"name": EVALGATE_WEIGHTS_VERIFIED_ENV, "value": EVALGATE_VERIFIED_RECORD}
    harness["env"] = [*harness["env"], record]


def _verify_weights(
    manifest: EvalgateManifestLike, image: str, opts: EvalgateRenderOptions
) -> _JSON | None:
    """The init container that verifies the weights against ``pins.weights_signature`` (a
    path inside the weights, left out of what it signs) with a ``release`` key of the trust
    file, and leaves the record the harness's decision reads. A failure ends the container,
    so the serving sidecar after it never starts."""
    pins = manifest.candidates[opts.sidecar_candidate].pins
    signature = pins.get("weights_signature")
    if not signature:
        return None
    key = f"candidates.{opts.sidecar_candidate}.pins.weights_signature"
    if not isinstance(signature, str) or signature.startswith("/") or ".." in signature:
        reason = f"a path inside the weights folder, got {signature!r}"
        raise EvalgateConfigError(manifest.path, key, reason)
    return {
        "name": "verify-weights",
        "image": image,
        "command": [
            "evalgate",
            "weights",
            "verify",
            EVALGATE_WEIGHTS_MOUNT,
            f"--signature={EVALGATE_WEIGHTS_MOUNT}/{signature}",
            f"--trust={EVALGATE_TRUST_MOUNT}/trust.yaml",
            f"--digest={pins.get('weights_digest')}",
            f"--record={EVALGATE_VERIFIED_RECORD}",
        ],
        "env": [{"name": "HOME", "value": "/tmp"}],
        "resources": {
            "requests": {"cpu": "1", "memory": "512Mi"},
            "limits": {"cpu": "4", "memory": "2Gi"},
        },
        "securityContext": evalgate_container_security(),
        "volumeMounts": [
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "weights", "mountPath": EVALGATE_WEIGHTS_MOUNT, "readOnly": True},
            {"name": "evalgate-trust", "mountPath": EVALGATE_TRUST_MOUNT, "readOnly": True},
            {"name": "evalgate-run", "mountPath": EVALGATE_RUN_MOUNT},
        ],
    }


def _verification_volumes(opts: EvalgateRenderOptions) -> list[_JSON]:
    return [
        {"name": "evalgate-trust", "configMap": {"name": opts.trust_configmap}},
        {"name": "evalgate-run", "emptyDir": {"sizeLimit": "1Mi"}},
    ]


def _harness_env(
    manifest: EvalgateManifestLike, opts: EvalgateRenderOptions, local: bool
) -> list[_JSON]:
    env: list[_JSON] = [
        {"name": "HOME", "value": "/tmp"},
        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
    ]
    for name in sorted(manifest.candidates):
        key_env = manifest.candidates[name].api_key_env
        if key_env:
            # keys never enter files: the Secret holds them, optional so a keyless dev run works
            ref = {"name": opts.api_key_secret, "key": key_env, "optional": True}
            env.append({"name": key_env, "valueFrom": {"secretKeyRef": ref}})
    if local:
        env.append({"name": evalgate_base_url_env(opts.sidecar_candidate), "value": _local_url()})
    return env


def _local_url() -> str:
    return f"http://127.0.0.1:{EVALGATE_SIDECAR_PORT}/v1"


def _volumes(opts: EvalgateRenderOptions, weights: _JSON | None) -> list[_JSON]:
    volumes: list[_JSON] = [
        {"name": "store", "persistentVolumeClaim": {"claimName": opts.store_claim}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
    ]
    if weights is not None:
        # tensor-parallel workers exchange tensors through /dev/shm; the default 64Mi is too small
        volumes.append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}})
        volumes.append(weights)
    return volumes


def _weights_volume(manifest: EvalgateManifestLike, opts: EvalgateRenderOptions) -> _JSON:
    """The candidate's weights: its OCI image by digest (the kubelet pulls and verifies it), or
    the read-only PVC a digest-checking Job filled (``weights_claim``)."""
    if opts.weights_claim:
        claim = {"claimName": opts.weights_claim, "readOnly": True}
        return {"name": "weights", "persistentVolumeClaim": claim}
    name = opts.sidecar_candidate
    image = evalgate_weights_image(manifest.path, name, manifest.candidates[name].pins)
    return {"name": "weights", "image": {"reference": image, "pullPolicy": "IfNotPresent"}}


def evalgate_container_security() -> _JSON:
    """The hardened container security context every evalgate container carries."""
    return {
        "runAsNonRoot": True,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _pod_security() -> _JSON:
    return {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


# --- the serving sidecar -----------------------------------------------------------------------


def evalgate_check_digest(image: str, source: str, key: str) -> str:
    """Return ``image`` if it is pinned by digest (``name@sha256:<64 hex>``), else refuse."""
    if not isinstance(image, str) or not _DIGEST_IMAGE.match(image):
        reason = f"serving image must be pinned by digest (name@sha256:<64 hex>), got {image!r}"
        raise EvalgateConfigError(source, key, reason)
    return image


def _sidecar(manifest: EvalgateManifestLike, opts: EvalgateRenderOptions) -> _JSON:
    name = opts.sidecar_candidate
    if name not in manifest.candidates:
        raise EvalgateConfigError(manifest.path, "candidates", f"no candidate {name!r} to serve")
    candidate = manifest.candidates[name]
    key = f"candidates.{name}.pins.serving_image"
    image = evalgate_check_digest(candidate.pins.get("serving_image", ""), manifest.path, key)
    # refused before rendering; a weights PVC holds this image's files, checked by digest
    evalgate_weights_image(manifest.path, name, candidate.pins)
    gpus = _tensor_parallel(manifest.path, name, candidate.pins)
    return {
        "name": "serving",
        "image": image,
        "restartPolicy": "Always",
        "args": evalgate_serving_args(candidate, gpus),
        "ports": [{"name": "http", "containerPort": EVALGATE_SIDECAR_PORT}],
        "env": [
            {"name": "HOME", "value": "/tmp"},
            # the weights are on disk: never reach for a model hub (an enclave has no egress)
            {"name": "HF_HUB_OFFLINE", "value": "1"},
            {"name": "TRANSFORMERS_OFFLINE", "value": "1"},
        ],
        "resources": {
            "requests": {"cpu": "4", "memory": "32Gi"},
            "limits": {"nvidia.com/gpu": gpus, "memory": "64Gi"},
        },
        "securityContext": evalgate_container_security(),
        "startupProbe": _probe(failure_threshold=180),  # loading weights takes minutes
        "readinessProbe": _probe(failure_threshold=3),
        "volumeMounts": [
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "shm", "mountPath": "/dev/shm"},
            {"name": "weights", "mountPath": EVALGATE_WEIGHTS_MOUNT, "readOnly": True},
        ],
    }


def _tensor_parallel(source: str, name: str, pins: Mapping[str, object]) -> int:
    value = pins.get("tensor_parallel", 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        key = f"candidates.{name}.pins.tensor_parallel"
        raise EvalgateConfigError(source, key, f"must be a whole number >= 1, got {value!r}")
    return value


def evalgate_serving_args(candidate: EvalgateCandidateLike, gpus: int) -> list[str]:
    """The serving container's arguments (vLLM OpenAI server flags) from the candidate's pins:
    the model is the mounted weights folder, never a name to download; ``quantization`` and
    ``max_model_len`` become ``--quantization`` and ``--max-model-len``."""
    args = [
        f"--model={EVALGATE_WEIGHTS_MOUNT}",
        f"--served-model-name={candidate.model}",
        f"--tensor-parallel-size={gpus}",
        f"--port={EVALGATE_SIDECAR_PORT}",
    ]
    if candidate.pins.get("quantization"):
        args.append(f"--quantization={candidate.pins['quantization']}")
    if candidate.pins.get("max_model_len"):  # long context (SPEC 18): checked by the manifest
        args.append(f"--max-model-len={candidate.pins['max_model_len']}")
    return args


def _probe(failure_threshold: int) -> _JSON:
    return {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": 10,
        "timeoutSeconds": 5,
        "failureThreshold": failure_threshold,
    }


def evalgate_to_yaml(objects: Sequence[_JSON]) -> str:
    """Multi-document YAML of the objects, keys in insertion order."""
    import yaml

    return "".join(
        "---\n" + yaml.safe_dump(obj, sort_keys=False, default_flow_style=False) for obj in objects
    )
