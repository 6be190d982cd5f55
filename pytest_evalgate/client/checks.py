"""Checks on what an endpoint sent back: size caps, plausible usage, status classes, wait hints.

Contracts
---------
- ``EvalgateCaps`` bounds one request's answer from its ``max_tokens`` (or
  ``max_completion_tokens``): at most ``EVALGATE_CHARS_PER_TOKEN`` characters of answer text a
  token and ``EVALGATE_BYTES_PER_TOKEN`` bytes of body a token (JSON and SSE framing included),
  each over a floor; without a token limit, fixed caps. A real answer never comes near them.
- ``evalgate_usage_flag`` says why reported usage is implausible (negative counts, more
  completion tokens than ``max_tokens``, more prompt tokens than the request had bytes, or far
  more text than the completion tokens could carry), or None. Flagged usage is not stored as a
  fact: the record's token counts are null and ``usage.flagged`` holds the reason.
- ``evalgate_classify_status`` maps a non-200 status to ``(category, retry, fatal)``;
  a 3xx is ``redirect``: never followed, never retried, and fatal (it would be the same for
  every request, and following it could send the prompt and key to another host).
- A 400 or 422 that names the request (the prompt is longer than the context, a parameter this
  case's request carried) is that identity's ``bad_request``, not fatal; one that names the
  configuration (the model) and a 404 are fatal. ``EvalgateBadRequests`` makes the same
  ``bad_request`` on ``EVALGATE_BAD_REQUEST_REPEATS`` identities of one candidate in a row (no
  answer between) fatal: then it is the configuration's, whatever the message says.
- ``evalgate_retry_hint`` reads the server's wait hints; ``evalgate_retry_wait`` caps a hint at
  ``EVALGATE_HINT_CAP_S`` (600 s) so that a hostile or broken ``Retry-After`` can not stall a
  run for longer.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

from pytest_evalgate.client.types import EvalgateCallError

EVALGATE_CHARS_PER_TOKEN = 32
EVALGATE_BYTES_PER_TOKEN = 1024
EVALGATE_HINT_CAP_S = 600.0
_TEXT_FLOOR = 4096
_BODY_FLOOR = 1 << 20
_TEXT_NO_LIMIT = 1 << 20
_BODY_NO_LIMIT = 32 << 20
_PROMPT_SLACK_TOKENS = 4096  # chat templates add tokens a request's bytes do not show
_TRANSIENT_5XX = frozenset({500, 502, 503, 504})
_FATAL_BAD_REQUEST = frozenset({400, 404, 422})
EVALGATE_BAD_REQUEST_REPEATS = 3
# What a server says when one request, not the configuration, is at fault (OpenAI, vLLM,
# llama.cpp, TGI wordings); checked before the configuration's, which mention "model" too.
_NAMES_REQUEST = re.compile(
    r"context[ _-]?(length|window)|maximum context|too long|too many tokens|exceeds? the"
    r"|input_too_long|string_above_max_length|invalid_prompt",
    re.IGNORECASE,
)
_NAMES_CONFIG = re.compile(
    r"model_not_found|\bmodel\b.{0,80}\b(not found|does not exist|unknown|not available|not"
    r" supported|invalid)|(unknown|invalid|unsupported) model|api[ _-]?key",
    re.IGNORECASE,
)
_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|m|s|us|µs|ns)")
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


@dataclass(frozen=True)
class EvalgateCaps:
    """How much one request's answer may be: text characters, body bytes, tokens."""

    text_chars: int
    body_bytes: int
    max_tokens: int | None
    request_bytes: int
    echo: bool = False  # the answer's text repeats the prompt (SPEC 18): its size is the prompt's

    @property
    def why(self) -> str:
        """The cap's reason, for messages."""
        if self.max_tokens is None:
            return "no max_tokens in the request: the fixed cap"
        return f"max_tokens {self.max_tokens} allows at most {self.text_chars} characters"


def evalgate_caps(body: Mapping[str, object], request_bytes: int) -> EvalgateCaps:
    """The caps of a request whose generation settings are ``body``."""
    limit = body.get("max_tokens", body.get("max_completion_tokens"))
    if body.get("echo") is True:  # the answer holds the prompt: the fixed caps
        kept = limit if isinstance(limit, int) and not isinstance(limit, bool) else None
        kept = kept if kept is not None and kept > 0 else None
        return EvalgateCaps(_TEXT_NO_LIMIT, _BODY_NO_LIMIT, kept, request_bytes, echo=True)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        return EvalgateCaps(_TEXT_NO_LIMIT, _BODY_NO_LIMIT, None, request_bytes)
    text = max(_TEXT_FLOOR, EVALGATE_CHARS_PER_TOKEN * limit)
    raw = _BODY_FLOOR + EVALGATE_BYTES_PER_TOKEN * limit
    return EvalgateCaps(text, raw, limit, request_bytes)


def evalgate_usage_flag(
    prompt_tokens: int | None, completion_tokens: int | None, output: str | None, caps: EvalgateCaps
) -> str | None:
    """Why this usage is implausible for this request and answer, or None (module contract)."""
    if (prompt_tokens or 0) < 0 or (completion_tokens or 0) < 0:
        counts = f"prompt_tokens {prompt_tokens}, completion_tokens {completion_tokens}"
        return f"negative usage ({counts})"
    limit = caps.max_tokens
    if completion_tokens is not None and limit is not None and completion_tokens > limit:
        return f"completion_tokens {completion_tokens} exceeds max_tokens {limit}"
    if prompt_tokens is not None and prompt_tokens > caps.request_bytes + _PROMPT_SLACK_TOKENS:
        return f"prompt_tokens {prompt_tokens} for a request of {caps.request_bytes} bytes"
    if completion_tokens is not None and output and not caps.echo:
        carried = EVALGATE_CHARS_PER_TOKEN * max(completion_tokens, 1) + _TEXT_FLOOR // 16
        if len(output) > carried:
            return f"completion_tokens {completion_tokens} for {len(output)} characters of answer"
    return None


def evalgate_classify_status(status: int, no_quota: bool) -> tuple[str, bool, bool]:
    """(category, retry, fatal) for a non-200 status; ``no_quota`` marks a permanent 429."""
    if status == 429:
        return "rate_limited", not no_quota, no_quota
    if status in (401, 403):
        return "auth", False, True
    if status == 408:
        return "timeout", True, False
    if 300 <= status < 400:
        return "redirect", False, True
    if status >= 500:
        return "server_error", status in _TRANSIENT_5XX, False
    return "bad_request", False, status in _FATAL_BAD_REQUEST


EVALGATE_REFUSED = "connection refused"


def evalgate_refused_message(exc: BaseException) -> str | None:
    """The message of a call error whose connection was refused (the error, or the transport
    error it caused), or None for another error."""
    if isinstance(exc, ConnectionRefusedError) or isinstance(exc.__cause__, ConnectionRefusedError):
        return f"{EVALGATE_REFUSED}: {type(exc).__name__}: {exc}"
    return None


def evalgate_bad_request_fatal(status: int, detail: str) -> bool:
    """Whether a 400/404/422 stops its candidate at once: a 404, or a body (``detail``: the
    message, code and type) that names the configuration and not the request."""
    if status == 404:
        return True
    return not _NAMES_REQUEST.search(detail) and bool(_NAMES_CONFIG.search(detail))


def evalgate_names_request(detail: str) -> bool:
    """Whether a 400's ``detail`` names the request itself (the prompt is longer than the
    context, a parameter of this case): the same request is refused on every run."""
    return bool(_NAMES_REQUEST.search(detail))


class EvalgateBadRequests:
    """Per stop channel (one candidate): ``bad_request`` errors since its last answer, the
    ``EVALGATE_BAD_REQUEST_REPEATS``-th in a row stops the channel; and a call whose every
    attempt was refused a connection, before the channel ever answered, stops it too (its
    endpoint is not there: each identity would pay all its attempts)."""

    def __init__(self) -> None:
        self._run: dict[int, int] = {}
        self._answered: set[int] = set()

    def evalgate_seen(self, channel: int, error: EvalgateCallError | None) -> str | None:
        """Note one call's outcome; the reason (a suffix of the error's category) when the
        channel should stop now, else None."""
        if error is None:
            self._run.pop(channel, None)
            self._answered.add(channel)
            return None
        if error.message.startswith(EVALGATE_REFUSED) and channel not in self._answered:
            return " (before any answer: nothing listens there)"
        if error.category != "bad_request":
            return None
        self._run[channel] = self._run.get(channel, 0) + 1
        if self._run[channel] < EVALGATE_BAD_REQUEST_REPEATS:
            return None
        return f" (on {EVALGATE_BAD_REQUEST_REPEATS} identities in a row)"


def evalgate_retry_wait(jitter_s: float, hint_s: float) -> float:
    """The wait before a retry: the backoff's jitter, raised to the server's hint, which is
    capped at ``EVALGATE_HINT_CAP_S``."""
    return max(jitter_s, min(hint_s, EVALGATE_HINT_CAP_S))


def evalgate_error_detail(raw: bytes) -> tuple[str, str | None, str | None]:
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


def _str_or_none(value: object) -> str | None:
    return None if value is None else str(value)


def evalgate_retry_hint(headers: Mapping[str, str], *, rate_limited: bool) -> float:
    """The server's lower bound on the wait before a retry, in seconds (0 when it gives none).

    ``headers`` is a case-insensitive mapping. ``Retry-After`` (delta seconds or an HTTP date)
    and ``retry-after-ms`` always count; with ``rate_limited`` also ``x-ratelimit-reset-requests``
    and ``x-ratelimit-reset-tokens`` whose matching ``x-ratelimit-remaining-*`` is 0 or absent.
    The largest hint wins; it is not capped here.
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
