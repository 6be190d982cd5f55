"""The xdist side of a session: what a worker tells its controller, what the controller reads
of a worker that went down, and the scheduler that sends worker k its sub-shard.

Worker data crosses ``workeroutput`` as builtins only, under the ``"evalgate"`` key (what the
worker ran) and ``"evalgate_stop"`` (why it stopped at collection). A worker that reports
neither crashed: the controller gives no verdict for it (fail closed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict

import pytest

from pytest_evalgate.session.prepare import EvalgateChosen
from pytest_evalgate.shard.scheduler import EvalgateScheduling

_WORKER_STOP = "evalgate_stop"  # the workeroutput key: why an xdist worker stopped at collection
_WORKER_OUTPUT = "evalgate"  # the workeroutput key: what the worker ran


class EvalgateWorkerStop(TypedDict):
    """Why a worker stopped at collection: the message and the exit status it would have had
    alone (4: a usage error, 1: a refused store)."""

    message: str
    returncode: int


class EvalgateWorkerNode(Protocol):
    """What the controller reads of a worker that went down (xdist's ``WorkerController``):
    its gateway (whose ``id`` names it) and, unless it crashed, its ``workeroutput``."""

    @property
    def gateway(self) -> object:
        """The execnet gateway of the worker."""


@dataclass(frozen=True)
class EvalgateNodeReport:
    """What a worker that went down reported: why it stopped (if it did), its gateway id when
    it crashed (reported nothing), and what it ran (suite path -> candidates and cases)."""

    stop: EvalgateWorkerStop | None
    crashed: str | None
    selection: Mapping[str, EvalgateChosen]
    reused: tuple[int, int] = (0, 0)  # its items' results found in the store, and not
    defects: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # session.defects


def evalgate_tell_stop(config: pytest.Config, stop: EvalgateWorkerStop) -> None:
    """In a worker: tell the controller why this worker stops at collection."""
    config.workeroutput[_WORKER_STOP] = stop  # type: ignore[attr-defined]


def evalgate_tell_selection(
    config: pytest.Config,
    selection: Mapping[str, EvalgateChosen],
    reused: tuple[int, int],
    defects: Mapping[str, Mapping[str, Any]],
) -> None:
    """In a worker: tell the controller what it ran, how many of its items' results it found
    in the store (``reused``, ``requested``) and its suite defects (``session.defects``)."""
    output = {"selection": selection, "reused": list(reused), "defects": dict(defects)}
    config.workeroutput[_WORKER_OUTPUT] = output  # type: ignore[attr-defined]


def evalgate_node_report(node: EvalgateWorkerNode) -> EvalgateNodeReport:
    """What the worker ``node`` (xdist's ``WorkerController``) reported as it went down."""
    workeroutput = getattr(node, "workeroutput", {})
    stop = workeroutput.get(_WORKER_STOP)
    output = workeroutput.get(_WORKER_OUTPUT)
    if output is None:
        return EvalgateNodeReport(stop, str(getattr(node.gateway, "id", "worker")), {})
    reused, requested = output.get("reused", (0, 0))
    counts = (int(reused), int(requested))
    return EvalgateNodeReport(stop, None, output["selection"], counts, output.get("defects", {}))


def evalgate_stop_for_workers(stops: Sequence[EvalgateWorkerStop]) -> None:
    """Stop the xdist controller's session for what stopped its workers at collection: their
    usage errors (exit 4, every message), else a refused store (exit 1), as without xdist."""
    usage = [stop["message"] for stop in stops if stop["returncode"] == 4]
    if usage:
        raise pytest.UsageError("\n".join(usage))
    pytest.exit(stops[0]["message"], returncode=int(stops[0]["returncode"]))


def evalgate_scheduling(config: pytest.Config, shard_count: int, log: object) -> EvalgateScheduling:
    """The scheduler that sends worker k of the controller's workers its sub-shard."""
    from xdist.workermanage import parse_tx_spec_config

    numnodes = len(parse_tx_spec_config(config))
    return EvalgateScheduling(numnodes, shard_count, log)
