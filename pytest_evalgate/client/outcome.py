"""What one attempt of ``client.call`` came to: its error, the checks on its answer, the result.

An attempt's error (``evalgate_fail``) is redacted, then cut short; a non-200 response is
classified by its status, body and headers (``evalgate_read_failure``: category, retry, fatal,
the server's wait hint); an answer is checked against the candidate's model
(``evalgate_check_model``: ``model_mismatch``) and its usage for plausibility
(``evalgate_check_usage``); a content-filtered answer becomes its error (``evalgate_settle``);
and the last attempt becomes the call's ``EvalgateCallResult`` (``evalgate_call_result``:
timings, redacted output, reported names cut at 256 characters). ``client.call`` says which
categories are retried and why.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import TYPE_CHECKING

from pytest_evalgate.client.checks import (
    EvalgateCaps,
    evalgate_bad_request_fatal,
    evalgate_classify_status,
    evalgate_error_detail,
    evalgate_retry_hint,
    evalgate_usage_flag,
)
from pytest_evalgate.client.read import EvalgateAttempt
from pytest_evalgate.client.redact import evalgate_redact, evalgate_redact_optional
from pytest_evalgate.client.types import EvalgateCallError, EvalgateCallResult, EvalgateEndpoint

if TYPE_CHECKING:  # only the type: the transport loads lazily
    from pytest_evalgate.client.http1_conn import EvalgateHttpResponse

_MESSAGE_MAX = 300
_REPORTED_MAX = 256  # characters of a reported model or system_fingerprint kept in the record
_ERROR_BODY = 65536  # bytes of an error response's body read for its message


def evalgate_settle(done: EvalgateAttempt) -> None:
    """Stamp the end of a failed attempt; turn a content-filtered answer into its error."""
    if not done.end:
        done.end = time.perf_counter()
    if done.finish_reason == "content_filter" and done.error is None:
        evalgate_fail(
            done, "content_filter", 200, "the endpoint's content filter stopped the answer"
        )


def evalgate_check_model(done: EvalgateAttempt, endpoint: EvalgateEndpoint) -> None:
    """An answer reported as another model than the candidate's is ``model_mismatch``."""
    name, reported = endpoint.model_check, done.model
    if name is None or reported is None or reported == endpoint.model or done.error is not None:
        return
    message = (
        f"candidate {name!r}: the endpoint answered as model {_short(reported, 80)!r}, the"
        f" manifest says {endpoint.model!r}; the candidate is stopped (set"
        f" candidates.{name}.model_rewrite: true if a gateway rewrites model names)"
    )
    evalgate_fail(done, "model_mismatch", 200, message, fatal=True)


def evalgate_check_usage(done: EvalgateAttempt, caps: EvalgateCaps) -> None:
    """Implausible usage is flagged and dropped, never kept as a fact."""
    if done.prompt_tokens is None and done.completion_tokens is None:
        return
    flag = evalgate_usage_flag(done.prompt_tokens, done.completion_tokens, done.output, caps)
    if flag is not None:
        done.usage_flag = flag
        done.prompt_tokens = done.completion_tokens = None


def _short(text: str, most: int = _MESSAGE_MAX) -> str:
    return text if len(text) <= most else text[: most - 3] + "..."


def _reported(value: str | None) -> str | None:
    """A reported name as the record keeps it: redacted (an endpoint may echo the key), and
    cut at ``_REPORTED_MAX`` characters (a hostile one may send a megabyte of it)."""
    return None if value is None else evalgate_redact(value)[:_REPORTED_MAX]


def evalgate_fail(
    done: EvalgateAttempt,
    category: str,
    status: int | None,
    message: str,
    retry: bool = False,
    fatal: bool = False,
) -> None:
    """The attempt's error; its message is redacted, then cut short (in that order, so that a
    cut can not leave half a secret behind)."""
    done.error = EvalgateCallError(category, status, _short(evalgate_redact(message)), fatal)
    done.retry = retry


def evalgate_not_waited(
    error: EvalgateCallError, hint_s: float, timeout_s: float
) -> EvalgateCallError:
    why = (
        f"; the endpoint asked to wait {hint_s:.0f} s before a retry, longer than an attempt's"
        f" budget.timeout_s ({timeout_s:g} s): not retried"
    )
    return dataclasses.replace(error, message=error.message + why)


def evalgate_call_result(
    done: EvalgateAttempt, queued: float, attempts: int, sent_at: float
) -> EvalgateCallResult:
    times = done.content_times
    tokens = done.completion_tokens
    tpot = None
    if tokens is not None and tokens >= 2 and len(times) >= 2:
        tpot = (times[-1] - times[0]) / (tokens - 1)
    return EvalgateCallResult(
        output=evalgate_redact_optional(done.output),
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
        usage_flag=done.usage_flag,
        usage_source=done.usage_source if tokens is not None else None,
        model=_reported(done.model),
        system_fingerprint=_reported(done.system_fingerprint),
        tool_calls=tuple(done.tool_calls),
        logprobs=done.logprobs,
    )


async def evalgate_read_failure(response: EvalgateHttpResponse, done: EvalgateAttempt) -> None:
    """A non-200 response: category, retry decision and wait hint from status, body, headers."""
    status = response.status
    message, code, kind = evalgate_error_detail(await response.evalgate_read_up_to(_ERROR_BODY))
    if 300 <= status < 400:
        where = response.headers.get("Location", "nowhere")
        message = f"redirect to {where} not followed (an endpoint's redirects never are)"
    message = f"HTTP {status}" + (f": {message}" if message else "")
    category, retry, fatal = evalgate_classify_status(status, "insufficient_quota" in (code, kind))
    if category == "bad_request" and fatal:  # the request's own, or the configuration's?
        fatal = evalgate_bad_request_fatal(status, f"{message} {code or ''} {kind or ''}")
    evalgate_fail(done, category, status, message, retry, fatal)
    if retry:
        done.hint_s = evalgate_retry_hint(response.headers, rate_limited=status == 429)
