"""The weights a candidate is evaluated with: ``pins.weights_image`` and ``pins.weights_digest``.

A candidate served in the worker pod (``k8s render --serving-sidecar``) is evaluated on the
artifact production ships: an OCI image of its weights, pinned by digest
(``registry/models/NAME@sha256:<64 hex>``), mounted read-only. The manifest refuses a
``weights_image`` that is not pinned by digest, or whose digest is not the candidate's
``weights_digest`` (the digest the decision is signed for); the sidecar render refuses a
candidate without one. Every refusal names the manifest, the key and the reason (exit 4).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pytest_evalgate.errors import EvalgateConfigError

EVALGATE_WEIGHTS_IMAGE_PIN = "weights_image"
EVALGATE_WEIGHTS_DIGEST_PIN = "weights_digest"
_PINNED = re.compile(r"^[^\s@]+@(sha256:[0-9a-f]{64})$")

# Names the record a weights verification left where the weights are served (SPEC section 20):
# set by the serving sidecar's pod (k8s.render), read by the decision (decision.weights).
EVALGATE_WEIGHTS_VERIFIED_ENV = "PYTEST_EVALGATE_WEIGHTS_VERIFIED"


def evalgate_check_weights_pins(source: str, name: str, pins: Mapping[str, object]) -> None:
    """Refuse a ``weights_image`` not pinned by digest, or one whose digest differs from
    ``weights_digest`` (or without a ``weights_digest`` beside it)."""
    if EVALGATE_WEIGHTS_IMAGE_PIN not in pins:
        return
    digest = _image_digest(source, name, pins[EVALGATE_WEIGHTS_IMAGE_PIN])
    recorded = pins.get(EVALGATE_WEIGHTS_DIGEST_PIN)
    if recorded != digest:
        key = f"candidates.{name}.pins.{EVALGATE_WEIGHTS_DIGEST_PIN}"
        reason = (
            f"must equal the digest of pins.{EVALGATE_WEIGHTS_IMAGE_PIN} ({digest}), got "
            f"{recorded!r}: the decision is signed for the weights the run evaluated"
        )
        raise EvalgateConfigError(source, key, reason)


def evalgate_weights_image(source: str, name: str, pins: Mapping[str, object]) -> str:
    """The candidate's weights image for a sidecar run; refused when absent or unpinned."""
    if EVALGATE_WEIGHTS_IMAGE_PIN not in pins:
        key = f"candidates.{name}.pins.{EVALGATE_WEIGHTS_IMAGE_PIN}"
        reason = (
            "a serving-sidecar run needs the weights as an OCI image pinned by digest "
            "(registry/models/NAME@sha256:<64 hex>), mounted read-only; none is pinned"
        )
        raise EvalgateConfigError(source, key, reason)
    evalgate_check_weights_pins(source, name, pins)
    return str(pins[EVALGATE_WEIGHTS_IMAGE_PIN])


def _image_digest(source: str, name: str, image: object) -> str:
    found = _PINNED.match(image) if isinstance(image, str) else None
    if found is None:
        key = f"candidates.{name}.pins.{EVALGATE_WEIGHTS_IMAGE_PIN}"
        reason = f"must be pinned by digest (NAME@sha256:<64 hex>), got {image!r}"
        raise EvalgateConfigError(source, key, reason)
    return found.group(1)
