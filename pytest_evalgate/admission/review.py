"""AdmissionReview ``admission.k8s.io/v1``: the request the API server sends, the answer it
expects.

Contracts:

- :func:`evalgate_parse_review` accepts only an ``admission.k8s.io/v1`` ``AdmissionReview``
  with a ``request.uid``, ``request.kind.kind`` and ``request.operation``; anything else
  raises :class:`EvalgateAdmissionError` (the server answers HTTP 400, which the API server
  treats as a webhook failure: with ``failurePolicy: Fail`` the Pod is denied).
- :func:`evalgate_review_response` echoes the uid; a denial carries a ``Status`` with code
  403 and the message; warnings are single-line texts (the API server shows them to kubectl).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_evalgate.errors import EvalgateAdmissionError

EVALGATE_REVIEW_API_VERSION = "admission.k8s.io/v1"
EVALGATE_REVIEW_KIND = "AdmissionReview"
EVALGATE_WARNING_MAX = 240  # the API server truncates longer warnings


@dataclass(frozen=True)
class EvalgateReviewRequest:
    """The parts of an AdmissionReview request the webhook reads. ``obj`` is the object (a Pod
    for ``kind == "Pod"``), None when the review carries none."""

    uid: str
    group: str
    version: str
    kind: str
    operation: str
    namespace: str
    name: str
    obj: Mapping[str, Any] | None

    @property
    def is_pod(self) -> bool:
        """True for a core v1 Pod (not a sub-resource such as ``pods/status``)."""
        return (self.group, self.version, self.kind) == ("", "v1", "Pod")


def evalgate_parse_review(body: bytes) -> EvalgateReviewRequest:
    """Parse the HTTP body of an AdmissionReview; raises :class:`EvalgateAdmissionError`."""
    review = _json_object(body)
    if (review.get("apiVersion"), review.get("kind")) != (
        EVALGATE_REVIEW_API_VERSION,
        EVALGATE_REVIEW_KIND,
    ):
        raise EvalgateAdmissionError(
            f"not an {EVALGATE_REVIEW_API_VERSION} {EVALGATE_REVIEW_KIND}: "
            f"apiVersion {review.get('apiVersion')!r}, kind {review.get('kind')!r}"
        )
    request = review.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
        raise EvalgateAdmissionError("the AdmissionReview has no request.uid")
    # Without kind or operation the review cannot be scoped: refuse rather than allow.
    if not isinstance(_dict(request.get("kind")).get("kind"), str):
        raise EvalgateAdmissionError("the AdmissionReview has no request.kind.kind")
    if not isinstance(request.get("operation"), str):
        raise EvalgateAdmissionError("the AdmissionReview has no request.operation")
    return _request(request)


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        review = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise EvalgateAdmissionError(f"the body is not JSON: {exc}") from None
    if not isinstance(review, dict):
        raise EvalgateAdmissionError("the body is not a JSON object")
    return review


def _request(request: dict[str, Any]) -> EvalgateReviewRequest:
    kind = _dict(request.get("kind"))
    obj = request.get("object")
    metadata = _dict(obj.get("metadata")) if isinstance(obj, dict) else {}
    name = request.get("name") or metadata.get("name") or metadata.get("generateName") or ""
    return EvalgateReviewRequest(
        uid=request["uid"],
        group=str(kind.get("group", "")),
        version=str(kind.get("version", "")),
        kind=str(kind.get("kind", "")),
        operation=str(request.get("operation", "")),
        namespace=str(request.get("namespace") or metadata.get("namespace") or ""),
        name=str(name),
        obj=obj if isinstance(obj, dict) else None,
    )


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def evalgate_review_response(
    uid: str, allowed: bool, message: str | None = None, warnings: Sequence[str] = ()
) -> dict[str, Any]:
    """The AdmissionReview answer for ``uid``; a denial has ``status.code`` 403 and
    ``message``; ``warnings`` are made single-line and cut to the API server's limit."""
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        response["status"] = {
            "status": "Failure",
            "code": 403,
            "reason": "Forbidden",
            "message": message or "denied",
        }
    if warnings:
        response["warnings"] = [_one_line(text) for text in warnings]
    return {
        "apiVersion": EVALGATE_REVIEW_API_VERSION,
        "kind": EVALGATE_REVIEW_KIND,
        "response": response,
    }


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= EVALGATE_WARNING_MAX else flat[: EVALGATE_WARNING_MAX - 3] + "..."
