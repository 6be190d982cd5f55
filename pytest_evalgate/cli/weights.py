"""``evalgate weights sign|verify``: OpenSSF model-signing signatures of a weights folder
(SPEC section 20).

- ``sign DIR --sign-key KEY [--output SIG]`` signs every file under DIR (default output:
  ``DIR.sig.json`` beside the folder); an existing signature is never replaced.
- ``verify DIR --signature SIG (--key PUB | --trust TRUST) [--digest sha256:D --record PATH]``
  prints what it checked, ``signer: IDENTITY`` and ``result: VALID`` (exit 0), or ``INVALID:
  REASON`` (exit 1) naming the first file that differs or the keys tried. With ``--trust`` only
  keys holding ``release`` count; a signature by a trusted key without it is refused naming the
  key, its identity and the role. ``--record`` writes what the decision reads where the weights
  are served (``PYTEST_EVALGATE_WEIGHTS_VERIFIED``): the serving sidecar's init container runs
  this before the server starts.

A missing folder, signature or key, or a bad trust file, exits 4.
"""

from __future__ import annotations

import argparse

from pytest_evalgate.cli.command import EvalgateCommand


def evalgate_weights_commands() -> tuple[EvalgateCommand, ...]:
    """The ``weights`` subcommand (with its own ``sign`` and ``verify``)."""
    text = "sign a weights folder, or verify it against its signature"
    return (EvalgateCommand("weights", text, _arguments, _run, usage_errors=(OSError,)),)


def _arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="weights_command", required=True)
    sign = sub.add_parser("sign", help="sign every file of a weights folder")
    verify = sub.add_parser("verify", help="verify a weights folder against its signature")
    for command in (sign, verify):
        command.add_argument("folder", metavar="DIR", help="the weights folder")
    sign.add_argument("--sign-key", required=True, metavar="KEY", help="PEM private key")
    sign.add_argument("--output", metavar="SIG", help="default: DIR.sig.json")
    verify.add_argument("--signature", required=True, metavar="SIG", help="signature file")
    keys = verify.add_mutually_exclusive_group(required=True)
    keys.add_argument("--key", metavar="PUB", help="the release key (PEM public key)")
    keys.add_argument("--trust", metavar="TRUST", help="trust file: keys holding 'release'")
    verify.add_argument("--digest", metavar="sha256:D", help="the weights image's digest")
    verify.add_argument("--record", metavar="PATH", help="write the verification record here")


def _run(args: argparse.Namespace) -> bool:
    return _sign(args) if args.weights_command == "sign" else _verify(args)


def _sign(args: argparse.Namespace) -> bool:
    from pytest_evalgate.weights import evalgate_sign_weights

    target = args.output or f"{args.folder.rstrip('/')}.sig.json"
    evalgate_sign_weights(args.folder, args.sign_key, target)
    print(f"signature written: {target}")
    return True


def _verify(args: argparse.Namespace) -> bool:
    from pytest_evalgate.errors import EvalgateConfigError, EvalgateSignatureError
    from pytest_evalgate.weights import evalgate_verify_weights, evalgate_write_verified_record

    if bool(args.record) != bool(args.digest):
        raise EvalgateConfigError("weights verify", "--record", "give --record with --digest")
    keys, others = _keys(args)
    try:
        verified = evalgate_verify_weights(args.folder, args.signature, keys)
    except EvalgateSignatureError as exc:
        print(f"INVALID: {_role_reason(args, others) or exc}")
        return False
    print(f"weights: {args.folder}\nsignature: {args.signature} sha256:{verified.signature_sha256}")
    print("checked: model-signing bundle signature, and the sha256 of every file")
    print(f"signer: {verified.identity} (key {verified.keyid[:16]})")
    if args.record:
        evalgate_write_verified_record(verified.evalgate_record(args.digest), args.record)
        print(f"record written: {args.record}")
    print("result: VALID")
    return True


def _keys(args: argparse.Namespace) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(the keys that count, the trusted keys without ``release``)."""
    if args.key:
        return [("--key", args.key)], []
    from pytest_evalgate.attest.trust import evalgate_load_trust

    trust = evalgate_load_trust(args.trust, "--trust")
    release = [(key.identity, key.path) for key in trust.keys if "release" in key.roles]
    others = [(key.identity, key.path) for key in trust.keys if "release" not in key.roles]
    return release, others


def _role_reason(args: argparse.Namespace, others: list[tuple[str, str]]) -> str | None:
    """When a trusted key without ``release`` made the signature: say so."""
    from pytest_evalgate.errors import EvalgateSignatureError
    from pytest_evalgate.weights import evalgate_verify_weights

    for identity, path in others:
        try:
            verified = evalgate_verify_weights(args.folder, args.signature, [(identity, path)])
        except EvalgateSignatureError:
            continue
        return f"signed by key {verified.keyid[:16]} ({identity}), which lacks role release"
    return None
