"""Kubernetes: the Kueue topology of an eval cluster shared with training (SPEC section 22).

``objects(topology)`` is pure: a ``Topology`` in, the Kueue API objects (``kueue.x-k8s.io/v1beta2``,
the storage version of the CRDs this project validates against) out:

- a **Cohort** shared with training (``topology.cohort``);
- **ResourceFlavors**, one per serving SKU (node labels select the SKU's nodes, tolerations let
  the pods onto its tainted nodes) and one for the CPU workers;
- the **serving ClusterQueue** (GPU serving sidecars), in the cohort, with a reserved floor
  (``nominalQuota``) and ``borrowingLimit`` per SKU, and the **CPU ClusterQueue** (workers against
  remote endpoints, aggregation), outside the cohort: two queues, so CPU Jobs never wait behind
  GPU quota and never borrow it;
- a **LocalQueue** per ClusterQueue in the eval namespace;
- three **WorkloadPriorityClasses**: ``eval-release-candidate`` > ``eval-checkpoint`` >
  ``eval-exploratory``.

Preemption is configuration: inside the eval queues a workload preempts only lower-priority ones
(``withinClusterQueue: LowerPriority``: a release candidate evicts exploratory evals); across the
cohort the serving queue reclaims its lent floor only from lower-priority workloads
(``reclaimWithinCohort: LowerPriority``) and never preempts while borrowing
(``borrowWithinCohort: Never``). With training's priority between checkpoint and release
candidate (``check`` refuses any other order), a release candidate reclaims the floor from
training and a checkpoint eval never preempts training.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_evalgate.errors import EvalgateConfigError

API_VERSION = "kueue.x-k8s.io/v1beta2"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
RELEASE_CANDIDATE = "eval-release-candidate"
CHECKPOINT = "eval-checkpoint"
EXPLORATORY = "eval-exploratory"
PRIORITY_NAMES = (RELEASE_CANDIDATE, CHECKPOINT, EXPLORATORY)
GPU = "nvidia.com/gpu"
_JSON = dict[str, Any]


@dataclass(frozen=True)
class ServingSku:
    """One serving SKU as a ResourceFlavor and its share of the serving queue.

    ``gpus`` is the reserved floor (``nominalQuota``), ``borrow_gpus`` the most it borrows from
    the cohort on top (``borrowingLimit``); CPU and memory (the harness and the sidecar of the
    pods on those GPUs) are quoted per GPU, floor and borrowing alike."""

    name: str
    node_labels: Mapping[str, str]
    tolerations: tuple[Mapping[str, str], ...] = ()
    gpus: int = 0
    borrow_gpus: int = 0
    cpu_per_gpu: int = 2
    memory_gi_per_gpu: int = 16


def _h100() -> ServingSku:
    return ServingSku(
        name="serving-h100-80gb",
        node_labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        tolerations=({"key": GPU, "operator": "Exists", "effect": "NoSchedule"},),
        gpus=24,
        borrow_gpus=40,
    )


def _l40s() -> ServingSku:
    return ServingSku(
        name="serving-l40s-48gb",
        node_labels={"nvidia.com/gpu.product": "NVIDIA-L40S"},
        tolerations=({"key": GPU, "operator": "Exists", "effect": "NoSchedule"},),
        gpus=0,
        borrow_gpus=16,
    )


@dataclass(frozen=True)
class Topology:
    """The eval cluster's queues; the defaults are ``k8s/base/kueue.yaml`` (docs/kubernetes.md).

    ``training_priority`` is the priority value training's workloads carry in the cohort (its
    WorkloadPriorityClass or pod priority): the order checkpoint < training < release candidate
    is what makes "checkpoint evals never preempt training" hold, and ``check`` enforces it."""

    namespace: str = "evalgate"
    cohort: str = "training"
    serving_queue: str = "evalgate-serving"
    cpu_queue: str = "evalgate"
    cpu_flavor: str = "evalgate-cpu"
    cpu_quota: int = 64
    memory_quota_gi: int = 256
    skus: tuple[ServingSku, ...] = field(default_factory=lambda: (_h100(), _l40s()))
    priorities: Mapping[str, int] = field(
        default_factory=lambda: {RELEASE_CANDIDATE: 2000, CHECKPOINT: 500, EXPLORATORY: 100}
    )
    training_priority: int = 1000


def check(topology: Topology, source: str = "kueue topology") -> None:
    """Refuse a topology whose priorities break the contract (``EvalgateConfigError``)."""
    values = topology.priorities
    missing = [name for name in PRIORITY_NAMES if name not in values]
    if missing:
        raise EvalgateConfigError(source, "priorities", f"missing {', '.join(missing)}")
    order = [values[EXPLORATORY], values[CHECKPOINT], topology.training_priority]
    order.append(values[RELEASE_CANDIDATE])
    if not all(low < high for low, high in itertools.pairwise(order)):
        reason = (
            "need eval-exploratory < eval-checkpoint < training_priority < "
            f"eval-release-candidate, got {order}"
        )
        raise EvalgateConfigError(source, "priorities", reason)
    if not topology.skus:
        raise EvalgateConfigError(source, "skus", "need at least one serving SKU")


def objects(topology: Topology | None = None) -> list[_JSON]:
    """Every Kueue object of ``topology`` (the default one when None), checked first."""
    topo = topology or Topology()
    check(topo)
    return [
        _object("Cohort", topo.cohort, {}),
        *[_flavor(sku.name, sku.node_labels, sku.tolerations) for sku in topo.skus],
        _flavor(topo.cpu_flavor, {}, ()),
        _serving_queue(topo),
        _cpu_queue(topo),
        _local_queue(topo, topo.serving_queue),
        _local_queue(topo, topo.cpu_queue),
        *[_priority_class(name, topo.priorities[name]) for name in PRIORITY_NAMES],
    ]


def priority_for(tier: str | None, explicit: str | None = None) -> str:
    """The WorkloadPriorityClass of a run: ``explicit`` when given (one of ``PRIORITY_NAMES``),
    else checkpoint for a tier run and release candidate for the full suite."""
    if explicit is not None:
        if explicit not in PRIORITY_NAMES:
            reason = f"one of {', '.join(PRIORITY_NAMES)}, got {explicit!r}"
            raise EvalgateConfigError("command line", "--priority", reason)
        return explicit
    return CHECKPOINT if tier else RELEASE_CANDIDATE


def sku_selector(topology: Topology, name: str) -> dict[str, str]:
    """The node labels of the serving SKU ``name``: the pod's nodeSelector, so Kueue admits it
    only on that SKU's flavor and the scheduler places it on those nodes."""
    for sku in topology.skus:
        if sku.name == name:
            return dict(sku.node_labels)
    known = ", ".join(sku.name for sku in topology.skus)
    raise EvalgateConfigError("command line", "--sku", f"no serving SKU {name!r} ({known})")


def _object(kind: str, name: str, spec: _JSON, namespace: str | None = None) -> _JSON:
    metadata: _JSON = {"name": name, "labels": {"app.kubernetes.io/name": "evalgate"}}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, "spec": spec}


def _flavor(
    name: str, labels: Mapping[str, str], tolerations: tuple[Mapping[str, str], ...]
) -> _JSON:
    spec: _JSON = {}
    if labels:
        spec["nodeLabels"] = dict(labels)
    if tolerations:  # Kueue adds them to the pods it admits on this flavor
        spec["tolerations"] = [dict(t) for t in tolerations]
    return _object("ResourceFlavor", name, spec)


def _namespace_selector(topo: Topology) -> _JSON:
    return {"matchLabels": {"kubernetes.io/metadata.name": topo.namespace}}


def _serving_queue(topo: Topology) -> _JSON:
    flavors = [
        {
            "name": sku.name,
            "resources": [
                _quota("cpu", sku.gpus * sku.cpu_per_gpu, sku.borrow_gpus * sku.cpu_per_gpu),
                _quota("memory", _gi(sku.gpus, sku), _gi(sku.borrow_gpus, sku)),
                _quota(GPU, sku.gpus, sku.borrow_gpus),
            ],
        }
        for sku in topo.skus
    ]
    spec = {
        "cohortName": topo.cohort,
        "namespaceSelector": _namespace_selector(topo),
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [{"coveredResources": ["cpu", "memory", GPU], "flavors": flavors}],
        "preemption": {
            "withinClusterQueue": "LowerPriority",
            "reclaimWithinCohort": "LowerPriority",
            "borrowWithinCohort": {"policy": "Never"},
        },
    }
    return _object("ClusterQueue", topo.serving_queue, spec)


def _gi(gpus: int, sku: ServingSku) -> str:
    return f"{gpus * sku.memory_gi_per_gpu}Gi"


def _quota(name: str, nominal: int | str, borrow: int | str | None) -> _JSON:
    quota: _JSON = {"name": name, "nominalQuota": nominal}
    if borrow is not None:
        quota["borrowingLimit"] = borrow
    return quota


def _cpu_queue(topo: Topology) -> _JSON:
    flavor = {
        "name": topo.cpu_flavor,
        "resources": [
            _quota("cpu", topo.cpu_quota, None),
            _quota("memory", f"{topo.memory_quota_gi}Gi", None),
        ],
    }
    spec = {
        "namespaceSelector": _namespace_selector(topo),
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [flavor]}],
        "preemption": {"withinClusterQueue": "LowerPriority"},
    }
    return _object("ClusterQueue", topo.cpu_queue, spec)


def _local_queue(topo: Topology, name: str) -> _JSON:
    return _object("LocalQueue", name, {"clusterQueue": name}, topo.namespace)


def _priority_class(name: str, value: int) -> _JSON:
    obj = _object("WorkloadPriorityClass", name, {})
    del obj["spec"]  # a WorkloadPriorityClass has value and description at the top level
    obj["value"] = value
    # an annotation, not ``description``: the CRDs this project validates against carry none
    obj["metadata"]["annotations"] = {"evalgate.dev/purpose": _PURPOSES[name]}
    return obj


_PURPOSES = {
    RELEASE_CANDIDATE: "full-suite evals of a pending release: preempt exploratory evals and "
    "reclaim the eval floor from training",
    CHECKPOINT: "tier evals of training checkpoints: below training, never preempt it",
    EXPLORATORY: "ad-hoc evals: first to be preempted",
}
