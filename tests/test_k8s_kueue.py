"""The eval cluster's Kueue topology (SPEC section 22, issue 35) and its priorities in renders.

Kueue objects validate strictly against the CRDs of ``../shared/crds`` (``crdkit``; skipped with
a reason when that folder is absent), Jobs against the Kubernetes schemas. The preemption rule
"checkpoint evals never preempt training" is checked as what Kueue does with the rendered
configuration: ``_kueue_may_preempt`` writes out Kueue's documented meaning of the three
``preemption`` fields, and the rendered values must make it true for a release candidate and
false for a checkpoint eval.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import crdkit
import jsonschema
import kubernetes_validate
import pytest
import yaml

from pytest_evalgate.cli import main as cli_main
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.k8s import kueue

REPO = Path(__file__).resolve().parents[1]
CRDS = REPO.parent / "shared" / "crds"
JSON = dict[str, Any]
SERVING_IMAGE = "registry.example/vllm-openai@sha256:" + "0" * 64
WEIGHTS_DIGEST = "sha256:" + "1" * 64


@pytest.fixture(scope="module")
def validators() -> dict[tuple[str, str], Any]:
    if not CRDS.is_dir():
        pytest.skip(f"{CRDS} is absent (a plain clone has no shared/crds): Kueue CRDs unchecked")
    return crdkit.crd_validators(CRDS, ["kueue.x-k8s.io_*.yaml"])


def _validate(obj: JSON, validators: dict[tuple[str, str], Any]) -> None:
    if obj["apiVersion"].startswith("kueue.x-k8s.io/"):
        validators[(obj["apiVersion"], obj["kind"])].validate(obj)
    else:
        kubernetes_validate.validate(obj, "1.33.0", strict=True)


def _by_kind(objects: list[JSON]) -> dict[tuple[str, str], JSON]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


# --- the topology ------------------------------------------------------------------------------


def test_every_kueue_object_validates_against_the_crds(
    validators: dict[tuple[str, str], Any],
) -> None:
    objects = kueue.objects()
    kinds = {o["kind"] for o in objects}
    assert kinds == {
        "Cohort",
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        "WorkloadPriorityClass",
    }
    for obj in objects:
        _validate(obj, validators)


def test_the_validation_can_fail(validators: dict[tuple[str, str], Any]) -> None:
    objects = _by_kind(kueue.objects())
    queue = copy.deepcopy(objects[("ClusterQueue", "evalgate-serving")])
    queue["spec"]["preemption"]["reclaimWithinCohort"] = "Sometimes"
    with pytest.raises(jsonschema.ValidationError, match="Sometimes"):
        _validate(queue, validators)
    flavor = copy.deepcopy(objects[("ResourceFlavor", "serving-h100-80gb")])
    flavor["spec"]["nodeLabel"] = {}  # typo
    with pytest.raises(jsonschema.ValidationError, match="nodeLabel"):
        _validate(flavor, validators)
    priority = copy.deepcopy(objects[("WorkloadPriorityClass", "eval-checkpoint")])
    priority["value"] = "high"
    with pytest.raises(jsonschema.ValidationError):
        _validate(priority, validators)


def test_the_serving_queue_shares_the_training_cohort_with_a_floor_and_borrowing() -> None:
    objects = _by_kind(kueue.objects())
    assert ("Cohort", "training") in objects
    serving = objects[("ClusterQueue", "evalgate-serving")]["spec"]
    assert serving["cohortName"] == "training"
    (group,) = serving["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    gpus = {
        flavor["name"]: next(r for r in flavor["resources"] if r["name"] == "nvidia.com/gpu")
        for flavor in group["flavors"]
    }
    assert gpus["serving-h100-80gb"] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": 24,
        "borrowingLimit": 40,
    }
    assert set(gpus) == {"serving-h100-80gb", "serving-l40s-48gb"}
    assert all("borrowingLimit" in r for f in group["flavors"] for r in f["resources"])


def test_cpu_workers_and_gpu_serving_have_separate_queues() -> None:
    objects = _by_kind(kueue.objects())
    cpu = objects[("ClusterQueue", "evalgate")]["spec"]
    assert "cohortName" not in cpu  # never borrows GPU quota, never waits behind it
    (group,) = cpu["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory"]
    assert [f["name"] for f in group["flavors"]] == ["evalgate-cpu"]
    local = {
        name: o["spec"]["clusterQueue"] for (k, name), o in objects.items() if k == "LocalQueue"
    }
    assert local == {"evalgate": "evalgate", "evalgate-serving": "evalgate-serving"}
    assert all(
        o["metadata"]["namespace"] == "evalgate"
        for (k, _), o in objects.items()
        if k == "LocalQueue"
    )


def test_flavors_select_serving_skus_by_node_labels_and_tolerate_their_taints() -> None:
    objects = _by_kind(kueue.objects())
    h100 = objects[("ResourceFlavor", "serving-h100-80gb")]["spec"]
    assert h100["nodeLabels"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert h100["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert objects[("ResourceFlavor", "evalgate-cpu")]["spec"] == {}


def _kueue_may_preempt(
    preemption: JSON, preemptor: int, victim: int, same_queue: bool, borrowing: bool
) -> bool:
    """Kueue's documented preemption rule for a pending workload of priority ``preemptor``
    against an admitted one of priority ``victim`` (in the same ClusterQueue or, otherwise, in
    another ClusterQueue of the cohort that borrows the pending workload's nominal quota)."""
    if same_queue:
        policy = preemption.get("withinClusterQueue", "Never")
        return (policy == "LowerPriority" and victim < preemptor) or (
            policy == "LowerOrNewerEqualPriority" and victim <= preemptor
        )
    if borrowing:
        rule = preemption.get("borrowWithinCohort", {})
        threshold = rule.get("maxPriorityThreshold", preemptor)
        return rule.get("policy") == "LowerPriority" and victim < preemptor and victim <= threshold
    policy = preemption.get("reclaimWithinCohort", "Never")
    return policy == "Any" or (policy == "LowerPriority" and victim < preemptor)


def test_release_candidates_reclaim_and_checkpoints_never_preempt_training() -> None:
    topology = kueue.Topology()
    objects = _by_kind(kueue.objects(topology))
    preemption = objects[("ClusterQueue", "evalgate-serving")]["spec"]["preemption"]
    value = {
        name: objects[("WorkloadPriorityClass", name)]["value"] for name in kueue.PRIORITY_NAMES
    }
    training = topology.training_priority
    rc, checkpoint, exploratory = (value[n] for n in kueue.PRIORITY_NAMES)
    assert rc > checkpoint > exploratory
    assert _kueue_may_preempt(preemption, rc, training, same_queue=False, borrowing=False)
    for borrowing in (False, True):
        assert not _kueue_may_preempt(preemption, checkpoint, training, False, borrowing)
        assert not _kueue_may_preempt(preemption, exploratory, training, False, borrowing)
    assert not _kueue_may_preempt(preemption, rc, training, same_queue=False, borrowing=True)
    assert _kueue_may_preempt(preemption, rc, exploratory, same_queue=True, borrowing=False)
    assert not _kueue_may_preempt(preemption, exploratory, rc, same_queue=True, borrowing=False)


@pytest.mark.parametrize(
    "priorities, training",
    [
        ({"eval-release-candidate": 2000, "eval-checkpoint": 1500, "eval-exploratory": 1}, 1000),
        ({"eval-release-candidate": 900, "eval-checkpoint": 500, "eval-exploratory": 1}, 1000),
        ({"eval-release-candidate": 2000, "eval-checkpoint": 1, "eval-exploratory": 5}, 1000),
        ({"eval-release-candidate": 2000, "eval-checkpoint": 500}, 1000),
    ],
)
def test_a_topology_that_breaks_the_priority_order_is_refused(
    priorities: dict[str, int], training: int
) -> None:
    topology = kueue.Topology(priorities=priorities, training_priority=training)
    with pytest.raises(EvalgateConfigError, match="priorities"):
        kueue.objects(topology)


def test_priority_for_a_run() -> None:
    assert kueue.priority_for("quick") == "eval-checkpoint"
    assert kueue.priority_for(None) == "eval-release-candidate"
    assert kueue.priority_for("quick", "eval-exploratory") == "eval-exploratory"
    with pytest.raises(EvalgateConfigError, match="--priority: one of"):
        kueue.priority_for(None, "urgent")


def test_the_base_kueue_file_is_the_default_topology() -> None:
    base = [d for d in yaml.safe_load_all((REPO / "k8s/base/kueue.yaml").read_text()) if d]
    assert base == kueue.objects()


# --- `evalgate k8s render` on a real suite with a tier -----------------------------------------


def _suite(tmp_path: Path) -> Path:
    suite = tmp_path / "ckpt"
    suite.mkdir()
    rows = [
        {"id": f"c{i:03d}", "input": f"q{i}", "target": "a", "category": "x"} for i in range(40)
    ]
    data = "".join(json.dumps(row) + "\n" for row in rows)
    (suite / "cases.jsonl").write_text(data, encoding="utf-8")
    weights = "registry.example/models/m2@" + WEIGHTS_DIGEST
    pins = {"serving_image": SERVING_IMAGE, "weights_image": weights}
    manifest = {
        "evalgate": 1,
        "suite": "ckpt-eval",
        "dataset": {
            "path": "cases.jsonl",
            "revision": "v1",
            "sha256": hashlib.sha256(data.encode()).hexdigest(),
        },
        "prompt": {"revision": "p1"},
        "evaluator": {"revision": "e1", "scorer": "exact"},
        "shards": 2,
        "tiers": {"quick": {"fraction": 0.25, "seed": 0}},
        "candidates": {
            "candidate": {
                "model": "m2",
                "base_url": "http://127.0.0.1:9/v1",
                "pins": {**pins, "weights_digest": WEIGHTS_DIGEST, "tensor_parallel": 4},
            },
            "baseline": {"model": "m1", "base_url": "http://127.0.0.1:9/v1"},
        },
    }
    (suite / "evalgate.yaml").write_text(yaml.safe_dump(manifest), encoding="utf-8")
    return suite


def _render(capsys: pytest.CaptureFixture[str], suite: Path, *extra: str) -> list[JSON]:
    assert cli_main(["k8s", "render", str(suite), "--image", "img:1", *extra]) == 0
    return [o for o in yaml.safe_load_all(capsys.readouterr().out) if o]


def test_a_tier_run_renders_the_checkpoint_priority(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], validators: dict[tuple[str, str], Any]
) -> None:
    workers, aggregate = _render(capsys, _suite(tmp_path), "--tier", "quick")
    for job in (workers, aggregate):
        assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "eval-checkpoint"
        assert (
            "--evalgate-tier=quick" in job["spec"]["template"]["spec"]["containers"][0]["command"]
        )
        _validate(job, validators)


def test_a_full_run_renders_the_release_candidate_priority(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workers, aggregate = _render(capsys, _suite(tmp_path))
    for job in (workers, aggregate):
        labels = job["metadata"]["labels"]
        assert labels["kueue.x-k8s.io/priority-class"] == "eval-release-candidate"
        command = job["spec"]["template"]["spec"]["containers"][0]["command"]
        assert not any(arg.startswith("--evalgate-tier") for arg in command)
        assert labels["kueue.x-k8s.io/queue-name"] == "evalgate"  # CPU workers


def test_sidecar_workers_go_to_the_serving_queue_on_the_chosen_sku(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], validators: dict[tuple[str, str], Any]
) -> None:
    argv = ["--serving-sidecar", "--sku", "serving-h100-80gb", "--kueue", "--tier", "quick"]
    objects = _render(capsys, _suite(tmp_path), *argv)
    for obj in objects:  # the Kueue objects against the CRDs, the Jobs against Kubernetes 1.33
        _validate(obj, validators)
    by_name = _by_kind(objects)
    workers = by_name[("Job", "evalgate-ckpt-eval")]
    aggregate = by_name[("Job", "evalgate-ckpt-eval-aggregate")]
    assert workers["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "evalgate-serving"
    assert aggregate["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "evalgate"
    pod = workers["spec"]["template"]["spec"]
    flavor = by_name[("ResourceFlavor", "serving-h100-80gb")]
    assert pod["nodeSelector"] == flavor["spec"]["nodeLabels"]
    assert "nodeSelector" not in aggregate["spec"]["template"]["spec"]
    assert ("LocalQueue", "evalgate-serving") in by_name


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--tier", "nightly"], "evalgate.yaml: tiers: no tier 'nightly' (tiers: quick)"),
        (["--serving-sidecar", "--sku", "a100"], "--sku: no serving SKU 'a100'"),
        (["--priority", "urgent"], "--priority: one of eval-release-candidate"),
    ],
)
def test_bad_render_input_exits_4_with_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    suite = _suite(tmp_path)
    assert cli_main(["k8s", "render", str(suite), "--image", "i", *argv]) == 4
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err
