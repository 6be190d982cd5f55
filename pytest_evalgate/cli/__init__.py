"""The ``evalgate`` console script: what is not a test run.

Every program's argument parsing, printing and exit status lives in this package; it calls the
core modules, never the reverse. Each subcommand module exposes its ``EvalgateCommand`` values;
:func:`main` parses, runs the chosen one through the one error wrapper
(:func:`evalgate_run_command`) and returns its exit status: 0 passed, 1 failed (or another
evalgate error), 2 undecided (``canary check`` with too little traffic), 4 a configuration or
usage error.
"""

from __future__ import annotations

from pytest_evalgate.cli.command import (
    EVALGATE_EXIT_FAIL,
    EVALGATE_EXIT_PASS,
    EVALGATE_EXIT_UNDECIDED,
    EVALGATE_EXIT_USAGE,
    EvalgateCommand,
    evalgate_run_command,
    evalgate_verdict_status,
)
from pytest_evalgate.cli.main import evalgate_build_parser, evalgate_commands, main

__all__ = [
    "EVALGATE_EXIT_FAIL",
    "EVALGATE_EXIT_PASS",
    "EVALGATE_EXIT_UNDECIDED",
    "EVALGATE_EXIT_USAGE",
    "EvalgateCommand",
    "evalgate_build_parser",
    "evalgate_commands",
    "evalgate_run_command",
    "evalgate_verdict_status",
    "main",
]
