"""The registry: transitions, what promotion needs, and tamper evidence, on real signed files."""

from __future__ import annotations

import base64
import json
import os
import shutil
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from admissionkit import (
    Keys,
    decision,
    digest_of,
    flip_payload_byte,
    make_keys,
    override_of,
    sign_raw,
    signed_decision,
    signed_unattestable,
)

from pytest_evalgate.attest.dsse import (
    evalgate_load_envelope,
    evalgate_payload_sha256,
    evalgate_sign,
    evalgate_statement,
    evalgate_write_envelope,
)
from pytest_evalgate.attest.keys import EVALGATE_KEY_PASSWORD_ENV, evalgate_load_public_key
from pytest_evalgate.errors import EvalgateConfigError, EvalgateRegistryError
from pytest_evalgate.formats.canonical import evalgate_canonical_json
from pytest_evalgate.registry import (
    EVALGATE_REGISTRY_ENTRY_TYPE,
    EVALGATE_REGISTRY_STATES,
    EvalgateRegistryChain,
    EvalgateRegistryDraft,
    evalgate_digest_folder,
    evalgate_parse_digest,
    evalgate_registry_append,
    evalgate_registry_describe,
    evalgate_registry_promote,
    evalgate_registry_read,
    evalgate_registry_revoke,
    evalgate_registry_rollback,
    evalgate_registry_signature,
    evalgate_transition_refusal,
)

D = digest_of("weights-r17")
OTHER = digest_of("weights-r16")
PATH_TO: dict[str | None, list[str]] = {
    None: [],
    "candidate": ["candidate"],
    "gated": ["candidate", "gated"],
    "canary": ["candidate", "gated", "canary"],
    "ga": ["candidate", "gated", "canary", "ga"],
    "deprecated": ["candidate", "gated", "canary", "ga", "deprecated"],
    "revoked": ["candidate", "revoked"],
}
PROMOTABLE = [state for state in EVALGATE_REGISTRY_STATES if state != "revoked"]
NEXT = {
    None: "candidate",
    "candidate": "gated",
    "gated": "canary",
    "canary": "ga",
    "ga": "deprecated",
}


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(EVALGATE_KEY_PASSWORD_ENV, raising=False)
        return make_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture()
def root(tmp_path: Path, keys: Keys) -> Path:
    folder = tmp_path / "registry"
    folder.mkdir()
    shutil.copy(keys.gate_pub, folder / "gate.pub")
    return folder


@pytest.fixture()
def passing(keys: Keys) -> dict[str, Any]:
    return signed_decision(D, keys.gate)


def _promote(root: Path, keys: Keys, to: str, *envelopes: Any, **kw: Any) -> Any:
    digest = kw.pop("digest", D)
    return evalgate_registry_promote(
        str(root), digest, to, list(envelopes), keys.registry, who="ci@build-7", **kw
    )


def _read(root: Path, keys: Keys, digest: str = D) -> EvalgateRegistryChain:
    return evalgate_registry_read(str(root), digest, evalgate_load_public_key(keys.registry_pub))


def _drive(root: Path, keys: Keys, state: str | None, digest: str = D) -> None:
    """Bring ``digest`` to ``state`` by allowed steps (a passing decision at ``candidate``)."""
    envelope = signed_decision(digest, keys.gate)
    for step in PATH_TO[state]:
        if step == "revoked":
            evalgate_registry_revoke(str(root), digest, "bad weights", keys.registry, who="sre")
        else:
            given = [envelope] if step == "candidate" else []
            _promote(root, keys, step, *given, digest=digest)


def _entry_path(root: Path, sequence: int, digest: str = D) -> Path:
    return Path(evalgate_digest_folder(str(root), digest)) / f"{sequence:06d}.json"


# --- digests and the transition table ---------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["sha256:" + "A" * 64, "sha256:" + "a" * 63, "sha512:" + "a" * 64, "a" * 64, "", 7]
)
def test_malformed_digests_are_configuration_errors(text: Any) -> None:
    with pytest.raises(EvalgateConfigError, match="not a weights digest"):
        evalgate_parse_digest(text)


def test_the_transition_table() -> None:
    allowed = {
        (previous, to)
        for previous in [None, *EVALGATE_REGISTRY_STATES]
        for to in EVALGATE_REGISTRY_STATES
        if evalgate_transition_refusal(previous, to) is None
    }
    forward = {(previous, to) for previous, to in NEXT.items()}
    revocations = {(previous, "revoked") for previous in [None, *PROMOTABLE]}
    assert allowed == forward | revocations
    assert "unknown state" in str(evalgate_transition_refusal("gated", "shipped"))


# --- promotions and revocations -----------------------------------------------------------------


def test_the_whole_life_of_a_digest_is_one_linked_chain(
    root: Path, keys: Keys, passing: dict[str, Any]
) -> None:
    _promote(root, keys, "candidate", passing)
    for state in ("gated", "canary", "ga", "deprecated"):
        _promote(root, keys, state)
    evalgate_registry_revoke(str(root), D, "data leak in training set", keys.registry, who="sre")
    chain = _read(root, keys)
    assert [e.state for e in chain.entries] == [*PROMOTABLE, "revoked"]
    assert [e.previous_state for e in chain.entries] == [None, *PROMOTABLE]
    assert [e.sequence for e in chain.entries] == [1, 2, 3, 4, 5, 6]
    links = [e.previous_entry for e in chain.entries]
    assert links == [None, *(e.entry_sha256 for e in chain.entries[:-1])]
    assert chain.state == "revoked" and chain.head is chain.entries[-1]
    decision_sha = evalgate_payload_sha256(passing)
    for entry in chain.entries[:5]:  # the basis is carried forward, copied into every entry
        assert entry.attestation_sha256 == decision_sha
        assert entry.attestations == (passing,)
    assert chain.head.attestations == () and chain.head.why == "data leak in training set"
    assert chain.entries[1].why == f"promoted to gated on decision {decision_sha[:16]} verdict pass"
    assert all(e.who == "ci@build-7" for e in chain.entries[:5]) and chain.head.who == "sre"
    datetime.strptime(chain.head.when, "%Y-%m-%dT%H:%M:%SZ")


def test_entries_are_canonical_dsse_statements_about_the_digest(
    root: Path, keys: Keys, passing: dict[str, Any]
) -> None:
    _promote(root, keys, "candidate", passing)
    path = _entry_path(root, 1)
    envelope = evalgate_load_envelope(str(path))
    assert path.read_bytes() == evalgate_canonical_json(envelope) + b"\n"
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert statement["predicateType"] == EVALGATE_REGISTRY_ENTRY_TYPE
    assert statement["subject"] == [{"name": D, "digest": {"sha256": D.removeprefix("sha256:")}}]
    assert statement["predicate"]["attestations"] == [passing]
    assert Path(evalgate_digest_folder(str(root), D)).name == "sha256-" + D[7:]


@pytest.mark.parametrize(
    ("start", "to"),
    [
        (start, to)
        for start in PATH_TO
        for to in PROMOTABLE
        if start == "revoked" or NEXT.get(start) != to
    ],
)
def test_every_refused_promotion(root: Path, keys: Keys, start: str | None, to: str) -> None:
    _drive(root, keys, start)
    before = _read(root, keys)
    with pytest.raises(EvalgateRegistryError, match=r"refused: .*(not allowed|nothing follows)"):
        _promote(root, keys, to, signed_decision(D, keys.gate))
    assert _read(root, keys) == before  # nothing was written


@pytest.mark.parametrize("start", [s for s in PATH_TO if s != "revoked"])
def test_revoked_from_every_state_and_nothing_after(
    root: Path, keys: Keys, start: str | None
) -> None:
    _drive(root, keys, start)
    evalgate_registry_revoke(str(root), D, "jailbreak found", keys.registry, who="sre")
    assert _read(root, keys).state == "revoked"
    with pytest.raises(EvalgateRegistryError, match="nothing follows a revocation"):
        evalgate_registry_revoke(str(root), D, "again", keys.registry, who="sre")


def test_promote_to_revoked_and_empty_reasons_are_usage_errors(root: Path, keys: Keys) -> None:
    with pytest.raises(EvalgateConfigError, match="registry revoke"):
        _promote(root, keys, "revoked")
    with pytest.raises(EvalgateConfigError, match="non-empty reason"):
        evalgate_registry_revoke(str(root), D, "  ", keys.registry, who="sre")
    with pytest.raises(EvalgateConfigError, match="not a weights digest"):
        _promote(root, keys, "candidate", digest="sha256:tag-latest")
    assert _read(root, keys).entries == ()


# --- what a promotion to gated or beyond needs ---------------------------------------------------


def test_gated_needs_a_decision(root: Path, keys: Keys) -> None:
    _promote(root, keys, "candidate")
    with pytest.raises(EvalgateRegistryError, match="needs a decision"):
        _promote(root, keys, "gated")
    assert _read(root, keys).state == "candidate"


def test_a_failing_decision_needs_an_override(root: Path, keys: Keys) -> None:
    failing = signed_decision(D, keys.gate, "fail")
    _promote(root, keys, "candidate", failing)  # recorded: the audit trail an override names
    with pytest.raises(EvalgateRegistryError, match="verdict 'fail' and no override"):
        _promote(root, keys, "gated")
    override = override_of(failing, keys.gate)
    entry = _promote(root, keys, "gated", override)  # the decision is found in the chain
    assert entry.attestations == (failing, override)
    assert entry.attestation_sha256 == evalgate_payload_sha256(failing)
    assert entry.override_sha256 == evalgate_payload_sha256(override)
    assert "override approved by alice@example.com until" in entry.why


def test_decision_and_override_may_be_given_together(root: Path, keys: Keys) -> None:
    failing = signed_decision(D, keys.gate, "fail")
    _promote(root, keys, "candidate")
    entry = _promote(root, keys, "gated", override_of(failing, keys.gate), failing)
    assert evalgate_payload_sha256(entry.attestations[0]) == entry.attestation_sha256


def test_an_override_of_an_unrecorded_decision_is_refused(root: Path, keys: Keys) -> None:
    failing = signed_decision(D, keys.gate, "fail")
    _promote(root, keys, "candidate")
    with pytest.raises(EvalgateRegistryError, match="has not recorded"):
        _promote(root, keys, "gated", override_of(failing, keys.gate))


def test_an_expired_override_is_refused_and_expiry_stops_carrying(root: Path, keys: Keys) -> None:
    failing = signed_decision(D, keys.gate, "fail")
    issued = datetime.now(UTC) - timedelta(hours=2)
    _promote(root, keys, "candidate", failing)
    with pytest.raises(EvalgateRegistryError, match="expired at"):
        _promote(root, keys, "gated", override_of(failing, keys.gate, now=issued, hours=1))
    override = override_of(failing, keys.gate, hours=1)
    _promote(root, keys, "gated", override)
    later = datetime.now(UTC) + timedelta(hours=2)
    with pytest.raises(EvalgateRegistryError, match="expired at"):
        _promote(root, keys, "canary", now=later)  # the carried basis is re-checked
    _promote(root, keys, "canary")  # still valid now


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda k: signed_decision(OTHER, k.gate), "is for weights"),
        (lambda k: signed_decision(D, k.other), "unknown key id"),
        (lambda k: flip_payload_byte(signed_decision(D, k.gate)), "signature mismatch"),
        (lambda k: signed_unattestable(D, k.gate, "partial"), "not attestable"),
        (lambda k: signed_unattestable(D, k.gate, "incomplete"), "not attestable"),
        (lambda k: {"payloadType": "x", "payload": "", "signatures": []}, "payloadType"),
    ],
    ids=["other-digest", "other-key", "tampered", "partial", "incomplete", "not-dsse"],
)
def test_a_bad_decision_is_refused(root: Path, keys: Keys, make: Any, reason: str) -> None:
    _promote(root, keys, "candidate")
    with pytest.raises(EvalgateRegistryError, match=reason):
        _promote(root, keys, "gated", make(keys))
    assert _read(root, keys).state == "candidate"


def test_an_override_of_a_passing_decision_or_a_second_decision_is_refused(
    root: Path, keys: Keys, passing: dict[str, Any]
) -> None:
    _promote(root, keys, "candidate")
    with pytest.raises(EvalgateRegistryError, match="one decision and at most one override"):
        _promote(root, keys, "gated", passing, signed_decision(D, keys.gate))


def test_without_gate_pub_promotions_with_attestations_are_configuration_errors(
    root: Path, keys: Keys, passing: dict[str, Any]
) -> None:
    (root / "gate.pub").unlink()
    _promote(root, keys, "candidate")  # no attestation, nothing to verify
    with pytest.raises(EvalgateConfigError, match=r"gate\.pub: gate key: missing"):
        _promote(root, keys, "gated", passing)


def test_deprecating_copies_the_basis_without_re_verifying_it(
    root: Path, keys: Keys, passing: dict[str, Any]
) -> None:
    _promote(root, keys, "candidate", passing)
    for state in ("gated", "canary", "ga"):
        _promote(root, keys, state)
    shutil.copy(keys.other_pub, root / "gate.pub")  # the gate key was rotated since
    with pytest.raises(EvalgateRegistryError, match="unknown key id"):
        _promote(root, keys, "deprecated", passing)  # given attestations are always verified
    entry = _promote(root, keys, "deprecated")
    assert entry.attestations == (passing,)


# --- tamper evidence -------------------------------------------------------------------------


@pytest.fixture()
def chain3(root: Path, keys: Keys, passing: dict[str, Any]) -> EvalgateRegistryChain:
    _promote(root, keys, "candidate", passing)
    _promote(root, keys, "gated")
    _promote(root, keys, "canary")
    return _read(root, keys)


def test_a_registry_signed_by_another_key_does_not_verify(
    root: Path, keys: Keys, chain3: EvalgateRegistryChain
) -> None:
    with pytest.raises(EvalgateRegistryError, match=r"000001.json: entry 1 .*unknown key id"):
        evalgate_registry_read(str(root), D, evalgate_load_public_key(keys.other_pub))
    with pytest.raises(EvalgateRegistryError, match="unknown key id"):
        evalgate_registry_revoke(str(root), D, "x", keys.other, who="mallory")


def test_every_byte_flip_of_an_entry_file_is_detected(
    root: Path, keys: Keys, chain3: EvalgateRegistryChain
) -> None:
    path = _entry_path(root, 2)
    original = path.read_bytes()
    for index in range(0, len(original), max(1, len(original) // 400)):
        changed = bytearray(original)
        changed[index] ^= 0x01
        path.write_bytes(bytes(changed))
        with pytest.raises(EvalgateRegistryError, match="entry 2"):
            _read(root, keys)
    path.write_bytes(original)
    assert _read(root, keys) == chain3


def test_an_edited_field_in_canonical_form_fails_the_signature(
    root: Path, keys: Keys, chain3: EvalgateRegistryChain
) -> None:
    path = _entry_path(root, 3)
    envelope = evalgate_load_envelope(str(path))
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["state"] = "ga"
    envelope["payload"] = base64.b64encode(evalgate_canonical_json(statement)).decode()
    evalgate_write_envelope(envelope, str(path))
    with pytest.raises(EvalgateRegistryError, match=r"entry 3 .*signature mismatch"):
        _read(root, keys)


def test_a_reformatted_entry_is_an_edited_entry(
    root: Path, keys: Keys, chain3: EvalgateRegistryChain
) -> None:
    path = _entry_path(root, 1)
    path.write_text(json.dumps(json.loads(path.read_bytes()), indent=2))
    with pytest.raises(EvalgateRegistryError, match=r"entry 1 .*not canonical"):
        _read(root, keys)


def test_a_removed_middle_entry_is_detected(
    root: Path, keys: Keys, chain3: EvalgateRegistryChain
) -> None:
    _entry_path(root, 2).unlink()
    with pytest.raises(EvalgateRegistryError, match="entry 2 is missing"):
        _read(root, keys)


def test_a_removed_and_renumbered_entry_is_detected(
    root: Path, keys: Keys, chain3: EvalgateRegistryChain
) -> None:
    _entry_path(root, 3).replace(_entry_path(root, 2))  # 2 removed, 3 moved into its place
    with pytest.raises(EvalgateRegistryError, match=r"entry 2 .*sequence 3"):
        _read(root, keys)


def test_reordered_entries_are_detected(
    root: Path, keys: Keys, chain3: EvalgateRegistryChain
) -> None:
    two, three = _entry_path(root, 2), _entry_path(root, 3)
    data2, data3 = two.read_bytes(), three.read_bytes()
    two.write_bytes(data3)
    three.write_bytes(data2)
    with pytest.raises(EvalgateRegistryError, match=r"entry 2 .*reordered"):
        _read(root, keys)


def test_an_entry_moved_from_another_digest_is_detected(
    root: Path, keys: Keys, chain3: EvalgateRegistryChain
) -> None:
    _drive(root, keys, "gated", digest=OTHER)
    shutil.copy(_entry_path(root, 2, OTHER), _entry_path(root, 2))
    with pytest.raises(EvalgateRegistryError, match=f"entry 2 .*is for {OTHER}"):
        _read(root, keys)


def test_a_validly_signed_entry_with_a_broken_link_is_detected(
    root: Path, keys: Keys, chain3: EvalgateRegistryChain
) -> None:
    # The registry key's holder re-signs entry 3 with a link to nothing: the chain notices.
    path = _entry_path(root, 3)
    envelope = evalgate_load_envelope(str(path))
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["previous_entry"] = "0" * 64
    evalgate_write_envelope(evalgate_sign(statement, keys.registry), str(path))
    with pytest.raises(EvalgateRegistryError, match=r"entry 3 .*link"):
        _read(root, keys)


def test_a_stray_file_is_refused_and_temp_files_are_ignored(
    root: Path, keys: Keys, chain3: EvalgateRegistryChain
) -> None:
    folder = Path(evalgate_digest_folder(str(root), D))
    (folder / ".tmp-123-abc").write_bytes(b"half an entry")
    assert _read(root, keys) == chain3
    _entry_path(root, 3).rename(folder / "000003.json.bak")
    with pytest.raises(EvalgateRegistryError, match=r"unexpected files \['000003.json.bak'\]"):
        _read(root, keys)


def test_a_removed_last_entry_is_a_rollback_against_the_remembered_head(
    root: Path, keys: Keys, chain3: EvalgateRegistryChain
) -> None:
    head = chain3.head
    assert head is not None
    remembered = (head.sequence, head.entry_sha256)
    assert evalgate_registry_rollback(remembered, chain3) is None
    assert evalgate_registry_rollback(None, chain3) is None
    _entry_path(root, 3).unlink()
    shorter = _read(root, keys)  # a valid chain, two entries long: only memory can tell
    assert len(shorter.entries) == 2
    assert "rolled back: entry 3" in str(evalgate_registry_rollback(remembered, shorter))
    evalgate_registry_revoke(str(root), D, "rewritten tail", keys.registry, who="mallory")
    rewritten = _read(root, keys)
    assert "rewritten: entry 3" in str(evalgate_registry_rollback(remembered, rewritten))


def test_the_folder_fingerprint_changes_with_every_write(
    root: Path, keys: Keys, passing: dict[str, Any]
) -> None:
    assert evalgate_registry_signature(str(root), D) == ()
    _promote(root, keys, "candidate", passing)
    first = evalgate_registry_signature(str(root), D)
    _promote(root, keys, "gated")
    second = evalgate_registry_signature(str(root), D)
    assert first != second and len(second) == 2
    path = _entry_path(root, 2)
    data = path.read_bytes()
    path.write_bytes(data[:-1] + b" ")  # same size, rewritten in place
    os.utime(path, ns=(1, 1))
    assert evalgate_registry_signature(str(root), D) != second


# --- writers ----------------------------------------------------------------------------------


def test_a_writer_with_a_stale_chain_loses_and_writes_nothing(
    root: Path, keys: Keys, passing: dict[str, Any]
) -> None:
    _promote(root, keys, "candidate", passing)
    stale = _read(root, keys)
    _promote(root, keys, "gated")
    draft = EvalgateRegistryDraft("revoked", "late", "stale view", "2030-01-01T00:00:00Z")
    with pytest.raises(EvalgateRegistryError, match="another writer published entry 2 first"):
        evalgate_registry_append(str(root), D, draft, keys.registry, stale)
    assert [e.state for e in _read(root, keys).entries] == ["candidate", "gated"]
    folder = Path(evalgate_digest_folder(str(root), D))
    assert sorted(p.name for p in folder.iterdir()) == ["000001.json", "000002.json"]


def test_concurrent_writers_of_one_sequence_number_one_wins(root: Path, keys: Keys) -> None:
    barrier = threading.Barrier(6)
    outcomes: list[str] = []

    def revoke(index: int) -> None:
        barrier.wait()
        try:
            evalgate_registry_revoke(str(root), D, f"writer {index}", keys.registry, who="w")
            outcomes.append("won")
        except EvalgateRegistryError as exc:
            outcomes.append("another writer" if "another writer" in str(exc) else "revoked")

    threads = [threading.Thread(target=revoke, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("won") == 1 and len(outcomes) == 6
    assert len(_read(root, keys).entries) == 1


def test_append_checks_shape_but_not_signatures(root: Path, keys: Keys) -> None:
    # The low-level writer records what it is given (admission re-verifies it); it still
    # refuses a gated entry that names no decision, or names one it does not carry.
    evalgate_registry_append(
        str(root), D, EvalgateRegistryDraft("candidate", "t", "w", "2030-01-01T00:00:00Z"),
        keys.registry,
    )  # fmt: skip
    with pytest.raises(EvalgateRegistryError, match="without the decision"):
        evalgate_registry_append(
            str(root), D, EvalgateRegistryDraft("gated", "t", "w", "2030-01-01T00:00:00Z"),
            keys.registry,
        )  # fmt: skip
    with pytest.raises(EvalgateRegistryError, match="carries no copy"):
        evalgate_registry_append(
            str(root), D,
            EvalgateRegistryDraft("gated", "t", "w", "2030-01-01T00:00:00Z", (), "ab" * 32),
            keys.registry,
        )  # fmt: skip
    forged = sign_raw(evalgate_statement(decision(D, "fail")), keys.other)
    entry = evalgate_registry_append(
        str(root), D,
        EvalgateRegistryDraft(
            "gated", "t", "w", "2030-01-01T00:00:00Z", (forged,), evalgate_payload_sha256(forged)
        ),
        keys.registry,
    )  # fmt: skip
    assert _read(root, keys).head == entry


def test_describe_lists_state_and_entries(
    root: Path, keys: Keys, chain3: EvalgateRegistryChain
) -> None:
    lines = evalgate_registry_describe(chain3)
    assert lines[:2] == [f"digest: {D}", "state: canary"]
    assert len(lines) == 5
    assert " 2 " in lines[3] and "candidate -> gated by ci@build-7: promoted to gated" in lines[3]
    assert f"[decision {chain3.entries[0].attestation_sha256[:16]}]" in lines[2]
    assert evalgate_registry_describe(_read(root, keys, OTHER))[1] == "state: unknown (no entries)"
