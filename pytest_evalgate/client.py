"""One OpenAI-compatible request: retries, error categories, streaming timings (SPEC 5 and 8).

``EvalgateClient.call`` sends one identity's request to an ``EvalgateEndpoint`` under the
process's ``EvalgateLimiter`` and always returns an ``EvalgateCallResult``: either an answer with
its timings, or an ``EvalgateCallError`` whose ``category`` is one of SPEC section 5's. It never
raises for endpoint trouble (only for cancellation and programming errors).

Why aiohttp and not httpx: on this 2-core machine, with 64 requests in flight against a 50 ms
endpoint (bound: 1,280 req/s), httpx 0.28's default transport reached about 125 req/s (8 ms CPU a
request, its connection pool is the bottleneck), while a bare asyncio + aiohttp loop reaches
93-95 % of the bound at 0.09-0.14 ms CPU a request. ``bench/client_overhead.py`` measures this
client against that bare loop side by side; see ``docs/timings.md`` for its last numbers.
One ``aiohttp.ClientSession`` serves the whole process; its connector allows as many
connections per host as the limiter's ``max_concurrency`` and keeps them alive.

Retry policy (at most ``endpoint.max_attempts`` attempts):

- transient, retried: connection errors (``connection``), a hang or slow body cut by
  ``timeout_s`` and HTTP 408 (``timeout``), 429 (``rate_limited``, the limiter halves its limit),
  500/502/503/504 (``server_error``), and a 200 that is not valid JSON or has no ``choices``
  (``malformed_response``, retried once only: a server that answers garbage twice will again);
- permanent, not retried: 429 with code ``insufficient_quota`` (``rate_limited``, fatal),
  400/404/422 (``bad_request``, fatal), 401/403 (``auth``, fatal), other 4xx (``bad_request``)
  and other 5xx (``server_error``), and ``finish_reason == "content_filter"`` (``content_filter``).

The wait before attempt n+1 is full jitter, ``uniform(0, min(30, 0.5 * 2**(n-1)))`` seconds from
a seeded ``random.Random``, raised to at least the server's hint: ``Retry-After`` (seconds or an
HTTP date), ``retry-after-ms``, and on a 429 ``x-ratelimit-reset-requests`` /
``x-ratelimit-reset-tokens`` (Go durations such as ``1s``, ``6m0s``, ``20ms``) for each kind whose
``x-ratelimit-remaining-*`` is 0 or absent (OpenAI sends the reset headers on every response,
also for the limit that was not hit). Hints are capped at 600 s to keep runs bounded. While it
waits, the request holds no concurrency slot.

Timings are defined in ``docs/timings.md``.
"""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import json
import random
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_evalgate.errors import EvalgateConfigError

if TYPE_CHECKING:  # only the type: the limiter object is the caller's
    import aiohttp

    from pytest_evalgate.budget import EvalgateLimiter

EVALGATE_ERROR_CATEGORIES = (
    "timeout",
    "connection",
    "rate_limited",
    "server_error",
    "auth",
    "bad_request",
    "malformed_response",
    "content_filter",
)

_BACKOFF_BASE_S = 0.5
_BACKOFF_CAP_S = 30.0
_HINT_CAP_S = 600.0
_MESSAGE_MAX = 300
_TRANSIENT_5XX = frozenset({500, 502, 503, 504})
_FATAL_BAD_REQUEST = frozenset({400, 404, 422})
_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|m|s|us|µs|ns)")
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_PATHS = {"chat": "/chat/completions", "completions": "/completions"}


@dataclass(frozen=True)
class EvalgateEndpoint:
    """Where and how to call one candidate.

    ``api`` is ``"chat"`` (POST ``{base_url}/chat/completions``) or ``"completions"`` (POST
    ``{base_url}/completions``). ``timeout_s`` bounds each attempt as a whole, from the send to
    the last byte. ``stream=True`` sends ``stream_options.include_usage`` and yields TTFT, TPOT
    and ITL.
    """

    base_url: str
    model: str
    api: str
    api_key: str | None
    timeout_s: float
    max_attempts: int
    stream: bool = True


@dataclass(frozen=True)
class EvalgateCallError:
    """Why a call ended without a result; ``fatal`` means: stop this endpoint's other requests."""

    category: str
    status: int | None
    message: str
    fatal: bool


@dataclass(frozen=True)
class EvalgateCallResult:
    """The outcome of one call, after its retries. Seconds throughout; see docs/timings.md.

    ``error`` is None for an answer. With ``error`` set the identity has no result; ``output``
    and the timings may still describe the last attempt (a content-filtered answer, say).
    """

    output: str | None
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    ttft_s: float | None
    tpot_s: float | None
    itl_s: tuple[float, ...]
    e2e_s: float
    queued_s: float
    attempts: int
    error: EvalgateCallError | None
    sent_at: float


@dataclass
class _Attempt:
    """What one attempt produced; mutable while the response is read, private to this module."""

    sent: float
    output: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    content_times: list[float] = field(default_factory=list)
    end: float = 0.0
    error: EvalgateCallError | None = None
    retry: bool = False
    hint_s: float = 0.0


@dataclass(frozen=True)
class _Request:
    """One call's fixed parts, shared by its attempts."""

    endpoint: EvalgateEndpoint
    url: str
    payload: bytes
    identity: str
    est_tokens: int


class _Malformed(Exception):
    """The body of a 200 response is not an OpenAI-shaped answer."""


def evalgate_load_http() -> None:
    """Import aiohttp now (the runner's child does at start, before its setup arrives)."""
    # aiohttp (0.3-0.7 s to import) is bound at module level by the first client: only the
    # runner's child sends requests, while the pytest process imports this module for
    # ``EvalgateEndpoint`` and must not pay for it on its start-up path.
    global aiohttp
    import aiohttp


class EvalgateClient:
    """Sends requests for one process through one aiohttp session under ``limiter``.

    Create and use it inside one running event loop; call ``aclose`` when done.
    ``rng_seed`` seeds the backoff jitter so that a run's retry schedule is reproducible.
    """

    def __init__(self, limiter: EvalgateLimiter, *, rng_seed: int | None = None) -> None:
        evalgate_load_http()
        self._limiter = limiter
        self._rng = random.Random(rng_seed)
        self._session: aiohttp.ClientSession | None = None
        self._headers: dict[EvalgateEndpoint, dict[str, str]] = {}

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            size = self._limiter.max_concurrency
            connector = aiohttp.TCPConnector(limit=size, limit_per_host=size, keepalive_timeout=30)
            # Each attempt is bounded by asyncio.timeout(timeout_s); no second timer here.
            timeout = aiohttp.ClientTimeout(total=None)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=timeout, trust_env=False
            )
        return self._session

    async def aclose(self) -> None:
        """Close the session and its connections; the client can not be used afterwards."""
        if self._session is not None:
            await self._session.close()

    async def call(
        self,
        endpoint: EvalgateEndpoint,
        body: dict[str, Any],
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
        request = _Request(endpoint, _url(endpoint), _payload(endpoint, body), identity, est_tokens)
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
                return _result(done, queued, attempt, sent_at)
            await asyncio.sleep(self._backoff(attempt, done.hint_s))

    def _feedback(self, done: _Attempt) -> None:
        if done.error is None or done.error.category == "content_filter":
            self._limiter.on_success()
        elif done.error.category == "rate_limited":
            self._limiter.on_rate_limited()

    def _backoff(self, attempt: int, hint_s: float) -> float:
        ceiling = min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2.0 ** (attempt - 1))
        return max(self._rng.uniform(0.0, ceiling), min(hint_s, _HINT_CAP_S))

    def _base_headers(self, endpoint: EvalgateEndpoint) -> dict[str, str]:
        headers = self._headers.get(endpoint)
        if headers is None:
            headers = {"Content-Type": "application/json"}
            if endpoint.api_key:
                headers["Authorization"] = f"Bearer {endpoint.api_key}"
            self._headers[endpoint] = headers
        return headers

    def _headers_for(self, request: _Request, attempt: int) -> dict[str, str]:
        headers = {**self._base_headers(request.endpoint)}
        headers["x-evalgate-identity"] = request.identity
        headers["x-evalgate-attempt"] = str(attempt)
        return headers

    async def _attempt(self, request: _Request, attempt: int) -> _Attempt:
        """One attempt in the slot ``call`` acquired; frees the slot (with the real usage)
        however the attempt ends, and feeds 429s and successes back to the limiter.

        Deliberately one coroutine (no nested helpers for the common path): every nesting
        level is resumed again on each network event, which the benchmark showed as CPU.
        """
        endpoint = request.endpoint
        headers = self._headers_for(request, attempt)
        done = _Attempt(sent=time.perf_counter())
        try:
            async with (
                asyncio.timeout(endpoint.timeout_s),
                self._get_session().post(request.url, data=request.payload, headers=headers) as rsp,
            ):
                if rsp.status != 200:
                    await _read_failure(rsp, done)
                elif endpoint.stream:
                    await _read_stream(rsp, endpoint.api, done)
                else:
                    _read_whole(await rsp.read(), endpoint.api, done)
                done.end = time.perf_counter()
        except TimeoutError:
            _fail(done, "timeout", None, f"no complete answer within {endpoint.timeout_s} s", True)
        except (aiohttp.ClientError, OSError) as exc:
            _fail(done, "connection", None, _short(f"{type(exc).__name__}: {exc}"), True)
        except _Malformed as exc:
            _fail(done, "malformed_response", 200, _short(str(exc)), True)
        except _StreamError as exc:
            _fail(done, "server_error", 200, str(exc), True)
        finally:
            self._limiter.release(request.est_tokens, _used(done))
        _settle(done)
        self._feedback(done)
        return done


def _settle(done: _Attempt) -> None:
    """Stamp the end of a failed attempt; turn a content-filtered answer into its error."""
    if not done.end:
        done.end = time.perf_counter()
    if done.finish_reason == "content_filter" and done.error is None:
        _fail(done, "content_filter", 200, "the endpoint's content filter stopped the answer")


def _url(endpoint: EvalgateEndpoint) -> str:
    if endpoint.api not in _PATHS:
        reason = f"must be one of {sorted(_PATHS)}, not {endpoint.api!r}"
        raise EvalgateConfigError("endpoint", "api", reason)
    return endpoint.base_url.rstrip("/") + _PATHS[endpoint.api]


def _payload(endpoint: EvalgateEndpoint, body: dict[str, Any]) -> bytes:
    """The request body, serialised once for every attempt."""
    payload = {**body, "model": endpoint.model, "stream": endpoint.stream}
    if endpoint.stream:
        payload["stream_options"] = {"include_usage": True}
    return json.dumps(payload).encode()


def _queued(entered: float, scheduled_at: float | None) -> float:
    if scheduled_at is not None:
        return max(0.0, time.time() - scheduled_at)
    return time.perf_counter() - entered


def _used(done: _Attempt) -> int | None:
    if done.prompt_tokens is None or done.completion_tokens is None:
        return None
    return done.prompt_tokens + done.completion_tokens


def _short(text: str) -> str:
    return text if len(text) <= _MESSAGE_MAX else text[: _MESSAGE_MAX - 3] + "..."


def _fail(
    done: _Attempt,
    category: str,
    status: int | None,
    message: str,
    retry: bool = False,
    fatal: bool = False,
) -> None:
    done.error = EvalgateCallError(category, status, message, fatal)
    done.retry = retry


def _result(done: _Attempt, queued: float, attempts: int, sent_at: float) -> EvalgateCallResult:
    times = done.content_times
    tokens = done.completion_tokens
    tpot = None
    if tokens is not None and tokens >= 2 and len(times) >= 2:
        tpot = (times[-1] - times[0]) / (tokens - 1)
    return EvalgateCallResult(
        output=done.output,
        finish_reason=done.finish_reason,
        prompt_tokens=done.prompt_tokens,
        completion_tokens=tokens,
        ttft_s=times[0] - done.sent if times else None,
        tpot_s=tpot,
        itl_s=tuple(b - a for a, b in itertools.pairwise(times)),
        e2e_s=done.end - done.sent,
        queued_s=queued,
        attempts=attempts,
        error=done.error,
        sent_at=sent_at,
    )


# --- reading answers -------------------------------------------------------------------------


def _read_whole(raw: bytes, api: str, done: _Attempt) -> None:
    """A non-streaming 200: output, finish reason and usage from one JSON body."""
    obj = _loads(raw)
    choice = _first_choice(obj)
    if choice is None:
        raise _Malformed("the 200 response has no choices")
    message = choice.get("message") if api == "chat" else None
    text = message.get("content") if isinstance(message, dict) else choice.get("text")
    done.output = text if isinstance(text, str) else None
    done.finish_reason = choice.get("finish_reason")
    _take_usage(obj.get("usage"), done)


async def _read_stream(response: aiohttp.ClientResponse, api: str, done: _Attempt) -> None:
    """A streaming 200: SSE ``data:`` lines parsed by hand.

    Whole network reads are split into lines here rather than awaiting ``readline`` per line:
    profiled on ``bench/client_overhead.py`` this made reading a stream 2.2 times cheaper.
    Every chunk of one read is stamped with that read's arrival time, which is when the client
    could first have seen it.
    """
    sse = _Sse(done, "delta" if api == "chat" else None)
    async for data in response.content.iter_any():
        if sse.feed(data, time.perf_counter()):
            break
    sse.feed(b"\n", time.perf_counter())  # a last line without its newline
    if not sse.chunks:
        raise _Malformed("the stream held no chunk with choices")
    done.output = "".join(sse.parts)
    if done.completion_tokens is None:
        done.completion_tokens = len(done.content_times)


class _Sse:
    """The state of one SSE stream being folded into an ``_Attempt``."""

    def __init__(self, done: _Attempt, key: str | None) -> None:
        self.done = done
        self.key = key
        self.parts: list[str] = []
        self.chunks = 0
        self.finished = False
        self.tail = b""

    def feed(self, data: bytes, now: float) -> bool:
        """Take the complete lines of ``tail + data``; True once ``[DONE]`` has been seen."""
        lines = (self.tail + data).split(b"\n")
        self.tail = lines.pop()
        for line in lines:
            if self.finished or not line.startswith(b"data:"):
                continue  # blank separators, comments, ``event:`` lines, bytes after [DONE]
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.finished = True
            else:
                self.chunks += self.take(_loads(payload), now)
        return self.finished

    def take(self, obj: dict[str, Any], now: float) -> int:
        """Fold one chunk in; return 1 if it carried choices."""
        if "error" in obj:
            raise _StreamError(_error_text(obj))
        _take_usage(obj.get("usage"), self.done)
        choice = _first_choice(obj)
        if choice is None:
            return 0
        holder = choice.get(self.key) if self.key else choice
        text = holder.get("content" if self.key else "text") if isinstance(holder, dict) else None
        if text:
            self.done.content_times.append(now)
            self.parts.append(text)
        if choice.get("finish_reason"):
            self.done.finish_reason = choice["finish_reason"]
        return 1


class _StreamError(Exception):
    """The server reported an error inside a 200 stream (vLLM does on an engine failure)."""


def _loads(raw: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise _Malformed(f"not valid JSON: {raw[:80]!r}") from None
    if not isinstance(obj, dict):
        raise _Malformed(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _first_choice(obj: dict[str, Any]) -> dict[str, Any] | None:
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return None


def _take_usage(usage: Any, done: _Attempt) -> None:
    if isinstance(usage, dict):
        done.prompt_tokens = _int_or_none(usage.get("prompt_tokens"))
        done.completion_tokens = _int_or_none(usage.get("completion_tokens"))


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# --- classifying failures --------------------------------------------------------------------


async def _read_failure(response: aiohttp.ClientResponse, done: _Attempt) -> None:
    """A non-200 response: category, retry decision and wait hint from status, body, headers."""
    status = response.status
    message, code, kind = _error_detail(await response.content.read(65536))
    message = _short(f"HTTP {status}" + (f": {message}" if message else ""))
    category, retry, fatal = _classify_status(status, "insufficient_quota" in (code, kind))
    _fail(done, category, status, message, retry, fatal)
    if retry:
        done.hint_s = evalgate_retry_hint(response.headers, rate_limited=status == 429)


def _classify_status(status: int, no_quota: bool) -> tuple[str, bool, bool]:
    """(category, retry, fatal) for a non-200 status; ``no_quota`` marks a permanent 429."""
    if status == 429:
        return "rate_limited", not no_quota, no_quota
    if status in (401, 403):
        return "auth", False, True
    if status == 408:
        return "timeout", True, False
    if status >= 500:
        return "server_error", status in _TRANSIENT_5XX, False
    return "bad_request", False, status in _FATAL_BAD_REQUEST


def _error_detail(raw: bytes) -> tuple[str, str | None, str | None]:
    """(message, code, type) from an OpenAI error body, or the raw text when it is not JSON."""
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return raw.decode("utf-8", "replace").strip()[:200], None, None
    error = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(error, dict):
        code, kind = error.get("code"), error.get("type")
        return str(error.get("message", "")), _str_or_none(code), _str_or_none(kind)
    if isinstance(error, str):
        return error, None, None
    return str(obj)[:200], None, None


def _error_text(obj: dict[str, Any]) -> str:
    error = obj.get("error")
    text = error.get("message", error) if isinstance(error, dict) else error
    return _short(f"error inside the stream: {text}")


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def evalgate_retry_hint(headers: Any, *, rate_limited: bool) -> float:
    """The server's lower bound on the wait before a retry, in seconds (0 when it gives none).

    ``headers`` is a case-insensitive mapping. ``Retry-After`` (delta seconds or an HTTP date)
    and ``retry-after-ms`` always count; with ``rate_limited`` also ``x-ratelimit-reset-requests``
    and ``x-ratelimit-reset-tokens`` whose matching ``x-ratelimit-remaining-*`` is 0 or absent.
    The largest hint wins.
    """
    hints = [_retry_after(headers.get("Retry-After")), _millis(headers.get("retry-after-ms"))]
    if rate_limited:
        for kind in ("requests", "tokens"):
            remaining = headers.get(f"x-ratelimit-remaining-{kind}")
            if remaining is None or remaining.strip() in ("0", "0.0"):
                hints.append(evalgate_parse_duration(headers.get(f"x-ratelimit-reset-{kind}")))
    return max(hints)


def _retry_after(value: str | None) -> float:
    if not value:
        return 0.0
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return 0.0
    return max(0.0, when.timestamp() - time.time())


def _millis(value: str | None) -> float:
    try:
        return max(0.0, float(value) / 1000.0) if value else 0.0
    except ValueError:
        return 0.0


def evalgate_parse_duration(value: str | None) -> float:
    """Seconds in an OpenAI/Go duration such as ``1s``, ``6m0s``, ``20ms``, ``1h2m3.5s``.

    A bare number counts as seconds; anything unparsable gives 0.0 (no hint).
    """
    if not value:
        return 0.0
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    matches = list(_GO_DURATION.finditer(text))
    if not matches or "".join(m.group(0) for m in matches) != text:
        return 0.0
    return sum(float(m.group(1)) * _GO_UNITS[m.group(2)] for m in matches)
