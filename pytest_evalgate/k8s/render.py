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

Running the objects through the API is ``k8s_run``'s job. The serving sidecar and the weights'
volume and verification are ``k8s.serving``; the types, mount constants and security context
both share are ``k8s.render_types``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from typing import Any

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.k8s import kueue
from pytest_evalgate.k8s.render_types import (
    EVALGATE_SIDECAR_PORT,
    EVALGATE_STORE_MOUNT,
    EvalgateManifestLike,
    EvalgateRenderOptions,
    evalgate_container_security,
)
from pytest_evalgate.k8s.sandbox import evalgate_sandbox_pod
from pytest_evalgate.k8s.serving import (
    evalgate_sidecar,
    evalgate_verify_weights,
    evalgate_weights_volume,
    evalgate_with_verification,
)
from pytest_evalgate.manifest.load import evalgate_base_url_env
from pytest_evalgate.manifest.tiers import evalgate_tier_spec

EVALGATE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
_JSON = dict[str, Any]


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
    sidecar = evalgate_sidecar(manifest, opts) if serving_sidecar else None
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
    check = evalgate_verify_weights(manifest, image, opts) if verify else None
    if check is not None:
        pod["initContainers"] = [check]
        pod["volumes"] = [*pod["volumes"], evalgate_weights_volume(manifest, opts)]
        evalgate_with_verification(pod, opts)
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
        "volumes": _volumes(
            opts, None if sidecar is None else evalgate_weights_volume(manifest, opts)
        ),
    }
    if sidecar is not None:
        pod["initContainers"] = [sidecar]
        verify = evalgate_verify_weights(manifest, image, opts)
        if verify is not None:  # runs to completion before the server starts (SPEC section 20)
            pod["initContainers"] = [verify, sidecar]
            evalgate_with_verification(pod, opts)
    return pod


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


def _pod_security() -> _JSON:
    return {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def evalgate_to_yaml(objects: Sequence[_JSON]) -> str:
    """Multi-document YAML of the objects, keys in insertion order."""
    import yaml

    return "".join(
        "---\n" + yaml.safe_dump(obj, sort_keys=False, default_flow_style=False) for obj in objects
    )
