"""Budget shares and the AIMD limiter; concurrency is counted at a real loopback server."""

from __future__ import annotations

import asyncio
import math
import time

import pytest
from faultserver import FaultServer, FaultStep

from pytest_evalgate.client import EvalgateClient, EvalgateEndpoint
from pytest_evalgate.client.budget import EvalgateLimiter, evalgate_check_shares, evalgate_share
from pytest_evalgate.errors import EvalgateConfigError

# --- shares ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("parts", [1, 2, 3, 7, 64])
@pytest.mark.parametrize("total", [64, 65, 100, 127])
def test_integer_shares_sum_to_total_and_differ_by_at_most_one(total: int, parts: int) -> None:
    shares = [evalgate_share(total, parts, i, integer=True) for i in range(parts)]
    assert all(isinstance(s, int) for s in shares)
    assert sum(shares) == total
    assert max(shares) - min(shares) <= 1
    assert shares == sorted(shares, reverse=True)  # the remainder goes to the lowest indices


def test_integer_share_example() -> None:
    assert [evalgate_share(10, 4, i, integer=True) for i in range(4)] == [3, 3, 2, 2]


def test_check_shares_names_the_file_the_first_short_key_and_the_processes() -> None:
    totals = {
        "budget.max_concurrency": 4,
        "judge.budget.max_concurrency": 3,
        "sandbox.max_concurrency": 1,
    }
    evalgate_check_shares("s/evalgate.yaml", totals, 1, "1 shard x 1 xdist worker")
    evalgate_check_shares(
        "s/evalgate.yaml", {"budget.max_concurrency": 3}, 3, "3 shards"
    )  # equal: one each
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_check_shares("s/evalgate.yaml", totals, 4, "2 shards x 2 xdist workers")
    assert info.value.source == "s/evalgate.yaml"
    assert info.value.key == "judge.budget.max_concurrency"  # 4 slots are enough, 3 are not
    assert str(info.value) == (
        "s/evalgate.yaml: judge.budget.max_concurrency: 3 is less than the 4 processes sharing it"
        " (2 shards x 2 xdist workers); each needs at least 1: raise"
        " judge.budget.max_concurrency to 4 or run fewer processes"
    )


def test_a_share_too_small_names_the_key_and_its_block() -> None:
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_share(1, 2, 0, integer=True, key="judge.budget.max_concurrency")
    assert (info.value.source, info.value.key) == ("judge", "judge.budget.max_concurrency")
    assert "1 is less than the 2 processes sharing it; each needs at least 1" in str(info.value)


def test_concurrency_below_process_count_is_a_config_error() -> None:
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_share(3, 4, 0, integer=True)
    assert info.value.key == "budget.max_concurrency"
    assert "4 processes" in str(info.value)


@pytest.mark.parametrize("parts", [1, 3, 7, 10, 49, 1000])
@pytest.mark.parametrize("total", [0.3, 1.0, 100.0, 2_000_000.0, 1e-3, 33.333333])
def test_float_shares_never_sum_above_total(total: float, parts: int) -> None:
    shares = [evalgate_share(total, parts, i, integer=False) for i in range(parts)]
    assert math.fsum(shares) <= total
    assert sum(shares) <= total
    assert shares[0] == pytest.approx(total / parts, rel=1e-12)


@pytest.mark.parametrize(("parts", "index"), [(0, 0), (2, 2), (2, -1)])
def test_share_rejects_bad_index(parts: int, index: int) -> None:
    with pytest.raises(EvalgateConfigError):
        evalgate_share(10, parts, index, integer=True)


@pytest.mark.parametrize(
    ("args", "key"),
    [
        ((0, None, None), "budget.max_concurrency"),
        ((4, 0.0, None), "budget.requests_per_second"),
        ((4, None, -5.0), "budget.tokens_per_minute"),
    ],
)
def test_limiter_rejects_non_positive_budgets(
    args: tuple[int, float | None, float | None], key: str
) -> None:
    with pytest.raises(EvalgateConfigError) as info:
        EvalgateLimiter(*args)
    assert info.value.key == key


# --- concurrency ----------------------------------------------------------------------------------


def test_limiter_never_exceeds_max_concurrency_at_the_server() -> None:
    async def main() -> tuple[int, int, int]:
        async with FaultServer(FaultStep(first_delay_s=0.01)) as server:
            limiter = EvalgateLimiter(8, None, None)
            client = EvalgateClient(limiter, rng_seed=0)
            ep = EvalgateEndpoint(server.base_url, "m", "chat", None, 10.0, 2)
            body = {"messages": [{"role": "user", "content": "x"}]}
            calls = [client.call(ep, body, f"id-{n}", 10) for n in range(200)]
            results = await asyncio.gather(*calls)
            await client.aclose()
            errors = sum(r.error is not None for r in results)
            return server.peak_in_flight, len(server.arrivals), errors

    peak, arrivals, errors = asyncio.run(main())
    assert (arrivals, errors) == (200, 0)
    assert peak == 8  # reached, never exceeded


def test_limiter_alone_bounds_concurrency() -> None:
    # The client's connector is sized to the budget too; this checks the limiter by itself.
    async def main() -> int:
        limiter = EvalgateLimiter(8, None, None)
        peak = 0

        async def user() -> None:
            nonlocal peak
            await limiter.acquire(1)
            peak = max(peak, limiter.in_flight)
            await asyncio.sleep(0.001)
            limiter.release(1, None)

        await asyncio.gather(*(user() for _ in range(200)))
        assert limiter.in_flight == 0
        return peak

    assert asyncio.run(main()) == 8


def test_slots_are_handed_over_in_arrival_order() -> None:
    async def main() -> list[int]:
        limiter = EvalgateLimiter(1, None, None)
        order: list[int] = []

        async def user(n: int) -> None:
            await limiter.acquire(1)
            order.append(n)
            await asyncio.sleep(0.001)
            limiter.release(1, None)

        await asyncio.gather(*(user(n) for n in range(20)))
        assert limiter.in_flight == 0
        return order

    assert asyncio.run(main()) == list(range(20))


def test_cancelled_waiter_does_not_leak_or_block_a_slot() -> None:
    async def main() -> None:
        limiter = EvalgateLimiter(1, None, None)
        await limiter.acquire(1)
        stuck = asyncio.create_task(limiter.acquire(1))
        behind = asyncio.create_task(limiter.acquire(1))
        await asyncio.sleep(0.01)
        stuck.cancel()
        limiter.release(1, None)
        await asyncio.wait_for(behind, 1.0)
        assert stuck.cancelled() and limiter.in_flight == 1

    asyncio.run(main())


def test_waiter_cancelled_just_after_hand_off_returns_the_slot() -> None:
    async def main() -> None:
        limiter = EvalgateLimiter(1, None, None)
        await limiter.acquire(1)
        waiter = asyncio.create_task(limiter.acquire(1))
        await asyncio.sleep(0.01)
        limiter.release(1, None)  # hands the slot to ``waiter``...
        waiter.cancel()  # ...which is cancelled before it runs
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert limiter.in_flight == 0

    asyncio.run(main())


# --- AIMD -----------------------------------------------------------------------------------------


def test_aimd_halves_on_429_and_recovers_additively() -> None:
    log: list[str] = []
    limiter = EvalgateLimiter(8, None, None, log=log.append, decrease_interval_s=0.0)
    limiter.on_rate_limited()
    assert limiter.limit == 4 and log == ["evalgate: concurrency limit 8 -> 4 (429)"]
    limiter.on_rate_limited()
    limiter.on_rate_limited()
    limiter.on_rate_limited()
    assert limiter.limit == 1  # floor
    limiter.on_rate_limited()
    assert limiter.limit == 1
    successes = 0
    while limiter.limit < 8 and successes < 1000:
        limiter.on_success()
        successes += 1
    # +1 after `limit` successes: 1 + 2 + ... + 7 = 28.
    assert limiter.limit == 8 and successes == 28
    assert log[-1] == "evalgate: concurrency limit 7 -> 8 (recovering)"
    limiter.on_success()
    assert limiter.limit == 8  # never above the maximum


def test_one_burst_of_429s_halves_once() -> None:
    limiter = EvalgateLimiter(64, None, None, decrease_interval_s=60.0)
    for _ in range(30):
        limiter.on_rate_limited()
    assert limiter.limit == 32


def test_lower_limit_holds_back_new_requests_until_in_flight_drains() -> None:
    async def main() -> None:
        limiter = EvalgateLimiter(4, None, None, decrease_interval_s=0.0)
        for _ in range(4):
            await limiter.acquire(1)
        limiter.on_rate_limited()  # limit 2 with 4 in flight
        blocked = asyncio.create_task(limiter.acquire(1))
        for _ in range(2):
            limiter.release(1, None)
            await asyncio.sleep(0.01)
            assert not blocked.done()
        limiter.release(1, None)  # in flight 1 < limit 2
        await asyncio.wait_for(blocked, 1.0)
        assert limiter.in_flight == 2

    asyncio.run(main())


def test_recovery_lets_waiters_in() -> None:
    async def main() -> None:
        limiter = EvalgateLimiter(2, None, None, decrease_interval_s=0.0)
        limiter.on_rate_limited()  # limit 1
        await limiter.acquire(1)
        waiter = asyncio.create_task(limiter.acquire(1))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        limiter.on_success()  # 1 success at limit 1: back to 2, the waiter gets in
        await asyncio.wait_for(waiter, 1.0)
        assert limiter.in_flight == 2 and limiter.limit == 2

    asyncio.run(main())


def test_client_429s_shrink_the_limit_and_successes_restore_it() -> None:
    async def main() -> tuple[int, int]:
        async with FaultServer() as server:
            server.script("c", FaultStep(status=429, headers={"retry-after-ms": "10"}))
            limiter = EvalgateLimiter(4, None, None, decrease_interval_s=0.0)
            client = EvalgateClient(limiter, rng_seed=3)
            ep = EvalgateEndpoint(server.base_url, "m", "chat", None, 5.0, 3)
            body = {"messages": [{"role": "user", "content": "x"}]}
            await client.call(ep, body, "c", 10)  # 429 (-> 2), then success
            after_429 = limiter.limit
            for n in range(10):
                await client.call(ep, body, f"ok-{n}", 10)
            await client.aclose()
            return after_429, limiter.limit

    assert asyncio.run(main()) == (2, 4)


# --- rates ----------------------------------------------------------------------------------------


def test_requests_per_second_is_honoured() -> None:
    # 21 requests at 20/s with a burst of 2 cannot finish before (21 - 2) / 20 = 0.95 s.
    async def main() -> float:
        limiter = EvalgateLimiter(64, 20.0, None)
        started = time.monotonic()

        async def one() -> None:
            await limiter.acquire(1)
            limiter.release(1, None)

        await asyncio.gather(*(one() for _ in range(21)))
        return time.monotonic() - started

    assert asyncio.run(main()) >= 0.95 - 0.01


def test_requests_per_second_at_the_server() -> None:
    async def main() -> list[float]:
        async with FaultServer() as server:
            limiter = EvalgateLimiter(16, 10.0, None)
            client = EvalgateClient(limiter, rng_seed=0)
            ep = EvalgateEndpoint(server.base_url, "m", "chat", None, 5.0, 1, stream=False)
            body = {"messages": [{"role": "user", "content": "x"}]}
            await asyncio.gather(*(client.call(ep, body, f"r{n}", 1) for n in range(8)))
            await client.aclose()
            return sorted(a.at for a in server.arrivals)

    times = asyncio.run(main())
    # burst 1 at 10/s: arrival k comes no earlier than k * 0.1 s after the first.
    assert times[-1] - times[0] >= 0.7 - 0.02


def test_tokens_per_minute_is_honoured() -> None:
    # 60,000 tpm = 1,000 tokens/s, bucket 1,000: five 500-token requests owe 1,500 tokens.
    async def main() -> float:
        limiter = EvalgateLimiter(64, None, 60_000.0)
        started = time.monotonic()
        await asyncio.gather(*(limiter.acquire(500) for _ in range(5)))
        return time.monotonic() - started

    assert asyncio.run(main()) >= 1.5 - 0.02


def test_release_corrects_the_token_charge_by_usage() -> None:
    async def main() -> tuple[float, float]:
        limiter = EvalgateLimiter(64, None, 60_000.0)
        await limiter.acquire(1000)
        limiter.release(1000, 0)  # nothing used: the estimate comes back
        started = time.monotonic()
        await limiter.acquire(1000)
        refunded = time.monotonic() - started
        limiter.release(1000, None)  # usage unknown: the estimate stays charged
        started = time.monotonic()
        await limiter.acquire(500)
        return refunded, time.monotonic() - started

    refunded, charged = asyncio.run(main())
    assert refunded < 0.2
    assert charged >= 0.45


def test_cancelled_pacing_wait_refunds_and_frees_the_slot() -> None:
    async def main() -> float:
        limiter = EvalgateLimiter(4, 2.0, None)  # two requests a second, burst 1
        await limiter.acquire(1)
        limiter.release(1, None)
        paced = asyncio.create_task(limiter.acquire(1))  # must wait ~0.5 s
        await asyncio.sleep(0.05)
        assert limiter.in_flight == 1 and not paced.done()
        paced.cancel()
        with pytest.raises(asyncio.CancelledError):
            await paced
        assert limiter.in_flight == 0
        started = time.monotonic()
        await limiter.acquire(1)  # the cancelled reservation was given back
        return time.monotonic() - started

    # ~0.45 s with the refund, ~0.95 s had the cancelled request kept its token.
    assert asyncio.run(main()) < 0.75
