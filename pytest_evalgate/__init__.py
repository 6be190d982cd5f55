"""pytest-evalgate: LLM evaluations as pytest tests, their results as a release gate.

The names a user touches are exported here: the record and identity of a result, the scorer
protocol, the gate policy, the decision record and the exception tree. They load lazily
(PEP 562), because pytest imports this package for the plugin entry point in every run of every
project that installs it: importing ``pytest_evalgate`` must stay as cheap as the entry point.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "EvalgateRecord": "pytest_evalgate.store",
    "EvalgateIdentity": "pytest_evalgate.store",
    "EvalgateScorer": "pytest_evalgate.scoring",
    "EvalgatePolicy": "pytest_evalgate.policy.values",
    "EvalgateDecision": "pytest_evalgate.decision.record",
    "EvalgateManifest": "pytest_evalgate.manifest.load",
    "EvalgateError": "pytest_evalgate.errors",
    "EvalgateConfigError": "pytest_evalgate.errors",
    "EvalgateStoreError": "pytest_evalgate.errors",
    "EvalgateIntegrityError": "pytest_evalgate.errors",
    "EvalgateSignatureError": "pytest_evalgate.errors",
}

__all__ = [
    "EvalgateConfigError",
    "EvalgateDecision",
    "EvalgateError",
    "EvalgateIdentity",
    "EvalgateIntegrityError",
    "EvalgateManifest",
    "EvalgatePolicy",
    "EvalgateRecord",
    "EvalgateScorer",
    "EvalgateSignatureError",
    "EvalgateStoreError",
    "__version__",
]

if TYPE_CHECKING:
    from pytest_evalgate.decision.record import EvalgateDecision
    from pytest_evalgate.errors import (
        EvalgateConfigError,
        EvalgateError,
        EvalgateIntegrityError,
        EvalgateSignatureError,
        EvalgateStoreError,
    )
    from pytest_evalgate.manifest.load import EvalgateManifest
    from pytest_evalgate.policy.values import EvalgatePolicy
    from pytest_evalgate.scoring import EvalgateScorer
    from pytest_evalgate.store import EvalgateIdentity, EvalgateRecord


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_evalgate' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
