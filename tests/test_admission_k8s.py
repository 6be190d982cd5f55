"""k8s/overlays/admission: the webhook's objects (kubernetes-validate, strict, 1.30 and 1.33)
and the Kyverno ClusterPolicy (against Kyverno's CRD in ../shared/crds, unknown fields
rejected), and that both say what the code does."""

from __future__ import annotations

import copy
import fnmatch
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from admissionkit import digest_of, make_keys, model_image
from crdkit import CRDS, crd_schema
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from pytest_evalgate.admission.checker import (
    EVALGATE_ADMISSION_DEFAULT_NAMESPACES,
    EVALGATE_ADMISSION_NAMESPACES_ENV,
    EVALGATE_CHECKED_OPERATIONS,
)
from pytest_evalgate.admission.pod import EVALGATE_WEIGHTS_ANNOTATION, evalgate_image_is_weights
from pytest_evalgate.attest.dsse import EVALGATE_PREDICATE_TYPE
from pytest_evalgate.attest.keys import EVALGATE_KEY_PASSWORD_ENV

OVERLAY = Path(__file__).resolve().parents[1] / "k8s" / "overlays" / "admission"
K8S_VERSIONS = ("1.30.0", "1.33.0")
JSON = dict[str, Any]


def _build(folder: Path) -> list[JSON]:
    """The objects of a kustomization that lists resources only (all this overlay uses)."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    assert set(kustomization) == {"apiVersion", "kind", "resources"}
    objects: list[JSON] = []
    for entry in kustomization["resources"]:
        docs = yaml.safe_load_all((folder / entry).read_text(encoding="utf-8"))
        objects += [doc for doc in docs if doc]
    return objects


def _by_kind(objects: list[JSON]) -> dict[str, JSON]:
    kinds = [obj["kind"] for obj in objects]
    assert len(kinds) == len(set(kinds)), "one object per kind in this overlay"
    return {obj["kind"]: obj for obj in objects}


@pytest.fixture(scope="module")
def webhook() -> dict[str, JSON]:
    return _by_kind(_build(OVERLAY))


@pytest.fixture(scope="module")
def policy() -> JSON:
    (obj,) = _build(OVERLAY / "kyverno")
    return obj


@pytest.fixture(scope="module")
def kyverno_schema() -> JSON:
    if not CRDS.is_dir():
        pytest.skip(f"{CRDS} is absent (a plain clone has no shared/crds): Kyverno unchecked")
    return crd_schema("kyverno.io_clusterpolicies.yaml", "v1")


# --- the webhook's objects --------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_webhook_object_validates_strictly(webhook: dict[str, JSON], version: str) -> None:
    assert set(webhook) == {
        "Namespace", "ServiceAccount", "NetworkPolicy", "PersistentVolumeClaim", "Deployment",
        "Service", "PodDisruptionBudget", "ValidatingWebhookConfiguration",
    }  # fmt: skip
    for obj in webhook.values():
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_strict_validation_rejects_unknown_fields(webhook: dict[str, JSON], version: str) -> None:
    config = copy.deepcopy(webhook["ValidatingWebhookConfiguration"])
    config["webhooks"][0]["failurPolicy"] = "Fail"  # typo
    with pytest.raises(kubernetes_validate.ValidationError, match="failurPolicy"):
        kubernetes_validate.validate(config, version, strict=True)
    deployment = copy.deepcopy(webhook["Deployment"])
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContex"] = {}
    with pytest.raises(kubernetes_validate.ValidationError, match="securityContex"):
        kubernetes_validate.validate(deployment, version, strict=True)


def test_the_webhook_configuration_fails_closed(webhook: dict[str, JSON]) -> None:
    (hook,) = webhook["ValidatingWebhookConfiguration"]["webhooks"]
    assert hook["failurePolicy"] == "Fail"
    assert hook["sideEffects"] == "None" and hook["admissionReviewVersions"] == ["v1"]
    assert 1 <= hook["timeoutSeconds"] <= 10
    (rule,) = hook["rules"]
    assert rule["resources"] == ["pods"] and rule["apiGroups"] == [""]
    assert set(rule["operations"]) == set(EVALGATE_CHECKED_OPERATIONS)
    excluded = hook["namespaceSelector"]["matchExpressions"][0]
    assert excluded["operator"] == "NotIn"
    assert {"kube-system", webhook["Namespace"]["metadata"]["name"]} <= set(excluded["values"])
    (pattern,) = EVALGATE_ADMISSION_DEFAULT_NAMESPACES
    (condition,) = hook["matchConditions"]
    assert condition["expression"] == f"request.namespace.startsWith('{pattern.rstrip('*')}')"
    service = hook["clientConfig"]["service"]
    assert service["path"] == "/validate"
    assert service["name"] == webhook["Service"]["metadata"]["name"]
    assert service["namespace"] == webhook["Service"]["metadata"]["namespace"]


def test_the_service_reaches_the_container_port(webhook: dict[str, JSON]) -> None:
    (port,) = webhook["Service"]["spec"]["ports"]
    container = webhook["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    (named,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    assert port["port"] == 443
    ingress_ports = webhook["NetworkPolicy"]["spec"]["ingress"][0]["ports"]
    assert ingress_ports == [{"protocol": "TCP", "port": named["containerPort"]}]
    command = container["command"]
    assert command[command.index("--port") + 1] == str(named["containerPort"])
    assert (
        webhook["Service"]["spec"]["selector"]
        == webhook["Deployment"]["spec"]["selector"]["matchLabels"]
    )


def test_the_webhook_pod_is_hardened(webhook: dict[str, JSON]) -> None:
    deployment = webhook["Deployment"]["spec"]
    pod = deployment["template"]["spec"]
    assert deployment["replicas"] >= 2
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert all(m["readOnly"] for m in container["volumeMounts"] if m["name"] != "tmp")
    registry = next(v for v in pod["volumes"] if v["name"] == "registry")
    assert registry["persistentVolumeClaim"]["readOnly"] is True
    for probe in (container["readinessProbe"], container["livenessProbe"]):
        assert probe["httpGet"]["scheme"] == "HTTPS" and probe["httpGet"]["path"] == "/healthz"
    assert webhook["NetworkPolicy"]["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert "egress" not in webhook["NetworkPolicy"]["spec"]  # no egress at all
    assert webhook["PodDisruptionBudget"]["spec"]["minAvailable"] == 1


def test_the_container_runs_the_spec_command(webhook: dict[str, JSON]) -> None:
    container = webhook["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    assert command[:3] == ["evalgate", "admission", "serve"]
    options = command[3::2]
    assert options == ["--key", "--registry", "--registry-key", "--tls-cert", "--tls-key", "--port"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    for value in command[4::2][:-1]:
        assert any(value == m or value.startswith(m + "/") for m in mounts), value
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env[EVALGATE_ADMISSION_NAMESPACES_ENV] == ",".join(EVALGATE_ADMISSION_DEFAULT_NAMESPACES)


# --- the Kyverno ClusterPolicy -----------------------------------------------------------------


def test_the_cluster_policy_validates_against_kyvernos_crd(
    policy: JSON, kyverno_schema: JSON
) -> None:
    jsonschema.validate(policy, kyverno_schema)


@pytest.mark.parametrize(
    ("path", "typo"),
    [
        (("spec",), "validationFailureActon"),
        (("spec", "rules", 0, "verifyImages", 0), "imageReference"),
        (("spec", "rules", 1, "verifyImages", 0, "attestations", 0), "predicate"),
        (
            ("spec", "rules", 2, "verifyImages", 0, "attestors", 0, "entries", 0, "keys"),
            "publicKey",
        ),
        (("spec", "rules", 2, "imageExtractors", "Pod", 0), "jmespath"),
    ],
)
def test_unknown_fields_in_the_policy_are_rejected(
    policy: JSON, kyverno_schema: JSON, path: tuple[Any, ...], typo: str
) -> None:
    changed = copy.deepcopy(policy)
    holder: Any = changed
    for part in path:
        holder = holder[part]
    holder[typo] = "x"
    with pytest.raises(jsonschema.ValidationError, match=typo):
        jsonschema.validate(changed, kyverno_schema)


def test_the_policy_with_real_gate_and_release_keys_validates(
    policy: JSON, kyverno_schema: JSON, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(EVALGATE_KEY_PASSWORD_ENV, raising=False)
    keys = make_keys(tmp_path)
    gate_pub = Path(keys.gate_pub).read_text().strip()
    release_pub = Path(keys.other_pub).read_text().strip()  # a release key: any other pair
    rendered = copy.deepcopy(policy)
    for entry in _key_entries(rendered):
        entry["keys"]["publicKeys"] = gate_pub
    for entry in _release_entries(rendered):
        entry["keys"]["publicKeys"] = release_pub
    jsonschema.validate(rendered, kyverno_schema)
    assert {entry["keys"]["publicKeys"] for entry in _key_entries(rendered)} == {gate_pub}
    assert {entry["keys"]["publicKeys"] for entry in _release_entries(rendered)} == {release_pub}


def _key_entries(policy: JSON) -> list[JSON]:
    return [
        entry
        for rule in policy["spec"]["rules"]
        for verify in rule["verifyImages"]
        for attestation in verify["attestations"]
        for attestor in attestation["attestors"]
        for entry in attestor["entries"]
    ]


def _release_entries(policy: JSON) -> list[JSON]:
    return [
        entry
        for rule in policy["spec"]["rules"]
        for verify in rule["verifyImages"]
        for attestor in verify["attestors"]
        for entry in attestor["entries"]
    ]


def test_every_rule_requires_a_passing_decision_signed_by_one_p256_key(policy: JSON) -> None:
    assert policy["spec"]["failurePolicy"] == "Fail"
    keys = {entry["keys"]["publicKeys"] for entry in _key_entries(policy)}
    (pem,) = keys
    assert isinstance(load_pem_public_key(pem.encode()).curve, ec.SECP256R1)  # type: ignore[union-attr]
    for rule in policy["spec"]["rules"]:
        (resources,) = [m["resources"] for m in rule["match"]["any"]]
        assert resources["kinds"] == ["Pod"]
        assert resources["namespaces"] == list(EVALGATE_ADMISSION_DEFAULT_NAMESPACES)
        (verify,) = rule["verifyImages"]
        assert verify["verifyDigest"] is True and verify["required"] is True
        assert verify["failureAction"] == "Enforce"
        (attestation,) = verify["attestations"]
        assert attestation["type"] == EVALGATE_PREDICATE_TYPE
        (conditions,) = attestation["conditions"]
        assert conditions["all"][0]["key"] == "{{ verdict }}"  # the rest: test_kyverno_conditions
        (release,) = verify["attestors"]  # the weights' release signature, another key
        (release_entry,) = release["entries"]
        release_pem = release_entry["keys"]["publicKeys"]
        assert release_pem != pem
        assert isinstance(load_pem_public_key(release_pem.encode()).curve, ec.SECP256R1)  # type: ignore[union-attr]


def test_the_policy_covers_images_volumes_and_the_annotation(policy: JSON) -> None:
    rules = {rule["name"]: rule for rule in policy["spec"]["rules"]}
    assert set(rules) == {"model-images", "model-image-volumes", "weights-annotation"}
    assert "imageExtractors" not in rules["model-images"]  # Kyverno's container extractors
    (volumes,) = rules["model-image-volumes"]["imageExtractors"]["Pod"]
    assert volumes["path"] == "/spec/volumes/*/image/reference"
    (annotation,) = rules["weights-annotation"]["imageExtractors"]["Pod"]
    assert (annotation["path"], annotation["value"]) == (
        "/metadata/annotations", EVALGATE_WEIGHTS_ANNOTATION
    )  # fmt: skip
    prefix = "registry.example/models/weights@"
    assert annotation["jmesPath"] == f"join('', ['{prefix}', @])"
    (pattern,) = rules["weights-annotation"]["verifyImages"][0]["imageReferences"]
    assert fnmatch.fnmatchcase(prefix + digest_of("x"), pattern)


@pytest.mark.parametrize(
    "reference",
    [
        model_image(digest_of("a")),
        "registry.example:5000/team/models/llm/support@" + digest_of("b"),
        "registry.example/vllm/vllm-openai@" + digest_of("c"),
        "registry.example/models-cache/x@" + digest_of("d"),
    ],
)
def test_kyverno_and_the_webhook_agree_on_what_is_weights(policy: JSON, reference: str) -> None:
    (pattern,) = policy["spec"]["rules"][0]["verifyImages"][0]["imageReferences"]
    # Kyverno's wildcard '*' also matches '/', as fnmatch does.
    assert fnmatch.fnmatchcase(reference, pattern) == evalgate_image_is_weights(reference)
