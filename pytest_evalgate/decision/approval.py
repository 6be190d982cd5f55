"""The decision's ``policy_approval`` (SPEC section 20): was the policy it gated under approved?

With a trust file, a decision records whether its policy carries a valid approval by a
``policy`` key (``attest.approval``), and a decision whose policy does not is never
attestable: a run under a loosened or unreviewed policy is a run, not a release. The approval
envelope is copied into the record so admission can re-verify it under its own trust file.
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from pytest_evalgate.attest.approval import evalgate_approval_path, evalgate_read_approval
from pytest_evalgate.attest.dsse import evalgate_load_envelope
from pytest_evalgate.attest.trust import EvalgateTrust
from pytest_evalgate.errors import EvalgateSignatureError
from pytest_evalgate.policy.values import EvalgatePolicy, evalgate_policy_digest
from pytest_evalgate.report.shape import EvalgateJSON, EvalgatePolicyApprovalRecord


def evalgate_approval_record(
    trust: EvalgateTrust, policy: EvalgatePolicy, at: datetime
) -> EvalgatePolicyApprovalRecord:
    """Whether ``policy`` (read from ``policy.source``) has an approval valid at ``at``."""
    digest = evalgate_policy_digest(policy)
    try:
        approval = evalgate_read_approval(policy.source, trust, policy.version, digest, at)
    except EvalgateSignatureError as exc:
        reason = f"policy {policy.version} sha256:{digest} is not approved: {exc}"
        return {"approved": False, "reason": reason}
    envelope = evalgate_load_envelope(evalgate_approval_path(policy.source))
    return {
        "approved": True,
        "identity": approval.identity,
        "keyid": approval.keyid,
        "approved_at": approval.approved_at,
        "expires_at": approval.expires_at,
        "envelope": cast(dict[str, EvalgateJSON], envelope),
    }
