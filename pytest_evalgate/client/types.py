"""The client's values: where to call (``EvalgateEndpoint``), what a call gave
(``EvalgateCallResult``), why it failed (``EvalgateCallError``, one of
``EVALGATE_ERROR_CATEGORIES``). Re-exported by ``pytest_evalgate.client``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

EVALGATE_ERROR_CATEGORIES = (
    "timeout",
    "connection",
    "rate_limited",
    "server_error",
    "auth",
    "bad_request",
    "malformed_response",
    "content_filter",
    "truncated",
    "oversize",
    "redirect",
    "model_mismatch",
)


@dataclass(frozen=True)
class EvalgateEndpoint:
    """Where and how to call one candidate.

    ``api`` is ``"chat"`` (POST ``{base_url}/chat/completions``) or ``"completions"`` (POST
    ``{base_url}/completions``). ``timeout_s`` bounds each attempt as a whole, from the send to
    the last byte. ``stream=True`` sends ``stream_options.include_usage`` and yields TTFT, TPOT
    and ITL.

    ``model_check`` names the candidate whose answers must report ``model`` (SPEC 20): an
    answer whose ``model`` is another string is the error ``model_mismatch`` (fatal), and the
    message names that candidate. None: the reported model is kept, never compared (a judge,
    a capacity probe, a candidate with ``model_rewrite: true`` behind a renaming gateway).
    """

    base_url: str
    model: str
    api: str
    api_key: str | None
    timeout_s: float
    max_attempts: int
    stream: bool = True
    model_check: str | None = None


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
    ``usage_flag`` set: the endpoint's usage was implausible, so the token counts are None.
    ``usage_source`` ``"chunks"``: the server sent no usage; ``completion_tokens`` (and TPOT)
    were counted from the stream's content chunks.
    ``model`` and ``system_fingerprint`` are what the last attempt's response reported (None
    when it did not, or sent no string). ``tool_calls`` are the answer's chat tool calls, in
    order, arguments as the text the model wrote (SPEC 17; the loop in ``dialogue`` runs them).
    ``logprobs`` is a whole completion's ``choices[0].logprobs`` object as the endpoint sent it
    (``tokens``, ``token_logprobs``, ``text_offset``: SPEC 18, read by ``choice.loglik``).
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
    usage_flag: str | None = None
    usage_source: str | None = None  # "chunks": completion_tokens counted from stream chunks
    model: str | None = None
    system_fingerprint: str | None = None
    tool_calls: tuple[dict[str, str], ...] = ()  # chat tool calls: {"id", "name", "arguments"}
    logprobs: Mapping[str, Any] | None = None
