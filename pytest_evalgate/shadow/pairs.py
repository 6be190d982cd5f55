"""The answer pairs of the shadow stage: one record per shadowed request, kept in the store.

A pair is builtins only::

    {"request_digest": sha256 hex of the request body, "path": "/v1/chat/completions",
     "model": the requested model or None, "sampled_at": ISO 8601 UTC,
     "stable": ANSWER, "candidate": ANSWER, "checksum": sha256 of the rest,
     "question": the request as a judge sees it, redacted (only with keep_question)}
    ANSWER = {"status", "text", "finish_reason", "output_tokens", "tool_calls", "error",
              "e2e_s": seconds to the whole answer, "ttft_s": seconds to its first byte}

Never in a pair: the request's headers or body (only its digest; with the proxy's
``keep_question`` also its question as a judge sees it, for the online judge), and no key:
every text is redacted (``client.redact``, plus the request's own bearer token).

Pairs are written in batches as segments ``shadow/<suite>/pairs/<writer>-<seq>.jsonl`` through
the store's backend (atomic, never replacing), so a folder or an S3 store both hold them;
``evalgate_read_pairs`` reads every segment of a suite and checks each pair's checksum.
"""

from __future__ import annotations

import datetime
import json
import threading
from collections.abc import Mapping
from typing import Any

from pytest_evalgate.client.redact import EVALGATE_REDACTED, evalgate_redact
from pytest_evalgate.errors import EvalgateIntegrityError
from pytest_evalgate.formats.canonical import evalgate_canonical_json, evalgate_sha256_hex
from pytest_evalgate.judge.prompt import evalgate_judge_input_text
from pytest_evalgate.shadow.answer import EvalgateShadowAnswer
from pytest_evalgate.store.backend import EvalgateStoreBackend

EVALGATE_PAIR_BATCH = 64


def evalgate_pairs_prefix(suite: str) -> str:
    """The store folder of a suite's pairs."""
    return f"shadow/{suite}/pairs"


def evalgate_side(
    answer: EvalgateShadowAnswer, e2e_s: float, ttft_s: float | None, token: str | None
) -> dict[str, Any]:
    """One side of a pair, its text redacted (registered keys, bearer tokens, ``token``)."""
    out = answer.to_dict()
    out["text"] = _redact(answer.text, token)
    out["error"] = None if answer.error is None else _redact(answer.error, token)
    out["e2e_s"] = round(e2e_s, 6)
    out["ttft_s"] = None if ttft_s is None else round(ttft_s, 6)
    return out


def _redact(text: str, token: str | None) -> str:
    if token and len(token) >= 4:
        text = text.replace(token, EVALGATE_REDACTED)
    return evalgate_redact(text)


def evalgate_pair(
    body: bytes,
    path: str,
    stable: Mapping[str, Any],
    candidate: Mapping[str, Any],
    question: str | None = None,
) -> dict[str, Any]:
    """The sealed pair of one request (see the module); ``question`` (already redacted) is
    kept only when given."""
    pair: dict[str, Any] = {
        "request_digest": evalgate_sha256_hex(body.decode("utf-8", errors="replace")),
        "path": path,
        "model": _model(body),
        "sampled_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
        "stable": dict(stable),
        "candidate": dict(candidate),
    }
    if question is not None:
        pair["question"] = question
    pair["checksum"] = evalgate_sha256_hex(pair)
    return pair


def evalgate_request_question(body: bytes, token: str | None) -> str | None:
    """The question a judge would see of a chat or completion request body (the system prompt
    left out, as offline judging does), redacted; None when the body holds no text messages."""
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(request, dict):
        return None
    prompt, messages = request.get("prompt"), request.get("messages")
    if isinstance(prompt, str):
        return _redact(prompt, token)
    if not isinstance(messages, list) or not messages:
        return None
    turns = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            return None
        turns.append({"role": str(message.get("role")), "content": message["content"]})
    return _redact(evalgate_judge_input_text(turns), token)


def _model(body: bytes) -> str | None:
    try:
        model = json.loads(body).get("model")
    except (ValueError, AttributeError, UnicodeDecodeError):
        return None
    return evalgate_redact(model)[:256] if isinstance(model, str) else None


class EvalgatePairWriter:
    """Batches pairs into segments of a suite's pair folder; thread-safe (the proxy flushes in
    a worker thread so its event loop never waits on a disk or an object store)."""

    def __init__(self, backend: EvalgateStoreBackend, suite: str, writer: str) -> None:
        self._backend = backend
        self._prefix = f"{evalgate_pairs_prefix(suite)}/{writer}"
        self._lock = threading.Lock()
        self._pending: list[bytes] = []
        self._sequence = 0
        self.written = 0

    def add(self, pair: Mapping[str, Any]) -> bool:
        """Queue one pair; True when a batch is full (the caller then flushes)."""
        with self._lock:
            self._pending.append(evalgate_canonical_json(pair) + b"\n")
            return len(self._pending) >= EVALGATE_PAIR_BATCH

    def flush(self) -> int:
        """Write what is queued as one new segment; returns how many pairs it held."""
        with self._lock:
            lines, self._pending = self._pending, []
            if not lines:
                return 0
            self._sequence += 1
            relpath = f"{self._prefix}-{self._sequence:06d}.jsonl"
            self._backend.evalgate_write_atomic(relpath, b"".join(lines))
            self.written += len(lines)
            return len(lines)


def evalgate_read_pairs(backend: EvalgateStoreBackend, suite: str) -> list[dict[str, Any]]:
    """Every pair of ``suite``, in segment order; ``EvalgateIntegrityError`` names a segment
    whose line is not a pair or whose checksum does not match."""
    pairs: list[dict[str, Any]] = []
    for relpath in backend.evalgate_list(evalgate_pairs_prefix(suite)):
        for number, line in enumerate(backend.evalgate_read(relpath).splitlines(), 1):
            pairs.append(evalgate_checked_pair(relpath, number, line))
    return pairs


def evalgate_checked_pair(relpath: str, number: int, line: bytes) -> dict[str, Any]:
    """Line ``number`` of segment ``relpath`` as a pair; ``EvalgateIntegrityError`` when it is
    not JSON, not a pair, or its checksum does not match."""
    try:
        pair = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        raise EvalgateIntegrityError(f"{relpath}:{number}: not JSON") from None
    if not isinstance(pair, dict) or not {"stable", "candidate", "checksum"} <= pair.keys():
        raise EvalgateIntegrityError(f"{relpath}:{number}: not a shadow pair")
    body = {key: value for key, value in pair.items() if key != "checksum"}
    if evalgate_sha256_hex(body) != pair["checksum"]:
        raise EvalgateIntegrityError(f"{relpath}:{number}: checksum mismatch")
    return pair
