"""``evalgate keygen``, ``evalgate verify`` and ``evalgate override``: signing keys, checking a
signed decision record, and signing an override of one (SPEC section 7).

``verify`` prints what it checked and ``result: VALID``; a record (or override) that does not
verify is its verdict, not an error: ``INVALID: REASON`` on stdout and exit 1. With
``--require-pass`` a valid record also needs verdict ``pass`` or a valid override.
"""

from __future__ import annotations

import argparse
from typing import Any

from pytest_evalgate.cli.command import EvalgateCommand


def evalgate_attest_commands() -> tuple[EvalgateCommand, ...]:
    """The signing subcommands, in ``evalgate --help`` order."""
    return (
        EvalgateCommand("keygen", "write an ECDSA P-256 signing key pair", _keygen_args, _keygen),
        EvalgateCommand("verify", "check a signed decision record", _verify_args, _verify),
        EvalgateCommand("override", "sign an override of a decision", _override_args, _override),
    )


def _keygen_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", default=".", help="where to write evalgate.key and evalgate.pub")


def _keygen(args: argparse.Namespace) -> bool:
    from pytest_evalgate.attest.keys import (
        evalgate_generate_key,
        evalgate_keyid,
        evalgate_load_public_key,
    )

    private_path, public_path = evalgate_generate_key(args.dir)
    keyid = evalgate_keyid(evalgate_load_public_key(public_path))
    print(f"private key: {private_path} (mode 0600)\npublic key: {public_path}\nkeyid: {keyid}")
    return True


def _verify_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("envelope", help="DSSE envelope of a decision record")
    keys = parser.add_mutually_exclusive_group(required=True)
    keys.add_argument("--key", help="PEM public key")
    keys.add_argument("--trust", metavar="TRUST", help="trust file: keys by role (SPEC 20)")
    parser.add_argument("--override", help="DSSE envelope of an override of this decision")
    parser.add_argument(
        "--require-pass", action="store_true", help="fail unless verdict pass or a valid override"
    )


def _verify(args: argparse.Namespace) -> bool:
    from pytest_evalgate.errors import EvalgateSignatureError

    try:
        if args.trust:
            lines, verdict, overridden = _trust_lines(args.envelope, args.trust, args.override)
        else:
            lines, verdict, overridden = _verify_lines(args.envelope, args.key, args.override)
    except EvalgateSignatureError as exc:
        print(f"INVALID: {exc}")
        return False
    print("\n".join(lines))
    if args.require_pass and verdict != "pass" and not overridden:
        print(f"gate: verdict {verdict!r} without a valid override; --require-pass fails")
        return False
    print("result: VALID")
    return True


def _verify_lines(
    envelope_path: str, key_path: str, override_path: str | None
) -> tuple[list[str], str, bool]:
    """(lines saying what was checked, the record's verdict, whether an override verified)."""
    from pytest_evalgate.attest import dsse as attest
    from pytest_evalgate.attest import keys as attest_keys
    from pytest_evalgate.attest import override as attest_override

    envelope = attest.evalgate_load_envelope(envelope_path)
    statement = attest.evalgate_verify(envelope, key_path)
    keyid = attest_keys.evalgate_keyid(attest_keys.evalgate_load_public_key(key_path))
    lines = [f"envelope: {envelope_path}", *_checked_lines(statement, keyid)]
    beside = attest.evalgate_check_beside(statement, envelope_path)
    if beside is not None:
        lines.append(f"checked: {beside} beside the envelope is the signed decision")
    verdict = str(statement["predicate"].get("verdict"))
    if override_path is None:
        return lines, verdict, False
    override_env = attest.evalgate_load_envelope(override_path)
    override = attest_override.evalgate_verify_override(override_env, envelope, key_path)
    return lines + _override_lines(override_path, override["predicate"]), verdict, True


def _trust_lines(
    envelope_path: str, trust_path: str, override_path: str | None
) -> tuple[list[str], str, bool]:
    """:func:`_verify_lines` under a trust file: the decision needs a ``gate`` key and an
    approved policy, an override an ``override`` key whose identity is its approver."""
    from pytest_evalgate.attest import dsse as attest
    from pytest_evalgate.attest import override as attest_override
    from pytest_evalgate.attest.approval import evalgate_decision_approval_refusal
    from pytest_evalgate.attest.trust import evalgate_load_trust, evalgate_release_refusal
    from pytest_evalgate.errors import EvalgateSignatureError

    trust = evalgate_load_trust(trust_path, "--trust")
    envelope = attest.evalgate_load_envelope(envelope_path)
    signed = trust.evalgate_verify(envelope, "gate")
    statement, decision = signed.statement, signed.statement["predicate"]
    lines = [f"envelope: {envelope_path}", *_checked_lines(statement, signed.signer.keyid)]
    lines.append(f"signer: {signed.signer.identity} (role gate in {trust_path})")
    refusal = evalgate_decision_approval_refusal(decision, trust)
    if refusal is not None:
        raise EvalgateSignatureError(refusal)
    approval = decision["policy_approval"]
    lines.append(f"checked: policy approved by {approval.get('identity')} (role policy)")
    release = evalgate_release_refusal(decision, trust)
    lines.append(f"release: {release or 'weights signed by a release key'}")
    beside = attest.evalgate_check_beside(statement, envelope_path)
    if beside is not None:
        lines.append(f"checked: {beside} beside the envelope is the signed decision")
    verdict = str(decision.get("verdict"))
    if override_path is None:
        return lines, verdict, False
    override_env = attest.evalgate_load_envelope(override_path)
    override = trust.evalgate_verifier().evalgate_signed(override_env).statement
    digest = attest.evalgate_payload_sha256(envelope)
    attest_override.evalgate_check_override(override, statement, digest)
    return lines + _override_lines(override_path, override["predicate"]), verdict, True


def _checked_lines(statement: dict[str, Any], keyid: str) -> list[str]:
    from pytest_evalgate.attest.dsse import EVALGATE_PAYLOAD_TYPE, EVALGATE_PREDICATE_TYPE

    subject = statement["subject"][0]
    lines = [
        f"checked: payloadType {EVALGATE_PAYLOAD_TYPE}; canonical base64 payload",
        f"checked: ECDSA P-256/SHA-256 signature over DSSE PAE by key id {keyid}",
        f"checked: in-toto Statement v1, predicateType {statement.get('predicateType')}",
        f"subject: {subject.get('name')} sha256:{subject.get('digest', {}).get('sha256')}",
    ]
    if statement.get("predicateType") == EVALGATE_PREDICATE_TYPE:
        lines.insert(3, "checked: subject digest equals candidate.pins.weights_digest")
        lines.append(f"verdict: {statement['predicate'].get('verdict')}")
    return lines


def _override_lines(path: str, predicate: dict[str, Any]) -> list[str]:
    return [
        f"override: {path}",
        "checked: override signature, link to this decision's payload sha256, expiry",
        f"override: approved by {predicate.get('approver')} until {predicate.get('expires_at')}",
        f"override reason: {predicate.get('reason')}",
    ]


def _override_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("decision", help="DSSE envelope of the decision to override")
    parser.add_argument("--approver", help="who approves shipping (with --trust: the key's)")
    parser.add_argument("--reason", required=True, help="why")
    parser.add_argument("--expires", required=True, help="ISO 8601 time with zone, <= 90 days")
    parser.add_argument("--key", required=True, help="PEM private key of the approver")
    parser.add_argument("--trust", metavar="TRUST", help="trust file: the key needs 'override'")
    parser.add_argument("--output", help="default: <decision>.override.json")


def _override(args: argparse.Namespace) -> bool:
    from pytest_evalgate.attest import dsse as attest
    from pytest_evalgate.attest import override as attest_override

    target = args.output or f"{args.decision.removesuffix('.json')}.override.json"
    decision = attest.evalgate_load_envelope(args.decision)
    approver = _approver(args)
    override = (approver, args.reason, args.expires, args.key)
    envelope = attest_override.evalgate_override(decision, *override)
    attest.evalgate_write_envelope(envelope, target)
    print(f"override written: {target}")
    return True


def _approver(args: argparse.Namespace) -> str:
    """``--approver``, or with ``--trust`` the identity of the ``override`` key (an
    ``--approver`` that differs from it is refused: the approver is who holds the key)."""
    from pytest_evalgate.attest.keys import evalgate_load_private_key
    from pytest_evalgate.attest.trust import evalgate_load_trust
    from pytest_evalgate.errors import EvalgateConfigError, EvalgateSignatureError

    if not args.trust:
        if not args.approver:
            raise EvalgateConfigError("override", "--approver", "required without --trust")
        return str(args.approver)
    trust = evalgate_load_trust(args.trust, "--trust")
    try:
        identity = trust.evalgate_check_role(
            evalgate_load_private_key(args.key).public_key(), "override"
        )
    except EvalgateSignatureError as exc:
        raise EvalgateConfigError(args.key, "--key", str(exc)) from None
    if args.approver and args.approver != identity:
        reason = f"--approver {args.approver!r} is not the key's identity {identity!r}"
        raise EvalgateConfigError(args.trust, "--approver", reason)
    return identity
