"""Policy approvals (SPEC section 20): a ``policy`` key's signature over a gate policy's digest.

An approval is an in-toto statement (predicateType :data:`EVALGATE_APPROVAL_TYPE`) whose
subject is ``policy/<version>`` with the policy's digest (the sha256 of its canonical JSON,
``policy.values.evalgate_policy_digest``: what the rules say, not the file's layout or comments),
signed in a DSSE envelope kept beside the policy as ``<stem>.approval.dsse.json``.

Contracts:

- :func:`evalgate_approval_statement` refuses an expiry that is not after the approval time.
- :func:`evalgate_check_approval` accepts an approval only when it verifies under a key of the
  trust file holding the ``policy`` role, names exactly this version and digest, and is valid
  at ``at`` (``approved_at <= at < expires_at``); else :class:`EvalgateSignatureError` with
  the reason. It never reads the policy file: callers pass what they loaded.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pytest_evalgate.attest.dsse import (
    EVALGATE_APPROVAL_TYPE,
    EVALGATE_STATEMENT_TYPE,
    evalgate_load_envelope,
)
from pytest_evalgate.attest.override import evalgate_format_time, evalgate_parse_time
from pytest_evalgate.attest.trust import EvalgateTrust
from pytest_evalgate.errors import EvalgateConfigError, EvalgateSignatureError

__all__ = [
    "EVALGATE_APPROVAL_TYPE",
    "EvalgateApproval",
    "evalgate_approval_path",
    "evalgate_approval_statement",
    "evalgate_check_approval",
    "evalgate_decision_approval_refusal",
    "evalgate_read_approval",
]

EVALGATE_APPROVAL_SUFFIX = ".approval.dsse.json"


@dataclass(frozen=True)
class EvalgateApproval:
    """A verified approval: which policy, who approved it (the key's identity), and when."""

    version: str
    digest: str
    identity: str
    keyid: str
    approved_at: str
    expires_at: str | None

    def describe(self) -> str:
        """One line for reports and ``evalgate policy show``."""
        until = f" until {self.expires_at}" if self.expires_at else ""
        return (
            f"policy {self.version} sha256:{self.digest[:16]} approved by {self.identity} "
            f"(key {self.keyid[:16]}) at {self.approved_at}{until}"
        )


def evalgate_approval_path(policy_path: str) -> str:
    """Where the approval of ``policy_path`` lies: ``gate.yaml`` -> ``gate.approval.dsse.json``."""
    stem, extension = os.path.splitext(policy_path)
    base = stem if extension in (".yaml", ".yml") else policy_path
    return base + EVALGATE_APPROVAL_SUFFIX


def evalgate_approval_statement(
    version: str, digest: str, approved_at: datetime, expires_at: datetime | None
) -> dict[str, Any]:
    """The statement a ``policy`` key signs to approve policy ``version`` with ``digest``."""
    if expires_at is not None and expires_at <= approved_at:
        raise EvalgateConfigError("policy approve", "--expires", "must be after now")
    return {
        "_type": EVALGATE_STATEMENT_TYPE,
        "subject": [_subject(version, digest)],
        "predicateType": EVALGATE_APPROVAL_TYPE,
        "predicate": {
            "policy_version": version,
            "policy_digest": f"sha256:{digest}",
            "approved_at": evalgate_format_time(approved_at),
            "expires_at": None if expires_at is None else evalgate_format_time(expires_at),
        },
    }


def _subject(version: str, digest: str) -> dict[str, Any]:
    return {"name": f"policy/{version}", "digest": {"sha256": digest}}


def evalgate_check_approval(
    envelope: Mapping[str, object],
    trust: EvalgateTrust,
    version: str,
    digest: str,
    at: datetime,
) -> EvalgateApproval:
    """The approval in ``envelope`` of policy ``version``/``digest``, valid at ``at``."""
    signed = trust.evalgate_verify(envelope, "policy")
    statement = signed.statement
    if statement.get("predicateType") != EVALGATE_APPROVAL_TYPE:
        raise EvalgateSignatureError(f"not a policy approval: {statement.get('predicateType')!r}")
    predicate = statement["predicate"]
    named = statement["subject"]
    if named != [_subject(version, digest)] or predicate.get("policy_digest") != f"sha256:{digest}":
        approved = predicate.get("policy_version"), predicate.get("policy_digest")
        raise EvalgateSignatureError(
            f"the approval is for policy {approved[0]} {approved[1]}, not {version} sha256:{digest}"
        )
    approved_at, expires_at = _window(predicate)
    if at < evalgate_parse_time(approved_at, "approved_at"):
        raise EvalgateSignatureError(f"the approval is issued in the future ({approved_at})")
    if expires_at is not None and at >= evalgate_parse_time(expires_at, "expires_at"):
        raise EvalgateSignatureError(f"the approval expired at {expires_at}")
    key = signed.signer
    return EvalgateApproval(version, digest, key.identity, key.keyid, approved_at, expires_at)


def _window(predicate: Mapping[str, object]) -> tuple[str, str | None]:
    approved_at, expires_at = predicate.get("approved_at"), predicate.get("expires_at")
    if not isinstance(approved_at, str) or not (expires_at is None or isinstance(expires_at, str)):
        raise EvalgateSignatureError("the approval's approved_at/expires_at are malformed")
    try:
        evalgate_parse_time(approved_at, "approved_at")
        if expires_at is not None:
            evalgate_parse_time(expires_at, "expires_at")
    except EvalgateConfigError as exc:
        raise EvalgateSignatureError(f"the approval's times are malformed: {exc.reason}") from None
    return approved_at, expires_at


def evalgate_read_approval(
    policy_path: str, trust: EvalgateTrust, version: str, digest: str, at: datetime
) -> EvalgateApproval:
    """Read the approval beside ``policy_path`` and check it (:func:`evalgate_check_approval`);
    a missing file is :class:`EvalgateSignatureError` too ("no approval")."""
    path = evalgate_approval_path(policy_path)
    if not os.path.isfile(path):
        raise EvalgateSignatureError(f"no approval: {_shown(path)} does not exist")
    return evalgate_check_approval(evalgate_load_envelope(path), trust, version, digest, at)


def evalgate_decision_approval_refusal(
    decision: Mapping[str, Any], trust: EvalgateTrust
) -> str | None:
    """Why a signed decision does not rest on an approved policy, or None when it does: its
    ``policy_approval`` must say approved and carry an approval envelope that verifies under
    a ``policy`` key of ``trust``, for the decision's policy version and digest, valid when the
    decision was made (``created_at``). Admission asks this of every decision it admits."""
    record = decision.get("policy_approval")
    policy = decision.get("policy")
    if not isinstance(record, Mapping) or record.get("approved") is not True:
        reason = record.get("reason") if isinstance(record, Mapping) else None
        return f"policy not approved: {reason or 'the decision records no policy approval'}"
    if not isinstance(policy, Mapping) or not isinstance(record.get("envelope"), Mapping):
        return "policy not approved: the decision's policy or approval envelope is missing"
    try:
        at = evalgate_parse_time(str(decision.get("created_at")), "created_at")
        evalgate_check_approval(
            record["envelope"], trust, str(policy.get("version")), str(policy.get("digest")), at
        )
    except (EvalgateSignatureError, EvalgateConfigError) as exc:
        return f"policy not approved: {exc}"
    return None


def _shown(path: str) -> str:
    """``path`` relative to the working folder when it lies below it (decision records and
    messages name it without the machine's absolute paths), else as given."""
    relative = os.path.relpath(path) if os.path.isabs(path) else path
    return path if relative.startswith("..") else relative
