"""``evalgate plan`` and ``evalgate probe``: what a suite costs, and how much concurrency an
endpoint takes (SPEC section 12; ``docs/capacity.md``). One module each: ``cli/plan.py``,
``cli/probe.py``.
"""

from __future__ import annotations

from pytest_evalgate.cli.command import EvalgateCommand
from pytest_evalgate.cli.plan import evalgate_plan_command
from pytest_evalgate.cli.probe import evalgate_probe_command


def evalgate_capacity_commands() -> tuple[EvalgateCommand, ...]:
    """The ``plan`` and ``probe`` subcommands."""
    return (evalgate_plan_command(), evalgate_probe_command())
