"""The one exception tree of pytest-evalgate.

::

    EvalgateError                      base; the runner raises it itself when its child process
    │                                  fails or stops, or a record cannot be committed
    ├── EvalgateConfigError            a manifest, policy, option, plan or key file is wrong
    │   └── EvalgatePolicyError        gate.yaml is wrong
    ├── EvalgateStoreError             the result store cannot be written or claimed
    ├── EvalgateSignatureError         a signed decision record or override does not verify
    ├── EvalgateK8sError               the Kubernetes API is unreachable, forbidden or failed
    └── EvalgatePrometheusError        the Prometheus HTTP API is unreachable or refused a query

A failed gate is a verdict, not an exception. The plugin turns ``EvalgateConfigError`` into
``pytest.UsageError`` so that pytest exits with status 4; the ``evalgate`` console script
(``pytest_evalgate.cli``) exits 4 for it and 1 for any other ``EvalgateError``. An exception
outside this tree is a bug, never a configuration error.
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


class EvalgateStoreError(EvalgateError):
    """The result store cannot be written (a segment commit failed) or no generation can be
    claimed."""


class EvalgateSignatureError(EvalgateError):
    """A signed decision record or an override fails verification, or a decision that must not
    be signed (not attestable, not pass/fail) was given to sign."""


class EvalgateK8sError(EvalgateError):
    """The Kubernetes API is unreachable, forbidden, or a Job failed."""


class EvalgatePrometheusError(EvalgateError):
    """The Prometheus HTTP API could not be reached, or answered a query with an error."""
