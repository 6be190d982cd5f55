"""``evalgate registry promote|revoke|show``: a weights digest's release states (SPEC section 14).

- ``promote DIGEST --to STATE [--attestation FILE] --registry PATH --sign-key PEM`` appends
  ``STATE`` and prints the new entry. ``--attestation`` is a signed decision (a DSSE envelope)
  or an override of one; give it twice for a decision and its override. An override alone finds
  its decision among the attestations the registry recorded. Decisions verify under
  ``PATH/gate.pub``.
- ``revoke DIGEST --reason TEXT --registry PATH --sign-key PEM``: ``revoked``, from any state.
- ``--trust TRUST`` (promote, revoke, show; SPEC section 20): keys by role instead of
  ``gate.pub`` and ``--registry-key``; the sign key must hold ``registry``, and a gated state's
  decision must rest on an approved policy.
- ``show DIGEST --registry PATH (--registry-key PUB | --trust TRUST)`` verifies the chain and
  prints it and ``result: VALID``; a chain that does not verify prints ``INVALID: REASON`` and
  exits 1.

A refused transition or basis exits 1; a bad digest or state, an unreadable key or file, or a
missing ``gate.pub`` exits 4. ``who`` is ``user@host`` of the process.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from pytest_evalgate.cli.command import EvalgateCommand

if TYPE_CHECKING:
    from pytest_evalgate.attest.trust import EvalgateTrust
    from pytest_evalgate.registry import EvalgateRegistryEntry


def evalgate_registry_commands() -> tuple[EvalgateCommand, ...]:
    """The ``registry`` subcommand (with its own ``promote``, ``revoke`` and ``show``)."""
    text = "promote, revoke or show a weights digest's release state"
    return (EvalgateCommand("registry", text, _arguments, _run, usage_errors=(OSError,)),)


def _arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="registry_command", required=True)
    promote = sub.add_parser("promote", help="append the next state (candidate, gated, ...)")
    revoke = sub.add_parser("revoke", help="revoke a digest, from any state")
    show = sub.add_parser("show", help="verify a digest's chain and print it")
    for command in (promote, revoke, show):
        command.add_argument("digest", metavar="DIGEST", help="weights digest sha256:<hex>")
    promote.add_argument("--to", required=True, metavar="STATE", help="the state to append")
    promote.add_argument(
        "--attestation", action="append", default=[], metavar="FILE",
        help="a signed decision or an override of one (twice: decision and override)",
    )  # fmt: skip
    revoke.add_argument("--reason", required=True, help="why (recorded in the entry)")
    for command in (promote, revoke, show):
        command.add_argument("--registry", required=True, metavar="PATH", help="registry folder")
    for command in (promote, revoke):
        command.add_argument("--sign-key", required=True, metavar="PEM", help="registry key")
    for command in (promote, revoke):
        command.add_argument("--trust", metavar="TRUST", help="trust file: keys by role")
    keys = show.add_mutually_exclusive_group(required=True)
    keys.add_argument("--registry-key", metavar="PUB", help="registry public key")
    keys.add_argument("--trust", metavar="TRUST", help="trust file: the registry keys by role")


def _run(args: argparse.Namespace) -> bool:
    if args.registry_command == "show":
        return _show(args)
    entry = _promote(args) if args.registry_command == "promote" else _revoke(args)
    print(f"{entry.path}: entry {entry.sequence} of {entry.digest}")
    print(f"state: {entry.previous_state or '-'} -> {entry.state} by {entry.who}: {entry.why}")
    return True


def _who() -> str:
    import getpass
    import os
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry in a container
        user = f"uid-{os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def _promote(args: argparse.Namespace) -> EvalgateRegistryEntry:
    from pytest_evalgate.registry import evalgate_registry_promote

    envelopes = [_attestation(path) for path in args.attestation]
    return evalgate_registry_promote(
        args.registry, args.digest, args.to, envelopes, args.sign_key, who=_who(),
        trust=_trust(args),
    )  # fmt: skip


def _trust(args: argparse.Namespace) -> EvalgateTrust | None:
    from pytest_evalgate.attest.trust import evalgate_load_trust

    return evalgate_load_trust(args.trust, "--trust") if args.trust else None


def _attestation(path: str) -> dict[str, Any]:
    import os

    from pytest_evalgate.attest.dsse import evalgate_load_envelope
    from pytest_evalgate.errors import EvalgateConfigError

    if not os.path.isfile(path):
        raise EvalgateConfigError(path, "--attestation", "no such file")
    return evalgate_load_envelope(path)


def _revoke(args: argparse.Namespace) -> EvalgateRegistryEntry:
    from pytest_evalgate.registry import evalgate_registry_revoke

    return evalgate_registry_revoke(
        args.registry, args.digest, args.reason, args.sign_key, who=_who(), trust=_trust(args)
    )


def _show(args: argparse.Namespace) -> bool:
    from pytest_evalgate.attest.keys import evalgate_load_public_key
    from pytest_evalgate.errors import EvalgateRegistryError
    from pytest_evalgate.registry import evalgate_registry_describe, evalgate_registry_read

    key = _trust(args) or evalgate_load_public_key(args.registry_key)
    try:
        chain = evalgate_registry_read(args.registry, args.digest, key)
    except EvalgateRegistryError as exc:
        print(f"INVALID: {exc}")
        return False
    print("\n".join(evalgate_registry_describe(chain)))
    print("result: VALID")
    return True
