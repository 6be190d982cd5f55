"""attest/override.py: an override's times and the checks after both signatures verified.

Times are ISO 8601 with a timezone, turned into UTC (a time without one is refused naming the
option); the formatted form is ``YYYY-MM-DDTHH:MM:SSZ``. An override must be of the override
type, name the decision by its payload's sha256 and subject, and hold ``now`` in
``[issued_at, expires_at)``; each failure is an ``EvalgateSignatureError`` saying which.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from pytest_evalgate.attest.override import (
    EVALGATE_OVERRIDE_TYPE,
    evalgate_check_override,
    evalgate_format_time,
    evalgate_parse_time,
)
from pytest_evalgate.errors import EvalgateConfigError, EvalgateSignatureError

PAYLOAD = "f" * 64
SUBJECT = [{"name": "demo-suite", "digest": {"sha256": "d" * 64}}]
ISSUED = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
EXPIRES = datetime(2026, 3, 8, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-03-01T12:00:00Z", datetime(2026, 3, 1, 12, 0, tzinfo=UTC)),
        ("2026-03-01T14:30:00+02:30", datetime(2026, 3, 1, 12, 0, tzinfo=UTC)),
        ("2026-02-28T23:00:00-13:00", datetime(2026, 3, 1, 12, 0, tzinfo=UTC)),
        ("2026-03-01T12:00:00.999+00:00", datetime(2026, 3, 1, 12, 0, 0, 999000, tzinfo=UTC)),
    ],
)
def test_times_with_a_timezone_become_utc(text: str, expected: datetime) -> None:
    parsed = evalgate_parse_time(text)
    assert parsed == expected
    assert parsed.tzinfo == UTC


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("2026-03-01T12:00:00", "a time needs a timezone (e.g. 'Z')"),
        ("next tuesday", "'next tuesday' is not an ISO 8601 time"),
        ("", "'' is not an ISO 8601 time"),
        ("2026-13-01T00:00:00Z", "'2026-13-01T00:00:00Z' is not an ISO 8601 time"),
    ],
)
def test_a_bad_time_is_refused_naming_the_option(text: str, reason: str) -> None:
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_parse_time(text, "issued_at")
    assert (caught.value.source, caught.value.key, caught.value.reason) == (
        "override",
        "issued_at",
        reason,
    )


def test_formatting_is_utc_whole_seconds_truncated() -> None:
    moment = datetime(2026, 3, 1, 14, 30, 59, 999999, tzinfo=timezone(timedelta(hours=2)))
    assert evalgate_format_time(moment) == "2026-03-01T12:30:59Z"
    assert evalgate_parse_time(evalgate_format_time(ISSUED)) == ISSUED  # a round trip
    with pytest.raises(EvalgateConfigError, match="a time needs a timezone"):
        evalgate_format_time(datetime(2026, 3, 1))


def _override(**predicate: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "decision": {"payload_sha256": PAYLOAD},
        "subject": SUBJECT,
        "issued_at": evalgate_format_time(ISSUED),
        "expires_at": evalgate_format_time(EXPIRES),
        "approver": "alice",
        "reason": "known flaky slice",
    }
    body.update(predicate)
    return {"predicateType": EVALGATE_OVERRIDE_TYPE, "predicate": body}


DECISION = {"subject": SUBJECT}


@pytest.mark.parametrize(
    "now", [ISSUED, ISSUED + timedelta(days=3), EXPIRES - timedelta(seconds=1)]
)
def test_an_override_inside_its_window_passes(now: datetime) -> None:
    evalgate_check_override(_override(), DECISION, PAYLOAD, now)


def _refusal(override: dict[str, Any], now: datetime = ISSUED, **kwargs: Any) -> str:
    with pytest.raises(EvalgateSignatureError) as caught:
        evalgate_check_override(override, DECISION, PAYLOAD, now, **kwargs)
    return str(caught.value)


def test_an_override_outside_its_window_is_refused_saying_which_end() -> None:
    early = _refusal(_override(), ISSUED - timedelta(seconds=1))
    assert early == f"the override is issued in the future ({ISSUED})"
    assert _refusal(_override(), EXPIRES) == "the override expired at 2026-03-08T12:00:00Z"
    later = EXPIRES + timedelta(days=30)
    evalgate_check_override(_override(), DECISION, PAYLOAD, later, window=False)


def test_another_statement_type_is_refused() -> None:
    override = {**_override(), "predicateType": "https://example.invalid/other"}
    assert _refusal(override) == f"the override's predicateType is not {EVALGATE_OVERRIDE_TYPE}"


@pytest.mark.parametrize("decision", [{"payload_sha256": "0" * 64}, None, "f" * 64, {}])
def test_an_override_of_another_decision_is_refused(decision: Any) -> None:
    assert _refusal(_override(decision=decision)) == (
        "the override names another decision (payload sha256)"
    )


def test_an_override_of_another_subject_is_refused() -> None:
    other = [{"name": "demo-suite", "digest": {"sha256": "e" * 64}}]
    assert _refusal(_override(subject=other)) == (
        "the override's subject is not the decision's subject"
    )


@pytest.mark.parametrize(
    ("field", "value"), [("issued_at", "soon"), ("expires_at", None), ("issued_at", "2026-03-01")]
)
def test_malformed_times_in_a_signed_override_are_a_signature_error(field: str, value: Any) -> None:
    message = _refusal(_override(**{field: value}))
    assert message.startswith("the override's times are malformed: override: " + field)


def test_now_without_a_timezone_is_refused() -> None:
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_check_override(_override(), DECISION, PAYLOAD, datetime(2026, 3, 2))
    assert caught.value.key == "now"
