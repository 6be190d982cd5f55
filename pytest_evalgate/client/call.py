"""One OpenAI-compatible request: retries, error categories, streaming timings (SPEC 5 and 8).

``EvalgateClient.call`` sends one identity's request to an ``EvalgateEndpoint`` under the
process's ``EvalgateLimiter`` and always returns an ``EvalgateCallResult``: either an answer with
its timings, or an ``EvalgateCallError`` whose ``category`` is one of SPEC section 5's. It never
raises for endpoint trouble (only for cancellation and programming errors).

Transport: ``client.http1``, a lean HTTP/1.1 client over asyncio protocols with httptools'
parser. One ``EvalgateHttpPool`` serves the whole process and keeps connections alive (30 s);
the limiter's ``max_concurrency`` bounds the attempts in flight, hence the busy connections.
Neither httpx nor aiohttp: on this 2-core machine, with 64 requests in flight against a 50 ms
endpoint (bound: 1,280 req/s), httpx 0.28's default transport reached about 125 req/s (8 ms CPU
a request), a bare aiohttp loop 93-95 % of the bound at ~0.2 ms CPU a request, and a loop over
asyncio protocols ~97 % at ~0.04 ms (``client.http1`` says why that matters in the runner's
child). ``bench/client_overhead.py`` measures this client against the bare loops side by side;
see ``docs/timings.md`` for its last numbers.

Retry policy (at most ``endpoint.max_attempts`` attempts):

- transient, retried: connection errors (``connection``), a hang or slow body cut by
  ``timeout_s`` and HTTP 408 (``timeout``), 429 (``rate_limited``, the limiter halves its limit),
  500/502/503/504 (``server_error``), and a 200 that is not valid JSON or has no ``choices``
  (``malformed_response``, retried once only: a server that answers garbage twice will again);
  a 200 that carries an ``error`` object (``server_error``, with the server's message), and a
  cut-off answer (``truncated``): a stream that ended with neither ``finish_reason`` nor
  ``[DONE]``, or a body shorter than its ``Content-Length``;
- permanent, not retried: 429 with code ``insufficient_quota`` (``rate_limited``, fatal),
  400/404/422 (``bad_request``, fatal), 401/403 (``auth``, fatal), any 3xx (``redirect``,
  fatal: redirects are never followed), other 4xx (``bad_request``) and other 5xx
  (``server_error``), ``finish_reason == "content_filter"`` (``content_filter``), and an answer
  far longer than its ``max_tokens`` allows (``oversize``: reading stops at the cap of
  ``client.checks``, the output kept is cut there).

The model check (SPEC 20, ``EvalgateEndpoint.model_check``): an answer whose reported ``model``
is a string other than the endpoint's ``model`` is not the candidate's answer. It is the error
``model_mismatch`` (status 200, fatal, not retried: the same endpoint answers as the same model
again), never scored, and it stops the candidate like a 401. The comparison is exact (no case
folding, no prefix or date-suffix matching: ``gpt-4o`` answered as ``gpt-4o-2024-08-06`` is a
mismatch, which a gateway's candidate opts out of with ``model_rewrite: true``); an answer
without a ``model`` is not a mismatch. A content-filtered answer from another model is the
mismatch.

Implausible ``usage`` (``client.checks.evalgate_usage_flag``) is flagged, not trusted: the
result's token counts are None and ``usage_flag`` says why. Every message and every answer text
leaves the client through ``client.redact.evalgate_redact``: the values of the configured key
variables (each endpoint's key is registered when the client first sees the endpoint) and any
``Bearer <token>`` never reach a record, a log or a terminal.

The wait before attempt n+1 is full jitter, ``uniform(0, min(30, 0.5 * 2**(n-1)))`` seconds from
a seeded ``random.Random``, raised to at least the server's hint: ``Retry-After`` (seconds or an
HTTP date), ``retry-after-ms``, and on a 429 ``x-ratelimit-reset-requests`` /
``x-ratelimit-reset-tokens`` (Go durations such as ``1s``, ``6m0s``, ``20ms``) for each kind whose
``x-ratelimit-remaining-*`` is 0 or absent (OpenAI sends the reset headers on every response,
also for the limit that was not hit). A hint longer than the endpoint's
``timeout_s`` (``budget.timeout_s``, what one attempt may take) is not waited out: the call ends
at once with the attempt's error, its message saying what the endpoint asked. Hints are also
capped at 600 s (``client.checks.EVALGATE_HINT_CAP_S``); a hint of 5 s or more is logged
(``log``) when it starts, with the hint and the cap. While it waits, the request holds no
concurrency slot.

Proxies: each endpoint's URL goes through the proxy the environment names for it
(``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, ``NO_PROXY``, either case; ``client.proxy``),
read when the client first sees the endpoint; the proxy's password is registered for redaction.

What an attempt came to (its error, the model and usage checks, the call's result) is
``client.outcome``'s. Timings are defined in ``docs/timings.md``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_evalgate.client.checks import (
    EVALGATE_HINT_CAP_S,
    EvalgateCaps,
    evalgate_caps,
    evalgate_refused_message,
    evalgate_retry_wait,
)
from pytest_evalgate.client.outcome import (
    evalgate_call_result,
    evalgate_check_model,
    evalgate_check_usage,
    evalgate_fail,
    evalgate_not_waited,
    evalgate_read_failure,
    evalgate_settle,
)
from pytest_evalgate.client.proxy import evalgate_proxy_for
from pytest_evalgate.client.read import (
    EvalgateAttempt,
    evalgate_read_stream,
    evalgate_read_whole,
)
from pytest_evalgate.client.redact import evalgate_add_secret
from pytest_evalgate.client.types import EvalgateCallResult, EvalgateEndpoint
from pytest_evalgate.errors import (
    EvalgateAnswerError,
    EvalgateConfigError,
    EvalgateHttpError,
    EvalgateHttpTruncated,
)

if TYPE_CHECKING:  # only the types: the limiter is the caller's, the transport loads lazily
    from pytest_evalgate.client import http1
    from pytest_evalgate.client.budget import EvalgateLimiter
    from pytest_evalgate.client.http1 import EvalgateHttpPool
    from pytest_evalgate.client.http1_conn import EvalgateHttpResponse

_BACKOFF_BASE_S = 0.5
_BACKOFF_CAP_S = 30.0
_HINT_LOG_S = 5.0
_PATHS = {"chat": "/chat/completions", "completions": "/completions"}
_KEEPALIVE_S = 30.0
_USER_AGENT = "pytest-evalgate"


@dataclass(frozen=True)
class _Request:
    """One call's fixed parts, shared by its attempts."""

    endpoint: EvalgateEndpoint
    target: http1.EvalgateHttpTarget
    payload: bytes
    identity: str
    est_tokens: int
    caps: EvalgateCaps


def evalgate_load_http() -> None:
    """Import the transport now (the runner's child does at start, before its setup arrives)."""
    # ``client.http1`` (httptools, ssl) is bound at module level by the first client: only the
    # runner's child sends requests, while the pytest process imports this module for
    # ``EvalgateEndpoint`` and need not pay for it on its start-up path.
    global http1
    from pytest_evalgate.client import http1


class EvalgateClient:
    """Sends requests for one process through one connection pool under ``limiter``.

    Create and use it inside one running event loop; call ``aclose`` when done.
    ``rng_seed`` seeds the backoff jitter so that a run's retry schedule is reproducible;
    ``log`` receives one line when a long server-asked wait starts.
    """

    def __init__(
        self,
        limiter: EvalgateLimiter,
        *,
        rng_seed: int | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        evalgate_load_http()
        self._limiter = limiter
        self._rng = random.Random(rng_seed)
        self._log = log
        self._pool: EvalgateHttpPool | None = None
        self._targets: dict[EvalgateEndpoint, http1.EvalgateHttpTarget] = {}

    def _get_pool(self) -> EvalgateHttpPool:
        # Each attempt is bounded by asyncio.timeout(timeout_s); the pool has no timer of its own.
        if self._pool is None:
            self._pool = http1.EvalgateHttpPool(keepalive_s=_KEEPALIVE_S)
        return self._pool

    async def aclose(self) -> None:
        """Close the pool and its connections; the client can not be used afterwards."""
        if self._pool is not None:
            await self._pool.evalgate_close()

    async def call(
        self,
        endpoint: EvalgateEndpoint,
        body: Mapping[str, object],
        identity: str,
        est_tokens: int,
        scheduled_at: float | None = None,
    ) -> EvalgateCallResult:
        """Send ``body`` (``messages`` or ``prompt`` plus generation settings) for ``identity``.

        The client adds ``model``, ``stream`` and ``stream_options``. ``est_tokens`` is the
        caller's estimate of prompt plus completion tokens, charged to the tpm budget until the
        usage is known. ``scheduled_at`` (a ``time.time()`` value) makes ``queued_s`` count from
        the schedule, as open-loop load needs.
        """
        payload = _payload(endpoint, body)
        caps = evalgate_caps(body, len(payload))
        request = _Request(endpoint, self._target(endpoint), payload, identity, est_tokens, caps)
        entered = time.perf_counter()
        queued = 0.0
        malformed = 0
        attempt = 0
        while True:
            attempt += 1
            await self._limiter.acquire(est_tokens)
            if attempt == 1:
                queued = _queued(entered, scheduled_at)
            sent_at = time.time()
            done = await self._attempt(request, attempt)
            malformed += done.error is not None and done.error.category == "malformed_response"
            if not (done.retry and attempt < endpoint.max_attempts and malformed < 2):
                return evalgate_call_result(done, queued, attempt, sent_at)
            if done.hint_s > endpoint.timeout_s and done.error is not None:
                # A server-asked wait longer than a whole attempt may take is not waited out:
                # the error stands at once (a 503 with Retry-After: 100000 held a run 400 s)
                done.error = evalgate_not_waited(done.error, done.hint_s, endpoint.timeout_s)
                return evalgate_call_result(done, queued, attempt, sent_at)
            await asyncio.sleep(self._backoff(request, attempt, done.hint_s))

    async def evalgate_warm(self, endpoint: EvalgateEndpoint, count: int) -> int:
        """Open up to ``count`` idle connections to ``endpoint`` ahead of its requests (no
        request is sent); returns how many opened. Never raises for endpoint trouble."""
        try:
            return await self._get_pool().evalgate_warm(self._target(endpoint), count)
        except (EvalgateHttpError, OSError):
            return 0

    def _feedback(self, done: EvalgateAttempt) -> None:
        if done.error is None or done.error.category == "content_filter":
            self._limiter.on_success()
        elif done.error.category == "rate_limited":
            self._limiter.on_rate_limited()

    def _backoff(self, request: _Request, attempt: int, hint_s: float) -> float:
        ceiling = min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2.0 ** (attempt - 1))
        wait = evalgate_retry_wait(self._rng.uniform(0.0, ceiling), hint_s)
        if hint_s >= _HINT_LOG_S and self._log is not None:
            over = hint_s > EVALGATE_HINT_CAP_S
            capped = f" (capped at {EVALGATE_HINT_CAP_S:g} s)" if over else ""
            self._log(
                f"evalgate: {request.identity}: the endpoint asked to wait {hint_s:.0f} s;"
                f" waiting {wait:.0f} s{capped} before attempt {attempt + 1}"
            )
        return wait

    def _target(self, endpoint: EvalgateEndpoint) -> http1.EvalgateHttpTarget:
        """The endpoint's URL and fixed headers, encoded once."""
        target = self._targets.get(endpoint)
        if target is None:
            headers = {"User-Agent": _USER_AGENT, "Accept": "application/json, text/event-stream"}
            headers["Content-Type"] = "application/json"
            if endpoint.api_key:
                headers["Authorization"] = f"Bearer {endpoint.api_key}"
                evalgate_add_secret(endpoint.api_key)
            url = _url(endpoint)
            proxy = evalgate_proxy_for(url, os.environ)  # read when first needed, as urllib does
            if proxy is not None:
                evalgate_add_secret(proxy.password)
                evalgate_add_secret(proxy.authorization and proxy.authorization.split(" ", 1)[1])
            target = http1.EvalgateHttpTarget(url, headers, proxy)
            self._targets[endpoint] = target
        return target

    async def _attempt(self, request: _Request, attempt: int) -> EvalgateAttempt:
        """One attempt in the slot ``call`` acquired; frees the slot (with the real usage)
        however the attempt ends, and feeds 429s and successes back to the limiter.

        Deliberately one coroutine (no nested helpers for the common path): every nesting
        level is resumed again on each network event, which the benchmark showed as CPU.
        Redirects are never followed (``client.http1`` follows none): a 3xx is an error.
        """
        endpoint = request.endpoint
        headers = {"x-evalgate-identity": _header_safe(request.identity)}
        headers["x-evalgate-attempt"] = str(attempt)
        done = EvalgateAttempt(sent=time.perf_counter())
        rsp: EvalgateHttpResponse | None = None
        try:
            async with asyncio.timeout(endpoint.timeout_s):
                rsp = await self._get_pool().evalgate_post(request.target, headers, request.payload)
                if rsp.status != 200:
                    await evalgate_read_failure(rsp, done)
                elif endpoint.stream:
                    await evalgate_read_stream(rsp, endpoint.api, request.caps, done)
                else:
                    await evalgate_read_whole(rsp, endpoint.api, request.caps, done)
                done.end = time.perf_counter()
        except TimeoutError:
            evalgate_fail(
                done, "timeout", None, f"no complete answer within {endpoint.timeout_s} s", True
            )
        except EvalgateHttpTruncated as exc:
            evalgate_fail(
                done, "truncated", 200, f"the body was cut off before its end ({exc})", True
            )
        except (EvalgateHttpError, OSError) as exc:
            refused = evalgate_refused_message(exc)  # kept findable: the child stops on it
            evalgate_fail(done, "connection", None, refused or f"{type(exc).__name__}: {exc}", True)
        except EvalgateAnswerError as exc:
            evalgate_fail(done, exc.category, 200, exc.message, exc.retry)
        finally:
            if rsp is not None:
                rsp.evalgate_release()  # its connection back to the pool, or closed
            evalgate_check_usage(done, request.caps)
            self._limiter.release(request.est_tokens, _used(done))
        evalgate_check_model(done, endpoint)
        evalgate_settle(done)
        self._feedback(done)
        return done


def _header_safe(value: str) -> str:
    """``value`` for an informational header: control characters (a line break in a case id)
    escaped as Python does (``\\n``), so no identity can break or forge a header line."""
    return value if value.isprintable() else value.encode("unicode_escape").decode("ascii")


def _url(endpoint: EvalgateEndpoint) -> str:
    if endpoint.api not in _PATHS:
        reason = f"must be one of {sorted(_PATHS)}, not {endpoint.api!r}"
        raise EvalgateConfigError("endpoint", "api", reason)
    return endpoint.base_url.rstrip("/") + _PATHS[endpoint.api]


def _payload(endpoint: EvalgateEndpoint, body: Mapping[str, object]) -> bytes:
    """The request body, serialised once for every attempt."""
    payload = {**body, "model": endpoint.model, "stream": endpoint.stream}
    if endpoint.stream:
        payload["stream_options"] = {"include_usage": True}
    return json.dumps(payload).encode()


def _queued(entered: float, scheduled_at: float | None) -> float:
    if scheduled_at is not None:
        return max(0.0, time.time() - scheduled_at)
    return time.perf_counter() - entered


def _used(done: EvalgateAttempt) -> int | None:
    if done.prompt_tokens is None or done.completion_tokens is None:
        return None
    return done.prompt_tokens + done.completion_tokens
