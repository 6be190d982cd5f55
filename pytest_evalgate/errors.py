"""The one exception tree of pytest-evalgate.

::

    EvalgateError                      base; the runner raises it itself when its child process
    │                                  fails or stops, or a record cannot be committed
    ├── EvalgateConfigError            a manifest, policy, option, plan or key file is wrong
    │   ├── EvalgatePolicyError        gate.yaml is wrong
    │   └── EvalgateSandboxUnavailableError  no sandbox works here (says how to get one)
    ├── EvalgateStoreError             the result store cannot be written or claimed
    │   ├── EvalgateIntegrityError     stored results contradict each other (a pair judged twice)
    │   └── EvalgateStorePathError     a store path leaves the store (a symlink, '..')
    ├── EvalgateSandboxError           an execution's sandbox could not be set up (category sandbox)
    ├── EvalgateSignatureError         a signed decision record or override does not verify
    ├── EvalgateRegistryError          a registry transition is refused or its chain does not verify
    ├── EvalgateAdmissionError         an AdmissionReview request is malformed
    ├── EvalgateYamlError              a document is not acceptable YAML (never leaves the
    │                                  manifest and policy readers: it becomes a config error)
    ├── EvalgateWireError              a runner pipe carried a line that is no wire message
    ├── EvalgateK8sError               the Kubernetes API is unreachable, forbidden or failed
    ├── EvalgatePrometheusError        the Prometheus HTTP API is unreachable or refused a query
    ├── EvalgateSimHttpError           a request the simulated model server refuses (never leaves
    │                                  its connection: answered with its status, then closed)
    ├── EvalgateAnswerError            a 200 that is no answer (never leaves the client: it
    │                                  becomes the call's error category)
    └── EvalgateHttpError              a connection failed, or its bytes are no HTTP/1.1 response
        │                              (never leaves the client: category ``connection``)
        └── EvalgateHttpTruncated      a body ended before its end (category ``truncated``)

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


class EvalgateSandboxUnavailableError(EvalgateConfigError):
    """No requested isolation works on this machine; ``reason`` says how to get a sandbox."""


class EvalgateStoreError(EvalgateError):
    """The result store cannot be written (a segment commit failed) or no generation can be
    claimed."""


class EvalgateIntegrityError(EvalgateStoreError):
    """Stored results contradict each other (for example one pair judged twice)."""


class EvalgateStorePathError(EvalgateStoreError):
    """A path under the store root resolves outside it (a symlink that leaves the store, a
    ``..`` component), or the store cannot be written at all; the message names the path,
    where it leads and why it is refused."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class EvalgateSandboxError(EvalgateError):
    """A sandbox for one code execution could not be set up or did not start.

    Never a wrong answer: the identity has no result (``category`` is ``"sandbox"``, as in a
    record's ``error``) and is retried by the next run. What the answer's code did is an outcome
    (``passed``, ``tests_failed``, ``timeout``, ``memory``, ``crashed``), not this error.
    """

    category = "sandbox"

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(f"sandbox: {message}")


class EvalgateSignatureError(EvalgateError):
    """A signed decision record or an override fails verification, or a decision that must not
    be signed (not attestable, not pass/fail) was given to sign."""


class EvalgateRegistryError(EvalgateError):
    """A registry transition is refused, or a digest's chain of entries does not verify
    (edited, removed, reordered or foreign entries); the message names the entry and reason."""


class EvalgateAdmissionError(EvalgateError):
    """An AdmissionReview request cannot be read (not JSON, no ``request.uid``)."""


class EvalgateYamlError(EvalgateError):
    """A document is not acceptable YAML; ``reason`` says why (with its line when known).

    Internal to the readers (``formats.yamlread``): the manifest and policy loaders turn it into
    their configuration error naming the file. Not an ``EvalgateConfigError`` itself: it knows
    no file or key, and a caller that lets it through keeps its exit status (1, not 4)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class EvalgateWireError(EvalgateError):
    """A line on the runner's pipes is not a message of ``runner.wire`` (a bug, never a user's)."""


class EvalgateK8sError(EvalgateError):
    """The Kubernetes API is unreachable, forbidden, or a Job failed."""


class EvalgatePrometheusError(EvalgateError):
    """The Prometheus HTTP API could not be reached, or answered a query with an error."""


class EvalgateAnswerError(EvalgateError):
    """A 200 response that is not an answer: malformed, truncated, oversize, an error inside.

    Raised while a response is read and caught by the client, which turns it into the call's
    ``EvalgateCallError`` of ``category``; ``retry`` says whether another attempt may help.
    """

    def __init__(self, category: str, message: str, *, retry: bool) -> None:
        self.category = category
        self.message = message
        self.retry = retry
        super().__init__(f"{category}: {message}")


class EvalgateHttpError(EvalgateError):
    """An endpoint's connection could not be opened or was lost before the response's head, or
    the bytes it sent are not an HTTP/1.1 response (``client.http1``).

    Raised while one attempt is sent or read and caught by the client, which turns it into the
    call's ``connection`` error (retried)."""


class EvalgateHttpTruncated(EvalgateHttpError):
    """A response body ended before its end: the connection closed short of its
    ``Content-Length`` or before the last chunk of a chunked body (the client's ``truncated``)."""


class EvalgateSimHttpError(EvalgateError):
    """A request the simulated model server cannot parse (``simulated.protocol``); answered with
    ``status``, then the connection closes. Raised and caught inside the server's connection."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class EvalgateToolServiceError(EvalgateError):
    """A tool's mock service could not be reached or answered no JSON result (``dialogue``)."""
