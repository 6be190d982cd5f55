"""Kubernetes: render a suite's Indexed Job and aggregation Job, and run them through the API.

``evalgate_render`` is pure: manifest in, plain dicts (the API objects) out. Each worker pod runs
``pytest --evalgate SUITE --evalgate-shard=$(JOB_COMPLETION_INDEX)/N`` against a shared store
volume; one aggregation pod then gates what the store holds. With ``serving_sidecar`` the
candidate is served inside each pod by a native sidecar (an initContainer with
``restartPolicy: Always``) whose startup probe holds the harness back until the model is ready;
it loads the weights the way production does, from an OCI image volume pinned by digest
(``pins.weights_image``, mounted read-only at ``/weights``; Kubernetes 1.31+ with the
``ImageVolume`` feature gate, on by default from 1.35) or, with ``weights_claim``, from a
read-only PVC a digest-checking Job prepared (docs/kubernetes.md).

``evalgate_run`` submits the objects through the official ``kubernetes`` client, follows each
completion index, then runs aggregation. API failures become ``EvalgateK8sError`` naming the
API server and the reason.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_evalgate.errors import EvalgateConfigError, EvalgateK8sError
from pytest_evalgate.k8s_sandbox import evalgate_sandbox_pod
from pytest_evalgate.manifest import evalgate_base_url_env
from pytest_evalgate.manifest_pins import evalgate_weights_image

EVALGATE_STORE_MOUNT = "/store"
EVALGATE_SIDECAR_PORT = 8000
EVALGATE_WEIGHTS_MOUNT = "/weights"
EVALGATE_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
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
    sidecar = _sidecar(manifest, opts) if serving_sidecar else None
    return [
        _worker_job(manifest, shards, image, opts, sidecar),
        _aggregate_job(manifest, image, opts),
    ]


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
        f"--evalgate-store={EVALGATE_STORE_MOUNT}",
        "-p",
        "no:cacheprovider",
    ]
    pod = _pod_spec(manifest, image, command, opts, sidecar)
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
    return _job(evalgate_job_names(manifest)[0], manifest, opts, "worker", spec)


def _aggregate_job(
    manifest: EvalgateManifestLike, image: str, opts: EvalgateRenderOptions
) -> _JSON:
    command = [
        "pytest",
        "--evalgate",
        _suite_path(manifest, opts),
        "--evalgate-aggregate",
        f"--evalgate-store={EVALGATE_STORE_MOUNT}",
        f"--evalgate-report={EVALGATE_STORE_MOUNT}/report",
        "-p",
        "no:cacheprovider",
    ]
    pod = _pod_spec(manifest, image, command, opts, None)
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


def _tensor_parallel(source: str, name: str, pins: Mapping[str, Any]) -> int:
    value = pins.get("tensor_parallel", 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        key = f"candidates.{name}.pins.tensor_parallel"
        raise EvalgateConfigError(source, key, f"must be a whole number >= 1, got {value!r}")
    return value


def evalgate_serving_args(candidate: EvalgateCandidateLike, gpus: int) -> list[str]:
    """The serving container's arguments (vLLM OpenAI server flags) from the candidate's pins:
    the model is the mounted weights folder, never a name to download."""
    args = [
        f"--model={EVALGATE_WEIGHTS_MOUNT}",
        f"--served-model-name={candidate.model}",
        f"--tensor-parallel-size={gpus}",
        f"--port={EVALGATE_SIDECAR_PORT}",
    ]
    if candidate.pins.get("quantization"):
        args.append(f"--quantization={candidate.pins['quantization']}")
    return args


def _probe(failure_threshold: int) -> _JSON:
    return {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": 10,
        "timeoutSeconds": 5,
        "failureThreshold": failure_threshold,
    }


# --- running -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalgateRunResult:
    """How a submitted run ended: per-index final phase of the workers and the aggregate's."""

    indexes: dict[int, str]
    workers: str
    aggregate: str

    @property
    def ok(self) -> bool:
        """Both Jobs completed (the gate verdict itself is in the store's report)."""
        return self.workers == "Complete" and self.aggregate == "Complete"


def evalgate_api(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """An ``ApiClient`` from the kubeconfig (path, ``$KUBECONFIG`` or ~/.kube/config) or, inside
    a pod, the in-cluster service account."""
    import kubernetes.config
    from kubernetes import client

    # the client's config loaders are untyped; Any keeps mypy --strict honest about that
    config: Any = kubernetes.config
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()
        return client.ApiClient()
    configuration = client.Configuration()
    try:
        config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    except (config.ConfigException, OSError) as exc:
        raise EvalgateK8sError(
            f"cannot load kubeconfig {kubeconfig or '(default)'}: {exc}"
        ) from None
    configuration.retries = 0  # fail fast on a dead API server; the caller decides to retry
    return client.ApiClient(configuration)


def evalgate_run(
    objects: Sequence[_JSON],
    api_client: Any,
    poll_s: float = 5.0,
    timeout_s: float = 24 * 3600.0,
    *,
    echo: Callable[[str], None],
) -> EvalgateRunResult:
    """Create the worker Job, follow each index to the end, then the aggregation Job.

    ``objects`` is ``evalgate_render``'s output; ``echo`` receives one line per created Job,
    per change of the pods' phases and per finished Job (the caller shows them). Returns how
    both ended; raises ``EvalgateK8sError`` (naming the API server and the reason) when the API
    is unreachable, refuses (401/403, 409 for an existing Job, ...) or the deadline passes.
    """
    workers, aggregate = objects[0], objects[1]
    runner = _Runner(api_client, poll_s, time.monotonic() + timeout_s, echo)
    runner.create(workers)
    indexes, workers_end = runner.follow(workers)
    runner.create(aggregate)
    _, aggregate_end = runner.follow(aggregate)
    return EvalgateRunResult(indexes, workers_end, aggregate_end)


class _Runner:
    """One run's API calls; every call goes through ``_call`` so failures read the same."""

    def __init__(
        self, api_client: Any, poll_s: float, deadline: float, echo: Callable[[str], None]
    ) -> None:
        from kubernetes import client

        self.batch = client.BatchV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.server = str(api_client.configuration.host)
        self.poll_s = poll_s
        self.deadline = deadline
        self.echo = echo

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            raise EvalgateK8sError(_api_reason(self.server, what, exc)) from None
        except (HTTPError, OSError) as exc:
            message = f"Kubernetes API {self.server} unreachable while {what}: {exc}"
            raise EvalgateK8sError(message) from None

    def create(self, job: _JSON) -> None:
        meta = job["metadata"]
        what = f"creating Job {meta['namespace']}/{meta['name']}"
        self._call(what, self.batch.create_namespaced_job, meta["namespace"], job)
        self.echo(f"created Job {meta['namespace']}/{meta['name']}")

    def follow(self, job: _JSON) -> tuple[dict[int, str], str]:
        meta = job["metadata"]
        shown: dict[int, str] = {}
        while True:
            status = self._call(
                f"reading Job {meta['name']}",
                self.batch.read_namespaced_job_status,
                meta["name"],
                meta["namespace"],
            ).status
            shown = self._progress(meta, shown)
            end = _job_end(status)
            if end:
                self.echo(f"Job {meta['name']}: {end}")
                return shown, end
            if time.monotonic() > self.deadline:
                raise EvalgateK8sError(f"Job {meta['name']} on {self.server}: deadline passed")
            time.sleep(self.poll_s)

    def _progress(self, meta: Mapping[str, Any], shown: dict[int, str]) -> dict[int, str]:
        pods = self._call(
            f"listing pods of Job {meta['name']}",
            self.core.list_namespaced_pod,
            meta["namespace"],
            label_selector=f"batch.kubernetes.io/job-name={meta['name']}",
        ).items
        phases = evalgate_index_phases(pods)
        if phases != shown:
            self.echo(evalgate_progress_line(str(meta["name"]), phases))
        return phases


def _api_reason(server: str, what: str, exc: Any) -> str:
    reasons = {401: "unauthorized (401): check the kubeconfig credentials", 403: "forbidden (403)"}
    reason = reasons.get(exc.status, f"HTTP {exc.status} {exc.reason}")
    return f"Kubernetes API {server} refused {what}: {reason}: {_api_message(exc)}"


def _api_message(exc: Any) -> str:
    import json

    try:
        return str(json.loads(exc.body).get("message", exc.body))
    except (TypeError, ValueError, AttributeError):
        return str(exc.body or exc.reason)


def _job_end(status: Any) -> str:
    for condition in status.conditions or []:
        if condition.status == "True" and condition.type in ("Complete", "Failed"):
            return str(condition.type)
    return ""


def evalgate_index_phases(pods: Sequence[Any]) -> dict[int, str]:
    """Completion index -> phase of its newest pod (a retried index shows its latest attempt).

    Pods of a non-indexed Job (the aggregation) carry no index label and count as index 0.
    """
    newest: dict[int, tuple[str, str]] = {}
    for pod in pods:
        index = int((pod.metadata.labels or {}).get(EVALGATE_INDEX_LABEL, 0))
        created = str(pod.metadata.creation_timestamp or "")
        if index not in newest or created >= newest[index][0]:
            newest[index] = (created, str(pod.status.phase if pod.status else "Unknown"))
    return {index: newest[index][1] for index in sorted(newest)}


def evalgate_progress_line(job: str, phases: Mapping[int, str]) -> str:
    """One progress line: counts by phase, then ``index:phase`` for every index not yet done."""
    counts: dict[str, int] = {}
    for phase in phases.values():
        counts[phase] = counts.get(phase, 0) + 1
    summary = " ".join(f"{phase}={count}" for phase, count in sorted(counts.items()))
    pending = " ".join(f"{i}:{p}" for i, p in phases.items() if p != "Succeeded")
    return f"{job}: {summary or 'no pods yet'}" + (f" [{pending}]" if pending else "")


def evalgate_to_yaml(objects: Sequence[_JSON]) -> str:
    """Multi-document YAML of the objects, keys in insertion order."""
    import yaml

    return "".join(
        "---\n" + yaml.safe_dump(obj, sort_keys=False, default_flow_style=False) for obj in objects
    )
