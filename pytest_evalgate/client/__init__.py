"""The OpenAI-compatible client (SPEC sections 5 and 8): one request with retries, error
categories and timings, and the run-wide budget it is sent under.

- ``call``: ``EvalgateClient``, one identity's request through its attempts (the retry policy);
- ``outcome``: what one attempt came to (its error, the model and usage checks) and the result;
- ``types``: ``EvalgateEndpoint``, ``EvalgateCallResult``, ``EvalgateCallError``, the categories;
- ``checks``: status classification, retry waits and hints, answer caps, implausible usage;
- ``read``: a streamed or whole answer read into one attempt;
- ``redact``: secrets kept out of every message and answer text;
- ``http1`` (the pool), ``http1_conn`` (a connection and its response), ``http1_dial``
  (direct, proxy and tunnel dialling) and ``http1_head``: the HTTP/1.1 transport (loaded by
  the first client only);
- ``budget``: run-wide concurrency, rps and tpm shares, AIMD on 429.

The names below are the client's public surface; the runner's child imports them from here.
"""

from __future__ import annotations

from pytest_evalgate.client.call import EvalgateClient, evalgate_load_http
from pytest_evalgate.client.checks import evalgate_parse_duration, evalgate_retry_hint
from pytest_evalgate.client.types import (
    EVALGATE_ERROR_CATEGORIES,
    EvalgateCallError,
    EvalgateCallResult,
    EvalgateEndpoint,
)

__all__ = [
    "EVALGATE_ERROR_CATEGORIES",
    "EvalgateCallError",
    "EvalgateCallResult",
    "EvalgateClient",
    "EvalgateEndpoint",
    "evalgate_load_http",
    "evalgate_parse_duration",
    "evalgate_retry_hint",
]
