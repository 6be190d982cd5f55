"""``evalgate admission serve (--key PUB --registry-key PUB | --trust TRUST) --registry PATH
--tls-cert PEM --tls-key PEM [--port 8443] [--require-binding verified]``: the validating
admission webhook (SPEC sections 14 and 20), until SIGTERM or SIGINT. With ``--trust`` the keys
come from the trust file by role, and a decision must rest on an approved policy and a release
signature of its weights (``admission.checker``).

It listens on all interfaces (``PYTEST_EVALGATE_ADMISSION_HOST`` names another address) and,
once listening, prints ``EVALGATE_ADMISSION_READY https://HOST:PORT`` on stdout, flushed
(``--port 0`` picks a free port). The namespaces whose Pods are checked come from
``PYTEST_EVALGATE_ADMISSION_NAMESPACES`` (comma-separated patterns, default ``serve-*``).
Every denial is logged on stderr. Unusable keys, certificates, registry folder or port exit 4
before anything listens; a clean stop exits 0.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from pytest_evalgate.cli.command import EvalgateCommand

if TYPE_CHECKING:
    from pytest_evalgate.admission import EvalgateAdmissionConfig, EvalgateAdmissionServer

EVALGATE_ADMISSION_READY = "EVALGATE_ADMISSION_READY"
EVALGATE_ADMISSION_HOST_ENV = "PYTEST_EVALGATE_ADMISSION_HOST"


def evalgate_admission_commands() -> tuple[EvalgateCommand, ...]:
    """The ``admission`` subcommand (with its own ``serve``)."""
    text = "run the validating admission webhook"
    return (EvalgateCommand("admission", text, _arguments, _run, usage_errors=(OSError,)),)


def _arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="admission_command", required=True)
    serve = sub.add_parser("serve", help="serve POST /validate and GET /healthz over HTTPS")
    serve.add_argument("--key", metavar="PUB", help="the gate's public key (without --trust)")
    serve.add_argument("--registry", required=True, metavar="PATH", help="registry folder")
    serve.add_argument("--registry-key", metavar="PUB", help="registry public key (no --trust)")
    serve.add_argument(
        "--trust", metavar="TRUST", help="trust file: keys by role, instead of --key/--registry-key"
    )
    serve.add_argument(
        "--require-binding",
        choices=("verified",),
        help="deny declared weights",
    )
    serve.add_argument("--tls-cert", required=True, metavar="PEM", help="serving certificate")
    serve.add_argument("--tls-key", required=True, metavar="PEM", help="its private key")
    serve.add_argument("--port", type=int, default=8443, help="port (0: any free port)")


def _run(args: argparse.Namespace) -> bool:
    import logging
    import os

    from pytest_evalgate.admission import (
        EVALGATE_ADMISSION_NAMESPACES_ENV,
        EvalgateAdmission,
        EvalgateAdmissionServer,
        evalgate_admission_namespaces,
    )

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    namespaces = evalgate_admission_namespaces(os.environ.get(EVALGATE_ADMISSION_NAMESPACES_ENV))
    config = _config(args, namespaces)
    host = os.environ.get(EVALGATE_ADMISSION_HOST_ENV, "0.0.0.0")
    server = EvalgateAdmissionServer(
        EvalgateAdmission(config), args.tls_cert, args.tls_key, host=host, port=args.port
    )
    _serve_until_signalled(server)
    return True


def _config(args: argparse.Namespace, namespaces: tuple[str, ...]) -> EvalgateAdmissionConfig:
    """The webhook's keys: a trust file, or both --key and --registry-key (not a mix)."""
    from pytest_evalgate.admission import EvalgateAdmissionConfig
    from pytest_evalgate.attest.trust import evalgate_load_trust
    from pytest_evalgate.errors import EvalgateConfigError

    if args.trust is not None:
        if args.key or args.registry_key:
            reason = "give either --trust or --key with --registry-key, not both"
            raise EvalgateConfigError(args.trust, "--trust", reason)
        trust = evalgate_load_trust(args.trust, "--trust")
        return EvalgateAdmissionConfig(
            "", args.registry, "", namespaces, trust=trust, require_binding=args.require_binding
        )
    if not args.key or not args.registry_key:
        raise EvalgateConfigError("admission serve", "--key", "needs --key and --registry-key")
    return EvalgateAdmissionConfig(
        args.key, args.registry, args.registry_key, namespaces,
        require_binding=args.require_binding,
    )  # fmt: skip


def _serve_until_signalled(server: EvalgateAdmissionServer) -> None:
    import signal
    import threading

    stop = threading.Event()
    signals = (signal.SIGTERM, signal.SIGINT)
    handlers = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in signals}
    try:
        server.start()
        print(f"{EVALGATE_ADMISSION_READY} {server.url}", flush=True)
        while not stop.wait(timeout=1.0):  # a timed wait lets the signal handler run promptly
            pass
    finally:
        server.stop()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
