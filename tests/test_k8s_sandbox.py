"""The rendered worker pod of a code suite (``k8s_sandbox.py``): its own security context for
the sandbox, ``runtimeClassName`` when the manifest names one, schema-valid (strict, the
Kubernetes versions tests/test_k8s.py checks); other suites' pods are unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from pytest_evalgate.k8s.render import evalgate_render
from pytest_evalgate.k8s.render_types import evalgate_container_security
from pytest_evalgate.k8s.sandbox import EVALGATE_SECCOMP_PROFILE, evalgate_sandbox_pod
from pytest_evalgate.manifest.code import EvalgateSandboxBlock
from pytest_evalgate.manifest.load import EvalgateManifest, evalgate_load_manifest

REPO = Path(__file__).resolve().parent.parent
K8S_VERSIONS = ("1.30.0", "1.33.0")
IMAGE = "registry.example/evalgate@sha256:" + "a" * 64


def _code_manifest(tmp_path: Path, **sandbox: Any) -> EvalgateManifest:
    folder = tmp_path / "code"
    folder.mkdir(parents=True)
    raw = yaml.safe_load((REPO / "suites" / "code" / "evalgate.yaml").read_text())
    raw["sandbox"] = {**raw["sandbox"], **sandbox}
    (folder / "cases.jsonl").write_bytes((REPO / "suites" / "code" / "cases.jsonl").read_bytes())
    (folder / "evalgate.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return evalgate_load_manifest(str(folder / "evalgate.yaml"))


def _pods(manifest: EvalgateManifest) -> tuple[dict[str, Any], dict[str, Any]]:
    workers, aggregate = evalgate_render(manifest, 2, IMAGE)
    return workers["spec"]["template"]["spec"], aggregate["spec"]["template"]["spec"]


def _harness(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["containers"] if c["name"] == "evalgate")


def test_a_code_worker_runs_the_sandbox_in_user_namespaces(tmp_path: Path) -> None:
    worker, aggregate = _pods(_code_manifest(tmp_path))
    assert worker["hostUsers"] is False and "runtimeClassName" not in worker
    context = _harness(worker)["securityContext"]
    assert context["runAsNonRoot"] is True and context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["procMount"] == "Unmasked"
    assert context["seccompProfile"] == {
        "type": "Localhost",
        "localhostProfile": "evalgate-sandbox.json",
    }
    assert "appArmorProfile" not in context  # never Unconfined: Pod Security restricted
    assert worker["automountServiceAccountToken"] is False
    assert worker["securityContext"]["runAsNonRoot"] is True
    # The aggregation pod runs no code: the default hardening, nothing for namespaces.
    assert "hostUsers" not in aggregate
    assert _harness(aggregate)["securityContext"] == evalgate_container_security()


def test_a_runtime_class_is_rendered_when_the_manifest_names_one(tmp_path: Path) -> None:
    worker, aggregate = _pods(_code_manifest(tmp_path, runtime_class="gvisor"))
    assert worker["runtimeClassName"] == "gvisor" and "hostUsers" not in worker
    assert "procMount" not in _harness(worker)["securityContext"]
    assert "runtimeClassName" not in aggregate


def test_the_runtime_class_is_transport_not_meaning(tmp_path: Path) -> None:
    plain = _code_manifest(tmp_path / "a")
    named = _code_manifest(tmp_path / "b", runtime_class="kata")
    assert plain.definition_digest == named.definition_digest


@pytest.mark.parametrize("runtime_class", [None, "gvisor"])
def test_the_rendered_code_jobs_validate_strictly(
    tmp_path: Path, runtime_class: str | None
) -> None:
    manifest = _code_manifest(tmp_path, runtime_class=runtime_class)
    for job in evalgate_render(manifest, 3, IMAGE, queue=None):
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(job, version, strict=True)


def test_other_suites_render_the_pod_they_always_did() -> None:
    tiny = evalgate_load_manifest(str(REPO / "suites" / "tiny" / "evalgate.yaml"))
    worker, _ = _pods(tiny)
    assert "hostUsers" not in worker and "runtimeClassName" not in worker
    assert _harness(worker)["securityContext"] == evalgate_container_security()
    pod = {"containers": [{"name": "evalgate", "securityContext": {}}]}
    assert evalgate_sandbox_pod(pod, None) == pod


def test_only_the_harness_container_gets_the_sandbox_context() -> None:
    pod = {
        "containers": [
            {"name": "evalgate", "securityContext": evalgate_container_security()},
            {"name": "other", "securityContext": evalgate_container_security()},
        ]
    }
    out = evalgate_sandbox_pod(pod, EvalgateSandboxBlock())
    assert out["containers"][1]["securityContext"] == evalgate_container_security()
    assert out["containers"][0]["securityContext"]["seccompProfile"]["type"] == "Localhost"


def test_the_shipped_seccomp_profile_allows_the_sandbox_and_refuses_the_dangerous() -> None:
    profile = json.loads((REPO / "k8s" / "sandbox" / EVALGATE_SECCOMP_PROFILE).read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    (rule,) = profile["syscalls"]
    assert rule["action"] == "SCMP_ACT_ERRNO" and rule["errnoRet"] == 1
    denied = set(rule["names"])
    # What bubblewrap builds a sandbox with must stay allowed.
    assert denied.isdisjoint({"clone", "clone3", "unshare", "mount", "umount2", "pivot_root",
                              "prctl", "setresuid", "capset", "execve", "wait4"})  # fmt: skip
    assert {"init_module", "kexec_load", "bpf", "ptrace", "keyctl", "userfaultfd"} <= denied


def test_the_restricted_pod_security_level_admits_the_harness_context(tmp_path: Path) -> None:
    # Pod Security "restricted": seccomp RuntimeDefault or Localhost (never Unconfined), no
    # privilege escalation, every capability dropped, non-root.
    context = _harness(_pods(_code_manifest(tmp_path))[0])["securityContext"]
    assert context["seccompProfile"]["type"] in ("RuntimeDefault", "Localhost")
    assert context["allowPrivilegeEscalation"] is False and context["runAsNonRoot"] is True
    assert context["capabilities"]["drop"] == ["ALL"] and "add" not in context["capabilities"]
