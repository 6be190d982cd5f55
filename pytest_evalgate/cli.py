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
    return []


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
