"""One-shot ``evalgate`` commands and ``pytest`` runs in the test's own process.

A ``python -m pytest_evalgate.cli ...`` subprocess starts a Python and imports the plugin's
modules again (about 0.4-0.7 s of CPU on the 2-core machine, several hundred times a suite run).
:func:`run_cli_inprocess` runs the same command through the console script's ``main`` here, with
its exit status and output as a :class:`subprocess.CompletedProcess`, in ``cwd``, with ``env``'s
changes applied to ``os.environ`` for the call only (a value of None removes the variable).
:func:`run_pytest_inprocess` does the same for a ``pytest`` run, through pytester (about 1-1.5 s
of CPU saved per run: pytest, numpy, scipy.special and the plugin are imported already).

Use them where the process boundary is not what a test is about: a test that kills or signals the
command, reads what it prints while it runs, or serves requests from it needs a subprocess.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from pytest_evalgate.cli import main as evalgate_cli_main


@contextlib.contextmanager
def patched_environ(env: Mapping[str, str | None]) -> Iterator[None]:
    """``os.environ`` with ``env`` applied (None removes a name), restored afterwards."""
    saved = {name: os.environ.get(name) for name in env}
    try:
        for name, value in env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_cli_inprocess(
    *args: str, cwd: Path, env: Mapping[str, str | None] | None = None
) -> subprocess.CompletedProcess[str]:
    """``evalgate ARGS`` through ``main`` in this process, in ``cwd``, with ``env`` applied."""
    out, err = io.StringIO(), io.StringIO()
    with (
        patched_environ(env or {}),
        contextlib.chdir(cwd),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            status = evalgate_cli_main(list(args))
        except SystemExit as exit_:  # argparse's exit on an unparsable command line
            status = exit_.code if isinstance(exit_.code, int) else 1
    return subprocess.CompletedProcess(list(args), status, out.getvalue(), err.getvalue())


def run_pytest_inprocess(
    pytester: pytest.Pytester, *args: str, cwd: Path
) -> subprocess.CompletedProcess[str]:
    """``pytest ARGS`` as pytester's in-process run in ``cwd``, with its exit status and output
    as a completed process (the shape of a ``subprocess.run`` of ``python -m pytest``). The
    runner's child, simulators and xdist workers are still processes of their own; a test that
    kills or signals the pytest process itself needs a subprocess."""
    with contextlib.chdir(cwd):
        result = pytester.runpytest_inprocess(*args)
    return subprocess.CompletedProcess(
        list(args), int(result.ret), result.stdout.str(), result.stderr.str()
    )
