"""The session's options, read once from pytest's configuration into frozen values.

``evalgate_read_options`` reads the ``--evalgate-*`` options and ini keys the session's steps
need; ``evalgate_topology`` builds the process's ``EvalgateTopology`` (shard, xdist position,
run id); ``evalgate_check_output_folders`` refuses an output folder that would lead a write out
of the store, before any request. Nothing here holds state: the plugin keeps what they return.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # cryptography is imported only when a trust file is given
    from pytest_evalgate.attest.trust import EvalgateTrust
from pytest_evalgate.session.usage import evalgate_usage_errors
from pytest_evalgate.shard.plan import (
    EvalgateTopology,
    evalgate_parse_shard,
    evalgate_worker_position,
)
from pytest_evalgate.store import EvalgateStoreBackend, evalgate_check_store_folder


@dataclass(frozen=True)
class EvalgateOptions:
    """What the command line and the ini file say, for the session's steps.

    ``requests`` is False when the session sends no request (``--evalgate-aggregate`` or
    ``--collect-only``); ``worker`` is True in an xdist worker.
    """

    store_root: str
    candidates: frozenset[str]
    aggregate_only: bool
    collect_only: bool
    worker: bool
    tier: str | None
    policy: str | None
    fresh: bool
    request_log: str | None
    report_dir: str | None
    sign_key: str | None
    report_text: bool
    trust: str | None = None

    @property
    def requests(self) -> bool:
        """Whether this session may send requests (neither aggregate mode nor a listing)."""
        return not (self.aggregate_only or self.collect_only)

    def evalgate_wants_candidate(self, name: str) -> bool:
        """Whether ``--evalgate-candidate`` selects ``name`` (all when not given)."""
        return not self.candidates or name in self.candidates


def evalgate_read_options(config: pytest.Config) -> EvalgateOptions:
    """The session's options from ``config`` (read once, at configure time)."""
    store = config.getoption("evalgate_store") or config.getini("evalgate_store")
    policy = config.getoption("evalgate_policy") or config.getini("evalgate_policy")
    trust = config.getoption("evalgate_trust") or config.getini("evalgate_trust")
    return EvalgateOptions(
        store_root=str(store),
        candidates=frozenset(config.getoption("evalgate_candidate")),
        aggregate_only=bool(config.getoption("evalgate_aggregate")),
        collect_only=bool(config.option.collectonly),
        worker=hasattr(config, "workerinput"),
        tier=config.getoption("evalgate_tier"),
        policy=str(policy) if policy else None,
        fresh=bool(config.getoption("evalgate_fresh")),
        request_log=config.getoption("evalgate_request_log"),
        report_dir=config.getoption("evalgate_report"),
        sign_key=config.getoption("evalgate_sign_key"),
        report_text=bool(config.getoption("evalgate_report_text")),
        trust=str(trust) if trust else None,
    )


def evalgate_check_sign_key(options: EvalgateOptions) -> None:
    """A ``--evalgate-sign-key`` that cannot sign (missing, garbage, a public key, not P-256)
    is a configuration error now, before any request: it was refused only at the gate, after
    every answer had been paid for. So is a bad ``--evalgate-trust`` file, and a sign key the
    trust file does not give the ``gate`` role. cryptography is imported only then."""
    if options.sign_key is None and options.trust is None:
        return
    from pytest_evalgate.attest.trust import evalgate_trust_for_signing

    evalgate_trust_for_signing(
        options.trust, options.sign_key, "--evalgate-trust", "--evalgate-sign-key"
    )


def evalgate_session_trust(options: EvalgateOptions) -> EvalgateTrust | None:
    """The session's trust file, loaded and checked (exit 4 when it is bad), or None."""
    if options.trust is None:
        return None
    from pytest_evalgate.attest.trust import evalgate_trust_for_signing

    return evalgate_trust_for_signing(options.trust, None, "--evalgate-trust", "")


def evalgate_topology(config: pytest.Config, writer_run: str) -> EvalgateTopology:
    """This process's place in the run: ``--evalgate-shard`` (a bad value: usage error), its
    xdist position, and the run id every process of the run shares."""
    text = config.getoption("evalgate_shard")
    with evalgate_usage_errors():
        shard = None if text is None else evalgate_parse_shard(text)
    workerinput = getattr(config, "workerinput", None)
    index, count = evalgate_worker_position(workerinput)
    # Every process of one run must name the same generation: pods share the env var,
    # xdist workers the controller's testrunuid.
    default = str(workerinput["testrunuid"]) if workerinput else writer_run
    run_id = os.environ.get("PYTEST_EVALGATE_RUN_ID", default)
    return EvalgateTopology(shard, index, count, run_id)


def evalgate_check_output_folders(
    config: pytest.Config, options: EvalgateOptions, backend: EvalgateStoreBackend
) -> None:
    """Before any request: the report folder can be replaced whole, and no output folder
    inside a folder store leads out of it through a symlink (docs/security.md)."""
    report = options.report_dir
    if report:
        evalgate_check_store_folder(backend, report, "--evalgate-report")
        from pytest_evalgate.report import evalgate_check_report_folder  # with a folder only

        evalgate_check_report_folder(report)
    junit = getattr(config.option, "xmlpath", None)
    if junit:
        folder = os.path.dirname(os.path.abspath(junit))
        evalgate_check_store_folder(backend, folder, "--junitxml")
