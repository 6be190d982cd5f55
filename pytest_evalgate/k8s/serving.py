"""The serving sidecar of a worker pod and the weights it serves (docs/kubernetes.md).

The candidate is served inside each pod by a native sidecar (an initContainer with
``restartPolicy: Always``) whose startup probe holds the harness back until the model is ready;
its image is pinned by digest (``evalgate_check_digest``). It loads the weights the way
production does, from an OCI image volume pinned by digest (``pins.weights_image``, mounted
read-only at ``/weights``) or, with ``weights_claim``, from a read-only PVC a digest-checking Job
prepared (``evalgate_weights_volume``). With ``pins.weights_signature`` an init container
verifies the weights before the server starts and leaves the record the harness's decision
reads (``evalgate_verify_weights``, ``evalgate_with_verification``).

``k8s.render`` puts these into the Indexed Job's and the aggregation Job's pods.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.k8s.render_types import (
    EVALGATE_RUN_MOUNT,
    EVALGATE_SIDECAR_PORT,
    EVALGATE_TRUST_MOUNT,
    EVALGATE_VERIFIED_RECORD,
    EVALGATE_WEIGHTS_MOUNT,
    EvalgateCandidateLike,
    EvalgateManifestLike,
    EvalgateRenderOptions,
    evalgate_container_security,
)
from pytest_evalgate.manifest.pins import EVALGATE_WEIGHTS_VERIFIED_ENV, evalgate_weights_image

_DIGEST_IMAGE = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}$")
_JSON = dict[str, Any]


# --- the weights and their verification ------------------------------------------------------


def evalgate_weights_volume(manifest: EvalgateManifestLike, opts: EvalgateRenderOptions) -> _JSON:
    """The candidate's weights: its OCI image by digest (the kubelet pulls and verifies it), or
    the read-only PVC a digest-checking Job filled (``weights_claim``)."""
    if opts.weights_claim:
        claim = {"claimName": opts.weights_claim, "readOnly": True}
        return {"name": "weights", "persistentVolumeClaim": claim}
    name = opts.sidecar_candidate
    image = evalgate_weights_image(manifest.path, name, manifest.candidates[name].pins)
    return {"name": "weights", "image": {"reference": image, "pullPolicy": "IfNotPresent"}}


def evalgate_with_verification(pod: _JSON, opts: EvalgateRenderOptions) -> None:
    """The trust file and the record's folder in ``pod``; the harness reads the record."""
    pod["volumes"] = [*pod["volumes"], *_verification_volumes(opts)]
    harness = pod["containers"][0]
    run = {"name": "evalgate-run", "mountPath": EVALGATE_RUN_MOUNT, "readOnly": True}
    harness["volumeMounts"] = [*harness["volumeMounts"], run]
    record = {"name": EVALGATE_WEIGHTS_VERIFIED_ENV, "value": EVALGATE_VERIFIED_RECORD}
    harness["env"] = [*harness["env"], record]


def evalgate_verify_weights(
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


# --- the serving sidecar -----------------------------------------------------------------------


def evalgate_check_digest(image: str, source: str, key: str) -> str:
    """Return ``image`` if it is pinned by digest (``name@sha256:<64 hex>``), else refuse."""
    if not isinstance(image, str) or not _DIGEST_IMAGE.match(image):
        reason = f"serving image must be pinned by digest (name@sha256:<64 hex>), got {image!r}"
        raise EvalgateConfigError(source, key, reason)
    return image


def evalgate_sidecar(manifest: EvalgateManifestLike, opts: EvalgateRenderOptions) -> _JSON:
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
