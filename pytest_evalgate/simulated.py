"""The built-in simulated model: a real OpenAI-compatible HTTP server on 127.0.0.1.

It is a simulator and says so: every response carries ``x-evalgate-simulator: 1`` and
``GET /v1/models`` lists models ``owned_by: "evalgate-simulator"``.

Contracts
---------
- Knobs come from a ``simulated://?accuracy=0.9&latency_ms=40&seed=1`` URL
  (:func:`evalgate_parse_simulated_url`) or from ``evalgate serve`` options.
- The answer key is JSON Lines ``{"prompt_sha256", "target", "category"}`` where
  ``prompt_sha256 = evalgate_prompt_digest(messages_or_prompt)`` (canonical sha256 of the chat
  ``messages`` list exactly as sent, or of the completion ``prompt``).
- Correctness is deterministic: ``u = uniform(sha256(seed, model, digest))`` (joined by U+001F),
  with the request's ``seed`` appended when its temperature is > 0 (a missing temperature means
  OpenAI's default 1.0); correct iff ``u < accuracy`` (``accuracy.<category>`` overrides).
  A correct answer is exactly the target; a wrong one never equals or contains the target, also
  after lowercasing, punctuation, article and whitespace normalisation. Unknown prompts are wrong.
- Tokens are the whitespace-separated words of the answer, each carrying its leading whitespace,
  so the tokens join back to the exact answer; ``output_tokens`` pads with ``" "`` tokens;
  ``max_tokens`` truncates with ``finish_reason: "length"``.
- Faults count completion requests (``POST /v1/chat/completions`` and ``/v1/completions``) in
  arrival order over the server's life. ``fail_401``, ``fail_400`` and ``quota`` hit every request;
  ``hang_first``, ``fail_429_first``, ``fail_500_first`` each hit requests with arrival index below
  their N, checked in that order; ``fail_rate`` is a seeded per-arrival 503 probability.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from types import TracebackType
from typing import Any, TextIO
from urllib.parse import parse_qsl, urlencode, urlsplit

from pytest_evalgate.canonical import evalgate_sha256_hex
from pytest_evalgate.errors import EvalgateConfigError

EVALGATE_SIM_OWNER = "evalgate-simulator"
EVALGATE_SIM_READY = "evalgate simulator (not a real model) listening on"
_HANG_LIMIT_S = 300.0
_MAX_BODY = 16 * 1024 * 1024
_MAX_HEAD = 64 * 1024


@dataclass(frozen=True)
class EvalgateSimConfig:
    """Every knob of the simulated model; times in milliseconds, rates in [0, 1]."""

    accuracy: float = 0.9
    accuracy_by_category: tuple[tuple[str, float], ...] = ()
    seed: int = 0
    latency_ms: float = 0.0
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    jitter: float = 0.0
    output_tokens: int | None = None
    output_jitter: float = 0.0
    fail_401: bool = False
    fail_400: bool = False
    quota: bool = False
    fail_429_first: int = 0
    retry_after: float | None = None
    fail_500_first: int = 0
    fail_rate: float = 0.0
    hang_first: int = 0
    hang_s: float = _HANG_LIMIT_S

    def accuracy_for(self, category: str | None) -> float:
        """The accuracy that applies to ``category`` (its override, else ``accuracy``)."""
        for name, value in self.accuracy_by_category:
            if name == category:
                return value
        return self.accuracy


# --------------------------------------------------------------------------- knobs and URLs

_UNIT_KNOBS = frozenset({"accuracy", "fail_rate", "jitter", "output_jitter"})


def _sim_knob_types() -> dict[str, str]:
    return {
        f.name: str(f.type) for f in fields(EvalgateSimConfig) if f.name != "accuracy_by_category"
    }


def evalgate_sim_knob_names() -> tuple[str, ...]:
    """The scalar knob names (``accuracy.<category>`` aside), in field order: ``--<knob>`` flags."""
    return tuple(_sim_knob_types())


def _sim_parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected 0 or 1, got {text!r}")


def _sim_parse_value(kind: str, text: str) -> Any:
    if kind == "bool":
        return _sim_parse_bool(text)
    number: float = int(text) if kind.startswith("int") else float(text)
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"expected a finite number >= 0, got {text!r}")
    return number


def _sim_check_range(source: str, name: str, value: Any) -> None:
    unit = name in _UNIT_KNOBS or name.startswith("accuracy.")
    if unit and not 0.0 <= float(value) <= 1.0:
        raise EvalgateConfigError(source, name, f"must be within [0, 1], got {value}")
    if name == "hang_s" and float(value) > _HANG_LIMIT_S:
        raise EvalgateConfigError(source, name, f"must be <= {_HANG_LIMIT_S:g}")


def _sim_knob(source: str, name: str, text: str, types: Mapping[str, str]) -> Any:
    kind = "float" if name.startswith("accuracy.") else types.get(name)
    if kind is None:
        known = ", ".join(sorted([*types, "accuracy.<category>"]))
        raise EvalgateConfigError(source, name, f"unknown knob (known: {known})")
    try:
        value = _sim_parse_value(kind, text)
    except ValueError as exc:
        raise EvalgateConfigError(source, name, str(exc)) from None
    _sim_check_range(source, name, value)
    return value


def evalgate_sim_config_from_knobs(
    pairs: Iterable[tuple[str, str]], source: str = "simulated://"
) -> EvalgateSimConfig:
    """Build a config from ``(knob, text)`` pairs; unknown, repeated or bad knobs raise
    ``EvalgateConfigError(source, knob, reason)``."""
    types = _sim_knob_types()
    values: dict[str, Any] = {}
    by_category: dict[str, float] = {}
    for name, text in pairs:
        if name in values or name.removeprefix("accuracy.") in by_category:
            raise EvalgateConfigError(source, name, "given twice")
        value = _sim_knob(source, name, text, types)
        if name.startswith("accuracy."):
            by_category[name.removeprefix("accuracy.")] = float(value)
        else:
            values[name] = value
    return EvalgateSimConfig(**values, accuracy_by_category=tuple(sorted(by_category.items())))


def evalgate_parse_simulated_url(url: str) -> EvalgateSimConfig:
    """Parse ``simulated://?knob=value&...`` into a config; errors name the URL and the knob."""
    parts = urlsplit(url)
    if parts.scheme != "simulated":
        raise EvalgateConfigError(url, "scheme", "a simulated model URL starts with simulated://")
    if parts.netloc or parts.path.strip("/"):
        raise EvalgateConfigError(url, "path", "knobs go in the query: simulated://?accuracy=0.9")
    try:
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise EvalgateConfigError(url, "query", str(exc)) from None
    return evalgate_sim_config_from_knobs(pairs, source=url)


def evalgate_sim_config_url(config: EvalgateSimConfig) -> str:
    """The ``simulated://?...`` URL of ``config`` (non-default knobs only); parses back equal."""
    default = EvalgateSimConfig()
    pairs: list[tuple[str, str]] = []
    for name in _sim_knob_types():
        value = getattr(config, name)
        if value != getattr(default, name):
            pairs.append((name, str(int(value)) if isinstance(value, bool) else repr(value)))
    pairs += [(f"accuracy.{name}", repr(value)) for name, value in config.accuracy_by_category]
    return "simulated://?" + urlencode(pairs)


# --------------------------------------------------------------------------- answer key


def evalgate_prompt_digest(messages_or_prompt: Any) -> str:
    """The answer-key digest: canonical sha256 of the chat ``messages`` list or of the prompt."""
    return evalgate_sha256_hex(messages_or_prompt)


def evalgate_write_answer_key(
    path: str | os.PathLike[str], rows: Iterable[tuple[Any, str, str]]
) -> int:
    """Write ``(messages_or_prompt, target, category)`` rows as an answer key; returns the count."""
    count = 0
    with open(path, "w", encoding="utf-8") as handle:
        for prompt, target, category in rows:
            row = {"prompt_sha256": evalgate_prompt_digest(prompt), "target": target}
            row["category"] = category
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count


def _sim_key_row(source: str, number: int, line: str) -> tuple[str, str, str]:
    try:
        row = json.loads(line)
        digest, target, category = row["prompt_sha256"], row["target"], row.get("category", "")
    except (ValueError, KeyError, TypeError) as exc:
        raise EvalgateConfigError(source, f"line {number}", f"not an answer row: {exc}") from None
    if not (isinstance(digest, str) and isinstance(target, str) and isinstance(category, str)):
        raise EvalgateConfigError(source, f"line {number}", "fields must be strings")
    return digest, target, category


def evalgate_load_answer_key(path: str | os.PathLike[str]) -> dict[str, tuple[str, str]]:
    """Read an answer key into ``digest -> (target, category)``; a digest given twice with a
    different answer is an ``EvalgateConfigError``."""
    source = os.fspath(path)
    key: dict[str, tuple[str, str]] = {}
    with open(source, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            digest, target, category = _sim_key_row(source, number, line)
            if key.setdefault(digest, (target, category)) != (target, category):
                raise EvalgateConfigError(source, f"line {number}", f"conflicting row for {digest}")
    return key


# --------------------------------------------------------------------------- answers

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = re.compile(r"[^\w\s]")
_NUMBER = re.compile(r"\s*-?\d+(\.\d+)?\s*")
_TOKEN = re.compile(r"\s*\S+")
_WRONG_WORDS = (
    "refund", "invoice", "password", "shipping", "warranty", "account", "billing", "upgrade",
    "cancel", "reset", "order", "payment", "ticket", "blue", "seven", "paris", "tuesday", "twelve",
    "london", "maybe", "unknown", "router", "printer", "monthly", "weekly", "green", "north",
    "forty", "copper", "summer", "morning", "eleven",
)  # fmt: skip
_WRONG_FALLBACKS = ("unknown", "42", "no", "xyz", "7", "qj")


def evalgate_sim_normalise(text: str) -> str:
    """Lowercase, drop punctuation and English articles, collapse whitespace."""
    return " ".join(_ARTICLES.sub(" ", _PUNCT.sub(" ", text.lower())).split())


def _sim_uniform(*parts: Any) -> float:
    """Uniform in [0, 1) from sha256 of the parts joined by U+001F (cheaper than JSON)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def _sim_clashes(wrong: str, target: str) -> bool:
    for norm in (evalgate_sim_normalise, lambda s: " ".join(s.lower().split())):
        good, bad = norm(target), norm(wrong)
        if not bad or bad == good or (good and good in bad):
            return True
    return False


def _sim_wrong_candidates(target: str | None, noise: bytes) -> list[str]:
    words = len(_WRONG_WORDS)
    out: list[str] = []
    if target is not None and _NUMBER.fullmatch(target):
        value, places = float(target), len(target.strip().partition(".")[2])
        out += [f"{value + (b % 9 + 1) * (1 if b & 16 else -1):.{places}f}" for b in noise[:8]]
    pairs = zip(noise[::2], noise[1::2], strict=True)
    out += [f"{_WRONG_WORDS[a % words]} {_WRONG_WORDS[b % words]}" for a, b in pairs]
    return out + [_WRONG_WORDS[b % words] for b in noise] + list(_WRONG_FALLBACKS)


def evalgate_sim_wrong_answer(target: str | None, salt: str) -> str:
    """A deterministic plausible wrong answer: never equal to ``target`` nor containing it,
    under plain and strong normalisation (``target=None``: any plausible answer)."""
    noise = hashlib.sha256(salt.encode()).digest()
    for candidate in _sim_wrong_candidates(target, noise):
        if target is None or not _sim_clashes(candidate, target):
            return candidate
    unused = [c for c in "0123456789xyzqj" if c not in (target or "").lower()]
    return "".join(unused[:3]) or "no answer"


@dataclass(frozen=True)
class EvalgateSimAnswer:
    """One simulated answer: its text, whether it is the key's target, and the key lookup."""

    text: str
    correct: bool
    known: bool
    category: str | None
    digest: str


def evalgate_sim_answer(
    config: EvalgateSimConfig,
    key: Mapping[str, tuple[str, str]],
    model: str,
    messages_or_prompt: Any,
    temperature: float = 0.0,
    request_seed: Any = None,
) -> EvalgateSimAnswer:
    """The deterministic answer the server gives (see the module contract)."""
    digest = evalgate_prompt_digest(messages_or_prompt)
    salt = _sim_salt(config, model, digest, temperature, request_seed)
    row = key.get(digest)
    if row is None:
        return EvalgateSimAnswer(
            evalgate_sim_wrong_answer(None, repr(salt)), False, False, None, digest
        )
    target, category = row
    correct = _sim_uniform(*salt) < config.accuracy_for(category)
    text = target if correct else evalgate_sim_wrong_answer(target, repr(salt))
    return EvalgateSimAnswer(text, correct, True, category, digest)


def _sim_salt(
    config: EvalgateSimConfig, model: str, digest: str, temperature: float, seed: Any
) -> tuple[Any, ...]:
    if temperature > 0:
        return (config.seed, model, digest, seed)
    return (config.seed, model, digest)


def evalgate_sim_tokens(text: str) -> list[str]:
    """Split ``text`` into word tokens, each with its leading whitespace; they join to ``text``."""
    tokens = _TOKEN.findall(text)
    rest = text[sum(map(len, tokens)) :]
    if rest and tokens:
        tokens[-1] += rest
    elif rest:
        tokens = [rest]
    return tokens


# --------------------------------------------------------------------------- request plans


@dataclass(frozen=True)
class _SimPlan:
    tokens: tuple[str, ...]
    finish: str
    prompt_tokens: int
    ttft_s: float
    tpot_s: float
    total_s: float


def _sim_prompt_words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(_sim_prompt_words(item) for item in value)
    if isinstance(value, dict):
        return _sim_prompt_words(value.get("content", value.get("text")))
    return 0


def _sim_token_target(config: EvalgateSimConfig, salt: tuple[Any, ...], count: int) -> int:
    if config.output_tokens is None:
        return count
    spread = config.output_jitter * (2.0 * _sim_uniform("length", *salt) - 1.0)
    return max(count, round(config.output_tokens * (1.0 + spread)))


def _sim_plan(
    config: EvalgateSimConfig, text: str, salt: tuple[Any, ...], body: Mapping[str, Any]
) -> _SimPlan:
    tokens = evalgate_sim_tokens(text)
    tokens += [" "] * (_sim_token_target(config, salt, len(tokens)) - len(tokens))
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    finish = "stop"
    if isinstance(limit, int) and 0 <= limit < len(tokens):
        tokens, finish = tokens[:limit], "length"
    scale = 1.0  # the jitter hash costs ~10 us: skip it when it cannot matter
    if config.jitter:
        scale += config.jitter * (2.0 * _sim_uniform("jitter", *salt) - 1.0)
    timed = config.ttft_ms is not None or config.tpot_ms is not None
    ttft = (config.ttft_ms if config.ttft_ms is not None else config.latency_ms) * scale / 1e3
    tpot = (config.tpot_ms or 0.0) * scale / 1e3
    total = ttft + tpot * max(len(tokens) - 1, 0) if timed else config.latency_ms * scale / 1e3
    prompt = body.get("messages", body.get("prompt"))
    return _SimPlan(tuple(tokens), finish, _sim_prompt_words(prompt), ttft, tpot, total)


# --------------------------------------------------------------------------- HTTP plumbing

_REASONS = {
    200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
    405: "Method Not Allowed", 411: "Length Required", 413: "Payload Too Large",
    429: "Too Many Requests", 431: "Request Header Fields Too Large",
    500: "Internal Server Error", 503: "Service Unavailable",
}  # fmt: skip


@dataclass(frozen=True)
class _SimRequest:
    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    keep_alive: bool


class _SimHttpError(Exception):
    """A request this server cannot parse; answered, then the connection closes."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _sim_parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ", 2)
    except ValueError:
        raise _SimHttpError(400, "malformed request line") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return method, target.partition("?")[0], version, headers


def _sim_body_length(headers: Mapping[str, str]) -> int:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise _SimHttpError(411, "chunked request bodies are not supported; send Content-Length")
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise _SimHttpError(400, "bad Content-Length") from None
    if not 0 <= length <= _MAX_BODY:
        raise _SimHttpError(413, "request body too large")
    return length


def _sim_parse(buffer: bytearray) -> tuple[_SimRequest, int] | None:
    """One complete request from the front of ``buffer`` and its size, or None if incomplete."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        if len(buffer) > _MAX_HEAD:
            raise _SimHttpError(431, "request head too large")
        return None
    method, path, version, headers = _sim_parse_head(bytes(buffer[:end]))
    total = end + 4 + _sim_body_length(headers)
    if len(buffer) < total:
        return None
    connection = headers.get("connection", "").lower()
    keep = connection != "close" and (version == "HTTP/1.1" or connection == "keep-alive")
    return _SimRequest(method, path, headers, bytes(buffer[end + 4 : total]), keep), total


def _sim_head(status: int, content_type: str, extra: str, length: int | None, close: bool) -> bytes:
    framing = "Transfer-Encoding: chunked" if length is None else f"Content-Length: {length}"
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\nContent-Type: {content_type}\r\n"
        f"{framing}\r\nx-evalgate-simulator: 1\r\n{extra}"
    )
    return (head + ("Connection: close\r\n\r\n" if close else "\r\n")).encode("latin-1")


def _sim_chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


class _SimProtocol(asyncio.Protocol):
    """One HTTP/1.1 connection: requests are answered one at a time, in order.

    Written against asyncio directly rather than aiohttp.web: it gives exact control of
    pipelining, hangs, drops and disconnect counting, and in ``bench/simulator.py`` the whole
    simulator costs about what a bare aiohttp.web sleep-and-reply handler costs per request.
    """

    def __init__(self, app: _SimApp) -> None:
        self.app = app
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._busy = False
        self._counted = False
        self._close = False
        self._pending: asyncio.TimerHandle | asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.app.connections.add(self)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if not self._busy:
            self._next()

    def connection_lost(self, exc: Exception | None) -> None:
        self.app.connections.discard(self)
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        if self._busy and self._counted:
            self.app.end(None)
        self._busy = self._counted = False
        self.transport = None

    def _next(self) -> None:
        try:
            parsed = _sim_parse(self._buffer)
        except _SimHttpError as exc:
            self._busy, self._close = True, True
            self.reply(exc.status, _sim_error_body(str(exc), "invalid_request_error", None))
            return
        if parsed is not None:
            request, size = parsed
            del self._buffer[:size]
            self._busy, self._close = True, not request.keep_alive
            self.app.dispatch(request, self)

    def begin_counted(self) -> None:
        """Mark the current request as one the stats count until it ends."""
        self._counted = True

    def reply(self, status: int, body: bytes, extra: str = "", delay: float = 0.0) -> None:
        """Send one JSON response, after ``delay`` seconds if positive."""
        data = _sim_head(status, "application/json", extra, len(body), self._close) + body
        if delay > 0:
            loop = asyncio.get_running_loop()
            self._pending = loop.call_later(delay, self._send, status, data)
        else:
            self._send(status, data)

    def stream(self, status: int, chunks: Callable[[_SimProtocol], Any]) -> None:
        """Run ``chunks(self)`` (a coroutine function writing SSE) as this request's response."""
        assert self.transport is not None
        self.transport.write(_sim_head(status, "text/event-stream", "", None, self._close))
        self._pending = asyncio.get_running_loop().create_task(self._stream(status, chunks))

    async def _stream(self, status: int, chunks: Callable[[_SimProtocol], Any]) -> None:
        await chunks(self)
        self._send(status, b"0\r\n\r\n")

    def write_events(self, data: bytes) -> None:
        """Write already SSE-framed bytes as one HTTP chunk."""
        if self.transport is not None:
            self.transport.write(_sim_chunk(data))

    def hang(self, seconds: float) -> None:
        """Never answer; drop the connection after ``seconds`` (the client usually leaves first)."""
        self._pending = asyncio.get_running_loop().call_later(seconds, self._drop)

    def _drop(self) -> None:
        self._pending = None
        if self._counted:
            self.app.end(None, dropped=True)
        self._busy = self._counted = False  # connection_lost must not count it again
        if self.transport is not None:
            self.transport.close()

    def _send(self, status: int, data: bytes) -> None:
        self._pending = None
        if self.transport is None:
            return
        self.transport.write(data)
        if self._counted:
            self.app.end(status)
        self._busy = self._counted = False
        if self._close:
            self.transport.close()
        elif self._buffer:
            self._next()

    def abort(self) -> None:
        """Close at once (server shutdown)."""
        if self.transport is not None:
            self.transport.abort()


def _sim_error_body(message: str, kind: str, code: str | None) -> bytes:
    error = {"message": message + " (evalgate simulator)", "type": kind, "param": None}
    error["code"] = code
    return json.dumps({"error": error}).encode()


# --------------------------------------------------------------------------- the application

_SimFault = tuple[int, str, str, str | None]
_FAULT_HANG: _SimFault = (0, "no answer", "", None)
_FAULT_401: _SimFault = (
    401,
    "Incorrect API key provided",
    "invalid_request_error",
    "invalid_api_key",
)
_FAULT_400: _SimFault = (400, "Invalid request", "invalid_request_error", "simulated_bad_request")
_FAULT_QUOTA: _SimFault = (
    429,
    "You exceeded your current quota",
    "insufficient_quota",
    "insufficient_quota",
)
_FAULT_429: _SimFault = (429, "Rate limit reached for requests", "requests", "rate_limit_exceeded")
_FAULT_500: _SimFault = (
    500,
    "The server had an error processing your request",
    "server_error",
    None,
)
_FAULT_503: _SimFault = (503, "The server is overloaded", "server_error", "overloaded")
_COMPLETIONS = {"/v1/chat/completions": "chat", "/v1/completions": "text"}


class _SimApp:
    """Routing, counters and answers of one server; lives on the server's event loop only."""

    def __init__(
        self, config: EvalgateSimConfig, key: Mapping[str, tuple[str, str]], log: TextIO | None
    ) -> None:
        self.config = config
        self.key = key
        self.log = log
        self.connections: set[_SimProtocol] = set()
        self.arrivals = 0
        self.models: dict[str, None] = {}
        self.hangs_dropped = 0
        self.in_flight = 0
        self.reset()

    def reset(self) -> None:
        """Zero the counters; requests still in flight stay counted in ``in_flight``."""
        self.total = 0
        self.by_status: dict[str, int] = {}
        self.disconnects = 0
        self.peak = self.in_flight

    def stats(self) -> dict[str, Any]:
        """The counters as builtins (``GET /evalgate/stats``)."""
        return {
            "simulator": True, "requests_total": self.total, "by_status": dict(self.by_status),
            "in_flight": self.in_flight, "peak_in_flight": self.peak,
            "client_disconnects": self.disconnects, "hangs_dropped": self.hangs_dropped,
            "completion_arrivals": self.arrivals,
        }  # fmt: skip

    def begin(self, proto: _SimProtocol) -> None:
        """Count a request as arrived and in progress."""
        proto.begin_counted()
        self.total += 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)

    def end(self, status: int | None, dropped: bool = False) -> None:
        """Count a request as finished (``None``: the client went away first, or ``dropped``:
        the server gave up on a hung request)."""
        self.in_flight -= 1
        if dropped:
            self.hangs_dropped += 1
        elif status is None:
            self.disconnects += 1
        else:
            self.by_status[str(status)] = self.by_status.get(str(status), 0) + 1

    def dispatch(self, request: _SimRequest, proto: _SimProtocol) -> None:
        """Route one parsed request to its handler."""
        kind = _COMPLETIONS.get(request.path)
        if kind is not None and request.method == "POST":
            self._completion(request, proto, kind)
        elif request.path == "/v1/models" and request.method == "GET":
            self._log(request, None, None)
            self.begin(proto)
            proto.reply(200, self._models_body())
        elif request.path in ("/evalgate/stats", "/evalgate/reset"):
            self._control(request, proto)
        else:
            known = kind is not None or request.path == "/v1/models"
            status, why = (405, "method not allowed") if known else (404, "no such path")
            proto.reply(status, _sim_error_body(why, "invalid_request_error", None))

    def _control(self, request: _SimRequest, proto: _SimProtocol) -> None:
        if request.path == "/evalgate/reset" and request.method == "POST":
            self.reset()
        elif request.path == "/evalgate/reset" or request.method != "GET":
            proto.reply(405, _sim_error_body("method not allowed", "invalid_request_error", None))
            return
        proto.reply(200, json.dumps(self.stats()).encode())

    def _models_body(self) -> bytes:
        names = ["evalgate-simulator", *self.models]
        data = [
            {"id": n, "object": "model", "created": 0, "owned_by": EVALGATE_SIM_OWNER}
            for n in names
        ]
        return json.dumps({"object": "list", "data": data}).encode()

    def _log(self, request: _SimRequest, model: Any, index: int | None) -> None:
        if self.log is None:
            return
        line = {"t": time.time(), "path": request.path, "model": model, "n": index}
        line["identity"] = request.headers.get("x-evalgate-identity")
        line["attempt"] = request.headers.get("x-evalgate-attempt")
        self.log.write(json.dumps(line) + "\n")  # line-buffered file: flushed per line

    def _completion(self, request: _SimRequest, proto: _SimProtocol, kind: str) -> None:
        index = self.arrivals
        self.arrivals += 1
        body = _sim_json(request.body)
        model = body.get("model") if body is not None else None
        self._log(request, model, index)
        self.begin(proto)
        if self._fault(index, proto):
            return
        try:
            self._answer(body, proto, kind, index)
        except (AttributeError, TypeError, ValueError) as exc:  # odd but valid JSON shapes
            proto.reply(400, _sim_error_body(f"bad request: {exc}", "invalid_request_error", None))

    def _fault(self, index: int, proto: _SimProtocol) -> bool:
        config = self.config
        fault = _sim_fault(config, index)
        if fault is _FAULT_HANG:
            proto.hang(min(config.hang_s, _HANG_LIMIT_S))
            return True
        if fault is None:
            return False
        status, message, kind, code = fault
        extra = ""
        if code == "rate_limit_exceeded" and config.retry_after is not None:
            extra = f"Retry-After: {config.retry_after:g}\r\n"
        proto.reply(status, _sim_error_body(message, kind, code), extra)
        return True

    def _answer(
        self, body: dict[str, Any] | None, proto: _SimProtocol, kind: str, index: int
    ) -> None:
        problem = _sim_validate(body, kind)
        if problem is not None or body is None:
            error = _sim_error_body(problem or "bad body", "invalid_request_error", None)
            proto.reply(400, error)
            return
        model = str(body.get("model", ""))
        self.models.setdefault(model, None)
        plan = self._plan(body, kind, model)
        rid = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-evalgate-sim-{index}"
        if body.get("stream"):
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            proto.stream(200, _SimStream(kind, rid, model, plan, usage).run)
        else:
            proto.reply(200, _sim_full_body(kind, rid, model, plan), delay=plan.total_s)

    def _plan(self, body: Mapping[str, Any], kind: str, model: str) -> _SimPlan:
        prompt = body["messages"] if kind == "chat" else body["prompt"]
        temperature = body.get("temperature")
        temperature = 1.0 if temperature is None else float(temperature)
        seed = body.get("seed")
        answer = evalgate_sim_answer(self.config, self.key, model, prompt, temperature, seed)
        salt = _sim_salt(self.config, model, answer.digest, temperature, seed)
        return _sim_plan(self.config, answer.text, salt, body)


def _sim_fault(config: EvalgateSimConfig, index: int) -> _SimFault | None:
    if config.fail_401:
        return _FAULT_401
    if config.fail_400:
        return _FAULT_400
    if config.quota:
        return _FAULT_QUOTA
    if index < config.hang_first:
        return _FAULT_HANG
    if index < config.fail_429_first:
        return _FAULT_429
    if index < config.fail_500_first:
        return _FAULT_500
    if config.fail_rate > 0 and _sim_uniform("fail", config.seed, index) < config.fail_rate:
        return _FAULT_503
    return None


def _sim_reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # canonical digests refuse NaN and Infinity


_DECODER = json.JSONDecoder(parse_constant=_sim_reject_constant)  # json.loads builds one per call


def _sim_json(body: bytes) -> dict[str, Any] | None:
    try:
        value = _DECODER.decode(body.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError is a ValueError too
        return None
    return value if isinstance(value, dict) else None


def _sim_validate(body: Mapping[str, Any] | None, kind: str) -> str | None:
    if body is None:
        return "the body must be a JSON object"
    if kind == "chat" and not isinstance(body.get("messages"), list):
        return "'messages' must be a list"
    if kind == "text" and not isinstance(body.get("prompt"), str | list):
        return "'prompt' must be a string or a list"
    temperature = body.get("temperature")
    if temperature is not None and not isinstance(temperature, int | float):
        return "'temperature' must be a number"
    return None


def _sim_usage(plan: _SimPlan) -> dict[str, int]:
    completion = len(plan.tokens)
    total = plan.prompt_tokens + completion
    return {
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": total,
    }


def _sim_full_body(kind: str, rid: str, model: str, plan: _SimPlan) -> bytes:
    text = "".join(plan.tokens)
    choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": plan.finish}
    if kind == "chat":
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    obj = "chat.completion" if kind == "chat" else "text_completion"
    body = {"id": rid, "object": obj, "created": int(time.time()), "model": model}
    body |= {
        "system_fingerprint": EVALGATE_SIM_OWNER,
        "choices": [choice],
        "usage": _sim_usage(plan),
    }
    return json.dumps(body).encode()


class _SimStream:
    """The SSE events of one streamed answer, written on the plan's schedule."""

    def __init__(self, kind: str, rid: str, model: str, plan: _SimPlan, usage: bool) -> None:
        self.kind, self.plan, self.usage = kind, plan, usage
        obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
        self.base = {"id": rid, "object": obj, "created": int(time.time()), "model": model}

    def event(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        """One ``data: {...}`` event."""
        return b"data: " + json.dumps({**self.base, "choices": choices, **extra}).encode() + b"\n\n"

    def token(self, index: int, text: str | None, finish: str | None) -> bytes:
        """The event carrying token ``index`` (the first one also carries the role)."""
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish}
        if self.kind == "text":
            choice["text"] = text or ""
        else:
            delta = {} if text is None else {"content": text}
            choice["delta"] = {"role": "assistant", **delta} if index == 0 else delta
        return self.event([choice])

    def tail(self) -> bytes:
        """Finish event, optional usage event, ``[DONE]``."""
        out = self.token(max(len(self.plan.tokens), 1), None, self.plan.finish)
        if self.usage:
            out += self.event([], usage=_sim_usage(self.plan))
        return out + b"data: [DONE]\n\n"

    async def run(self, proto: _SimProtocol) -> None:
        """Write every event: first token after ``ttft_s``, each next after ``tpot_s``."""
        await asyncio.sleep(self.plan.ttft_s)
        tokens = self.plan.tokens or ("",)
        if self.plan.tpot_s <= 0:  # no pacing: one write is far cheaper than one per token
            proto.write_events(b"".join(self.token(i, t, None) for i, t in enumerate(tokens)))
        else:
            for i, text in enumerate(tokens):
                if i:
                    await asyncio.sleep(self.plan.tpot_s)
                proto.write_events(self.token(i, text, None))
        proto.write_events(self.tail())


# --------------------------------------------------------------------------- servers


async def _sim_serve(
    app: _SimApp, port: int, ready: Callable[[int], None], stop: asyncio.Event
) -> None:
    """Serve ``app`` on 127.0.0.1:``port`` until ``stop`` is set; ``ready(port)`` once bound."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _SimProtocol(app), "127.0.0.1", port, backlog=1024)
    try:
        ready(server.sockets[0].getsockname()[1])
        await stop.wait()
    finally:
        server.close()
        for proto in list(app.connections):
            proto.abort()
        await asyncio.sleep(0)  # let connection_lost callbacks cancel pending work


def _sim_open_log(path: str | os.PathLike[str] | None) -> TextIO | None:
    if path is None:
        return None
    return open(path, "a", encoding="utf-8", buffering=1)  # closed by the server


def _sim_load_key(answers: str | os.PathLike[str] | None) -> dict[str, tuple[str, str]]:
    return {} if answers is None else evalgate_load_answer_key(answers)


class EvalgateSimServer:
    """The simulator in this process: its own event loop in a daemon thread.

    ``start()`` binds 127.0.0.1:``port`` (0 = ephemeral) and returns once listening;
    ``base_url`` is ``http://127.0.0.1:PORT/v1``; ``stats()``/``reset()`` read and zero the
    counters; ``stop()`` closes every connection and joins the thread. A context manager.
    """

    def __init__(
        self,
        config: EvalgateSimConfig | None = None,
        answers: str | os.PathLike[str] | None = None,
        request_log: str | os.PathLike[str] | None = None,
        port: int = 0,
    ) -> None:
        self.config = config or EvalgateSimConfig()
        self._answers, self._log_path, self._want_port = answers, request_log, port
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._app: _SimApp | None = None
        self._failure: BaseException | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> EvalgateSimServer:
        """Bind and serve in the background; raises what binding or loading raised."""
        key = _sim_load_key(self._answers)
        self._thread = threading.Thread(target=self._main, args=(key,), daemon=True)
        self._thread.start()
        self._ready.wait(30.0)
        if self._failure is not None or not self.port:
            self._thread.join(5.0)
            raise self._failure or EvalgateConfigError("simulator", "start", "did not start")
        return self

    def _main(self, key: dict[str, tuple[str, str]]) -> None:
        try:
            asyncio.run(self._serve(key))
        except BaseException as exc:  # handed to start() in the caller's thread
            self._failure = exc
        finally:
            self._ready.set()

    async def _serve(self, key: dict[str, tuple[str, str]]) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        log = _sim_open_log(self._log_path)
        self._app = _SimApp(self.config, key, log)
        try:
            await _sim_serve(self._app, self._want_port, self._on_ready, self._stop)
        finally:
            if log is not None:
                log.close()

    def _on_ready(self, port: int) -> None:
        self.port = port
        self._ready.set()

    def _call(self, fn: Callable[[], Any]) -> Any:
        async def call() -> Any:
            return fn()

        assert self._loop is not None, "start() the server first"
        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(10.0)

    def stats(self) -> dict[str, Any]:
        """The counters, as ``GET /evalgate/stats`` returns them."""
        assert self._app is not None, "start() the server first"
        return dict(self._call(self._app.stats))

    def reset(self) -> None:
        """Zero the counters, as ``POST /evalgate/reset`` does."""
        assert self._app is not None, "start() the server first"
        self._call(self._app.reset)

    def stop(self) -> None:
        """Close every connection, stop the loop, join the thread; idempotent."""
        loop, stop, thread = self._loop, self._stop, self._thread
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop may have just finished
                loop.call_soon_threadsafe(stop.set)
        if thread is not None:
            thread.join(10.0)
        self._loop = self._thread = None

    def __enter__(self) -> EvalgateSimServer:
        return self.start() if self._thread is None else self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


# --------------------------------------------------------------------------- subprocess


class EvalgateSimProcess:
    """A simulator subprocess (``python -m pytest_evalgate.simulated``), on its own core."""

    def __init__(self, process: subprocess.Popen[bytes], port: int) -> None:
        self.process = process
        self.port = port

    @property
    def pid(self) -> int:
        """The subprocess id (for ``/proc/PID/stat``)."""
        return self.process.pid

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict[str, Any]:
        """``GET /evalgate/stats`` over loopback."""
        return _sim_http_json(self.port, "GET", "/evalgate/stats")

    def reset(self) -> None:
        """``POST /evalgate/reset`` over loopback."""
        _sim_http_json(self.port, "POST", "/evalgate/reset")

    def stop(self, timeout_s: float = 10.0) -> int:
        """SIGTERM, then SIGKILL after ``timeout_s``; waits and returns the exit status."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
        status = self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        return status

    def __enter__(self) -> EvalgateSimProcess:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _sim_http_json(port: int, method: str, path: str) -> dict[str, Any]:
    import http.client  # only the subprocess handle needs a blocking client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10.0)
    try:
        connection.request(method, path, body=b"" if method == "POST" else None)
        result: dict[str, Any] = json.loads(connection.getresponse().read())
        return result
    finally:
        connection.close()


_READY_LINE = re.compile(re.escape(EVALGATE_SIM_READY) + r" http://127\.0\.0\.1:(\d+)/v1")


def _sim_wait_ready(process: subprocess.Popen[bytes], timeout_s: float) -> int:
    assert process.stdout is not None
    deadline, seen = time.monotonic() + timeout_s, b""
    fd = process.stdout.fileno()
    while b"\n" not in seen and time.monotonic() < deadline:
        readable, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0.0))
        chunk = os.read(fd, 4096) if readable else b""
        if readable and not chunk:
            break  # EOF: the process exited before it was ready
        seen += chunk
    match = _READY_LINE.search(seen.decode(errors="replace"))
    if match is None:
        raise EvalgateConfigError("evalgate serve", "startup", f"no ready line: {seen[:300]!r}")
    return int(match.group(1))


def evalgate_spawn_simulator(
    config: EvalgateSimConfig,
    answers_path: str | os.PathLike[str] | None,
    request_log: str | os.PathLike[str] | None = None,
    *,
    port: int = 0,
    startup_timeout_s: float = 30.0,
) -> EvalgateSimProcess:
    """Start the simulator as a subprocess and return once it listens (its ready line).

    Raises ``EvalgateConfigError`` (after killing it) if it does not become ready in time.
    """
    spec = {
        "url": evalgate_sim_config_url(config),
        "answers": None if answers_path is None else os.fspath(answers_path),
        "request_log": None if request_log is None else os.fspath(request_log),
        "port": port,
        "parent_pid": os.getpid(),
    }
    argv = [sys.executable, "-m", "pytest_evalgate.simulated", json.dumps(spec)]
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    try:
        return EvalgateSimProcess(process, _sim_wait_ready(process, startup_timeout_s))
    except BaseException:
        EvalgateSimProcess(process, 0).stop(timeout_s=2.0)
        raise


# --------------------------------------------------------------------------- serving


def evalgate_sim_serve(
    config: EvalgateSimConfig,
    answers: str | None,
    request_log: str | None,
    port: int,
    parent_pid: int | None,
    on_ready: Callable[[str], None],
) -> None:
    """Serve on 127.0.0.1:``port`` (0: any free) until SIGTERM/SIGINT, or until ``parent_pid``
    is no longer this process's parent; ``on_ready(base_url)`` once listening. A bad answer key
    raises ``EvalgateConfigError`` (an unreadable one ``OSError``) before anything listens."""
    key = _sim_load_key(answers)

    def ready(bound: int) -> None:
        on_ready(f"http://127.0.0.1:{bound}/v1")

    asyncio.run(_sim_main(config, key, request_log, port, ready, parent_pid))


async def _sim_main(
    config: EvalgateSimConfig,
    key: dict[str, tuple[str, str]],
    log_path: str | None,
    port: int,
    ready: Callable[[int], None],
    parent_pid: int | None = None,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watch = None if parent_pid is None else loop.create_task(_sim_watch_parent(parent_pid, stop))
    log = _sim_open_log(log_path)
    try:
        await _sim_serve(_SimApp(config, key, log), port, ready, stop)
    finally:
        if watch is not None:
            watch.cancel()
        if log is not None:
            log.close()


async def _sim_watch_parent(parent_pid: int, stop: asyncio.Event) -> None:
    # A spawned simulator must not outlive a SIGKILLed harness: once the parent is gone the
    # process is re-parented, and the simulator stops itself.
    while not stop.is_set():
        if os.getppid() != parent_pid:
            stop.set()
            return
        await asyncio.sleep(0.5)


def _sim_write_ready(base_url: str) -> None:
    sys.stdout.write(f"{EVALGATE_SIM_READY} {base_url}\n")
    sys.stdout.flush()


def _sim_child(spec_json: str) -> None:
    """``python -m pytest_evalgate.simulated SPEC``: what ``evalgate_spawn_simulator`` starts
    (SPEC is its JSON); the ready line on stdout tells the parent the port."""
    spec = json.loads(spec_json)
    config = evalgate_parse_simulated_url(spec["url"])
    answers, log = spec["answers"], spec["request_log"]
    evalgate_sim_serve(config, answers, log, spec["port"], spec["parent_pid"], _sim_write_ready)


if __name__ == "__main__":
    _sim_child(sys.argv[1])
