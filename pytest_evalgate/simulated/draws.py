"""Deterministic draws: every "random" choice of the simulator is a hash, so it repeats exactly.

Contracts
---------
- ``evalgate_sim_uniform(*parts)`` is uniform in ``[0, 1)``: the first 8 bytes (big endian) of
  sha256 over ``str(part)`` joined by U+001F, divided by 2**64.
- ``evalgate_sim_salt`` is the draws key of one request: ``(seed, model, digest)``, plus the
  request's ``seed`` when its temperature is > 0 (a cold request ignores its seed).
"""

from __future__ import annotations

import hashlib
from typing import Any

from pytest_evalgate.simulated.knobs import EvalgateSimConfig


def evalgate_sim_uniform(*parts: object) -> float:
    """Uniform in [0, 1) from sha256 of the parts joined by U+001F (cheaper than JSON)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def evalgate_sim_salt(
    config: EvalgateSimConfig, model: str, digest: str, temperature: float, seed: object
) -> tuple[Any, ...]:
    """The draws key of one request (see the module contract)."""
    if temperature > 0:
        return (config.seed, model, digest, seed)
    return (config.seed, model, digest)
