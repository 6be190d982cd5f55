"""Kubernetes without a shared volume: turn rendered Jobs into Jobs on an S3 store.

``evalgate_s3_store_objects(objects, options)`` takes what ``k8s.evalgate_render`` returned and
gives the same Jobs with ``--evalgate-store=s3://...`` instead of the store volume (the PVC
volume and its mount are gone; the report goes to the pod's ``/tmp``), plus one NetworkPolicy
that allows egress to the object store. Credentials are never inline: either workload identity
(the pods' service account is bound to a cloud role; nothing in the pod spec) or a named Secret
whose ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (and optional ``AWS_SESSION_TOKEN``)
keys become environment variables by ``secretKeyRef``. The endpoint (``AWS_ENDPOINT_URL``) and
region are plain values: they are not secrets. Pure: dicts in, dicts out.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.k8s.render_types import EVALGATE_STORE_MOUNT
from pytest_evalgate.store.s3 import evalgate_split_s3

_JSON = dict[str, Any]
_SECRET_KEYS = (("AWS_ACCESS_KEY_ID", False), ("AWS_SECRET_ACCESS_KEY", False),
                ("AWS_SESSION_TOKEN", True))  # fmt: skip
EVALGATE_S3_REPORT_DIR = "/tmp/report"


@dataclass(frozen=True)
class EvalgateS3RenderOptions:
    """How pods reach the S3 store: where it is, who they are, what egress it needs.

    Exactly one of ``credentials_secret`` (a Secret's name) and ``workload_identity`` (True:
    the service account carries the cloud identity) must be chosen. ``egress_cidr`` is the
    object store's address range; the port comes from ``endpoint`` (443 without one).
    """

    store: str
    endpoint: str | None = None
    region: str | None = None
    credentials_secret: str | None = None
    workload_identity: bool = False
    egress_cidr: str = "0.0.0.0/0"


def evalgate_s3_store_objects(
    objects: list[_JSON], options: EvalgateS3RenderOptions
) -> list[_JSON]:
    """The Jobs of ``objects`` on the S3 store, then the store's egress NetworkPolicy."""
    evalgate_split_s3(options.store)  # a malformed location is refused before anything
    if bool(options.credentials_secret) == options.workload_identity:
        raise EvalgateConfigError(
            "--store", options.store,
            "choose one way to S3 credentials: --store-secret NAME or --workload-identity",
        )  # fmt: skip
    jobs = [_on_s3(job, options) for job in objects]
    namespace = jobs[0]["metadata"]["namespace"] if jobs else "evalgate"
    return [*jobs, _egress_policy(namespace, options)]


def evalgate_store_port(endpoint: str | None) -> int:
    """The TCP port of the object store's endpoint (443 for https or no endpoint, 80 for http)."""
    if not endpoint:
        return 443
    parts = urlsplit(endpoint)
    return parts.port or (80 if parts.scheme == "http" else 443)


def _on_s3(job: _JSON, options: EvalgateS3RenderOptions) -> _JSON:
    job = copy.deepcopy(job)
    pod = job["spec"]["template"]["spec"]
    # only the store's volume goes: a weights PVC (--weights-claim) stays
    pod["volumes"] = [v for v in pod.get("volumes", []) if v["name"] != "store"]
    for container in pod["containers"]:
        if container["name"] == "evalgate":
            _harness_on_s3(container, options)
    return job


def _harness_on_s3(container: _JSON, options: EvalgateS3RenderOptions) -> None:
    container["command"] = [_store_word(word, options.store) for word in container["command"]]
    mounts = container.get("volumeMounts", [])
    container["volumeMounts"] = [m for m in mounts if m["mountPath"] != EVALGATE_STORE_MOUNT]
    container["env"] = [*container.get("env", []), *_store_env(options)]


def _store_word(word: str, store: str) -> str:
    if word == f"--evalgate-store={EVALGATE_STORE_MOUNT}":
        return f"--evalgate-store={store}"
    if word.startswith(f"--evalgate-report={EVALGATE_STORE_MOUNT}/"):
        return f"--evalgate-report={EVALGATE_S3_REPORT_DIR}"
    return word


def _store_env(options: EvalgateS3RenderOptions) -> list[_JSON]:
    env: list[_JSON] = []
    if options.endpoint:
        env.append({"name": "AWS_ENDPOINT_URL", "value": options.endpoint})
    if options.region:
        env.append({"name": "AWS_REGION", "value": options.region})
    if options.credentials_secret:
        for key, optional in _SECRET_KEYS:
            ref = {"name": options.credentials_secret, "key": key, "optional": optional}
            env.append({"name": key, "valueFrom": {"secretKeyRef": ref}})
    return env


def _egress_policy(namespace: str, options: EvalgateS3RenderOptions) -> _JSON:
    port = evalgate_store_port(options.endpoint)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "evalgate-allow-object-store", "namespace": namespace},
        "spec": {
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "evalgate"}},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [{"ipBlock": {"cidr": options.egress_cidr}}],
                    "ports": [{"protocol": "TCP", "port": port}],
                }
            ],
        },
    }
