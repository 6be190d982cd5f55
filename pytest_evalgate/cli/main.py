"""``evalgate``: the parser of every subcommand and the console entry point.

:func:`main` parses the command line, runs the chosen subcommand through the one error wrapper
(:func:`evalgate_run_command`) and returns its exit status; :func:`evalgate_commands` lists every
subcommand in ``evalgate --help`` order.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pytest_evalgate.cli.admission import evalgate_admission_commands
from pytest_evalgate.cli.attest import evalgate_attest_commands
from pytest_evalgate.cli.canary import evalgate_canary_commands
from pytest_evalgate.cli.capacity import evalgate_capacity_commands
from pytest_evalgate.cli.command import EvalgateCommand, evalgate_run_command
from pytest_evalgate.cli.contamination import evalgate_contamination_commands
from pytest_evalgate.cli.imports import evalgate_import_commands
from pytest_evalgate.cli.judge import evalgate_judge_commands
from pytest_evalgate.cli.k8s import evalgate_k8s_commands
from pytest_evalgate.cli.onlinejudge import evalgate_online_judge_commands
from pytest_evalgate.cli.policy import evalgate_policy_commands
from pytest_evalgate.cli.polyaxon import evalgate_polyaxon_commands
from pytest_evalgate.cli.reference import evalgate_reference_commands
from pytest_evalgate.cli.registry import evalgate_registry_commands
from pytest_evalgate.cli.serve import evalgate_serve_commands
from pytest_evalgate.cli.shadow import evalgate_shadow_commands
from pytest_evalgate.cli.shard_plan import evalgate_shard_plan_commands
from pytest_evalgate.cli.suite import evalgate_suite_commands
from pytest_evalgate.cli.trend import evalgate_trend_commands
from pytest_evalgate.cli.weights import evalgate_weights_commands

_DESCRIPTION = "The ``evalgate`` console script: what is not a test run."


def evalgate_commands() -> tuple[EvalgateCommand, ...]:
    """Every subcommand, in ``evalgate --help`` order."""
    return (
        *evalgate_suite_commands(),
        *evalgate_judge_commands(),
        *evalgate_attest_commands(),
        *evalgate_policy_commands(),
        *evalgate_weights_commands(),
        *evalgate_serve_commands(),
        *evalgate_shard_plan_commands(),
        *evalgate_k8s_commands(),
        *evalgate_polyaxon_commands(),
        *evalgate_registry_commands(),
        *evalgate_admission_commands(),
        *evalgate_canary_commands(),
        *evalgate_shadow_commands(),
        *evalgate_online_judge_commands(),
        *evalgate_contamination_commands(),
        *evalgate_trend_commands(),
        *evalgate_import_commands(),
        *evalgate_capacity_commands(),
        *evalgate_reference_commands(),
    )


def evalgate_build_parser() -> argparse.ArgumentParser:
    """The argparse parser with every subcommand; a parsed namespace carries its command as
    ``evalgate_command``."""
    parser = argparse.ArgumentParser(prog="evalgate", description=_DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in evalgate_commands():
        subparser = sub.add_parser(command.name, help=command.help, description=command.help)
        command.add_arguments(subparser)
        subparser.set_defaults(evalgate_command=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: parse ``argv`` (default ``sys.argv[1:]``), run the subcommand and
    return its exit status (argparse itself exits 2 on unparsable options)."""
    args = evalgate_build_parser().parse_args(argv)
    command: EvalgateCommand = args.evalgate_command
    return evalgate_run_command(command, args)
