"""The ``evalgate`` console script: what is not a test run.

Each subcommand is registered in ``_evalgate_subcommands()`` as (name, help, add_arguments, run);
``run(args) -> int`` returns the exit status. Subcommand bodies live in their own modules; this
file only wires argparse to them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

EvalgateAdder = Callable[[argparse.ArgumentParser], None]
EvalgateRunner = Callable[[argparse.Namespace], int]


def _evalgate_subcommands() -> list[tuple[str, str, EvalgateAdder, EvalgateRunner]]:
    return [
        ("pin", "write the dataset sha256 into a suite's manifest", _suite_arguments, _pin_run),
        ("gate", "gate what the store holds for a suite (no requests)", _gate_arguments, _gate_run),
        ("aggregate", "same as gate", _gate_arguments, _gate_run),
        (
            "report",
            "re-render report.md and forest.png from decision.json",
            _report_arguments,
            _report_run,
        ),
        ("keygen", "write an ECDSA P-256 signing key pair", _keygen_arguments, _keygen_run),
        ("verify", "check a signed decision record", _verify_arguments, _verify_run),
        ("override", "sign an override of a decision", _override_arguments, _override_run),
        ("serve", "run the simulated model (not a real model)", _serve_arguments, _serve_run),
        ("shard-plan", "write a cost-balanced shard plan", _shard_plan_arguments, _shard_plan_run),
        ("k8s", "render or run a suite's Kubernetes Jobs", _k8s_arguments, _k8s_run),
    ]


def _suite_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("suite", help="suite folder or its evalgate.yaml")


def _manifest_path(suite: str) -> str:
    import os

    return os.path.join(suite, "evalgate.yaml") if os.path.isdir(suite) else suite


def _pin_run(args: argparse.Namespace) -> int:
    from pytest_evalgate.errors import EvalgateConfigError
    from pytest_evalgate.manifest import evalgate_pin

    try:
        digest = evalgate_pin(_manifest_path(args.suite))
    except EvalgateConfigError as exc:
        print(f"evalgate pin: {exc}", file=sys.stderr)
        return 4
    print(f"pinned dataset sha256 {digest}")
    return 0


def _gate_arguments(parser: argparse.ArgumentParser) -> None:
    _suite_arguments(parser)
    parser.add_argument("--store", default=".evalgate", help="result store root")
    parser.add_argument("--policy", help="gate policy (default: the suite's gate.yaml)")
    parser.add_argument("--report", help="write decision.json, report.md, forest.png here")
    parser.add_argument("--sign-key", help="sign the decision with this PEM private key")


def _gate_run(args: argparse.Namespace) -> int:
    from pytest_evalgate.aggregate import EvalgateSelection
    from pytest_evalgate.decide import evalgate_decide, evalgate_load_suite_policy, evalgate_pair
    from pytest_evalgate.errors import EvalgateConfigError
    from pytest_evalgate.manifest import evalgate_load_manifest
    from pytest_evalgate.perf import evalgate_perf_phase
    from pytest_evalgate.report import evalgate_summary_lines
    from pytest_evalgate.store import EvalgateLocalStore

    try:
        manifest = evalgate_load_manifest(_manifest_path(args.suite))
        policy = evalgate_load_suite_policy(manifest, args.policy)
        selection = EvalgateSelection(
            tuple(manifest.candidates), tuple(case.case_id for case in manifest.cases)
        )
        backend = EvalgateLocalStore(args.store)
        perf = evalgate_perf_phase(backend, manifest, None, evalgate_pair(manifest, policy))
        outcome = evalgate_decide(
            backend, manifest, selection, policy,
            report_dir=args.report, sign_key=args.sign_key, perf=perf,
        )  # fmt: skip
    except EvalgateConfigError as exc:
        print(f"evalgate gate: {exc}", file=sys.stderr)
        return 4
    for line in [*evalgate_summary_lines(outcome.decision), *outcome.notes]:
        print(line)
    for path in outcome.written:
        print(f"wrote {path}")
    return outcome.exit_status


def _report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", help="folder holding decision.json")


def _report_run(args: argparse.Namespace) -> int:
    import json
    import os

    from pytest_evalgate.report import evalgate_write_report

    with open(os.path.join(args.directory, "decision.json"), encoding="utf-8") as handle:
        decision = json.load(handle)
    for path in evalgate_write_report(args.directory, decision):
        print(f"wrote {path}")
    return 0


def _shard_plan_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("suite", help="suite folder or its evalgate.yaml")
    parser.add_argument("--shards", type=int, required=True, help="number of shards N")
    parser.add_argument("--output", help="plan file (default: SUITE/shard-plan-N.json)")


def _shard_plan_run(args: argparse.Namespace) -> int:
    from pytest_evalgate.shard import evalgate_shard_plan_main

    return evalgate_shard_plan_main(args.suite, args.shards, args.output)


def _k8s_arguments(parser: argparse.ArgumentParser) -> None:
    from pytest_evalgate.k8s import evalgate_k8s_add_arguments

    evalgate_k8s_add_arguments(parser)


def _k8s_run(args: argparse.Namespace) -> int:
    from pytest_evalgate.k8s import evalgate_k8s_main

    return evalgate_k8s_main(args)


def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    from pytest_evalgate.simulated import evalgate_sim_knob_names

    parser.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (0: any free)")
    parser.add_argument("--answers", default=None, help="answer key (JSON Lines)")
    parser.add_argument("--request-log", default=None, help="append one JSON line per request")
    parser.add_argument(
        "--parent-pid", type=int, default=None, help="stop when this process is gone (spawned use)"
    )
    parser.add_argument("--url", default=None, help="knobs as simulated://?knob=value&...")
    for name in evalgate_sim_knob_names():
        flag = "--" + name.replace("_", "-")
        parser.add_argument(
            flag, dest=f"knob_{name}", default=None, metavar="X", help=f"the {name} knob"
        )
    parser.add_argument(
        "--knob", action="append", default=[], metavar="K=V", help="any knob, e.g. accuracy.x=0.5"
    )


def _serve_knobs(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The URL's knobs, overridden by ``--<knob>`` options, overridden by ``--knob K=V``."""
    from urllib.parse import parse_qsl, urlsplit

    from pytest_evalgate.errors import EvalgateConfigError
    from pytest_evalgate.simulated import evalgate_parse_simulated_url, evalgate_sim_knob_names

    merged: dict[str, str] = {}
    if args.url:
        evalgate_parse_simulated_url(args.url)  # report URL errors against the URL first
        merged.update(parse_qsl(urlsplit(args.url).query, keep_blank_values=True))
    for name in evalgate_sim_knob_names():
        if getattr(args, f"knob_{name}") is not None:
            merged[name] = getattr(args, f"knob_{name}")
    for item in args.knob:
        name, sep, value = item.partition("=")
        if not sep:
            raise EvalgateConfigError("evalgate serve", item, "expected --knob NAME=VALUE")
        merged[name] = value
    return list(merged.items())


def _serve_ready(base_url: str) -> None:
    from pytest_evalgate.simulated import EVALGATE_SIM_READY

    print(f"{EVALGATE_SIM_READY} {base_url}", flush=True)


def _serve_run(args: argparse.Namespace) -> int:
    from pytest_evalgate.errors import EvalgateConfigError
    from pytest_evalgate.simulated import evalgate_sim_config_from_knobs, evalgate_sim_serve

    try:
        config = evalgate_sim_config_from_knobs(_serve_knobs(args), "evalgate serve")
        evalgate_sim_serve(
            config, args.answers, args.request_log, args.port, args.parent_pid, _serve_ready
        )
    except EvalgateConfigError as exc:
        print(f"evalgate serve: {exc}", file=sys.stderr)
        return 4
    return 0


def _keygen_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", default=".", help="where to write evalgate.key and evalgate.pub")


def _keygen_run(args: argparse.Namespace) -> int:
    from pytest_evalgate.attest import evalgate_keygen_main

    return evalgate_keygen_main(args.dir)


def _verify_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("envelope", help="DSSE envelope of a decision record")
    parser.add_argument("--key", required=True, help="PEM public key")
    parser.add_argument("--override", help="DSSE envelope of an override of this decision")
    parser.add_argument(
        "--require-pass", action="store_true", help="fail unless verdict pass or a valid override"
    )


def _verify_run(args: argparse.Namespace) -> int:
    from pytest_evalgate.attest import evalgate_verify_main

    return evalgate_verify_main(
        args.envelope, args.key, args.override, require_pass=args.require_pass
    )


def _override_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("decision", help="DSSE envelope of the decision to override")
    parser.add_argument("--approver", required=True, help="who approves shipping")
    parser.add_argument("--reason", required=True, help="why")
    parser.add_argument("--expires", required=True, help="ISO 8601 time with zone, <= 90 days")
    parser.add_argument("--key", required=True, help="PEM private key of the approver")
    parser.add_argument("--output", help="default: <decision>.override.json")


def _override_run(args: argparse.Namespace) -> int:
    from pytest_evalgate.attest import evalgate_override_main

    return evalgate_override_main(
        args.decision, args.approver, args.reason, args.expires, args.key, args.output
    )


def evalgate_build_parser() -> argparse.ArgumentParser:
    """The argparse parser with every registered subcommand."""
    parser = argparse.ArgumentParser(prog="evalgate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text, add_arguments, run in _evalgate_subcommands():
        command = sub.add_parser(name, help=help_text, description=help_text)
        add_arguments(command)
        command.set_defaults(evalgate_run=run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns the exit status (also used by ``sys.exit``)."""
    args = evalgate_build_parser().parse_args(argv)
    run: EvalgateRunner = args.evalgate_run
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
