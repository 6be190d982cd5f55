"""The one exception tree of pytest-evalgate.

::

    EvalgateError                      base; never raised itself
    ├── EvalgateConfigError            a manifest, policy, option or plan is wrong (exit 4)
    │   └── EvalgatePolicyError        gate.yaml is wrong
    ├── EvalgateEndpointError          an endpoint call ended in error after its retries
    ├── EvalgateStoreError             the result store cannot be read or written
    │   └── EvalgateIntegrityError     a stored record is malformed, conflicting or foreign
    ├── EvalgateSignatureError         a signed decision record does not verify
    ├── EvalgateK8sError               the Kubernetes API is unreachable, forbidden or failed
    └── EvalgatePrometheusError        the Prometheus HTTP API is unreachable or refused a query

A failed gate is a verdict, not an exception. The plugin turns ``EvalgateConfigError`` into
``pytest.UsageError`` so that pytest exits with status 4.
"""

from __future__ import annotations


class EvalgateError(Exception):
    """Base of every error this package raises on purpose."""


class EvalgateConfigError(EvalgateError):
    """A manifest, policy, option or shard plan is invalid; the message names file, key, reason."""

    def __init__(self, source: str, key: str, reason: str) -> None:
        self.source = source
        self.key = key
        self.reason = reason
        super().__init__(f"{source}: {key}: {reason}")


class EvalgatePolicyError(EvalgateConfigError):
    """The gate policy file is invalid."""


class EvalgateEndpointError(EvalgateError):
    """An endpoint call failed for good; ``category`` is one of SPEC section 5's categories."""

    def __init__(self, category: str, message: str, status: int | None = None) -> None:
        self.category = category
        self.status = status
        self.message = message
        super().__init__(f"{category}: {message}" + (f" (HTTP {status})" if status else ""))


class EvalgateStoreError(EvalgateError):
    """The result store cannot be read or written."""


class EvalgateIntegrityError(EvalgateStoreError):
    """Stored records are malformed, conflicting or from another definition."""


class EvalgateSignatureError(EvalgateError):
    """A signed decision record fails verification."""


class EvalgateK8sError(EvalgateError):
    """The Kubernetes API is unreachable, forbidden, or a Job failed."""


class EvalgatePrometheusError(EvalgateError):
    """The Prometheus HTTP API could not be reached, or answered a query with an error."""
