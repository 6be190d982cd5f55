"""An xdist scheduler that sends worker k exactly its sub-shard.

The runner on worker ``gwK`` prefetches the identities of sub-shard K (``evalgate_sub_shard``)
ahead of its item loop, so the scheduler must hand that worker those items and no others: with
xdist's load scheduling an item could land on a worker that did not prefetch it while the worker
that did also requests it, and the store would get the identity twice. Ordinary (non-evalgate)
items are spread round-robin. A worker that replaces a crashed one takes over the crashed one's
pending items (as xdist's ``each`` scheduler does); its runner requests them on demand.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_evalgate.shard.plan import evalgate_sub_shard


def evalgate_case_of_nodeid(nodeid: str) -> str | None:
    """The case id of an evalgate item node id (``...evalgate.yaml::cand::case[rN]``), else None."""
    if "evalgate.yaml::" not in nodeid or not nodeid.endswith("]"):
        return None
    last = nodeid.rsplit("::", 1)[-1]
    case_id, sep, _rep = last.rpartition("[r")
    return case_id if sep else None


def evalgate_assign(collection: Sequence[str], shards: int, workers: int, index: int) -> list[int]:
    """Indices of ``collection`` that worker ``index`` of ``workers`` runs."""
    mine = []
    for position, nodeid in enumerate(collection):
        case_id = evalgate_case_of_nodeid(nodeid)
        owner = (
            position % workers if case_id is None else evalgate_sub_shard(case_id, shards, workers)
        )
        if owner == index:
            mine.append(position)
    return mine


class EvalgateScheduling:
    """xdist ``Scheduling`` protocol: fixed sub-shard per worker, no stealing."""

    def __init__(self, numnodes: int, shards: int, log: Any) -> None:
        self.numnodes = numnodes
        self.shards = shards
        self.log = log
        self.node2collection: dict[Any, list[str]] = {}
        self.node2pending: dict[Any, list[int]] = {}
        self._started: list[Any] = []
        self._removed2pending: dict[Any, list[int]] = {}
        self.collection_is_completed = False

    @property
    def nodes(self) -> list[Any]:
        """All nodes known to the scheduler."""
        return list(self.node2pending)

    @property
    def tests_finished(self) -> bool:
        """True once collection is done and every node is down to its last item."""
        if not self.collection_is_completed or self._removed2pending:
            return False
        return all(len(pending) < 2 for pending in self.node2pending.values())

    @property
    def has_pending(self) -> bool:
        """True while any node has items left."""
        return any(self.node2pending.values())

    def add_node(self, node: Any) -> None:
        """A worker came up."""
        self.node2pending[node] = []

    def add_node_collection(self, node: Any, collection: Sequence[str]) -> None:
        """A worker finished collecting; a replacement takes a dead worker's pending items."""
        if not self.collection_is_completed:
            self.node2collection[node] = list(collection)
            if len(self.node2collection) >= self.numnodes:
                self.collection_is_completed = True
            return
        for dead in list(self._removed2pending):
            if list(collection) == self.node2collection[dead]:
                self.node2collection[node] = list(collection)
                self.node2pending[node] = self._removed2pending.pop(dead)
                return

    def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
        """An item finished on ``node``."""
        self.node2pending[node].remove(item_index)

    def mark_test_pending(self, item: str) -> None:
        """Not supported: items are never re-queued."""
        raise NotImplementedError

    def remove_pending_tests_from_node(self, node: Any, indices: Sequence[int]) -> None:
        """Not supported: no work stealing, the sub-shards are fixed."""
        raise NotImplementedError

    def remove_node(self, node: Any) -> str | None:
        """A worker went down; returns the item it crashed on, if any."""
        pending = self.node2pending.pop(node)
        if not pending:
            return None
        crashed = self.node2collection[node][pending.pop(0)]
        if pending:
            self._removed2pending[node] = pending
        return crashed

    def schedule(self) -> None:
        """Send each new worker its sub-shard, then shut it down after those items."""
        workers = self.numnodes
        for node, pending in self.node2pending.items():
            if node in self._started:
                continue
            if not pending:
                index = int(str(node.gateway.id).removeprefix("gw")) % workers
                pending[:] = evalgate_assign(
                    self.node2collection[node], self.shards, workers, index
                )
            if pending:
                node.send_runtest_some(list(pending))
            node.shutdown()
            self._started.append(node)
