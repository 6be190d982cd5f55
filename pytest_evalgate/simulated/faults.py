"""Injected faults: which completion request fails, and how.

Contracts
---------
- Faults count completion requests (``POST /v1/chat/completions`` and ``/v1/completions``) in
  arrival order over the server's life (index 0 first). ``fail_401``, ``fail_400`` and
  ``quota`` hit every request; ``hang_first``, ``fail_429_first``, ``fail_500_first`` each hit
  requests with arrival index below their N, checked in that order; ``fail_rate`` is a seeded
  per-arrival 503 probability (``evalgate_sim_uniform("fail", seed, index)``).
- A fault's ``(status, message, type, code)`` is what OpenAI sends for the same failure; the
  hang fault (status 0) is never answered.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_evalgate.simulated.draws import evalgate_sim_uniform
from pytest_evalgate.simulated.knobs import EvalgateSimConfig


@dataclass(frozen=True)
class EvalgateSimFault:
    """One injected failure: HTTP status (0: never answer), OpenAI error message, type, code."""

    status: int
    message: str
    kind: str
    code: str | None

    @property
    def hangs(self) -> bool:
        """True for the fault that never answers."""
        return self.status == 0


EVALGATE_FAULT_HANG = EvalgateSimFault(0, "no answer", "", None)
EVALGATE_FAULT_401 = EvalgateSimFault(
    401, "Incorrect API key provided", "invalid_request_error", "invalid_api_key"
)
EVALGATE_FAULT_400 = EvalgateSimFault(
    400, "Invalid request", "invalid_request_error", "simulated_bad_request"
)
EVALGATE_FAULT_QUOTA = EvalgateSimFault(
    429, "You exceeded your current quota", "insufficient_quota", "insufficient_quota"
)
EVALGATE_FAULT_429 = EvalgateSimFault(
    429, "Rate limit reached for requests", "requests", "rate_limit_exceeded"
)
EVALGATE_FAULT_500 = EvalgateSimFault(
    500, "The server had an error processing your request", "server_error", None
)
EVALGATE_FAULT_503 = EvalgateSimFault(503, "The server is overloaded", "server_error", "overloaded")


def evalgate_sim_fault(config: EvalgateSimConfig, index: int) -> EvalgateSimFault | None:
    """The fault that hits the completion request with arrival ``index``, or None."""
    if config.fail_401:
        return EVALGATE_FAULT_401
    if config.fail_400:
        return EVALGATE_FAULT_400
    if config.quota:
        return EVALGATE_FAULT_QUOTA
    if index < config.hang_first:
        return EVALGATE_FAULT_HANG
    if index < config.fail_429_first:
        return EVALGATE_FAULT_429
    if index < config.fail_500_first:
        return EVALGATE_FAULT_500
    if config.fail_rate > 0 and evalgate_sim_uniform("fail", config.seed, index) < config.fail_rate:
        return EVALGATE_FAULT_503
    return None


def evalgate_sim_fault_headers(config: EvalgateSimConfig, fault: EvalgateSimFault) -> str:
    """Extra response header lines of ``fault`` (``Retry-After`` on rate limits, if set)."""
    if fault.code == "rate_limit_exceeded" and config.retry_after is not None:
        return f"Retry-After: {config.retry_after:g}\r\n"
    return ""
