"""Reading one 200 response into an attempt: a whole JSON body, or an SSE stream.

Contracts
---------
- ``EvalgateAttempt`` is what one attempt produced; the readers fill its output, finish
  reason, usage and content times, and raise ``EvalgateAnswerError`` for an answer that is no
  answer (the caller turns it into the attempt's error):

  - ``malformed_response`` (retried once): not JSON, not an object, no ``choices``, or a
    string holding a lone UTF-16 surrogate (a ``\\udXXX`` escape without its pair: no text
    UTF-8 can store, so sealing its record would fail);
  - ``server_error`` (retried): an ``error`` object inside the 200, with the server's message
    (also when a stream's 200 is one JSON error body and no SSE, up to 64 KiB of it; a non-200
    answer to a stream is read as any non-200, ``client.call``);
  - ``truncated`` (retried): a stream that ended without a ``finish_reason``, whatever ended
    it (``[DONE]``, the end of the body): llama-cpp-python's server ends a stream it interrupts
    with ``[DONE]`` and no ``finish_reason``, and its empty answers were scored as wrong ones;
  - ``oversize`` (not retried): more answer text than ``EvalgateCaps.text_chars`` or more bytes
    than ``EvalgateCaps.body_bytes``; reading stops there and the output kept is cut to the cap.

- The readers also keep the ``model`` and ``system_fingerprint`` the response reports (the
  first non-empty string of each in a stream; None when absent): the client compares the model
  with the candidate's (``model_mismatch``, ``client.call``).

- A stream whose server sent no ``usage`` gets ``completion_tokens`` counted from its content
  chunks, and ``usage_source`` ``EVALGATE_USAGE_FROM_CHUNKS`` (``"chunks"``) says so: a chunk
  may hold several tokens, so that count (and the TPOT taken from it) is per chunk.

- A body shorter than its ``Content-Length`` (or a chunked body cut off) is
  ``EvalgateHttpTruncated`` (``client.http1``), which the client classifies as ``truncated``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_evalgate.client.checks import EvalgateCaps
from pytest_evalgate.client.types import EvalgateCallError
from pytest_evalgate.errors import EvalgateAnswerError

EVALGATE_USAGE_FROM_CHUNKS = "chunks"
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # only an escape makes a surrogate

if TYPE_CHECKING:  # only the type: responses come from the client's pool
    from pytest_evalgate.client.http1_conn import EvalgateHttpResponse


@dataclass
class EvalgateAttempt:
    """What one attempt produced; mutable while the response is read, private to the client."""

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
    usage_flag: str | None = None
    usage_source: str | None = None  # "chunks": completion_tokens counted from the stream
    model: str | None = None
    system_fingerprint: str | None = None
    # Chat tool calls (SPEC 17), in the answer's order: {"id", "name", "arguments"}, the
    # arguments the raw text the model wrote (a stream's pieces joined by their ``index``).
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    # A completion's ``logprobs`` object as sent (echoed prompts, SPEC 18), None when absent.
    logprobs: dict[str, Any] | None = None


def _malformed(message: str) -> EvalgateAnswerError:
    return EvalgateAnswerError("malformed_response", message, retry=True)


def _oversize(caps: EvalgateCaps, what: str) -> EvalgateAnswerError:
    reason = f"the answer exceeds {what}; cut there ({caps.why})"
    return EvalgateAnswerError("oversize", reason, retry=False)


async def evalgate_read_whole(
    response: EvalgateHttpResponse, api: str, caps: EvalgateCaps, done: EvalgateAttempt
) -> None:
    """A non-streaming 200: output, finish reason and usage from one JSON body."""
    length = response.content_length
    if length is not None and length > caps.body_bytes:
        raise _oversize(caps, f"{caps.body_bytes} bytes (Content-Length {length})")
    raw = (
        await response.evalgate_read() if length is not None else await _read_capped(response, caps)
    )
    obj = evalgate_loads(raw)
    if "error" in obj:
        raise evalgate_error_in_200(obj)
    choice = _first_choice(obj)
    if choice is None:
        raise _malformed("the 200 response has no choices")
    message = choice.get("message") if api == "chat" else None
    text = message.get("content") if isinstance(message, dict) else choice.get("text")
    done.finish_reason = choice.get("finish_reason")
    if isinstance(message, dict):
        done.tool_calls = evalgate_tool_calls_of(message.get("tool_calls"))
    logprobs = choice.get("logprobs")
    done.logprobs = logprobs if isinstance(logprobs, dict) else None
    _take_usage(obj.get("usage"), done)
    _take_served(obj, done)
    if isinstance(text, str) and len(text) > caps.text_chars:
        done.output = text[: caps.text_chars]
        raise _oversize(caps, f"{caps.text_chars} characters")
    done.output = text if isinstance(text, str) else None


async def evalgate_read_stream(
    response: EvalgateHttpResponse, api: str, caps: EvalgateCaps, done: EvalgateAttempt
) -> None:
    """A streaming 200: SSE ``data:`` lines parsed by hand.

    Whole network reads are split into lines here rather than awaiting ``readline`` per line:
    profiled on ``bench/client_overhead.py`` this made reading a stream 2.2 times cheaper.
    Every chunk of one read is stamped with that read's arrival time, which is when the client
    could first have seen it.
    """
    sse = EvalgateSse(done, "delta" if api == "chat" else None, caps)
    async for data in response.evalgate_chunks():
        if sse.feed(data, time.perf_counter()):
            break
    sse.feed(b"\n", time.perf_counter())  # a last line without its newline
    if not sse.chunks:
        raise _not_a_stream(sse.head, sse.read_bytes)
    done.output = "".join(sse.parts)
    done.tool_calls = sse.evalgate_tool_calls()
    if done.finish_reason is None:
        ended = "with [DONE]" if sse.finished else "without [DONE]"
        raise EvalgateAnswerError(
            "truncated",
            f"the stream ended {ended} but no finish_reason after {sse.chunks} chunk(s)",
            retry=True,
        )
    if done.completion_tokens is None:  # the server sent no usage: count the content chunks
        done.completion_tokens = len(done.content_times)
        done.usage_source = EVALGATE_USAGE_FROM_CHUNKS


class EvalgateSse:
    """The state of one SSE stream being folded into an ``EvalgateAttempt``."""

    def __init__(self, done: EvalgateAttempt, key: str | None, caps: EvalgateCaps) -> None:
        self.done = done
        self.key = key
        self.caps = caps
        self.parts: list[str] = []
        self.chunks = 0
        self.finished = False
        self.tail = b""
        self.read_bytes = 0
        self.text_chars = 0
        self.head = b""  # the first bytes, kept to read a JSON error body sent to a stream
        self.calls: dict[int, dict[str, str]] = {}  # a stream's tool calls by their index

    def feed(self, data: bytes, now: float) -> bool:
        """Take the complete lines of ``tail + data``; True once ``[DONE]`` has been seen."""
        if not self.chunks and len(self.head) < _HEAD_BYTES:  # until a chunk shows it is SSE
            self.head += data[: _HEAD_BYTES - len(self.head)]
        self.read_bytes += len(data)
        if self.read_bytes > self.caps.body_bytes:
            self._cut()
            raise _oversize(self.caps, f"{self.caps.body_bytes} bytes")
        lines = (self.tail + data).split(b"\n")
        self.tail = lines.pop()
        for line in lines:
            if self.finished or not line.startswith(b"data:"):
                continue  # blank separators, comments, ``event:`` lines, bytes after [DONE]
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.finished = True
            else:
                self.chunks += self.take(evalgate_loads(payload), now)
        return self.finished

    def take(self, obj: Mapping[str, object], now: float) -> int:
        """Fold one chunk in; return 1 if it carried choices."""
        if "error" in obj:
            raise evalgate_error_in_200(obj)
        _take_usage(obj.get("usage"), self.done)
        if self.done.model is None or self.done.system_fingerprint is None:
            _take_served(obj, self.done)
        choice = _first_choice(obj)
        if choice is None:
            return 0
        holder = choice.get(self.key) if self.key else choice
        text = holder.get("content" if self.key else "text") if isinstance(holder, dict) else None
        if self.key and isinstance(holder, dict) and holder.get("tool_calls"):
            self._take_calls(holder["tool_calls"], now)
        if text:
            self.done.content_times.append(now)
            self.parts.append(text)
            self.text_chars += len(text)
            if self.text_chars > self.caps.text_chars:
                self._cut()
                raise _oversize(self.caps, f"{self.caps.text_chars} characters")
        if choice.get("finish_reason"):
            self.done.finish_reason = choice["finish_reason"]
        return 1

    def _cut(self) -> None:
        self.done.output = "".join(self.parts)[: self.caps.text_chars]

    def _take_calls(self, pieces: object, now: float) -> None:
        # OpenAI streams a call as deltas keyed by ``index``: the first names it, the next ones
        # carry pieces of its arguments; a piece counts as content for the timings.
        if not isinstance(pieces, list):
            raise _malformed("a stream's tool_calls delta is not a list")
        self.done.content_times.append(now)
        for piece in pieces:
            if not isinstance(piece, dict) or not isinstance(piece.get("index", 0), int):
                raise _malformed("a stream's tool_calls delta holds a non-object")
            blank = {"id": "", "name": "", "arguments": ""}
            call = self.calls.setdefault(piece.get("index", 0), blank)
            function = piece.get("function")
            function = function if isinstance(function, dict) else {}
            call["id"] += _text_or_none(piece.get("id")) or ""
            call["name"] += _text_or_none(function.get("name")) or ""
            piece_text = function.get("arguments")
            piece_text = piece_text if isinstance(piece_text, str) else ""
            call["arguments"] += piece_text
            self.text_chars += len(piece_text)
            if self.text_chars > self.caps.text_chars:
                raise _oversize(self.caps, f"{self.caps.text_chars} characters")

    def evalgate_tool_calls(self) -> list[dict[str, str]]:
        """The stream's tool calls, in index order."""
        return [self.calls[index] for index in sorted(self.calls)]


_HEAD_BYTES = 65536  # a JSON error body sent to a stream is read this far for its message


def _not_a_stream(head: bytes, size: int) -> EvalgateAnswerError:
    # A server that refuses a streamed request may answer 200 with a JSON error body and no
    # SSE at all: its message is kept (server_error), not lost in "no chunk with choices".
    if size <= len(head):
        try:
            obj = json.loads(head)
        except (ValueError, UnicodeDecodeError):
            obj = None
        if isinstance(obj, dict) and "error" in obj:
            return evalgate_error_in_200(obj)
    return _malformed("the stream held no chunk with choices")


async def _read_capped(response: EvalgateHttpResponse, caps: EvalgateCaps) -> bytes:
    """A body without ``Content-Length`` (chunked), read up to the cap."""
    parts: list[bytes] = []
    size = 0
    async for data in response.evalgate_chunks():
        size += len(data)
        if size > caps.body_bytes:
            raise _oversize(caps, f"{caps.body_bytes} bytes")
        parts.append(data)
    return b"".join(parts)


def evalgate_error_in_200(obj: Mapping[str, object]) -> EvalgateAnswerError:
    """The error a 200 carried (vLLM sends one on an engine failure), with the server's words."""
    error = obj.get("error")
    text = error.get("message", error) if isinstance(error, dict) else error
    return EvalgateAnswerError("server_error", f"error inside a 200 response: {text}", retry=True)


def evalgate_loads(raw: bytes) -> dict[str, Any]:
    """One JSON object, or ``malformed_response``."""
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise _malformed(f"not valid JSON: {raw[:80]!r}") from None
    if not isinstance(obj, dict):
        raise _malformed(f"expected a JSON object, got {type(obj).__name__}")
    if _SURROGATE_ESCAPE.search(raw) is not None:  # rare: a pair decodes to one character
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise _malformed("a string holds a lone UTF-16 surrogate: not text") from None
    return obj


def _first_choice(obj: Mapping[str, object]) -> dict[str, Any] | None:
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return None


def evalgate_tool_calls_of(value: object) -> list[dict[str, str]]:
    """A whole answer's ``message.tool_calls`` as ``{"id", "name", "arguments"}`` (arguments
    kept as the text the model wrote, an object re-encoded as JSON); [] when absent. A list
    holding something else than call objects is ``malformed_response``."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise _malformed("message.tool_calls is not a list of objects")
    calls = []
    for item in value:
        function = item.get("function")
        function = function if isinstance(function, dict) else {}
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        name = str(function.get("name") or "")
        calls.append({"id": str(item.get("id") or ""), "name": name, "arguments": arguments})
    return calls


def _take_served(obj: Mapping[str, object], done: EvalgateAttempt) -> None:
    """Keep the ``model`` and ``system_fingerprint`` a response (or stream chunk) reports, the
    first non-empty string of each: a stream repeats them in every chunk."""
    if done.model is None:
        done.model = _text_or_none(obj.get("model"))
    if done.system_fingerprint is None:
        done.system_fingerprint = _text_or_none(obj.get("system_fingerprint"))


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _take_usage(usage: object, done: EvalgateAttempt) -> None:
    if isinstance(usage, dict):
        done.prompt_tokens = _int_or_none(usage.get("prompt_tokens"))
        done.completion_tokens = _int_or_none(usage.get("completion_tokens"))


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
