"""``evalgate online-judge serve``'s machinery: read answers, sample, judge, export.

``EvalgateOnlineJudge.run`` polls its source (a feed file or the shadow store, ``feed``) every
``poll_s`` seconds, draws each answer (``sample.EvalgateOnlineSampler``), counts it, and scores
the sampled ones with the judge (``judging``), at most ``2 x budget.max_concurrency`` in flight
(the judge's limiter bounds the requests themselves). It stops reading when ``stop`` is set,
after ``max_answers`` sampled answers, or, with ``follow=False``, once a read finds nothing new
(the source read to its end); then it waits for the judge calls in flight. The counts are
served meanwhile by ``evalgate_metrics_server``: a real HTTP server (``http.server``, one
thread per connection) answering ``GET /metrics`` with the text exposition, 404 otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import threading
from collections.abc import Callable
from dataclasses import dataclass

from pytest_evalgate.onlinejudge.feed import (
    EvalgateFeedReader,
    EvalgateOnlineAnswer,
    EvalgatePairReader,
    evalgate_feed_answer,
    evalgate_pair_answers,
)
from pytest_evalgate.onlinejudge.judging import EvalgateOnlineScorer
from pytest_evalgate.onlinejudge.sample import (
    EVALGATE_EXPOSITION_TYPE,
    EvalgateOnlineCounts,
    EvalgateOnlineSampler,
)
from pytest_evalgate.shadow.verdict import evalgate_is_refusal

EvalgateOnlineSource = Callable[[], list[EvalgateOnlineAnswer | str]]


def evalgate_feed_source(path: str) -> EvalgateOnlineSource:
    """The answers of lines appended to the feed file ``path`` since the last call."""
    reader = EvalgateFeedReader(path)

    def poll() -> list[EvalgateOnlineAnswer | str]:
        return [evalgate_feed_answer(line) for line in reader.poll()]

    return poll


def evalgate_pairs_source(reader: EvalgatePairReader) -> EvalgateOnlineSource:
    """The answers of shadow pairs in segments written since the last call."""

    def poll() -> list[EvalgateOnlineAnswer | str]:
        pairs, bad = reader.poll()
        found: list[EvalgateOnlineAnswer | str] = [f"not a shadow pair: {why}" for why in bad]
        for pair in pairs:
            answers = evalgate_pair_answers(pair)
            found.extend([answers] if isinstance(answers, str) else answers)
        return found

    return poll


@dataclass(frozen=True)
class EvalgateOnlineConfig:
    """How the online judge reads and samples (see the module)."""

    rate: float
    seed: int = 0
    follow: bool = True
    max_answers: int | None = None
    poll_s: float = 0.5


class EvalgateOnlineJudge:
    """One online judging run over one source, its counts in ``counts``."""

    def __init__(
        self,
        config: EvalgateOnlineConfig,
        source: EvalgateOnlineSource,
        scorer: EvalgateOnlineScorer,
        counts: EvalgateOnlineCounts,
    ) -> None:
        self.config = config
        self.counts = counts
        self._source = source
        self._scorer = scorer
        self._sampler = EvalgateOnlineSampler(config.rate, config.seed)
        self._sampled = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def _full(self) -> bool:
        most = self.config.max_answers
        return most is not None and self._sampled >= most

    async def run(self, stop: asyncio.Event) -> None:
        """Read, sample and judge until done (see the module); every judge call finished."""
        slots = asyncio.Semaphore(2 * self._scorer.concurrency)
        try:
            while not stop.is_set() and not self._full():
                items = self._source()
                for item in items:
                    if stop.is_set() or self._full():
                        break
                    if isinstance(item, str):
                        self.counts.skip(item)
                        continue
                    await self._take(item, slots)
                if not self.config.follow:
                    if not items:
                        break  # read to its end
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.config.poll_s)
            if self._tasks:
                await asyncio.wait(set(self._tasks))
        finally:
            for task in self._tasks:
                task.cancel()
            await self._scorer.aclose()

    async def _take(self, answer: EvalgateOnlineAnswer, slots: asyncio.Semaphore) -> None:
        sampled = self._sampler.draw()
        self.counts.seen(answer.version, sampled, evalgate_is_refusal(answer.answer))
        if not sampled:
            return
        self._sampled += 1
        await slots.acquire()
        task = asyncio.create_task(self._judge(answer, slots))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _judge(self, answer: EvalgateOnlineAnswer, slots: asyncio.Semaphore) -> None:
        try:
            outcome = await self._scorer.score(answer)
        finally:
            slots.release()
        if isinstance(outcome, str):
            self.counts.failed(answer.version, outcome)
        else:
            self.counts.scored(answer.version, outcome)


def evalgate_metrics_server(
    counts: EvalgateOnlineCounts, host: str, port: int
) -> http.server.ThreadingHTTPServer:
    """A started HTTP server on ``host:port`` serving ``counts`` at ``/metrics`` (its thread is
    a daemon; call ``shutdown`` and ``server_close`` to stop it)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self._reply(404, "text/plain; charset=utf-8", b"not found: try /metrics\n")
                return
            self._reply(200, EVALGATE_EXPOSITION_TYPE, counts.exposition().encode("utf-8"))

        def _reply(self, status: int, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return  # no access log on stderr

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    # the flag shutdown() sets is looked at every 50 ms (serve_forever's default: 0.5 s, which
    # every SIGTERMed online judge waited out before it could exit)
    thread = threading.Thread(
        target=server.serve_forever, args=(0.05,), name="online-judge-metrics", daemon=True
    )
    thread.start()
    return server
