"""A server-side concurrency limit, simulated: the ``service_slots`` knob (issue 16).

A real serving engine runs at most so many sequences at once; the rest wait in its queue, so
concurrency beyond that adds latency and no throughput. :class:`EvalgateSimSlots` keeps, per
slot, the (monotonic) time it becomes free: a request takes the earliest free slot, waits until
then, and holds it for its planned service time. With 0 slots nothing ever waits.
"""

from __future__ import annotations

import asyncio
import heapq

from pytest_evalgate.simulated.protocol import EvalgateSimProtocol, EvalgateSimWriter


class EvalgateSimSlots:
    """The slots of one server (its event loop only): ``evalgate_wait`` books one request."""

    def __init__(self, slots: int) -> None:
        self._free_at: list[float] = [0.0] * slots

    def evalgate_wait(self, now: float, service_s: float) -> float:
        """Book a request arriving at ``now`` that is served for ``service_s``; return how long
        it queues first (0 when a slot is free, always 0 without slots)."""
        if not self._free_at:
            return 0.0
        start = max(now, heapq.heappop(self._free_at))
        heapq.heappush(self._free_at, start + service_s)
        return start - now


def evalgate_sim_after(wait_s: float, run: EvalgateSimWriter) -> EvalgateSimWriter:
    """The stream writer ``run``, started after ``wait_s`` seconds in the server's queue."""

    async def delayed(sink: EvalgateSimProtocol) -> None:
        await asyncio.sleep(wait_s)
        await run(sink)

    return delayed
