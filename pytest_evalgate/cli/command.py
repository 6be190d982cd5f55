"""What every ``evalgate`` subcommand shares: its registration, the one error wrapper and the one
verdict -> exit status mapping.

A subcommand's ``run(args)`` prints its own output and returns its verdict: ``True`` when it
passed, ``False`` when it did not, ``None`` when it could not decide (``evalgate canary check``
with too little traffic to judge: exit 2). It never returns an exit status and never catches an
error only to print it:
:func:`evalgate_run_command` does both, in one place, for every subcommand:

- ``EvalgateConfigError`` (and the subcommand's declared ``usage_errors``, e.g. ``OSError`` for
  a file named on its command line): ``evalgate LABEL: MESSAGE`` on stderr, exit 4;
- any other ``EvalgateError``: the same message, exit 1;
- anything else is a bug and propagates with its traceback (Python exits 1): a programming
  error must never look as if the user's file were wrong.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

from pytest_evalgate.errors import EvalgateConfigError, EvalgateError

EVALGATE_EXIT_PASS = 0
EVALGATE_EXIT_FAIL = 1
EVALGATE_EXIT_UNDECIDED = 2  # too little evidence to pass or fail (canary check)
EVALGATE_EXIT_USAGE = 4

EvalgateAdder = Callable[[argparse.ArgumentParser], None]
EvalgateRunner = Callable[[argparse.Namespace], bool | None]


@dataclass(frozen=True)
class EvalgateCommand:
    """One subcommand: its name and help, how it adds its options, and how it runs.

    ``label`` names the command in error messages (default: ``name``); ``usage_errors`` are the
    exception types besides ``EvalgateConfigError`` that mean the user's input is wrong.
    """

    name: str
    help: str
    add_arguments: EvalgateAdder
    run: EvalgateRunner
    label: str = ""
    usage_errors: tuple[type[Exception], ...] = ()

    @property
    def message_label(self) -> str:
        """The word after ``evalgate`` in this command's error messages."""
        return self.label or self.name


def evalgate_verdict_status(passed: bool | None) -> int:
    """The exit status of a subcommand's verdict: 0 when it passed, 1 when it did not, 2 when it
    could not decide (``None``)."""
    if passed is None:
        return EVALGATE_EXIT_UNDECIDED
    return EVALGATE_EXIT_PASS if passed else EVALGATE_EXIT_FAIL


def evalgate_run_command(command: EvalgateCommand, args: argparse.Namespace) -> int:
    """Run ``command`` and return its exit status: its verdict's, or 4 / 1 for an error as the
    module docstring says. Errors that are not ours propagate unchanged."""
    try:
        passed = command.run(args)
    except EvalgateConfigError as exc:
        return _evalgate_refused(command, exc, EVALGATE_EXIT_USAGE)
    except command.usage_errors as exc:
        return _evalgate_refused(command, exc, EVALGATE_EXIT_USAGE)
    except EvalgateError as exc:
        return _evalgate_refused(command, exc, EVALGATE_EXIT_FAIL)
    return evalgate_verdict_status(passed)


def _evalgate_refused(command: EvalgateCommand, exc: Exception, status: int) -> int:
    print(f"evalgate {command.message_label}: {exc}", file=sys.stderr)
    return status
