"""Checkpoint tiers (SPEC section 12): small, stable subsets of a suite, named in the manifest.

``tiers: {checkpoint: {fraction: 0.1, seed: 0, policy: gate-checkpoint.yaml}}``. A case belongs
to a tier when ``evalgate_tier_draw(seed, case id) < fraction``: the draw depends on nothing but
the seed and the case's own id, so adding cases never moves an existing case in or out. A tier
run is a full verdict for the tier, recorded in the decision, and never attestable: it cannot
authorise a release that needs the whole suite.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.manifest.schema import EvalgateTierSchema

if TYPE_CHECKING:  # load does not import this module: no circle
    from pytest_evalgate.manifest.load import EvalgateManifest


def evalgate_tier_draw(seed: int, case_id: str) -> float:
    """Uniform in [0, 1): the first 8 bytes of sha256 of ``"<seed>\\x1f<case id>"`` / 2**64."""
    digest = hashlib.sha256(f"{seed}\x1f{case_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def evalgate_tier_spec(
    tiers: Mapping[str, EvalgateTierSchema], name: str, source: str
) -> EvalgateTierSchema:
    """The tier ``name`` of a manifest's ``tiers``; an unknown name raises
    ``EvalgateConfigError(source, "tiers", ...)`` listing the known ones."""
    if name not in tiers:
        known = ", ".join(sorted(tiers)) or "none"
        raise EvalgateConfigError(source, "tiers", f"no tier {name!r} (tiers: {known})")
    return tiers[name]


def evalgate_tier_member(spec: EvalgateTierSchema, case_id: str) -> bool:
    """Whether ``case_id`` belongs to the tier ``spec`` (``fraction``, ``seed``)."""
    return evalgate_tier_draw(spec.seed, case_id) < spec.fraction


def evalgate_tier_policy(spec: EvalgateTierSchema, suite_dir: str) -> str | None:
    """The tier's own policy file (relative to the suite folder), or None."""
    return None if spec.policy is None else os.path.join(suite_dir, spec.policy)


def evalgate_chosen_policy(
    manifest: EvalgateManifest, policy: str | None, tier: str | None
) -> str | None:
    """The policy file a run of ``manifest`` gates with: ``policy`` when given, else the
    tier's own policy when ``tier`` names a tier that has one, else None (the suite's gate.yaml).
    An unknown tier raises ``EvalgateConfigError``. The one choice of ``--evalgate-tier`` in a
    pytest run and ``--tier`` of ``evalgate gate``."""
    if policy is not None or tier is None:
        return policy
    spec = evalgate_tier_spec(manifest.tiers, tier, manifest.path)
    return evalgate_tier_policy(spec, manifest.suite_dir)


def evalgate_tier_record(
    name: str, spec: EvalgateTierSchema, cases: int, of: int
) -> dict[str, str | float | int | bool]:
    """The decision's ``tier`` member: which tier, its definition, and how many cases it holds."""
    return {
        "name": name,
        "fraction": spec.fraction,
        "seed": spec.seed,
        "cases": cases,
        "suite_cases": of,
        "authorises_release": False,
        "note": "a tier verdict is not a full-suite verdict and is never signed as one",
    }
