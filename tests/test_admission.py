"""The admission webhook: a real HTTPS server on loopback (a certificate made here), real
AdmissionReview JSON, real signed decisions and registry entries."""

from __future__ import annotations

import contextlib
import json
import shutil
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from admissionkit import (
    Client,
    Keys,
    Tls,
    decision,
    digest_of,
    flip_payload_byte,
    make_keys,
    make_tls,
    model_image,
    override_of,
    pod,
    review,
    sign_raw,
    signed_decision,
    signed_unattestable,
)

from pytest_evalgate.admission import (
    EvalgateAdmission,
    EvalgateAdmissionConfig,
    EvalgateAdmissionServer,
    evalgate_admission_namespaces,
    evalgate_parse_review,
    evalgate_pod_weights,
    evalgate_review_response,
)
from pytest_evalgate.admission.pod import evalgate_image_is_weights, evalgate_split_image
from pytest_evalgate.attest.dsse import evalgate_payload_sha256, evalgate_statement
from pytest_evalgate.attest.keys import EVALGATE_KEY_PASSWORD_ENV
from pytest_evalgate.errors import EvalgateAdmissionError, EvalgateConfigError
from pytest_evalgate.registry import (
    EvalgateRegistryDraft,
    evalgate_digest_folder,
    evalgate_registry_append,
    evalgate_registry_promote,
    evalgate_registry_revoke,
)

D = digest_of("weights-r17")
E = digest_of("weights-r18")
UNKNOWN = digest_of("never-gated")
JSON = dict[str, Any]


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(EVALGATE_KEY_PASSWORD_ENV, raising=False)
        return make_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return make_tls(tmp_path_factory.mktemp("tls"))


@dataclass
class Clock:
    """The webhook's clock: real time plus ``offset``, which tests move forward."""

    offset: timedelta = field(default_factory=timedelta)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


@dataclass
class Webhook:
    """A running webhook with its registry, and helpers that act on both."""

    root: Path
    keys: Keys
    admission: EvalgateAdmission
    server: EvalgateAdmissionServer
    client: Client
    clock: Clock

    def promote(self, to: str, *envelopes: JSON, digest: str = D) -> None:
        evalgate_registry_promote(
            str(self.root), digest, to, list(envelopes), self.keys.registry, who="ci"
        )

    def gate(self, digest: str = D, verdict: str = "pass", *extra: JSON) -> JSON:
        """Record a decision at candidate and promote to gated (with ``extra`` if any)."""
        envelope = signed_decision(digest, self.keys.gate, verdict)
        self.promote("candidate", envelope, digest=digest)
        if verdict == "pass" or extra:
            self.promote("gated", *extra, digest=digest)
        return envelope

    def forge_gated(self, envelopes: tuple[JSON, ...], digest: str = D) -> None:
        """A registry writer that skipped promote's checks (admission must not trust it)."""
        draft = EvalgateRegistryDraft(
            "candidate", "mallory", "skipping checks", "2030-01-01T00:00:00Z"
        )
        evalgate_registry_append(str(self.root), digest, draft, self.keys.registry)
        draft = EvalgateRegistryDraft(
            "gated", "mallory", "skipping checks", "2030-01-01T00:00:00Z", envelopes,
            evalgate_payload_sha256(envelopes[0]),
        )  # fmt: skip
        evalgate_registry_append(str(self.root), digest, draft, self.keys.registry)

    def ask(self, obj: JSON | None, **kw: Any) -> JSON:
        answer = self.client.review(review(obj, **kw))
        response: JSON = answer["response"]
        return response


@contextlib.contextmanager
def _start(root: Path, keys: Keys, tls: Tls, **config: Any) -> Iterator[Webhook]:
    clock = Clock()
    admission = EvalgateAdmission(
        EvalgateAdmissionConfig(keys.gate_pub, str(root), keys.registry_pub, **config),
        clock=clock,
    )
    with EvalgateAdmissionServer(admission, tls.cert, tls.key, port=0, reload_s=0.05) as server:
        client = Client(server.port, tls)
        yield Webhook(root, keys, admission, server, client, clock)
        client.close()


def _registry(tmp_path: Path, keys: Keys, gate_pub: str | None = None) -> Path:
    root = tmp_path / "registry"
    root.mkdir()
    shutil.copy(gate_pub or keys.gate_pub, root / "gate.pub")
    return root


@pytest.fixture()
def hook(tmp_path: Path, keys: Keys, tls: Tls) -> Iterator[Webhook]:
    with _start(_registry(tmp_path, keys), keys, tls) as webhook:
        yield webhook


def _volume_pod(digest: str = D) -> JSON:
    return pod(volumes={"weights": model_image(digest)})


def _denied(response: JSON, *parts: str) -> str:
    """The denial message, after checking it names every part (digest, reason)."""
    assert response["allowed"] is False, response
    status = response["status"]
    assert status["code"] == 403 and status["reason"] == "Forbidden"
    message: str = status["message"]
    for part in parts:
        assert part in message, (part, message)
    return message


# --- allowed ---------------------------------------------------------------------------------


def test_a_passing_signed_decision_is_admitted_through_an_image_volume(hook: Webhook) -> None:
    hook.gate()
    sent = review(_volume_pod())
    answer = hook.client.review(sent)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert answer["response"] == {"uid": sent["request"]["uid"], "allowed": True}


def test_a_passing_signed_decision_is_admitted_through_the_annotation(hook: Webhook) -> None:
    hook.gate()
    hook.gate(E)
    assert hook.ask(pod(annotation=D))["allowed"] is True
    assert hook.ask(pod(annotation=f"{D}, {E}"))["allowed"] is True


def test_a_model_image_container_is_checked_too(hook: Webhook) -> None:
    assert hook.ask(pod(images={"weights": model_image(D)}))["allowed"] is False
    hook.gate()
    assert hook.ask(pod(images={"weights": model_image(D)}))["allowed"] is True


def test_a_failing_decision_with_a_valid_override_is_admitted_with_a_warning(
    hook: Webhook,
) -> None:
    failing = signed_decision(D, hook.keys.gate, "fail")
    hook.promote("candidate", failing)
    hook.promote("gated", override_of(failing, hook.keys.gate, hours=1))
    response = hook.ask(_volume_pod())
    assert response["allowed"] is True
    (warning,) = response["warnings"]
    assert D in warning and "admitted by override" in warning and "alice@example.com" in warning


def test_canary_ga_and_deprecated_are_admitted(hook: Webhook) -> None:
    hook.gate()
    for state in ("canary", "ga"):
        hook.promote(state)
        response = hook.ask(_volume_pod())
        assert response["allowed"] is True and "warnings" not in response
    hook.promote("deprecated")
    response = hook.ask(_volume_pod())
    assert response["allowed"] is True
    (warning,) = response["warnings"]
    assert D in warning and "deprecated" in warning


def test_pods_without_weights_and_outside_the_gated_namespaces_are_admitted(
    hook: Webhook,
) -> None:
    assert hook.ask(pod())["allowed"] is True  # a serving namespace Pod with no weights
    assert hook.ask(_volume_pod(UNKNOWN), namespace="default")["allowed"] is True
    assert hook.ask(_volume_pod(UNKNOWN), namespace="serve")["allowed"] is True
    assert hook.ask(_volume_pod(UNKNOWN), operation="DELETE")["allowed"] is True
    assert hook.ask({"kind": "ConfigMap"}, kind="ConfigMap")["allowed"] is True
    assert hook.ask(_volume_pod(UNKNOWN), operation="UPDATE")["allowed"] is True  # finalizers
    assert hook.ask(_volume_pod(UNKNOWN), operation="CREATE")["allowed"] is False


def test_namespace_patterns_are_configurable(tmp_path: Path, keys: Keys, tls: Tls) -> None:
    patterns = evalgate_admission_namespaces(" prod-*, llm ")
    assert patterns == ("prod-*", "llm")
    assert evalgate_admission_namespaces("") == ("serve-*",) == evalgate_admission_namespaces(None)
    with _start(_registry(tmp_path, keys), keys, tls, namespaces=patterns) as hook:
        assert hook.ask(_volume_pod(UNKNOWN), namespace="serve-support")["allowed"] is True
        assert hook.ask(_volume_pod(UNKNOWN), namespace="prod-eu")["allowed"] is False
        assert hook.ask(_volume_pod(UNKNOWN), namespace="llm")["allowed"] is False


# --- denied ----------------------------------------------------------------------------------


def test_an_unsigned_digest_is_denied(hook: Webhook) -> None:
    _denied(hook.ask(_volume_pod(UNKNOWN)), UNKNOWN, "no signed decision", 'image volume "weights"')
    _denied(hook.ask(pod(annotation=UNKNOWN)), UNKNOWN, "annotation evalgate.dev/weights-digest")


def test_a_candidate_with_a_failing_decision_is_denied(hook: Webhook) -> None:
    hook.gate(verdict="fail")  # recorded at candidate, not promoted
    _denied(hook.ask(_volume_pod()), D, "registry state is candidate")


def test_a_failing_verdict_without_override_is_denied(hook: Webhook) -> None:
    hook.forge_gated((signed_decision(D, hook.keys.gate, "fail"),))
    _denied(hook.ask(_volume_pod()), D, "verdict 'fail' and no override")


@pytest.mark.parametrize("verdict", ["partial", "incomplete"])
def test_a_partial_or_incomplete_decision_is_denied(hook: Webhook, verdict: str) -> None:
    hook.forge_gated((signed_unattestable(D, hook.keys.gate, verdict),))
    _denied(hook.ask(_volume_pod()), D, "does not verify", f"verdict '{verdict}' is never signed")


def test_a_decision_signed_by_another_key_is_denied(tmp_path: Path, keys: Keys, tls: Tls) -> None:
    # The registry trusts the wrong gate key; the webhook checks under its own.
    with _start(_registry(tmp_path, keys, keys.other_pub), keys, tls) as hook:
        hook.promote("candidate", signed_decision(D, keys.other))
        hook.promote("gated")
        _denied(hook.ask(_volume_pod()), D, "does not verify", "unknown key id")


def test_a_decision_tampered_by_one_byte_is_denied(hook: Webhook) -> None:
    hook.forge_gated((flip_payload_byte(signed_decision(D, hook.keys.gate)),))
    _denied(hook.ask(_volume_pod()), D, "does not verify", "signature mismatch")


def test_a_registry_entry_tampered_by_one_byte_is_denied(hook: Webhook) -> None:
    hook.gate()
    assert hook.ask(_volume_pod())["allowed"] is True
    path = Path(evalgate_digest_folder(str(hook.root), D)) / "000002.json"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    _denied(hook.ask(_volume_pod()), D, "the registry does not verify", "entry 2")


def test_a_decision_for_other_weights_is_denied(hook: Webhook) -> None:
    hook.forge_gated((signed_decision(E, hook.keys.gate),))
    _denied(hook.ask(_volume_pod()), D, f"is for weights ['{E}']")


def test_an_expired_override_is_denied(hook: Webhook) -> None:
    failing = signed_decision(D, hook.keys.gate, "fail")
    hook.promote("candidate", failing)
    hook.promote("gated", override_of(failing, hook.keys.gate, hours=1))
    assert hook.ask(_volume_pod())["allowed"] is True
    hook.clock.offset += timedelta(hours=2)
    _denied(hook.ask(_volume_pod()), D, "override of decision", "expired at")


def test_an_override_naming_another_decision_is_denied(hook: Webhook) -> None:
    failing = signed_decision(D, hook.keys.gate, "fail")
    other_failing = evalgate_statement(decision(D, "fail") | {"suite": "another-suite"})
    other = sign_raw(other_failing, hook.keys.gate)
    hook.forge_gated((failing, override_of(other, hook.keys.gate)))
    _denied(hook.ask(_volume_pod()), D, "names another decision")


def test_a_revoked_digest_is_denied(hook: Webhook) -> None:
    hook.gate()
    evalgate_registry_revoke(str(hook.root), D, "leaked eval set", hook.keys.registry, who="sre")
    _denied(hook.ask(_volume_pod()), D, "revoked at", "by sre: leaked eval set")


@pytest.mark.parametrize(
    "reference",
    ["registry.example/models/support:r17", "registry.example:5000/models/support", "models/x:1"],
)
def test_weights_by_tag_are_denied(hook: Webhook, reference: str) -> None:
    message = _denied(hook.ask(pod(volumes={"weights": reference})), reference, "by tag")
    assert "@sha256:<digest>" in message


@pytest.mark.parametrize(
    ("annotation", "reason"),
    [("support:r17", "is not a weights digest"), ("", "empty"), ("sha256:" + "A" * 64, "not a")],
)
def test_a_bad_annotation_is_denied(hook: Webhook, annotation: str, reason: str) -> None:
    _denied(hook.ask(pod(annotation=annotation)), "evalgate.dev/weights-digest", reason)


def test_every_bad_reference_is_named_and_good_ones_are_not(hook: Webhook) -> None:
    hook.gate()
    obj = pod(
        volumes={"good": model_image(D), "bad": model_image(UNKNOWN)},
        annotation=f"{D},{E}",
        images={"server": "registry.example/models/support:latest"},
    )
    message = _denied(hook.ask(obj), UNKNOWN, E, "registry.example/models/support:latest")
    assert f"weights {D}" not in message
    assert message.count(";") == 2  # three denials, one for each bad reference


def test_a_review_without_an_object_is_denied(hook: Webhook) -> None:
    _denied(hook.ask(None), "no Pod object")


# --- without a restart -----------------------------------------------------------------------


def test_a_revocation_reaches_the_running_webhook_without_a_restart(hook: Webhook) -> None:
    hook.gate()
    assert hook.ask(_volume_pod())["allowed"] is True
    evalgate_registry_revoke(str(hook.root), D, "jailbreak", hook.keys.registry, who="sre")
    _denied(hook.ask(_volume_pod()), D, "revoked at", "jailbreak")


def test_a_promotion_reaches_the_running_webhook_without_a_restart(hook: Webhook) -> None:
    _denied(hook.ask(_volume_pod()), D, "no signed decision")
    hook.gate()
    assert hook.ask(_volume_pod())["allowed"] is True


def test_removing_a_revocation_does_not_readmit(hook: Webhook) -> None:
    hook.gate()
    assert hook.ask(_volume_pod())["allowed"] is True
    evalgate_registry_revoke(str(hook.root), D, "jailbreak", hook.keys.registry, who="sre")
    _denied(hook.ask(_volume_pod()), D, "revoked")
    (Path(evalgate_digest_folder(str(hook.root), D)) / "000003.json").unlink()
    _denied(hook.ask(_volume_pod()), D, "rolled back: entry 3")
    shutil.rmtree(evalgate_digest_folder(str(hook.root), D))
    _denied(hook.ask(_volume_pod()), D, "rolled back: entry 3")


def test_verifications_are_cached_by_envelope_digest(hook: Webhook) -> None:
    hook.gate()
    assert hook.ask(_volume_pod())["allowed"] is True
    misses, hits = hook.admission.misses, hook.admission.hits
    assert misses == 1
    for _ in range(20):
        assert hook.ask(_volume_pod())["allowed"] is True
    assert (hook.admission.misses, hook.admission.hits) == (misses, hits)  # nothing re-verified
    hook.promote("canary")  # a new head carrying the same envelope: served from the cache
    assert hook.ask(_volume_pod())["allowed"] is True
    assert (hook.admission.misses, hook.admission.hits) == (misses, hits + 1)


def test_a_failure_inside_the_checks_denies(hook: Webhook) -> None:
    hook.gate()
    assert hook.ask(_volume_pod())["allowed"] is True
    hook.root.rename(hook.root.with_name("moved"))
    hook.root.write_text("not a folder")
    _denied(hook.ask(_volume_pod()), "admission check failed")


# --- HTTP ------------------------------------------------------------------------------------


def test_healthz_reports_the_registry(hook: Webhook) -> None:
    assert hook.client.request("GET", "/healthz") == (200, b"ok")
    hook.root.rename(hook.root.with_name("gone"))
    status, body = hook.client.request("GET", "/healthz")
    assert status == 503 and b"cannot read the registry" in body


def _without(sent: JSON, key: str) -> JSON:
    del sent["request"][key]
    return sent


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", b"not JSON"),
        (b"[]", b"not a JSON object"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}), b"v1"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}), b"uid"),
        (json.dumps(_without(review(pod()), "kind")), b"request.kind.kind"),
        (json.dumps(_without(review(pod()), "operation")), b"request.operation"),
    ],
)
def test_unreadable_reviews_are_http_400(hook: Webhook, body: Any, reason: bytes) -> None:
    data = body if isinstance(body, bytes) else body.encode()
    status, answer = hook.client.request("POST", "/validate", data)
    assert status == 400 and reason in answer


def test_an_oversized_body_is_refused(hook: Webhook) -> None:
    status, _ = hook.client.request("POST", "/validate", b" " * (9 * 1024 * 1024))
    assert status == 413


def test_only_tls_clients_that_trust_the_certificate_connect(hook: Webhook, tmp_path: Path) -> None:
    stranger = Client(hook.server.port, make_tls(tmp_path / "stranger", "stranger"))
    with pytest.raises(ssl.SSLCertVerificationError):
        stranger.request("GET", "/healthz")
    stranger.close()


def _wait_for(condition: Callable[[], bool], failure: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, failure
        time.sleep(0.01)


def test_a_rotated_certificate_is_served_without_a_restart(tmp_path: Path, keys: Keys) -> None:
    first = make_tls(tmp_path / "first")
    with _start(_registry(tmp_path, keys), keys, first) as hook:
        second = make_tls(tmp_path / "second")
        old = shutil.copy(first.cert, tmp_path / "old.crt")
        shutil.copy(second.cert, first.cert)  # half-way: new certificate, old key
        _wait_for(lambda: hook.server.reload_errors >= 1, "the half-written pair was not seen")
        client = Client(hook.server.port, Tls(str(old), first.key))
        assert client.request("GET", "/healthz")[0] == 200  # still the working pair
        client.close()
        assert hook.server.reloads == 0
        shutil.copy(second.key, first.key)
        _wait_for(lambda: hook.server.reloads == 1, "the new pair was never loaded")
        deadline = time.monotonic() + 10
        while True:  # wait for the reload (checked every 0.05 s), with a deadline
            client = Client(hook.server.port, Tls(second.cert, second.key))
            try:
                status = client.request("GET", "/healthz")
                break
            except ssl.SSLCertVerificationError:
                assert time.monotonic() < deadline, "the new certificate was never served"
            finally:
                client.close()
        assert status[0] == 200


def test_a_port_in_use_is_a_configuration_error(hook: Webhook, tls: Tls) -> None:
    second = EvalgateAdmissionServer(hook.admission, tls.cert, tls.key, port=hook.server.port)
    with pytest.raises(EvalgateConfigError, match="cannot listen"):
        second.start()


def test_bad_keys_certificates_and_registries_are_configuration_errors(
    tmp_path: Path, keys: Keys, tls: Tls
) -> None:
    root = str(_registry(tmp_path, keys))
    with pytest.raises(EvalgateConfigError, match="not a folder"):
        EvalgateAdmission(EvalgateAdmissionConfig(keys.gate_pub, root + "/x", keys.registry_pub))
    with pytest.raises(EvalgateConfigError, match="cannot read key file"):
        EvalgateAdmission(EvalgateAdmissionConfig(root + "/no.pub", root, keys.registry_pub))
    admission = EvalgateAdmission(EvalgateAdmissionConfig(keys.gate_pub, root, keys.registry_pub))
    with pytest.raises(EvalgateConfigError, match="--tls-cert"):
        EvalgateAdmissionServer(admission, tls.cert, keys.registry, port=0)  # key does not match


# --- pod inspection and review parsing (no server) -------------------------------------------


@pytest.mark.parametrize(
    ("reference", "repository", "tag", "digest"),
    [
        ("reg.example/models/a@sha256:ab", "reg.example/models/a", None, "sha256:ab"),
        ("reg.example:5000/models/a:v1", "reg.example:5000/models/a", "v1", None),
        ("reg.example:5000/models/a", "reg.example:5000/models/a", None, None),
        ("reg/models/a:v1@sha256:cd", "reg/models/a", "v1", "sha256:cd"),
    ],
)
def test_image_references_split(
    reference: str, repository: str, tag: str | None, digest: str | None
) -> None:
    image = evalgate_split_image(reference)
    assert (image.repository, image.tag, image.digest) == (repository, tag, digest)


def test_only_paths_with_a_models_segment_are_weights() -> None:
    assert evalgate_image_is_weights("reg.example/models/support@sha256:ab")
    assert evalgate_image_is_weights("reg.example/team/models/llm/support:v1")
    assert not evalgate_image_is_weights("reg.example/vllm/vllm-openai:v0.8")
    assert not evalgate_image_is_weights("reg.example/team/models")  # the image is named models
    assert not evalgate_image_is_weights("reg.example/models-cache/x:1")


def test_pod_weights_are_found_everywhere_they_can_be() -> None:
    obj = pod(volumes={"w": model_image(D)}, annotation=E, images={"c": model_image(UNKNOWN)})
    obj["spec"]["initContainers"] = [{"name": "fetch", "image": "reg/models/tool:1"}]
    obj["spec"]["volumes"].append({"name": "cfg", "configMap": {"name": "cfg"}})
    refs = evalgate_pod_weights(obj)
    assert [(r.source, r.digest) for r in refs] == [
        ('image volume "w"', D),
        ('init container "fetch"', None),
        ('container "c"', UNKNOWN),
        ("annotation evalgate.dev/weights-digest", E),
    ]
    assert "by tag (1)" in str(refs[1].problem)
    assert evalgate_pod_weights({"spec": {"volumes": "nonsense", "containers": [7]}}) == []


def test_other_digest_algorithms_are_not_gated() -> None:
    (ref,) = evalgate_pod_weights(pod(volumes={"w": "reg/models/a@sha512:" + "a" * 128}))
    assert ref.digest is None and "is not sha256:<64 lowercase hex>" in str(ref.problem)


def test_review_parsing_and_responses() -> None:
    parsed = evalgate_parse_review(json.dumps(review(pod(), uid="u-1")).encode())
    assert (parsed.uid, parsed.kind, parsed.namespace, parsed.name) == (
        "u-1", "Pod", "serve-support", "support-0"
    )  # fmt: skip
    assert parsed.is_pod and parsed.operation == "CREATE"
    with pytest.raises(EvalgateAdmissionError, match=r"request\.uid"):
        evalgate_parse_review(
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",'
            b' "request": {"uid": 7}}'
        )
    denied = evalgate_review_response("u-2", False, "no", ["a\nb " + "x" * 400])
    assert denied["response"]["status"]["message"] == "no"
    (warning,) = denied["response"]["warnings"]
    assert "\n" not in warning and len(warning) == 240 and warning.endswith("...")
    assert evalgate_review_response("u-3", True) == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "u-3", "allowed": True},
    }


# --- which image volumes hold weights: declared, not guessed (issue 37) -----------------------


def _annotated(volumes: dict[str, str], **annotations: str) -> JSON:
    obj = pod(volumes=volumes)
    obj["metadata"]["annotations"] = {f"evalgate.dev/{k}": v for k, v in annotations.items()}
    return obj


def test_an_image_volume_outside_a_models_path_is_denied_as_ambiguous(hook: Webhook) -> None:
    hook.gate()
    renamed = model_image(D, "registry.example/llm/support")  # the same weights, renamed repo
    message = _denied(hook.ask(pod(volumes={"weights": renamed})), 'image volume "weights"')
    assert "ambiguous: an image volume neither under a models/ path nor declared" in message


def test_a_declared_weights_volume_is_gated_whatever_its_repository(hook: Webhook) -> None:
    renamed = {"weights": model_image(D, "registry.example/llm/support")}
    declared = _annotated(renamed, **{"weights-volumes": "weights"})
    _denied(hook.ask(declared), D, "not in the registry")  # checked, and not gated yet
    hook.gate()
    assert hook.ask(declared)["allowed"] is True


def test_a_volume_declared_as_other_is_not_gated(hook: Webhook) -> None:
    tokenizer = {"tokenizer": "registry.example/assets/tok@sha256:" + "b" * 64}
    assert hook.ask(_annotated(tokenizer, **{"other-volumes": "tokenizer"}))["allowed"] is True
    both = _annotated(tokenizer, **{"other-volumes": "tokenizer", "weights-volumes": "tokenizer"})
    _denied(hook.ask(both), "declared both")


def test_a_declared_name_that_is_no_image_volume_is_denied(hook: Webhook) -> None:
    hook.gate()
    typo = _annotated({"weights": model_image(D)}, **{"weights-volumes": "weigths"})
    _denied(hook.ask(typo), "'weigths' is no image volume of the Pod")


def test_a_declared_weights_container_is_gated_whatever_its_repository(hook: Webhook) -> None:
    # A modelcar (a container whose image carries the weights, as KServe's storageUri oci://
    # makes one) outside a models/ path was admitted unchecked (issue 37)
    images = {"server": "registry.example/vllm@sha256:" + "a" * 64}
    images["modelcar"] = model_image(D, "registry.example/llm/support")
    plain = pod(images=images)
    assert hook.ask(plain)["allowed"] is True  # undeclared: an ordinary container image
    declared = pod(images=images)
    declared["metadata"]["annotations"] = {"evalgate.dev/weights-containers": "modelcar"}
    _denied(hook.ask(declared), 'container "modelcar"', "not in the registry")
    hook.gate()
    assert hook.ask(declared)["allowed"] is True
    tagged = pod(images={**images, "modelcar": "registry.example/llm/support:v1"})
    tagged["metadata"]["annotations"] = {"evalgate.dev/weights-containers": "modelcar"}
    _denied(hook.ask(tagged), "by tag (v1)")
    typo = pod(images=images)
    typo["metadata"]["annotations"] = {"evalgate.dev/weights-containers": "modlecar"}
    _denied(hook.ask(typo), "'modlecar' is no container of the Pod")
