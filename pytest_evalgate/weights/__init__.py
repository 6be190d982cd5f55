"""Weights provenance (SPEC section 20): OpenSSF model-signing signatures over a weights folder,
made and checked offline with ECDSA P-256 keys (``signing``), and the record a verification
leaves for the decision where the weights are served."""

from pytest_evalgate.weights.signing import (
    EVALGATE_WEIGHTS_RECORD_FIELDS,
    EvalgateWeightsVerified,
    evalgate_sign_weights,
    evalgate_verify_weights,
    evalgate_write_verified_record,
)

__all__ = [
    "EVALGATE_WEIGHTS_RECORD_FIELDS",
    "EvalgateWeightsVerified",
    "evalgate_sign_weights",
    "evalgate_verify_weights",
    "evalgate_write_verified_record",
]
