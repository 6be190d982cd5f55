"""Overrides of a gate decision (SPEC section 7): "ship despite the gate", signed and verified.

Contracts:

- An override is a separate signed statement (predicateType :data:`EVALGATE_OVERRIDE_TYPE`) that
  names the decision by the sha256 of the decision envelope's decoded payload bytes, and carries
  the decision's subject, its verdict, an approver, a reason, ``issued_at`` and ``expires_at``.
- Only a non-passing evalgate decision is overridden. Bad override options (a time without a
  timezone, an expiry in the past or more than ``max_days`` ahead, an empty approver or reason)
  raise :class:`EvalgateConfigError`; verification failures (either signature, the link to the
  decision, the validity window) raise :class:`EvalgateSignatureError` naming the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pytest_evalgate.attest.dsse import (
    EVALGATE_PREDICATE_TYPE,
    EVALGATE_STATEMENT_TYPE,
    evalgate_envelope_parts,
    evalgate_parse_statement,
    evalgate_payload_sha256,
    evalgate_sign,
    evalgate_verify,
)
from pytest_evalgate.errors import EvalgateConfigError, EvalgateSignatureError

EVALGATE_OVERRIDE_TYPE = "https://pytest-evalgate.dev/override/v1"
EVALGATE_OVERRIDE_MAX_DAYS = 90


def _utc_now(now: datetime | None) -> datetime:
    return datetime.now(UTC) if now is None else _aware(now, "now")


def _aware(moment: datetime, what: str) -> datetime:
    if moment.tzinfo is None:
        raise EvalgateConfigError("override", what, "a time needs a timezone (e.g. 'Z')")
    return moment.astimezone(UTC)


def evalgate_parse_time(text: str, what: str = "expires_at") -> datetime:
    """Parse an ISO 8601 time with a timezone into an aware UTC datetime."""
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise EvalgateConfigError("override", what, f"{text!r} is not an ISO 8601 time") from None
    return _aware(moment, what)


def evalgate_format_time(moment: datetime) -> str:
    """An aware datetime as ``YYYY-MM-DDTHH:MM:SSZ`` (UTC, whole seconds, truncated)."""
    return _aware(moment, "time").strftime("%Y-%m-%dT%H:%M:%SZ")


def _unverified_statement(envelope: Mapping[str, object]) -> dict[str, Any]:
    body, _ = evalgate_envelope_parts(envelope)
    return evalgate_parse_statement(body)


def _check_expiry(expires: datetime, now: datetime, max_days: int) -> None:
    if expires <= now:
        raise EvalgateConfigError("override", "expires_at", "the expiry is in the past")
    if expires > now + timedelta(days=max_days):
        reason = f"the expiry is more than {max_days} days ahead"
        raise EvalgateConfigError("override", "expires_at", reason)


def _override_predicate(
    decision_envelope: Mapping[str, object], approver: str, reason: str, issued: datetime
) -> dict[str, Any]:
    decision = _unverified_statement(decision_envelope)
    if decision.get("predicateType") != EVALGATE_PREDICATE_TYPE:
        raise EvalgateSignatureError("the envelope to override is not an evalgate decision")
    if decision["predicate"].get("verdict") == "pass":
        raise EvalgateSignatureError("the decision passed; there is nothing to override")
    return {
        "decision": {
            "payload_sha256": evalgate_payload_sha256(decision_envelope),
            "predicateType": EVALGATE_PREDICATE_TYPE,
            "verdict": decision["predicate"].get("verdict"),
        },
        "subject": decision["subject"],
        "approver": approver,
        "reason": reason,
        "issued_at": evalgate_format_time(issued),
    }


def _required_text(value: str, what: str) -> str:
    text = value.strip() if isinstance(value, str) else ""
    if not text:
        raise EvalgateConfigError("override", what, "must be a non-empty text")
    return text


def evalgate_override(
    decision_envelope: Mapping[str, object],
    approver: str,
    reason: str,
    expires_at: str | datetime,
    key: str,
    *,
    now: datetime | None = None,
    max_days: int = EVALGATE_OVERRIDE_MAX_DAYS,
) -> dict[str, Any]:
    """Sign an override ("ship despite the gate") of a non-passing decision envelope.

    The override statement has the decision's subject, predicateType
    :data:`EVALGATE_OVERRIDE_TYPE`, and a predicate with the decision's payload sha256, its
    verdict, approver, reason, ``issued_at`` and ``expires_at`` (UTC). The expiry must lie in
    (now, now + ``max_days``]. The decision's own signature is not checked here (the approver
    may hold another key); :func:`evalgate_verify_override` checks both."""
    issued = _utc_now(now)
    if isinstance(expires_at, str):
        expires = evalgate_parse_time(expires_at)
    else:
        expires = _aware(expires_at, "expires_at")
    _check_expiry(expires, issued, max_days)
    predicate = _override_predicate(
        decision_envelope,
        _required_text(approver, "approver"),
        _required_text(reason, "reason"),
        issued,
    )
    predicate["expires_at"] = evalgate_format_time(expires)
    statement = {
        "_type": EVALGATE_STATEMENT_TYPE,
        "subject": predicate["subject"],
        "predicateType": EVALGATE_OVERRIDE_TYPE,
        "predicate": predicate,
    }
    return evalgate_sign(statement, key)


def evalgate_verify_override(
    override_envelope: Mapping[str, object],
    decision_envelope: Mapping[str, object],
    public_key_pem_path: str,
    now: datetime | None = None,
    *,
    decision_key_pem_path: str | None = None,
) -> dict[str, Any]:
    """Verify an override and return its statement: both signatures (the decision's under
    ``decision_key_pem_path``, default the same key), the override's predicateType, its link
    to the decision's payload sha256, and ``issued_at <= now < expires_at``."""
    verify_key = decision_key_pem_path or public_key_pem_path
    decision = evalgate_verify(decision_envelope, verify_key)
    override = evalgate_verify(override_envelope, public_key_pem_path)
    evalgate_check_override(override, decision, evalgate_payload_sha256(decision_envelope), now)
    return override


def evalgate_check_override(
    override: Mapping[str, Any],
    decision: Mapping[str, Any],
    decision_payload_sha256: str,
    now: datetime | None = None,
    *,
    window: bool = True,
) -> None:
    """The checks of :func:`evalgate_verify_override` after both signatures verified: the
    override's predicateType, its link to the decision (payload sha256 and subject) and, with
    ``window``, ``issued_at <= now < expires_at``. Raises :class:`EvalgateSignatureError`."""
    if override.get("predicateType") != EVALGATE_OVERRIDE_TYPE:
        raise EvalgateSignatureError(
            f"the override's predicateType is not {EVALGATE_OVERRIDE_TYPE}"
        )
    _check_link(override["predicate"], decision, decision_payload_sha256)
    if window:
        _check_window(override["predicate"], _utc_now(now))


def _check_link(
    predicate: Mapping[str, object], decision: Mapping[str, object], payload_hex: str
) -> None:
    linked = predicate.get("decision")
    if not isinstance(linked, dict) or linked.get("payload_sha256") != payload_hex:
        raise EvalgateSignatureError("the override names another decision (payload sha256)")
    if predicate.get("subject") != decision["subject"]:
        raise EvalgateSignatureError("the override's subject is not the decision's subject")


def _check_window(predicate: Mapping[str, object], now: datetime) -> None:
    try:
        issued = evalgate_parse_time(str(predicate.get("issued_at")), "issued_at")
        expires = evalgate_parse_time(str(predicate.get("expires_at")), "expires_at")
    except EvalgateConfigError as exc:
        raise EvalgateSignatureError(f"the override's times are malformed: {exc}") from None
    if now < issued:
        raise EvalgateSignatureError(f"the override is issued in the future ({issued})")
    if now >= expires:
        raise EvalgateSignatureError(f"the override expired at {evalgate_format_time(expires)}")
