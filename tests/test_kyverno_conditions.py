"""k8s/overlays/admission/kyverno: the ClusterPolicy checks what the webhook checks (SPEC
sections 14 and 20, issue 30). Its attestation conditions are evaluated against decision
predicates with a model of Kyverno's semantics (tests/kyvernokit.py: how the image digest is
exposed, how a missing key is an error, how Equals matches); its release-signature attestor is
checked for presence and key.

Not run here: Kyverno itself. Neither the cosign signature of the weights (the release
attestor) nor the attestation's signature (the gate attestor) is verified by these tests; that
is Kyverno's code, and needs a cluster with Kyverno and a registry. What is checked is that the
policy *asks* for both signatures with the right keys, and what its conditions admit.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import jmespath
import pytest
from admissionkit import decision, digest_of, model_image
from kyvernokit import (
    JSON,
    KyvernoVariableError,
    equals,
    evaluate_conditions,
    failing_messages,
    image_info,
    kyverno_context,
    kyverno_policy,
    resolve,
)

from pytest_evalgate.attest.dsse import evalgate_statement
from pytest_evalgate.errors import EvalgateSignatureError

RULES = ("model-images", "model-image-volumes", "weights-annotation")
WEIGHTS = digest_of("support-r17 weights")
RELEASE_PLACEHOLDER_LINE = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEhKOgcw2Z1xAzZ2jk7YA309oyT/Lm"
GATE_PLACEHOLDER_LINE = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEKsrDxLuiCD8QEfQKOrFmtLYIIjIF"

NOT_PASS = "the evalgate decision for these weights is not a pass"
NOT_ATTESTABLE = "the evalgate decision is not attestable (a run, not a release)"
TIER = "the evalgate decision is a tier run's, never a release"
NOT_APPROVED = "the gate policy of the evalgate decision is not approved"
OTHER_WEIGHTS = "the evalgate decision is for other weights than this image digest"
NO_APPROVAL = (
    'failed to substitute variables in attestation conditions: Unknown key "policy_approval" in '
    "path"
)


@pytest.fixture(scope="module")
def policy() -> JSON:
    return kyverno_policy()


def _rules(policy: JSON) -> dict[str, JSON]:
    return {rule["name"]: rule for rule in policy["spec"]["rules"]}


def _verify(policy: JSON, rule: str) -> JSON:
    (verify,) = _rules(policy)[rule]["verifyImages"]
    assert isinstance(verify, dict)
    return verify


def _conditions(policy: JSON, rule: str) -> list[JSON]:
    (attestation,) = _verify(policy, rule)["attestations"]
    conditions = attestation["conditions"]
    assert isinstance(conditions, list)
    return conditions


def _reference(policy: JSON, rule: str, digest: str) -> str:
    """The image reference Kyverno verifies for weights ``digest`` under ``rule``: the model
    image, or the annotation turned into a reference by the rule's extractor."""
    if rule != "weights-annotation":
        return model_image(digest)
    (extractor,) = _rules(policy)[rule]["imageExtractors"]["Pod"]
    reference = jmespath.search(extractor["jmesPath"], digest)
    assert isinstance(reference, str)
    return reference


def good_decision(digest: str = WEIGHTS) -> JSON:
    """A passing, attestable decision under an approved policy, as the gate records it."""
    record = decision(digest)
    record["policy"] = {"version": "2030.1", "digest": "e" * 64}
    record["policy_approval"] = {
        "approved": True,
        "identity": "policy-board@example",
        "keyid": "f" * 64,
        "approved_at": "2030-01-01T00:00:00Z",
        "expires_at": None,
        "envelope": {
            "payloadType": "application/vnd.in-toto+json",
            "payload": "",
            "signatures": [],
        },
    }
    return record


def _tier(record: JSON) -> None:
    record["tier"] = {"name": "smoke", "complete": True}


def _tier_as_recorded(record: JSON) -> None:
    _tier(record)
    record["attestable"] = False  # decide.py: a tier decision is never attestable


def _unattestable(record: JSON) -> None:
    record["attestable"] = False


def _failing(record: JSON) -> None:
    record["verdict"] = "fail"


def _other_weights(record: JSON) -> None:
    record["candidate"]["pins"]["weights_digest"] = digest_of("other weights")


def _unapproved(record: JSON) -> None:
    record["policy_approval"] = {"approved": False, "reason": "policy 2030.1 is not approved"}


def _no_approval(record: JSON) -> None:
    del record["policy_approval"]  # a run without a trust file


BAD: list[tuple[str, Callable[[JSON], None], set[str]]] = [
    ("tier, even if it claimed attestable", _tier, {TIER}),
    ("tier, as the gate records it", _tier_as_recorded, {TIER, NOT_ATTESTABLE}),
    ("attestable false", _unattestable, {NOT_ATTESTABLE}),
    ("verdict fail", _failing, {NOT_PASS}),
    ("another weights digest", _other_weights, {OTHER_WEIGHTS}),
    ("policy not approved", _unapproved, {NOT_APPROVED}),
    ("no policy approval at all", _no_approval, {NO_APPROVAL}),
]


# --- one source of truth -----------------------------------------------------------------------


def test_the_three_rules_verify_alike_but_for_the_images(policy: JSON) -> None:
    # YAML anchors would make this structural, but kustomize's handling of aliases has broken
    # more than once (kyaml 4.0-4.3, merge keys later): the three copies are kept identical here.
    rules = _rules(policy)
    assert tuple(rules) == RULES
    bodies = []
    for name in RULES:
        (match,) = rules[name]["match"]["any"]
        assert match == rules[RULES[0]]["match"]["any"][0]
        body = copy.deepcopy(_verify(policy, name))
        body.pop("imageReferences")
        bodies.append(body)
    assert bodies[0] == bodies[1] == bodies[2]
    assert [len(_conditions(policy, name)[0]["all"]) for name in RULES] == [5, 5, 5]
    assert _verify(policy, "weights-annotation")["imageReferences"] == [
        "registry.example/models/weights@*"
    ]


# --- the conditions --------------------------------------------------------------------------


@pytest.mark.parametrize("rule", RULES)
def test_a_good_decision_passes_every_condition(policy: JSON, rule: str) -> None:
    conditions = _conditions(policy, rule)
    context = kyverno_context(good_decision(), _reference(policy, rule, WEIGHTS))
    assert context["image"]["digest"] == WEIGHTS
    assert evaluate_conditions(conditions, context) == (True, "")
    assert failing_messages(conditions, context) == set()


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize(("case", "spoil", "messages"), BAD, ids=[case for case, _, _ in BAD])
def test_each_bad_decision_fails_with_its_message(
    policy: JSON, rule: str, case: str, spoil: Callable[[JSON], None], messages: set[str]
) -> None:
    record = good_decision()
    spoil(record)
    conditions = _conditions(policy, rule)
    context = kyverno_context(record, _reference(policy, rule, WEIGHTS))
    passed, message = evaluate_conditions(conditions, context)
    assert not passed, case
    assert message in messages  # the first failing condition's message, as Kyverno reports it
    assert failing_messages(conditions, context) == messages  # and no other condition fails


@pytest.mark.parametrize(("case", "spoil", "messages"), BAD, ids=[case for case, _, _ in BAD])
def test_a_bad_decision_is_denied_even_if_missing_keys_were_null(
    policy: JSON, case: str, spoil: Callable[[JSON], None], messages: set[str]
) -> None:
    # Kyverno gives an error for a missing key (kyvernokit); were a version to give null
    # instead, null Equals true is false: the Pod is still denied, now with the message.
    record = good_decision()
    spoil(record)
    context = kyverno_context(record, model_image(WEIGHTS))
    passed, message = evaluate_conditions(_conditions(policy, RULES[0]), context, missing="null")
    assert not passed, case
    assert message in {m if m != NO_APPROVAL else NOT_APPROVED for m in messages}


def test_a_reference_by_tag_has_no_digest_to_match(policy: JSON) -> None:
    # verifyDigest refuses it first; the condition would deny it as well (image.digest is "").
    reference = "registry.example/models/support:r17"
    assert image_info(reference)["digest"] == ""
    context = kyverno_context(good_decision(), reference)
    assert evaluate_conditions(_conditions(policy, RULES[0]), context) == (False, OTHER_WEIGHTS)


def test_the_digest_pattern_comes_from_the_signed_decision(policy: JSON) -> None:
    (digest_condition,) = [
        c for c in _conditions(policy, RULES[0])[0]["all"] if "image.digest" in c["key"]
    ]
    # Equals matches the value as a wildcard pattern against the key: the Pod's digest is the
    # key, the signed decision's digest the value ...
    assert digest_condition["key"] == "{{ image.digest }}"
    assert digest_condition["value"] == "{{ candidate.pins.weights_digest }}"
    assert equals(WEIGHTS, "sha256:*") and not equals("sha256:*", WEIGHTS)
    # ... and the gate never signs a decision whose digest is a pattern.
    with pytest.raises(EvalgateSignatureError, match="64 lowercase hex"):
        evalgate_statement(good_decision("sha256:*"))


def test_the_model_of_a_missing_key(policy: JSON) -> None:
    context = kyverno_context({"verdict": "pass"}, model_image(WEIGHTS))
    with pytest.raises(KyvernoVariableError, match='Unknown key "policy_approval" in path'):
        resolve("policy_approval.approved", context)
    assert resolve("policy_approval.approved", context, missing="null") is None
    # in a function's argument a missing key is null (the fork swallows NotFoundError there)
    assert resolve("contains(keys(@), 'tier')", context) is False
    assert resolve("image.digest", context) == WEIGHTS


# --- the release signature ---------------------------------------------------------------------


def release_gaps(policy: JSON, release_line: str, gate_line: str) -> list[str]:
    """What keeps a rule from requiring the release signature of the weights: verifyImages
    ``attestors`` (the image's cosign signature) whose every entry is the release key, with at
    least one required, and the release key is not the gate key."""
    gaps = []
    for name in RULES:
        for verify in _rules(policy)[name]["verifyImages"]:
            sets = verify.get("attestors") or []
            if not sets:
                gaps.append(f"{name}: no release attestor")
            for attestor_set in sets:
                keys = [
                    entry.get("keys", {}).get("publicKeys", "") for entry in attestor_set["entries"]
                ]
                if attestor_set.get("count", len(keys)) < 1 or not keys:
                    gaps.append(f"{name}: an attestor set that requires nothing")
                if not all(release_line in key and gate_line not in key for key in keys):
                    gaps.append(f"{name}: an attestor entry that is not the release key")
    return gaps


def test_every_rule_requires_the_release_signature(policy: JSON) -> None:
    assert release_gaps(policy, RELEASE_PLACEHOLDER_LINE, GATE_PLACEHOLDER_LINE) == []
    for name in RULES:
        (release_set,) = _verify(policy, name)["attestors"]
        assert release_set["count"] == 1
        (entry,) = release_set["entries"]
        assert RELEASE_PLACEHOLDER_LINE in entry["keys"]["publicKeys"]
        (attestation,) = _verify(policy, name)["attestations"]
        (gate_set,) = attestation["attestors"]
        (gate_entry,) = gate_set["entries"]
        assert GATE_PLACEHOLDER_LINE in gate_entry["keys"]["publicKeys"]


def _without_attestors(verify: JSON) -> None:
    del verify["attestors"]


def _gate_key_too(verify: JSON) -> None:
    gate_entry = verify["attestations"][0]["attestors"][0]["entries"][0]
    verify["attestors"][0]["entries"].append(copy.deepcopy(gate_entry))  # count 1: either


def _gate_key_instead(verify: JSON) -> None:
    gate_entry = verify["attestations"][0]["attestors"][0]["entries"][0]
    verify["attestors"][0]["entries"] = [copy.deepcopy(gate_entry)]


@pytest.mark.parametrize("weaken", [_without_attestors, _gate_key_too, _gate_key_instead])
def test_a_policy_without_the_release_signature_is_caught(
    policy: JSON, weaken: Callable[[JSON], None]
) -> None:
    weakened: Any = copy.deepcopy(policy)
    weaken(weakened["spec"]["rules"][1]["verifyImages"][0])
    (gap,) = release_gaps(weakened, RELEASE_PLACEHOLDER_LINE, GATE_PLACEHOLDER_LINE)
    assert gap.startswith("model-image-volumes: ")
