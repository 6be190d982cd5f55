"""``evalgate policy approve|show``: change control of gate policies (SPEC section 20).

- ``approve PATH --sign-key KEY [--expires TIME] [--trust TRUST]`` signs an approval of the
  policy's digest and version and writes it beside the policy (``gate.yaml`` ->
  ``gate.approval.dsse.json``); it never replaces an approval already there unless
  ``--replace``. With ``--trust`` the key must hold the ``policy`` role.
- ``show PATH [--trust TRUST]`` prints the policy's version and digest and, when an approval
  lies beside it, what it approves and (with ``--trust``) whether it is valid and by whom;
  ``result: APPROVED`` (exit 0) or ``NOT APPROVED: REASON`` (exit 1). Without ``--trust`` it
  says what the approval claims and exits 0: only a trust file can say who may approve.

A bad policy, key, time or trust file exits 4.
"""

from __future__ import annotations

import argparse

from pytest_evalgate.cli.command import EvalgateCommand


def evalgate_policy_commands() -> tuple[EvalgateCommand, ...]:
    """The ``policy`` subcommand (with its own ``approve`` and ``show``)."""
    text = "approve a gate policy, or show whether it is approved"
    return (EvalgateCommand("policy", text, _arguments, _run, usage_errors=(OSError,)),)


def _arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="policy_command", required=True)
    approve = sub.add_parser("approve", help="sign an approval of the policy's digest")
    show = sub.add_parser("show", help="the policy's digest and who approved it")
    for command in (approve, show):
        command.add_argument("policy", metavar="PATH", help="gate policy (gate.yaml)")
        command.add_argument("--trust", metavar="TRUST", help="trust file (signer roles)")
    approve.add_argument("--sign-key", required=True, metavar="KEY", help="PEM private key")
    approve.add_argument("--expires", metavar="TIME", help="ISO 8601 time with zone")
    approve.add_argument("--replace", action="store_true", help="replace an existing approval")


def _run(args: argparse.Namespace) -> bool:
    return _approve(args) if args.policy_command == "approve" else _show(args)


def _approve(args: argparse.Namespace) -> bool:
    import os
    from datetime import UTC, datetime

    from pytest_evalgate.attest.approval import evalgate_approval_path, evalgate_approval_statement
    from pytest_evalgate.attest.dsse import evalgate_sign, evalgate_write_envelope
    from pytest_evalgate.attest.keys import evalgate_load_private_key
    from pytest_evalgate.attest.override import evalgate_parse_time
    from pytest_evalgate.attest.trust import evalgate_load_trust
    from pytest_evalgate.errors import EvalgateConfigError, EvalgateSignatureError
    from pytest_evalgate.policy.load import evalgate_load_policy
    from pytest_evalgate.policy.values import evalgate_policy_digest

    policy = evalgate_load_policy(args.policy)
    digest = evalgate_policy_digest(policy)
    key = evalgate_load_private_key(args.sign_key)
    if args.trust:
        trust = evalgate_load_trust(args.trust, "--trust")
        try:
            identity = trust.evalgate_check_role(key.public_key(), "policy")
        except EvalgateSignatureError as exc:
            raise EvalgateConfigError(args.sign_key, "--sign-key", str(exc)) from None
        print(f"signer: {identity}")
    target = evalgate_approval_path(args.policy)
    if os.path.exists(target) and not args.replace:
        reason = "an approval is already there (--replace to sign a new one)"
        raise EvalgateConfigError(target, "approval", reason)
    expires = None if args.expires is None else evalgate_parse_time(args.expires, "--expires")
    statement = evalgate_approval_statement(policy.version, digest, datetime.now(UTC), expires)
    evalgate_write_envelope(evalgate_sign(statement, args.sign_key), target)
    print(f"policy {policy.version} sha256:{digest}\napproval written: {target}")
    return True


def _show(args: argparse.Namespace) -> bool:
    import os
    from datetime import UTC, datetime

    from pytest_evalgate.attest.approval import evalgate_approval_path, evalgate_read_approval
    from pytest_evalgate.attest.dsse import (
        evalgate_envelope_parts,
        evalgate_load_envelope,
        evalgate_parse_statement,
    )
    from pytest_evalgate.attest.trust import evalgate_load_trust
    from pytest_evalgate.errors import EvalgateSignatureError
    from pytest_evalgate.policy.load import evalgate_load_policy
    from pytest_evalgate.policy.values import evalgate_policy_digest

    policy = evalgate_load_policy(args.policy)
    digest = evalgate_policy_digest(policy)
    trust = evalgate_load_trust(args.trust, "--trust") if args.trust else None
    path = evalgate_approval_path(args.policy)
    print(f"policy: {args.policy}\nversion: {policy.version}\ndigest: sha256:{digest}")
    if trust is not None:
        try:
            approval = evalgate_read_approval(
                args.policy, trust, policy.version, digest, datetime.now(UTC)
            )
        except EvalgateSignatureError as exc:
            print(f"NOT APPROVED: policy {policy.version} sha256:{digest[:16]}: {exc}")
            return False
        print(f"approval: {path}\n{approval.describe()}\nresult: APPROVED")
        return True
    if not os.path.isfile(path):
        print(f"approval: none ({path} does not exist)")
        return True
    body, signatures = evalgate_envelope_parts(evalgate_load_envelope(path))
    predicate = evalgate_parse_statement(body)["predicate"]
    claimed = f"{predicate.get('policy_version')} {predicate.get('policy_digest')}"
    keyids = ", ".join(str(entry.get("keyid"))[:16] for entry in signatures)
    print(f"approval: {path}\nclaims: policy {claimed}, signed by key {keyids}")
    print(f"approved_at: {predicate.get('approved_at')} expires_at: {predicate.get('expires_at')}")
    print("unchecked: give --trust to verify the signer's role")
    return True
