"""Admission (SPEC section 14): a Kubernetes validating webhook that admits a Pod only when
every weights digest it references rests on a signed, passing gate (or a valid override) and
is not revoked in the registry.

- :mod:`.pod`: which weights a Pod references (image volumes, model images, the annotation);
- :mod:`.review`: AdmissionReview ``admission.k8s.io/v1`` in and out;
- :mod:`.checker`: the decision per digest, with its caches (:class:`EvalgateAdmission`);
- :mod:`.server`: the HTTPS server (``POST /validate``, ``GET /healthz``).
"""

from __future__ import annotations

from pytest_evalgate.admission.checker import (
    EVALGATE_ADMISSION_NAMESPACES_ENV,
    EvalgateAdmission,
    EvalgateAdmissionConfig,
    EvalgateDigestVerdict,
    evalgate_admission_namespaces,
)
from pytest_evalgate.admission.pod import (
    EVALGATE_WEIGHTS_ANNOTATION,
    EvalgateWeightsRef,
    evalgate_pod_weights,
)
from pytest_evalgate.admission.review import evalgate_parse_review, evalgate_review_response
from pytest_evalgate.admission.server import EvalgateAdmissionServer, evalgate_tls_context

__all__ = [
    "EVALGATE_ADMISSION_NAMESPACES_ENV",
    "EVALGATE_WEIGHTS_ANNOTATION",
    "EvalgateAdmission",
    "EvalgateAdmissionConfig",
    "EvalgateAdmissionServer",
    "EvalgateDigestVerdict",
    "EvalgateWeightsRef",
    "evalgate_admission_namespaces",
    "evalgate_parse_review",
    "evalgate_pod_weights",
    "evalgate_review_response",
    "evalgate_tls_context",
]
