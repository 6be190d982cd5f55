"""The run-wide load budget: concurrency, requests per second, tokens per minute, AIMD on 429.

SPEC section 5: ``budget`` in the manifest is the total for the whole run (all pods, all xdist
workers). ``evalgate_share`` splits it so that the shares of all processes sum to at most the
total; ``EvalgateLimiter`` enforces one process's share inside one asyncio loop.

The limiter has three gates, taken in this order by ``acquire``:

1. a concurrency slot (FIFO, hand-off on release so that no late caller barges ahead);
2. a requests-per-second token bucket holding at most ``max(1, rps / 10)`` tokens (a burst of
   100 ms worth of requests, so that timer jitter does not cost throughput);
3. a tokens-per-minute bucket holding at most one second's worth (``tpm / 60``) of tokens.
   ``acquire`` charges the caller's estimate; ``release`` corrects it by the reported usage.

Both buckets reserve first and sleep after (the bucket may go negative, a debt that later callers
queue behind), so concurrent callers are spaced without a polling loop and a request larger than
the bucket still proceeds once the debt ahead of it is paid. The slot is taken before the pacing
wait, so pacing is measured at the send; a slot held while pacing costs nothing because this
process may not send faster anyway.

AIMD: ``on_rate_limited`` halves the concurrency limit (floor 1) at most once per
``decrease_interval_s`` (a burst of 429s from one overload is one signal, not six halvings);
``on_success`` adds one slot after ``limit`` successes in a row without a decrease, up to
``max_concurrency``. Both log the change through ``log``.

No threads: the limiter belongs to one running loop (the runner's child process, or the load
phase's loop).
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping

from pytest_evalgate.errors import EvalgateConfigError

_RPS_BURST_S = 0.1  # the rps bucket holds this many seconds of requests (at least one)
_TPM_BURST_S = 1.0  # the tpm bucket holds this many seconds of tokens


def evalgate_share(
    total: float, parts: int, index: int, *, integer: bool, key: str = "budget.max_concurrency"
) -> float | int:
    """Process ``index``'s share of a run-wide budget ``total`` split over ``parts`` processes.

    Integer shares (concurrency): ``total // parts`` each, the remainder going one apiece to the
    lowest indices, so the shares sum to exactly ``total``; ``total < parts`` raises
    ``EvalgateConfigError`` naming ``key`` (the manifest key of ``total``; a process with no slot
    could never run). Float shares (rates): ``total / parts``, nudged down if rounding would let
    the sum of the shares exceed ``total``.
    """
    if parts < 1 or not 0 <= index < parts:
        raise EvalgateConfigError(
            "budget", "parts", f"need 0 <= index < parts, got {index}/{parts}"
        )
    if integer:
        return _integer_share(int(total), parts, index, key)
    return _float_share(float(total), parts)


def evalgate_check_shares(
    source: str, totals: Mapping[str, int], parts: int, processes: str
) -> None:
    """Refuse each concurrency total of ``totals`` (manifest key -> total) that ``parts``
    processes cannot share, each needing at least one slot: the error names ``source`` (the
    manifest), the key, and ``processes`` (how the processes come about, e.g. "2 shards x 2 xdist
    workers"). Checked when the suite loads, before any request."""
    for key, total in totals.items():
        if total < parts:
            reason = (
                f"{_too_few(total, parts)} ({processes}); each needs at least 1: raise {key}"
                f" to {parts} or run fewer processes"
            )
            raise EvalgateConfigError(source, key, reason)


def _too_few(total: int, parts: int) -> str:
    return f"{total} is less than the {parts} processes sharing it"


def _integer_share(total: int, parts: int, index: int, key: str) -> int:
    if total < parts:
        reason = f"{_too_few(total, parts)}; each needs at least 1"
        raise EvalgateConfigError(key.split(".")[0], key, reason)
    base, remainder = divmod(total, parts)
    return base + (1 if index < remainder else 0)


def _float_share(total: float, parts: int) -> float:
    # Summing ``parts`` equal floats one by one can round above ``total`` by up to ``parts``
    # ulps; shaving that relative margin off first makes the check below pass at once.
    share = total / parts * (1.0 - 4.0 * parts * sys.float_info.epsilon)
    for _ in range(64):  # bounded; in practice zero iterations
        if sum([share] * parts) <= total and math.fsum([share] * parts) <= total:
            break
        share = math.nextafter(share, 0.0)
    return share


class _Bucket:
    """A token bucket that reserves first and reports how long the caller must then wait."""

    def __init__(self, rate_per_s: float, capacity: float) -> None:
        self.rate = rate_per_s
        self.capacity = capacity
        self.level = capacity
        self.stamp = time.monotonic()

    def _refill(self) -> None:
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def reserve(self, amount: float) -> float:
        """Take ``amount`` (possibly into debt); return the seconds until the debt is paid."""
        self._refill()
        self.level -= amount
        return 0.0 if self.level >= 0 else -self.level / self.rate

    def refund(self, amount: float) -> None:
        """Give back ``amount`` (negative to charge more), never above capacity."""
        self._refill()
        self.level = min(self.capacity, self.level + amount)


class EvalgateLimiter:
    """One process's share of the load budget (see the module docstring for the contract).

    ``max_concurrency`` (an attribute) is the share's ceiling; the client sizes its connection
    pool by it. ``decrease_interval_s`` is the AIMD cool-down between two halvings.
    """

    def __init__(
        self,
        max_concurrency: int,
        requests_per_second: float | None,
        tokens_per_minute: float | None,
        *,
        log: Callable[[str], None] | None = None,
        decrease_interval_s: float = 1.0,
    ) -> None:
        _check_positive("budget.max_concurrency", max_concurrency)
        self.max_concurrency = int(max_concurrency)
        self._limit = self.max_concurrency
        self._in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._rps = _rps_bucket(requests_per_second)
        self._tpm = _tpm_bucket(tokens_per_minute)
        self._log = log
        self._decrease_interval_s = decrease_interval_s
        self._last_decrease = -math.inf
        self._successes = 0

    @property
    def in_flight(self) -> int:
        """Requests holding a slot now."""
        return self._in_flight

    @property
    def limit(self) -> int:
        """The current (AIMD-adjusted) concurrency limit, 1..max_concurrency."""
        return self._limit

    async def acquire(self, est_tokens: int) -> None:
        """Wait for a slot, an rps token and ``est_tokens`` of tpm; cancellation-safe."""
        await self._take_slot()
        try:
            await self._pace(est_tokens)
        except BaseException:
            self._give_slot()
            raise

    def release(self, est_tokens: int, used_tokens: int | None) -> None:
        """Free the slot; correct the tpm charge from ``est_tokens`` to ``used_tokens`` if known."""
        if self._tpm is not None and used_tokens is not None:
            self._tpm.refund(est_tokens - used_tokens)
        self._give_slot()

    def on_rate_limited(self) -> None:
        """Multiplicative decrease: halve the limit (floor 1), once per decrease interval."""
        now = time.monotonic()
        self._successes = 0
        if now - self._last_decrease < self._decrease_interval_s or self._limit == 1:
            return
        self._last_decrease = now
        self._set_limit(max(1, self._limit // 2), "429")

    def on_success(self) -> None:
        """Additive increase: +1 after ``limit`` successes in a row, up to ``max_concurrency``."""
        if self._limit >= self.max_concurrency:
            return
        self._successes += 1
        if self._successes >= self._limit:
            self._successes = 0
            self._set_limit(self._limit + 1, "recovering")
            self._wake()

    def _set_limit(self, value: int, reason: str) -> None:
        old, self._limit = self._limit, value
        if self._log is not None:
            self._log(f"evalgate: concurrency limit {old} -> {value} ({reason})")

    async def _take_slot(self) -> None:
        if self._in_flight < self._limit and not self._waiters:
            self._in_flight += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            self._abandon(waiter)
            raise

    def _abandon(self, waiter: asyncio.Future[None]) -> None:
        # A slot handed to a waiter that was cancelled at the same moment goes back to the pool.
        if waiter.done() and not waiter.cancelled():
            self._give_slot()
        elif waiter in self._waiters:
            self._waiters.remove(waiter)

    def _give_slot(self) -> None:
        self._in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        # Hand-off: the slot is counted for the waiter before it runs, so nobody barges in.
        while self._waiters and self._in_flight < self._limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._in_flight += 1
                waiter.set_result(None)

    async def _pace(self, est_tokens: int) -> None:
        wait = 0.0 if self._rps is None else self._rps.reserve(1.0)
        if self._tpm is not None:
            wait = max(wait, self._tpm.reserve(float(est_tokens)))
        if wait <= 0.0:
            return
        try:
            await asyncio.sleep(wait)
        except BaseException:
            self._refund_pace(est_tokens)
            raise

    def _refund_pace(self, est_tokens: int) -> None:
        if self._rps is not None:
            self._rps.refund(1.0)
        if self._tpm is not None:
            self._tpm.refund(float(est_tokens))


def _check_positive(key: str, value: float | None) -> None:
    if value is not None and not value > 0:
        raise EvalgateConfigError("budget", key, f"must be > 0, got {value}")


def _rps_bucket(rps: float | None) -> _Bucket | None:
    _check_positive("budget.requests_per_second", rps)
    return None if rps is None else _Bucket(rps, max(1.0, rps * _RPS_BURST_S))


def _tpm_bucket(tpm: float | None) -> _Bucket | None:
    _check_positive("budget.tokens_per_minute", tpm)
    return None if tpm is None else _Bucket(tpm / 60.0, max(1.0, tpm / 60.0 * _TPM_BURST_S))
