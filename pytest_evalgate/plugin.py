"""pytest11 entry point: options and our hookspecs; inert unless ``--evalgate`` is given.

This module is imported by every pytest run where pytest-evalgate is installed, so it imports
nothing heavy. With ``--evalgate``, ``pytest_configure`` registers the ``EvalgatePlugin`` of
``session/core.py``, which holds the per-session state and the hooks that compose the stages.
"""

from __future__ import annotations

import os

import pytest

from pytest_evalgate import hookspecs


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("evalgate", "LLM evaluations as a release gate (pytest-evalgate)")
    group.addoption(
        "--evalgate",
        action="store_true",
        default=False,
        help="turn evalgate on; without it the plugin is inert",
    )
    group.addoption(
        "--evalgate-store",
        default=None,
        metavar="PATH",
        help="result store: a folder (default .evalgate/, or the evalgate_store ini key) "
        "or s3://bucket/prefix",
    )
    group.addoption(
        "--evalgate-shard",
        default=None,
        metavar="I/N",
        help="run only shard I of N; auto/N reads JOB_COMPLETION_INDEX",
    )
    group.addoption(
        "--evalgate-candidate",
        action="append",
        default=[],
        metavar="NAME",
        help="restrict to these candidates (repeatable)",
    )
    group.addoption(
        "--evalgate-tier",
        default=None,
        metavar="NAME",
        help="run and gate only the manifest's tier NAME (never a full-suite verdict)",
    )
    group.addoption(
        "--evalgate-aggregate",
        action="store_true",
        default=False,
        help="send no requests: verify the store and gate what it holds",
    )
    group.addoption(
        "--evalgate-policy",
        default=None,
        metavar="PATH",
        help="gate policy (default: the suite's gate.yaml)",
    )
    group.addoption(
        "--evalgate-report",
        default=None,
        metavar="DIR",
        help="write decision.json, report.md, report.html and forest.png to DIR",
    )
    group.addoption(
        "--evalgate-report-text",
        action="store_true",
        default=False,
        help="let reports and the terminal show case input, target and output (eval sets are"
        " crown jewels: without this flag only case ids leave the store)",
    )
    group.addoption(
        "--evalgate-sign-key",
        default=None,
        metavar="PEM",
        help="sign the decision record with this ECDSA P-256 private key",
    )
    group.addoption(
        "--evalgate-trust",
        default=None,
        metavar="TRUST",
        help="trust file (signer roles, SPEC section 20): the sign key must hold 'gate', and a"
        " decision is attestable only under a policy approved by a 'policy' key",
    )
    group.addoption(
        "--evalgate-request-log",
        default=None,
        metavar="FILE",
        help="simulated endpoints append one JSON line per request here",
    )
    group.addoption(
        "--evalgate-fresh",
        action="store_true",
        default=False,
        help="start over in a new store generation; nothing committed is overwritten or deleted"
        " (processes sharing PYTEST_EVALGATE_RUN_ID, or xdist workers, join one generation)",
    )
    parser.addini("evalgate_store", "result store root", default=".evalgate")
    parser.addini("evalgate_policy", "gate policy path", default="")  # fmt: skip
    parser.addini("evalgate_trust", "trust file (signer roles)", default="")  # fmt: skip


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # The runner child starts here, as soon as the options say this process will request:
    # its interpreter and imports (~0.27 s) overlap conftests, configuration and collection.
    # A run that needs no request stops it again (session/running.py, at the item loop's end);
    # a session that ends before (a usage error) stops it at its clean-up, so a child started
    # with one session's environment never serves the next session of the same process
    # (pytester's in-process runs, pytest.main called twice).
    if evalgate_prespawn_wanted(early_config.known_args_namespace):
        from pytest_evalgate.runner.spawn import (
            evalgate_discard_prespawned,
            evalgate_prespawn_child,
        )

        evalgate_prespawn_child()
        early_config.add_cleanup(evalgate_discard_prespawned)


def evalgate_prespawn_wanted(options: object) -> bool:
    """Whether the parsed options (pytest's early namespace) name a session that requests:
    ``--evalgate`` without ``--collect-only``, ``--evalgate-aggregate``, ``--help``,
    ``--version`` or xdist's ``-n`` (its controller sends no request; its workers start their
    child at collection)."""
    if not getattr(options, "evalgate", False):
        return False
    quiet = ("collectonly", "evalgate_aggregate", "help", "version", "numprocesses")
    return not any(getattr(options, name, None) for name in quiet)


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("evalgate"):
        return
    if evalgate_prespawn_wanted(config.option):
        from pytest_evalgate.session.gcpause import evalgate_pause_gc

        # Until the runner started (the session resumes it; this module's unconfigure at the
        # latest, which pytest runs once configure began, even when it raised): gcpause.py.
        evalgate_pause_gc()
    from pytest_evalgate.errors import EvalgateConfigError
    from pytest_evalgate.items import EVALGATE_PLUGIN_KEY
    from pytest_evalgate.protocol import EvalgateLightProtocol
    from pytest_evalgate.runner.wire import evalgate_asyncio_loop_wanted
    from pytest_evalgate.session.core import EvalgatePlugin

    try:
        evalgate_asyncio_loop_wanted(os.environ)  # a bad value stops the run before a request
    except EvalgateConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    plugin = EvalgatePlugin(config)
    config.stash[EVALGATE_PLUGIN_KEY] = plugin
    config.pluginmanager.register(plugin, "evalgate-plugin")
    config.pluginmanager.register(EvalgateLightProtocol(), "evalgate-protocol")


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.getoption("evalgate", False):
        from pytest_evalgate.session.gcpause import evalgate_resume_gc

        evalgate_resume_gc()  # a configure that raised registered no session to do it
