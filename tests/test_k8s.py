"""Kubernetes: the kustomize tree, rendered Jobs, their schemas, and runs against loopback APIs.

Built-in kinds validate with ``kubernetes_validate`` (strict, 1.30.0 and 1.33.0). Kueue kinds
validate against the CRDs in ``../shared/crds`` (turned into JSON Schema by ``crdkit``; skipped
with a reason when that folder is absent). No
kustomize binary exists here, so ``_kustomize_build`` applies the subset this tree uses:
``resources`` (files and directories) and ``patches`` holding JSON6902 operations.
"""

from __future__ import annotations

import copy
import hashlib
import http.server
import importlib.util
import json
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import crdkit
import jsonschema
import kubernetes_validate
import pytest
import yaml

from pytest_evalgate.cli import main as cli_main
from pytest_evalgate.errors import EvalgateConfigError, EvalgateK8sError
from pytest_evalgate.k8s.render import evalgate_render
from pytest_evalgate.k8s.render_types import EvalgateRenderOptions
from pytest_evalgate.k8s.run import (
    evalgate_api,
    evalgate_index_phases,
    evalgate_progress_line,
    evalgate_run,
)
from pytest_evalgate.manifest.load import evalgate_base_url_env

REPO = Path(__file__).resolve().parents[1]
K8S = REPO / "k8s"
CRDS = REPO.parent / "shared" / "crds"
K8S_VERSIONS = ("1.30.0", "1.33.0")
# An image volume (the sidecar's weights) exists in the API from 1.31 (alpha, ImageVolume gate),
# beta in 1.33, on by default from 1.35: sidecar objects are rendered and checked for those.
SIDECAR_K8S_VERSIONS = ("1.33.0", "1.35.0")
JSON = dict[str, Any]


def _load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "evalgate_render_example", K8S / "render_example.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while decorating
    spec.loader.exec_module(module)
    return module


EXAMPLE = _load_example()


# --- a kustomize subset ------------------------------------------------------------------------


def _yaml_docs(path: Path) -> list[JSON]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def _kustomize_build(folder: Path) -> list[JSON]:
    """Objects of a kustomization: its resources, then its JSON6902 patches applied in order."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text(encoding="utf-8"))
    unsupported = set(kustomization) - {"apiVersion", "kind", "resources", "patches"}
    assert not unsupported, f"the test's kustomize subset does not handle {unsupported}"
    objects: list[JSON] = []
    for entry in kustomization.get("resources", []):
        target = (folder / entry).resolve()
        objects += _kustomize_build(target) if target.is_dir() else _yaml_docs(target)
    for patch in kustomization.get("patches", []):
        ops = _patch_ops(folder, patch)
        matched = [obj for obj in objects if _selected(obj, patch["target"])]
        assert len(matched) == 1, f"patch target {patch['target']} matched {len(matched)}"
        _apply_json6902(matched[0], ops)
    return objects


def _patch_ops(folder: Path, patch: JSON) -> list[JSON]:
    text = (folder / patch["path"]).read_text() if "path" in patch else patch["patch"]
    ops = yaml.safe_load(text)
    assert isinstance(ops, list), "only JSON6902 patches (a list of operations) are supported"
    return ops


def _selected(obj: JSON, target: JSON) -> bool:
    group, _, version = obj["apiVersion"].rpartition("/")
    fields = {"group": group, "version": version, "kind": obj["kind"]}
    fields["name"] = obj["metadata"]["name"]
    return all(fields.get(key) == value for key, value in target.items())


def _apply_json6902(doc: JSON, ops: list[JSON]) -> None:
    for op in ops:
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]
        ]
        holder: Any = doc
        for part in parents:
            holder = holder[int(part)] if isinstance(holder, list) else holder[part]
        _apply_op(holder, last, op)


def _apply_op(holder: Any, last: str, op: JSON) -> None:
    if isinstance(holder, list):
        index = len(holder) if last == "-" else int(last)
        if op["op"] == "add":
            holder.insert(index, op["value"])
            return
        assert 0 <= index < len(holder), f"{op} points past the list"
    else:
        assert op["op"] == "add" or last in holder, f"{op} targets a missing key"
        index = last  # type: ignore[assignment]
    if op["op"] == "remove":
        del holder[index]
    else:
        assert op["op"] in ("add", "replace"), f"unsupported op {op['op']}"
        holder[index] = op["value"]


def test_kustomize_subset_applies_and_refuses() -> None:
    doc: JSON = {"a": {"b": [1, 2]}}
    _apply_json6902(doc, [{"op": "add", "path": "/a/b/-", "value": 3}])
    _apply_json6902(doc, [{"op": "replace", "path": "/a/b/0", "value": 9}])
    _apply_json6902(doc, [{"op": "remove", "path": "/a/b/1"}])
    _apply_json6902(doc, [{"op": "add", "path": "/a/c", "value": {"d": 1}}])
    assert doc == {"a": {"b": [9, 3], "c": {"d": 1}}}
    with pytest.raises(AssertionError, match="missing key"):
        _apply_json6902(doc, [{"op": "replace", "path": "/a/zz", "value": 1}])


# --- validation --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def crd_schemas() -> dict[tuple[str, str], JSON]:
    if not CRDS.is_dir():
        pytest.skip(f"{CRDS} is absent (a plain clone has no shared/crds): Kueue CRDs unchecked")
    return crdkit.crd_schemas(CRDS, "kueue.x-k8s.io_*.yaml")


def _validate(obj: JSON, crd_schemas: dict[tuple[str, str], JSON]) -> None:
    """Raise if ``obj`` does not validate (strictly) for every supported Kubernetes version."""
    if obj["apiVersion"].startswith("kueue.x-k8s.io/"):
        jsonschema.validate(obj, crd_schemas[(obj["apiVersion"], obj["kind"])])
        return
    for version in SIDECAR_K8S_VERSIONS if _has_image_volume(obj) else K8S_VERSIONS:
        kubernetes_validate.validate(obj, version, strict=True)


def _has_image_volume(obj: JSON) -> bool:
    pod = obj.get("spec", {}).get("template", {}).get("spec", {})
    return any("image" in volume for volume in pod.get("volumes", []))


def _base_objects() -> list[JSON]:
    return _kustomize_build(K8S / "base")


def test_base_lists_the_objects_the_spec_asks_for() -> None:
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in _base_objects())
    assert ("Namespace", "evalgate") in kinds
    assert ("NetworkPolicy", "evalgate-default-deny-egress") in kinds
    for allowance in ("dns", "endpoint", "judge", "store"):
        assert ("NetworkPolicy", f"evalgate-allow-{allowance}") in kinds
    for kind in ("ServiceAccount", "ResourceFlavor", "ClusterQueue", "LocalQueue", "PriorityClass"):
        assert kind in {k for k, _ in kinds}
    assert ("Cohort", "training") in kinds
    assert ("WorkloadPriorityClass", "eval-checkpoint") in kinds
    assert ("PersistentVolumeClaim", "evalgate-store") in kinds
    assert ("Job", "evalgate-example") in kinds and ("Job", "evalgate-example-aggregate") in kinds
    assert all(
        o["apiVersion"] == "kueue.x-k8s.io/v1beta2"
        for o in _base_objects()
        if o["kind"] in ("ResourceFlavor", "ClusterQueue", "LocalQueue", "Cohort")
    )


def test_base_policies_deny_egress_and_tokens() -> None:
    objects = {(o["kind"], o["metadata"]["name"]): o for o in _base_objects()}
    deny = objects[("NetworkPolicy", "evalgate-default-deny-egress")]["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Egress"]}
    dns = objects[("NetworkPolicy", "evalgate-allow-dns")]["spec"]["egress"][0]
    selector = dns["to"][0]["namespaceSelector"]["matchLabels"]
    assert selector == {"kubernetes.io/metadata.name": "kube-system"}
    assert objects[("ServiceAccount", "evalgate")]["automountServiceAccountToken"] is False


@pytest.mark.parametrize("folder", ["base", "overlays/cpu-remote", "overlays/gpu-sidecar"])
def test_every_kustomize_object_validates(
    folder: str, crd_schemas: dict[tuple[str, str], JSON]
) -> None:
    objects = _kustomize_build(K8S / folder)
    assert len(objects) >= 12
    for obj in objects:
        _validate(obj, crd_schemas)


def test_overlays_change_what_they_say() -> None:
    def job(folder: str) -> JSON:
        objects = _kustomize_build(K8S / folder)
        return next(o for o in objects if o["metadata"]["name"] == "evalgate-example")

    cpu = job("overlays/cpu-remote")["spec"]["template"]["spec"]
    assert cpu["containers"][0]["resources"]["requests"]["cpu"] == "250m"
    assert "initContainers" not in cpu
    # the gpu overlay must equal a fresh render with the sidecar: the tree cannot drift
    assert job("overlays/gpu-sidecar") == EXAMPLE.example_objects(True)[0]


def test_generated_files_are_in_sync_with_the_renderer(capsys: pytest.CaptureFixture[str]) -> None:
    assert EXAMPLE.main(["--check"]) == 0, capsys.readouterr().out


def test_validation_rejects_unknown_fields(crd_schemas: dict[tuple[str, str], JSON]) -> None:
    objects = _base_objects()
    job = copy.deepcopy(next(o for o in objects if o["kind"] == "Job"))
    job["spec"]["template"]["spec"]["containers"][0]["securityContex"] = {}  # typo
    with pytest.raises(kubernetes_validate.ValidationError, match="securityContex"):
        _validate(job, crd_schemas)
    for kind in ("ClusterQueue", "LocalQueue", "ResourceFlavor"):
        obj = copy.deepcopy(next(o for o in objects if o["kind"] == kind))
        obj.setdefault("spec", {})["clusterQeue"] = "x"  # typo
        with pytest.raises(jsonschema.ValidationError, match="clusterQeue"):
            _validate(obj, crd_schemas)


def test_validation_rejects_wrong_types(crd_schemas: dict[tuple[str, str], JSON]) -> None:
    objects = _base_objects()
    job = copy.deepcopy(next(o for o in objects if o["kind"] == "Job"))
    job["spec"]["completions"] = "four"
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(job, crd_schemas)
    queue = copy.deepcopy(next(o for o in objects if o["kind"] == "ClusterQueue"))
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = [1]
    with pytest.raises(jsonschema.ValidationError):
        _validate(queue, crd_schemas)


# --- rendering ---------------------------------------------------------------------------------


def _render(sidecar: bool = False, shards: int = 4, **pins: Any) -> list[JSON]:
    manifest = EXAMPLE.ExampleManifest()
    if pins:
        candidate = manifest.candidates["candidate"]
        changed = EXAMPLE.ExampleCandidate(
            "candidate", candidate.model, candidate.api_key_env, {**candidate.pins, **pins}
        )
        manifest = EXAMPLE.ExampleManifest(candidates={**manifest.candidates, "candidate": changed})
    return evalgate_render(manifest, shards, "registry.example/evalgate:1", sidecar)


@pytest.mark.parametrize("sidecar", [False, True])
@pytest.mark.parametrize("shards", [1, 7])
def test_rendered_objects_validate(
    sidecar: bool, shards: int, crd_schemas: dict[tuple[str, str], JSON]
) -> None:
    for obj in _render(sidecar, shards):
        _validate(obj, crd_schemas)


def test_rendered_worker_job_key_fields() -> None:
    workers = _render(shards=7)[0]
    spec = workers["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 7
    assert spec["backoffLimitPerIndex"] == 3 and spec["maxFailedIndexes"] == 7
    rule = spec["podFailurePolicy"]["rules"][0]
    assert rule["action"] == "Ignore" and rule["onPodConditions"][0]["type"] == "DisruptionTarget"
    assert workers["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "evalgate"
    assert spec["suspend"] is True  # Kueue admits by unsuspending
    pod = spec["template"]["spec"]
    assert pod["priorityClassName"] == "evalgate" and pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False
    (harness,) = pod["containers"]
    assert harness["command"] == [
        "pytest",
        "--evalgate",
        "suites/example",
        "--evalgate-shard=$(JOB_COMPLETION_INDEX)/7",
        "--evalgate-store=/store",
        "-p",
        "no:cacheprovider",
    ]
    assert {"name": "store", "persistentVolumeClaim": {"claimName": "evalgate-store"}} in pod[
        "volumes"
    ]
    assert {"name": "tmp", "mountPath": "/tmp"} in harness["volumeMounts"]
    assert "emptyDir" in next(v for v in pod["volumes"] if v["name"] == "tmp")


def test_rendered_security_context_is_hardened() -> None:
    for obj in _render(sidecar=True):
        pod = obj["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for container in pod["containers"] + pod.get("initContainers", []):
            context = container["securityContext"]
            assert context["runAsNonRoot"] is True
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}


def test_cpu_workers_ask_for_no_gpu() -> None:
    for obj in _render(sidecar=False):
        pod = obj["spec"]["template"]["spec"]
        assert "initContainers" not in pod
        text = json.dumps(pod)
        assert "nvidia.com/gpu" not in text


def test_aggregation_job_command() -> None:
    aggregate = _render()[1]
    assert aggregate["metadata"]["name"] == "evalgate-example-aggregate"
    assert "completionMode" not in aggregate["spec"]
    assert aggregate["spec"]["template"]["spec"]["containers"][0]["command"] == [
        "pytest",
        "--evalgate",
        "suites/example",
        "--evalgate-aggregate",
        "--evalgate-store=/store",
        "--evalgate-report=/store/report",
        "-p",
        "no:cacheprovider",
    ]


def test_sidecar_serves_the_candidate_on_localhost() -> None:
    pod = _render(sidecar=True, tensor_parallel=4, quantization="fp8")[0]["spec"]["template"][
        "spec"
    ]
    (sidecar,) = pod["initContainers"]
    assert sidecar["restartPolicy"] == "Always"  # native sidecar
    assert sidecar["image"] == EXAMPLE.EXAMPLE_SERVING_IMAGE
    assert sidecar["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert "--tensor-parallel-size=4" in sidecar["args"]
    assert "--quantization=fp8" in sidecar["args"]
    assert "--model=/weights" in sidecar["args"]
    assert not [arg for arg in sidecar["args"] if arg.startswith("--download-dir")]
    for probe in ("startupProbe", "readinessProbe"):
        assert sidecar[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert sidecar["ports"] == [{"name": "http", "containerPort": 8000}]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env[evalgate_base_url_env("candidate")] == "http://127.0.0.1:8000/v1"
    assert "nvidia.com/gpu" not in json.dumps(pod["containers"])


def test_sidecar_loads_the_weights_image_read_only_by_digest() -> None:
    # issue 19: evaluate the artifact you ship, not a model name downloaded into an emptyDir
    pod = _render(sidecar=True)[0]["spec"]["template"]["spec"]
    (sidecar,) = pod["initContainers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["weights"] == {
        "name": "weights",
        "image": {"reference": EXAMPLE.EXAMPLE_WEIGHTS_IMAGE, "pullPolicy": "IfNotPresent"},
    }
    assert not [v for v in pod["volumes"] if v.get("emptyDir") == {}]  # no download cache
    mounts = {m["name"]: m for m in sidecar["volumeMounts"]}
    assert mounts["weights"] == {"name": "weights", "mountPath": "/weights", "readOnly": True}
    assert "weights" not in {m["name"] for m in pod["containers"][0]["volumeMounts"]}
    env = {e["name"]: e["value"] for e in sidecar["env"]}
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    digest = EXAMPLE.EXAMPLE_WEIGHTS_IMAGE.split("@", 1)[1]
    assert digest == EXAMPLE.ExampleManifest().candidates["candidate"].pins["weights_digest"]


def test_the_image_volume_needs_kubernetes_1_31_or_later() -> None:
    job = _render(sidecar=True)[0]
    for version in SIDECAR_K8S_VERSIONS:
        kubernetes_validate.validate(job, version, strict=True)
    with pytest.raises(kubernetes_validate.ValidationError, match="image"):
        kubernetes_validate.validate(job, "1.30.0", strict=True)  # no image volume source


def test_a_weights_claim_mounts_the_prepared_pvc_read_only(
    crd_schemas: dict[tuple[str, str], JSON],
) -> None:
    options = EvalgateRenderOptions(weights_claim="weights-example-r2")
    job = evalgate_render(EXAMPLE.ExampleManifest(), 2, "img", True, options=options)[0]
    pod = job["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    claim = {"claimName": "weights-example-r2", "readOnly": True}
    assert volumes["weights"] == {"name": "weights", "persistentVolumeClaim": claim}
    assert "--model=/weights" in pod["initContainers"][0]["args"]
    for version in K8S_VERSIONS:  # a PVC works where image volumes do not
        kubernetes_validate.validate(job, version, strict=True)


@pytest.mark.parametrize(
    ("pins", "key", "reason"),
    [
        ({"weights_image": None}, "pins.weights_image", "a serving-sidecar run needs the weights"),
        ({"weights_image": "registry.example/models/r2:latest"}, "pins.weights_image",
         "must be pinned by digest (NAME@sha256:<64 hex>), got 'registry.example/models/r2:"),
        ({"weights_digest": "sha256:" + "2" * 64}, "pins.weights_digest",
         "must equal the digest of pins.weights_image (sha256:" + "1" * 64 + ")"),
    ],
)  # fmt: skip
def test_sidecar_refuses_weights_not_pinned_by_digest(
    pins: dict[str, Any], key: str, reason: str
) -> None:
    manifest = EXAMPLE.ExampleManifest()
    candidate = manifest.candidates["candidate"]
    changed = {**candidate.pins, **pins}
    changed = {k: v for k, v in changed.items() if v is not None}
    other = EXAMPLE.ExampleCandidate("candidate", candidate.model, candidate.api_key_env, changed)
    manifest = EXAMPLE.ExampleManifest(candidates={**manifest.candidates, "candidate": other})
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_render(manifest, 2, "img", True)
    assert info.value.source == manifest.path
    assert info.value.key == f"candidates.candidate.{key}"
    assert info.value.reason.startswith(reason)


@pytest.mark.parametrize(
    "image",
    [
        "registry.example/vllm:latest",
        "registry.example/vllm",
        "registry.example/vllm@sha256:abc",
        "registry.example/vllm@sha512:" + "0" * 64,
        "",
    ],
)
def test_sidecar_refuses_an_image_not_pinned_by_digest(image: str) -> None:
    with pytest.raises(EvalgateConfigError) as info:
        _render(sidecar=True, serving_image=image)
    assert info.value.key == "candidates.candidate.pins.serving_image"
    assert "pinned by digest" in info.value.reason


@pytest.mark.parametrize("value", [0, "4", True, -1])
def test_sidecar_refuses_a_bad_tensor_parallel(value: Any) -> None:
    with pytest.raises(EvalgateConfigError, match="tensor_parallel"):
        _render(sidecar=True, tensor_parallel=value)


def test_render_refuses_missing_candidate_and_zero_shards() -> None:
    manifest = EXAMPLE.ExampleManifest()
    options = EvalgateRenderOptions(sidecar_candidate="nobody")
    with pytest.raises(EvalgateConfigError, match="no candidate 'nobody'"):
        evalgate_render(manifest, 2, "img", True, options=options)
    with pytest.raises(EvalgateConfigError, match="at least 1 shard"):
        evalgate_render(manifest, 0, "img")


def test_render_without_queue_drops_kueue() -> None:
    workers = evalgate_render(EXAMPLE.ExampleManifest(), 2, "img", queue=None, namespace="ns")[0]
    assert "kueue.x-k8s.io/queue-name" not in workers["metadata"]["labels"]
    assert "suspend" not in workers["spec"]
    assert workers["metadata"]["namespace"] == "ns"


def test_api_keys_come_from_a_secret_never_a_value() -> None:
    env = _render()[0]["spec"]["template"]["spec"]["containers"][0]["env"]
    keys = {e["name"]: e for e in env if e["name"].endswith("_API_KEY")}
    assert set(keys) == {"CANDIDATE_API_KEY", "BASELINE_API_KEY"}
    for entry in keys.values():
        assert "value" not in entry
        assert entry["valueFrom"]["secretKeyRef"]["name"] == "evalgate-api-keys"


# --- the CLI on a real suite -------------------------------------------------------------------


def _suite(tmp_path: Path, serving_image: str = EXAMPLE.EXAMPLE_SERVING_IMAGE, **pins: Any) -> Path:
    suite = tmp_path / "support"
    suite.mkdir()
    rows = [
        {"id": f"c{i:03d}", "input": f"q{i}", "target": "a", "category": "x", "cost": 1 + i % 7**2}
        for i in range(60)
    ]
    data = "".join(json.dumps(row) + "\n" for row in rows)
    (suite / "cases.jsonl").write_text(data, encoding="utf-8")
    manifest = {
        "evalgate": 1,
        "suite": "support-eval",
        "dataset": {
            "path": "cases.jsonl",
            "revision": "v1",
            "sha256": hashlib.sha256(data.encode()).hexdigest(),
        },
        "prompt": {"revision": "p1"},
        "evaluator": {"revision": "e1", "scorer": "exact"},
        "shards": 3,
        "candidates": {
            "candidate": {
                "model": "m2",
                "base_url": "http://127.0.0.1:9/v1",
                "pins": {
                    "serving_image": serving_image,
                    "weights_image": EXAMPLE.EXAMPLE_WEIGHTS_IMAGE,
                    "weights_digest": EXAMPLE.EXAMPLE_WEIGHTS_DIGEST,
                    "tensor_parallel": 2,
                    **pins,
                },
            },
            "baseline": {"model": "m1", "base_url": "http://127.0.0.1:9/v1"},
        },
    }
    (suite / "evalgate.yaml").write_text(yaml.safe_dump(manifest), encoding="utf-8")
    return suite


def test_cli_render_prints_valid_yaml(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    crd_schemas: dict[tuple[str, str], JSON],
) -> None:
    suite = _suite(tmp_path)
    argv = ["k8s", "render", str(suite), "--image", "img:1", "--serving-sidecar"]
    assert cli_main([*argv, "--namespace", "evals"]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [o["metadata"]["name"] for o in objects] == [
        "evalgate-support-eval",
        "evalgate-support-eval-aggregate",
    ]
    assert objects[0]["spec"]["completions"] == 3  # the manifest's shards
    assert objects[0]["metadata"]["namespace"] == "evals"
    for obj in objects:
        _validate(obj, crd_schemas)


def test_cli_render_refuses_an_unpinned_sidecar(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = _suite(tmp_path, serving_image="reg/vllm:latest")
    argv = ["k8s", "render", str(suite), "--image", "i", "--serving-sidecar", "--shards", "2"]
    assert cli_main(argv) == 4
    assert "pinned by digest" in capsys.readouterr().err


def test_the_manifest_refuses_a_weights_image_whose_digest_is_not_the_pin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = "sha256:" + "2" * 64
    suite = _suite(tmp_path, weights_digest=other)
    before = {p.name: p.read_bytes() for p in suite.iterdir()}
    argv = ["k8s", "render", str(suite), "--image", "i", "--serving-sidecar", "--shards", "2"]
    assert cli_main(argv) == 4
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing rendered
    assert (
        f"{suite / 'evalgate.yaml'}: candidates.candidate.pins.weights_digest: must equal the "
        f"digest of pins.weights_image ({EXAMPLE.EXAMPLE_WEIGHTS_DIGEST}), got '{other}'"
    ) in captured.err
    assert {p.name: p.read_bytes() for p in suite.iterdir()} == before


def test_a_pytest_run_refuses_an_unpinned_weights_image_with_exit_4(
    pytester: pytest.Pytester,
) -> None:
    suite = _suite(pytester.path, weights_image="registry.example/models/r2:latest")
    result = pytester.runpytest("--evalgate", str(suite), "-p", "no:cacheprovider")
    assert result.ret == 4
    result.stderr.fnmatch_lines(
        ["*evalgate.yaml: candidates.candidate.pins.weights_image: must be pinned by digest*"]
    )
    assert not (pytester.path / ".evalgate").exists()  # nothing requested, nothing stored


def test_cli_render_checks_the_manifests_shard_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = _suite(tmp_path)
    assert cli_main(["shard-plan", str(suite), "--shards", "3"]) == 0
    text = (suite / "evalgate.yaml").read_text(encoding="utf-8")
    (suite / "evalgate.yaml").write_text(text + "shard_plan: shard-plan-3.json\n", encoding="utf-8")
    capsys.readouterr()
    assert cli_main(["k8s", "render", str(suite), "--image", "i"]) == 0
    assert "completions: 3" in capsys.readouterr().out
    assert cli_main(["k8s", "render", str(suite), "--image", "i", "--shards", "4"]) == 4
    assert "plan is for 3, need 4" in capsys.readouterr().err


def test_cli_shard_plan_writes_plan_and_prints_balances(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_evalgate.shard.plan import evalgate_load_plan

    suite = _suite(tmp_path)
    assert cli_main(["shard-plan", str(suite), "--shards", "4"]) == 0
    out = capsys.readouterr().out
    plan_line = next(line for line in out.splitlines() if line.strip().startswith("plan"))
    hash_line = next(line for line in out.splitlines() if line.strip().startswith("hashing"))
    assert float(plan_line.split()[-1]) <= float(hash_line.split()[-1])
    ids = [f"c{i:03d}" for i in range(60)]
    assert len(evalgate_load_plan(str(suite / "shard-plan-4.json"), ids, 4)) == 60
    assert cli_main(["shard-plan", str(suite), "--shards", "0"]) == 4


# --- running against loopback API servers ------------------------------------------------------


def _kubeconfig(tmp_path: Path, port: int) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "test-token"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return str(path)


class _FakeApiHandler(http.server.BaseHTTPRequestHandler):
    """A tiny Kubernetes API: answers ``server.answer(method, path, body)`` -> (status, JSON)."""

    def _reply(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.server.seen.append((method, self.path, self.headers.get("Authorization")))  # type: ignore[attr-defined]
        status, payload = self.server.answer(method, self.path, body)  # type: ignore[attr-defined]
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._reply("GET")

    def do_POST(self) -> None:
        self._reply("POST")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api_server() -> Iterator[Callable[[Callable[..., tuple[int, Any]]], Any]]:
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(answer: Callable[..., tuple[int, Any]]) -> Any:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeApiHandler)
        server.answer = answer  # type: ignore[attr-defined]
        server.seen = []  # type: ignore[attr-defined]
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _status(code: int, reason: str, message: str) -> tuple[int, JSON]:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure"}
    return code, {**body, "reason": reason, "message": message, "code": code}


def test_run_fails_clearly_on_403(tmp_path: Path, api_server: Any) -> None:
    message = 'jobs.batch is forbidden: User "dev" cannot create resource "jobs"'
    server = api_server(lambda *_: _status(403, "Forbidden", message))
    port = server.server_address[1]
    api = evalgate_api(_kubeconfig(tmp_path, port))
    with pytest.raises(EvalgateK8sError) as info:
        evalgate_run(_render(), api, poll_s=0.01, timeout_s=5, echo=lambda _: None)
    text = str(info.value)
    assert f"http://127.0.0.1:{port}" in text
    assert "forbidden (403)" in text and "cannot create resource" in text
    assert "creating Job evalgate/evalgate-example" in text
    assert server.seen[0][2] == "Bearer test-token"  # the kubeconfig's credentials were used


def test_run_fails_clearly_on_401(tmp_path: Path, api_server: Any) -> None:
    server = api_server(lambda *_: _status(401, "Unauthorized", "Unauthorized"))
    api = evalgate_api(_kubeconfig(tmp_path, server.server_address[1]))
    with pytest.raises(EvalgateK8sError, match=r"unauthorized \(401\)"):
        evalgate_run(_render(), api, poll_s=0.01, timeout_s=5, echo=lambda _: None)


def test_run_fails_clearly_when_the_api_is_unreachable(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago and is now closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    api = evalgate_api(_kubeconfig(tmp_path, port))
    with pytest.raises(EvalgateK8sError) as info:
        evalgate_run(_render(), api, poll_s=0.01, timeout_s=5, echo=lambda _: None)
    assert f"Kubernetes API http://127.0.0.1:{port} unreachable" in str(info.value)


def test_run_refuses_a_missing_kubeconfig(tmp_path: Path) -> None:
    with pytest.raises(EvalgateK8sError, match="cannot load kubeconfig"):
        evalgate_api(str(tmp_path / "absent"))


def test_cli_run_exit_status_on_403(
    tmp_path: Path, api_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    server = api_server(lambda *_: _status(403, "Forbidden", "nope"))
    suite = _suite(tmp_path)
    kubeconfig = _kubeconfig(tmp_path, server.server_address[1])
    argv = ["k8s", "run", str(suite), "--image", "i", "--kubeconfig", kubeconfig]
    assert cli_main(argv) == 1
    assert "forbidden (403)" in capsys.readouterr().err


class _Cluster:
    """Scripted cluster state: each Job completes after ``polls`` status reads; its pods, one per
    index, move Pending -> Running -> Succeeded (index 1 fails once and is retried)."""

    def __init__(self, polls: int = 3) -> None:
        self.polls = polls
        self.reads: dict[str, int] = {}
        self.created: list[JSON] = []

    def __call__(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if method == "POST" and path.endswith("/jobs"):
            self.created.append(body)
            return 201, body
        name = path.split("?")[0].split("/")[-2 if path.split("?")[0].endswith("/status") else -1]
        if "/pods" in path:
            return 200, {"kind": "PodList", "apiVersion": "v1", "items": self._pods(path)}
        self.reads[name] = self.reads.get(name, 0) + 1
        done = self.reads[name] >= self.polls
        job = next(j for j in self.created if j["metadata"]["name"] == name)
        conditions = [{"type": "Complete", "status": "True"}] if done else []
        return 200, {**job, "status": {"conditions": conditions}}

    def _pods(self, path: str) -> list[JSON]:
        job = path.split("job-name%3D")[-1].split("&")[0]
        step = self.reads.get(job, 0)
        spec = next(j for j in self.created if j["metadata"]["name"] == job)["spec"]
        indexed = spec.get("completionMode") == "Indexed"
        phase = ["Pending", "Running", "Succeeded"][min(step - 1, 2)]
        stamp = "2024-01-01T00:00:01Z"
        pods = [self._pod(job, i, phase, stamp, indexed) for i in range(spec["completions"])]
        if indexed:
            pods.append(self._pod(job, 1, "Failed", "2024-01-01T00:00:00Z", True))  # older try
        return pods

    @staticmethod
    def _pod(job: str, index: int, phase: str, created: str, indexed: bool) -> JSON:
        labels = {"batch.kubernetes.io/job-name": job}
        if indexed:  # only Indexed Jobs label their pods with a completion index
            labels["batch.kubernetes.io/job-completion-index"] = str(index)
        meta = {
            "name": f"{job}-{index}-{created[-3:-1]}",
            "labels": labels,
            "creationTimestamp": created,
        }
        return {"metadata": meta, "status": {"phase": phase}}


def test_run_follows_each_index_then_aggregates(tmp_path: Path, api_server: Any) -> None:
    cluster = _Cluster(polls=3)
    server = api_server(cluster)
    api = evalgate_api(_kubeconfig(tmp_path, server.server_address[1]))
    lines: list[str] = []
    result = evalgate_run(_render(shards=3), api, poll_s=0.01, timeout_s=10, echo=lines.append)
    assert result.ok and result.workers == "Complete" and result.aggregate == "Complete"
    assert result.indexes == {0: "Succeeded", 1: "Succeeded", 2: "Succeeded"}
    assert [j["metadata"]["name"] for j in cluster.created] == [
        "evalgate-example",
        "evalgate-example-aggregate",
    ]
    assert "evalgate-example: Pending=3 [0:Pending 1:Pending 2:Pending]" in lines
    assert "evalgate-example: Running=3 [0:Running 1:Running 2:Running]" in lines
    assert "evalgate-example: Succeeded=3" in lines
    assert "evalgate-example-aggregate: Succeeded=1" in lines
    # aggregation is created only after the workers' Job completed
    created_at = lines.index("created Job evalgate/evalgate-example-aggregate")
    assert lines.index("Job evalgate-example: Complete") < created_at


def test_run_reports_a_failed_job(tmp_path: Path, api_server: Any) -> None:
    def answer(method: str, path: str, body: Any) -> tuple[int, Any]:
        if method == "POST":
            return 201, body
        if "/pods" in path:
            return 200, {"kind": "PodList", "apiVersion": "v1", "items": []}
        return 200, {"status": {"conditions": [{"type": "Failed", "status": "True"}]}}

    server = api_server(answer)
    api = evalgate_api(_kubeconfig(tmp_path, server.server_address[1]))
    result = evalgate_run(_render(), api, poll_s=0.01, timeout_s=5, echo=lambda _: None)
    assert not result.ok and result.workers == "Failed"


def test_run_gives_up_at_the_deadline(tmp_path: Path, api_server: Any) -> None:
    def answer(method: str, path: str, body: Any) -> tuple[int, Any]:
        if method == "POST":
            return 201, body
        if "/pods" in path:
            return 200, {"kind": "PodList", "apiVersion": "v1", "items": []}
        return 200, {"status": {"conditions": []}}

    server = api_server(answer)
    api = evalgate_api(_kubeconfig(tmp_path, server.server_address[1]))
    with pytest.raises(EvalgateK8sError, match="deadline passed"):
        evalgate_run(_render(), api, poll_s=0.01, timeout_s=0.05, echo=lambda _: None)


def test_progress_line_and_index_phases() -> None:
    assert evalgate_progress_line("j", {}) == "j: no pods yet"
    line = evalgate_progress_line("j", {0: "Succeeded", 1: "Running", 2: "Succeeded"})
    assert line == "j: Running=1 Succeeded=2 [1:Running]"
    assert evalgate_index_phases([]) == {}


# --- weights provenance in the sidecar pod (SPEC section 20) ---------------------------------


def test_the_weights_are_verified_before_the_server_starts(
    crd_schemas: dict[tuple[str, str], JSON],
) -> None:
    workers, aggregate = _render(sidecar=True, weights_signature="model.sig.json")
    for obj in (workers, aggregate):
        _validate(obj, crd_schemas)
    pod = workers["spec"]["template"]["spec"]
    verify, serving = pod["initContainers"]
    assert (verify["name"], serving["name"]) == ("verify-weights", "serving")
    assert "restartPolicy" not in verify  # a plain init container: it must finish, and succeed
    digest = EXAMPLE.ExampleManifest().candidates["candidate"].pins["weights_digest"]
    assert verify["command"] == [
        "evalgate", "weights", "verify", "/weights", "--signature=/weights/model.sig.json",
        "--trust=/etc/evalgate/trust/trust.yaml", f"--digest={digest}",
        "--record=/var/run/evalgate/weights-verified.json",
    ]  # fmt: skip
    mounts = {m["name"]: m for m in verify["volumeMounts"]}
    assert mounts["weights"]["readOnly"] is True and mounts["evalgate-trust"]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["evalgate-trust"] == {
        "name": "evalgate-trust",
        "configMap": {"name": "evalgate-trust"},
    }
    harness = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in harness["env"]}
    assert env["PYTEST_EVALGATE_WEIGHTS_VERIFIED"] == "/var/run/evalgate/weights-verified.json"
    # the aggregation pod, which decides, verifies the same image by digest first
    agg = aggregate["spec"]["template"]["spec"]
    assert [c["name"] for c in agg["initContainers"]] == ["verify-weights"]
    assert {v["name"] for v in agg["volumes"]} >= {"weights", "evalgate-trust", "evalgate-run"}
    assert "nvidia.com/gpu" not in json.dumps(agg)


def test_without_a_weights_signature_nothing_is_verified() -> None:
    pod = _render(sidecar=True)[0]["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["serving"]
    assert "initContainers" not in _render(sidecar=True)[1]["spec"]["template"]["spec"]


@pytest.mark.parametrize("signature", ["/etc/passwd", "../sig.json"])
def test_a_weights_signature_outside_the_weights_is_refused(signature: str) -> None:
    with pytest.raises(EvalgateConfigError, match=r"pins\.weights_signature: a path inside"):
        _render(sidecar=True, weights_signature=signature)
