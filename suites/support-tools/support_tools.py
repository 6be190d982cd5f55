"""The python: tools of suites/support-tools (SPEC 17): ``fn(arguments, context)``.

``context`` holds ``identity``, ``idempotency_key`` and ``state`` (this identity's mock state,
a dict the harness keeps for the conversation and a case's ``expect.state`` reads).
"""

from __future__ import annotations

from typing import Any


def check_eligibility(arguments: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    """Every order but A13 may be refunded (A13 is past the 30 days)."""
    eligible = arguments["order_id"] != "A13"
    context["state"]["eligibility_checked"] = True
    return {"order_id": arguments["order_id"], "eligible": eligible}
