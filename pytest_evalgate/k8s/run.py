"""Kubernetes: run a suite's rendered Jobs through the API and follow them to the end.

``evalgate_run`` submits the objects ``k8s.evalgate_render`` returned through the official
``kubernetes`` client, follows each completion index, then runs aggregation. API failures become
``EvalgateK8sError`` naming the API server and the reason. ``evalgate_index_phases`` and
``evalgate_progress_line`` turn the pods a Job owns into the progress lines the caller shows.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_evalgate.errors import EvalgateK8sError

EVALGATE_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
_JSON = dict[str, Any]


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

    def _progress(self, meta: Mapping[str, object], shown: dict[int, str]) -> dict[int, str]:
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


class _ApiException(Protocol):
    """What is read of ``kubernetes.client.ApiException`` (the package has no type hints)."""

    status: int
    reason: str
    body: str | bytes | None


class _JobCondition(Protocol):
    status: str
    type: str


class _JobStatus(Protocol):
    """What is read of a ``V1JobStatus``."""

    conditions: Sequence[_JobCondition] | None


def _api_reason(server: str, what: str, exc: _ApiException) -> str:
    reasons = {401: "unauthorized (401): check the kubeconfig credentials", 403: "forbidden (403)"}
    reason = reasons.get(exc.status, f"HTTP {exc.status} {exc.reason}")
    return f"Kubernetes API {server} refused {what}: {reason}: {_api_message(exc)}"


def _api_message(exc: _ApiException) -> str:
    import json

    try:
        return str(json.loads(exc.body or b"").get("message", exc.body))
    except (TypeError, ValueError, AttributeError):
        return str(exc.body or exc.reason)


def _job_end(status: _JobStatus) -> str:
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
