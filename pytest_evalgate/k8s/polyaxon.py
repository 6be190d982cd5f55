"""Polyaxon: a suite's worker and aggregation components and the pipeline that maps the worker
over the shard indices.

``evalgate_polyaxon_render`` is pure: manifest in, polyaxonfiles (plain dicts, by file name) out.
The components are derived from the Jobs ``k8s.evalgate_render`` renders (after
``k8s_store.evalgate_s3_store_objects`` for an S3 store), so a Polyaxon worker runs exactly the
pod command, environment, resources and security context of the Indexed Job's pod, with
``$(JOB_COMPLETION_INDEX)`` replaced by the ``shard`` input. Files:

- ``worker.yaml``: a component (``run.kind: job``) with inputs ``shard`` (int) and
  ``revision`` (the definition digest the files were rendered for, exported to the pod as
  ``PYTEST_EVALGATE_DEFINITION``, which the plugin checks); its JUnit (one row per identity) is
  written to the run's outputs (a Polyaxon artifact);
- ``aggregate.yaml``: the aggregation (input ``revision``); its report folder and JUnit are
  written to the run's outputs;
- ``pipeline.yaml``: a component whose run is a ``dag``: the operation ``shards`` maps
  ``worker.yaml`` over ``[{shard: 0}, ..., {shard: N-1}]`` (``matrix.kind: mapping``), the
  operation ``aggregate`` depends on it and runs when all of them are done (``trigger:
  all_done``: a failed shard makes the verdict ``incomplete``, it does not skip the verdict);
- ``networkpolicy.yaml`` (S3 store only): the object store's egress NetworkPolicy, a Kubernetes
  object to ``kubectl apply`` (Polyaxon has no place for it).

What a Polyaxon job cannot express is refused (``EvalgateConfigError``), never dropped silently:
the code sandbox's pod fields (``hostUsers``, ``runtimeClassName``). The GPU serving sidecar is
not offered (a native sidecar has no place in a Polyaxon job).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.k8s.render import evalgate_render, evalgate_suite_slug
from pytest_evalgate.k8s.render_types import EvalgateManifestLike, EvalgateRenderOptions
from pytest_evalgate.k8s.store import EvalgateS3RenderOptions, evalgate_s3_store_objects
from pytest_evalgate.manifest.revision import EVALGATE_DEFINITION_ENV

_JSON = dict[str, Any]
_INDEX = "$(JOB_COMPLETION_INDEX)"
_OUTPUTS = "{{ globals.run_outputs_path }}"
# pod fields -> the Polyaxon environment's names for them
_ENVIRONMENT = {
    "serviceAccountName": "serviceAccountName",
    "securityContext": "securityContext",
    "priorityClassName": "priorityClassName",
    "restartPolicy": "restartPolicy",
    "nodeSelector": "nodeSelector",
    "tolerations": "tolerations",
    "affinity": "affinity",
}
# the service account of k8s/base sets automountServiceAccountToken: false itself
_DROPPED = frozenset({"automountServiceAccountToken"})


@dataclass(frozen=True)
class EvalgatePolyaxonOptions:
    """What a Polyaxon render needs besides the manifest: the path of the suite inside the image
    (as for ``k8s render``), an S3 store (``None``: the store PVC of ``k8s/base``), the PVC's
    name and the retries of one shard (``termination.maxRetries``)."""

    suite_path: str | None = None
    s3: EvalgateS3RenderOptions | None = None
    store_claim: str = "evalgate-store"
    max_retries: int = 3


def evalgate_polyaxon_render(
    manifest: EvalgateManifestLike,
    shards: int,
    image: str,
    options: EvalgatePolyaxonOptions | None = None,
) -> dict[str, _JSON]:
    """The polyaxonfiles of ``manifest`` for ``shards`` workers, by file name (module docstring).

    ``EvalgateConfigError`` for fewer than one shard, negative retries, a malformed S3 location
    or credentials choice, or a pod that needs what a Polyaxon job cannot express.
    """
    opts = options or EvalgatePolyaxonOptions()
    if opts.max_retries < 0:
        reason = f"a shard's retries must be 0 or more, got {opts.max_retries}"
        raise EvalgateConfigError("--max-retries", str(opts.max_retries), reason)
    objects = evalgate_render(
        manifest,
        shards,
        image,
        store_claim=opts.store_claim,
        queue=None,  # Polyaxon queues its own runs
        options=EvalgateRenderOptions(suite_path=opts.suite_path),
    )
    if opts.s3 is not None:
        objects = evalgate_s3_store_objects(objects, opts.s3)
    revision = manifest.definition_digest[:16]
    slug = evalgate_suite_slug(manifest.suite)
    files = {
        "worker.yaml": _worker(manifest.path, objects[0], slug, revision, opts.max_retries),
        "aggregate.yaml": _aggregate(manifest.path, objects[1], slug, revision),
        "pipeline.yaml": _pipeline(slug, shards, revision),
    }
    if len(objects) > 2:
        files["networkpolicy.yaml"] = objects[2]
    return files


def _inputs(revision: str, shard: bool) -> list[_JSON]:
    found: list[_JSON] = [{"name": "shard", "type": "int"}] if shard else []
    found.append({"name": "revision", "type": "str", "value": revision, "isOptional": True})
    return found


def _worker(source: str, job: _JSON, slug: str, revision: str, retries: int) -> _JSON:
    def word(text: str) -> str:
        return text.replace(_INDEX, "{{ shard }}")

    component = _component(source, job, f"evalgate-{slug}-worker", word)
    container = component["run"]["container"]
    container["command"].append(f"--junitxml={_OUTPUTS}/junit-shard-{{{{ shard }}}}.xml")
    component["inputs"] = _inputs(revision, shard=True)
    component["termination"] = {"maxRetries": retries}
    return component


def _aggregate(source: str, job: _JSON, slug: str, revision: str) -> _JSON:
    def word(text: str) -> str:
        # the report goes to the run's outputs (a Polyaxon artifact, and the bucket on S3)
        if text.startswith("--evalgate-report="):
            return f"--evalgate-report={_OUTPUTS}/report"
        return text

    component = _component(source, job, f"evalgate-{slug}-aggregate", word)
    component["run"]["container"]["command"].append(f"--junitxml={_OUTPUTS}/junit.xml")
    component["inputs"] = _inputs(revision, shard=False)
    # exit 1 is a verdict (the gate failed), not a crash: retrying cannot change it
    component["termination"] = {"maxRetries": 0}
    return component


def _component(source: str, job: _JSON, name: str, word: Callable[[str], str]) -> _JSON:
    template = job["spec"]["template"]
    pod = copy.deepcopy(template["spec"])
    _refuse_unexpressible(source, pod)
    container = pod["containers"][0]
    container["command"] = [word(text) for text in container["command"]]
    env = [e for e in container.get("env", []) if e["name"] != EVALGATE_DEFINITION_ENV]
    container["env"] = [*env, {"name": EVALGATE_DEFINITION_ENV, "value": "{{ revision }}"}]
    environment: _JSON = {
        "labels": dict(template["metadata"]["labels"]),
        "annotations": dict(job["metadata"].get("annotations", {})),
    }
    for field, key in _ENVIRONMENT.items():
        if field in pod:
            environment[key] = pod[field]
    if "securityContext" in environment:
        environment["securityContext"] = _pod_security(environment["securityContext"])
    run: _JSON = {"kind": "job", "environment": environment, "container": container}
    if pod.get("volumes"):
        run["volumes"] = pod["volumes"]
    return {
        "kind": "component",
        "name": name,
        "tags": ["evalgate"],
        "plugins": {"collectArtifacts": True, "collectLogs": True},
        "run": run,
    }


def _pod_security(context: Mapping[str, object]) -> _JSON:
    # Polyaxon types the environment's securityContext as a container's (no fsGroup): the
    # store PVC must be writable by the pods' uid/gid 65532 itself (docs/polyaxon.md)
    return {key: value for key, value in context.items() if key != "fsGroup"}


def _refuse_unexpressible(source: str, pod: Mapping[str, object]) -> None:
    extra = sorted(set(pod) - set(_ENVIRONMENT) - _DROPPED - {"containers", "volumes"})
    if extra:
        reason = (
            f"the worker pod needs {', '.join(extra)}, which a Polyaxon job's environment "
            "cannot set (a code suite's sandbox): use evalgate k8s render"
        )
        raise EvalgateConfigError(source, "polyaxon", reason)


def _pipeline(slug: str, shards: int, revision: str) -> _JSON:
    revision_param = {"revision": {"value": "{{ revision }}"}}
    workers = {
        "name": "shards",
        "pathRef": "worker.yaml",
        # Polyaxon refuses a param that names no input of the component only when strict
        "strictParams": True,
        "params": revision_param,
        "matrix": {
            "kind": "mapping",
            "concurrency": shards,
            "values": [{"shard": index} for index in range(shards)],
        },
    }
    aggregate = {
        "name": "aggregate",
        "pathRef": "aggregate.yaml",
        "dependencies": ["shards"],
        # after every shard, failed or not: missing shards make the verdict incomplete
        "trigger": "all_done",
        "strictParams": True,
        "params": revision_param,
    }
    return {
        "kind": "component",
        "name": f"evalgate-{slug}",
        "tags": ["evalgate"],
        "inputs": _inputs(revision, shard=False),
        "run": {"kind": "dag", "operations": [workers, aggregate]},
    }
