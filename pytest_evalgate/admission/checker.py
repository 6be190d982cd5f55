"""The admission decision: does a Pod's every weights digest rest on a passing, signed gate?

Where the decision comes from: the registry. A digest's chain (verified under the registry
key) gives its state, and its newest entry carries copies of the decision envelope and, for a
decision that did not pass, of the override it rests on. The webhook re-verifies those under
its own gate key (``--key``): a registry writer cannot admit what the gate did not sign.

A digest is admitted when all of these hold, else the Pod is denied with the digest and the
first reason that failed:

1. its chain verifies and was not rolled back (a head seen before is remembered);
2. its state is ``gated``, ``canary``, ``ga`` or ``deprecated`` (a warning): not unknown,
   not ``candidate``, not ``revoked``;
3. the newest entry's decision verifies under the gate key, names the digest, and has verdict
   ``pass``, or it is a ``fail`` with an override that verifies, names it and is valid now.

Caching (it sits on the Pod creation path): envelope verifications are kept by the sha256 of
the envelope's canonical JSON, a digest's chain by a fingerprint of its folder (names, inodes,
sizes, mtimes: one ``scandir``), and a head entry's basis by the entry's digest. A new entry
(a revocation, a promotion) changes the fingerprint, so the next review re-reads that chain:
no restart, no polling. Time-dependent checks (an override's expiry) run on every review.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec

from pytest_evalgate.admission.pod import EvalgateWeightsRef, evalgate_pod_weights
from pytest_evalgate.admission.review import (
    EvalgateReviewRequest,
    evalgate_parse_review,
    evalgate_review_response,
)
from pytest_evalgate.attest.approval import evalgate_decision_approval_refusal
from pytest_evalgate.attest.dsse import evalgate_verify_with_key
from pytest_evalgate.attest.keys import evalgate_load_public_key
from pytest_evalgate.attest.override import evalgate_parse_time
from pytest_evalgate.attest.trust import EvalgateTrust, evalgate_release_refusal
from pytest_evalgate.errors import (
    EvalgateConfigError,
    EvalgateRegistryError,
    EvalgateSignatureError,
)
from pytest_evalgate.formats.canonical import evalgate_canonical_json
from pytest_evalgate.registry import (
    EvalgateBasis,
    EvalgateRegistryChain,
    EvalgateRegistryEntry,
    evalgate_check_basis,
    evalgate_registry_read,
    evalgate_registry_rollback,
    evalgate_registry_signature,
)

EVALGATE_ADMISSION_NAMESPACES_ENV = "PYTEST_EVALGATE_ADMISSION_NAMESPACES"
EVALGATE_ADMISSION_DEFAULT_NAMESPACES = ("serve-*",)
EVALGATE_ADMITTED_STATES = frozenset({"gated", "canary", "ga", "deprecated"})
# Only CREATE: weights are loaded when a Pod starts (image volumes are immutable), and checking
# UPDATE would deny removing a finalizer from a Pod whose weights were revoked since.
EVALGATE_CHECKED_OPERATIONS = frozenset({"CREATE"})

_log = logging.getLogger("pytest_evalgate.admission")
_K = TypeVar("_K")
_V = TypeVar("_V")


def evalgate_admission_namespaces(text: str | None) -> tuple[str, ...]:
    """Namespace patterns (``fnmatch``, comma-separated) from the environment variable's
    value; unset or blank gives ``serve-*``."""
    patterns = tuple(part.strip() for part in (text or "").split(",") if part.strip())
    return patterns or EVALGATE_ADMISSION_DEFAULT_NAMESPACES


@dataclass(frozen=True)
class EvalgateAdmissionConfig:
    """What the webhook trusts: the gate's public key (decisions, overrides), the registry
    folder and its public key, and the namespaces whose Pods are checked.

    With ``trust`` (a trust file, SPEC section 20) the keys come from it by role instead:
    decisions need a ``gate`` key, overrides an ``override`` key (the approver is its
    identity), registry entries a ``registry`` key; and every admitted decision must rest on
    a policy approved by a ``policy`` key and name weights signed by a ``release`` key. With
    ``require_binding`` ("verified") a decision must say its weights were verified, not
    declared. ``gate_key`` and ``registry_key`` are then ignored (give "")."""

    gate_key: str
    registry: str
    registry_key: str
    namespaces: tuple[str, ...] = EVALGATE_ADMISSION_DEFAULT_NAMESPACES
    trust: EvalgateTrust | None = None
    require_binding: str | None = None


@dataclass(frozen=True)
class EvalgateDigestVerdict:
    """One digest's answer: ``reason`` says why it was denied, or what admitted it."""

    digest: str
    allowed: bool
    reason: str
    warning: str | None = None


@dataclass(frozen=True)
class _Window:
    """A verified basis and, for an override, the times it is valid between."""

    basis: EvalgateBasis
    issued: datetime | None
    expires: datetime | None


class _Lru(Generic[_K, _V]):
    """A small bounded mapping that forgets the least recently used key."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._data: OrderedDict[_K, _V] = OrderedDict()

    def get(self, key: _K) -> _V | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: _K, value: _V) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        if len(self._data) > self._size:
            self._data.popitem(last=False)


class EvalgateAdmission:
    """The admission checks with their caches; one per webhook process, used from one thread.

    ``clock`` returns the current aware UTC time (tests move it). ``hits`` and ``misses``
    count envelope verifications served from and added to the cache."""

    def __init__(
        self,
        config: EvalgateAdmissionConfig,
        *,
        clock: Callable[[], datetime] | None = None,
        cache_size: int = 4096,
    ) -> None:
        self.config = config
        self._verifier: Callable[[Mapping[str, Any]], dict[str, Any]]
        self._registry_key: ec.EllipticCurvePublicKey | EvalgateTrust
        if config.trust is not None:
            self._verifier = config.trust.evalgate_verifier()
            self._registry_key = config.trust
        else:
            gate_key = evalgate_load_public_key(config.gate_key)
            self._verifier = lambda envelope: evalgate_verify_with_key(envelope, gate_key)
            self._registry_key = evalgate_load_public_key(config.registry_key)
        if not os.path.isdir(config.registry):
            raise EvalgateConfigError(config.registry, "--registry", "not a folder")
        self._clock = clock or (lambda: datetime.now(UTC))
        self._verified: _Lru[str, dict[str, Any] | str] = _Lru(cache_size)
        self._chains: _Lru[str, tuple[Any, EvalgateRegistryChain | str]] = _Lru(cache_size)
        self._windows: _Lru[str, _Window | str] = _Lru(cache_size)
        self._heads: dict[str, tuple[int, str]] = {}
        self.hits = 0
        self.misses = 0

    # --- reviews ------------------------------------------------------------------------------

    def review(self, body: bytes) -> dict[str, Any]:
        """The AdmissionReview answer for an HTTP body. An unreadable body raises
        :class:`EvalgateAdmissionError`; a failure inside the checks denies (fail closed)."""
        request = evalgate_parse_review(body)
        try:
            return self.decide(request)
        except Exception as exc:  # a bug must deny, never admit
            _log.exception("admission check failed for %s", request.uid)
            message = f"evalgate: admission check failed ({type(exc).__name__}: {exc}): denied"
            return evalgate_review_response(request.uid, False, message)

    def decide(self, request: EvalgateReviewRequest) -> dict[str, Any]:
        """Allow what is not ours to check (other kinds, operations than CREATE, namespaces
        outside the patterns); check the weights of a Pod created in a gated namespace."""
        if not self._in_scope(request):
            return evalgate_review_response(request.uid, True)
        if request.obj is None:
            message = "evalgate: denied: the review carries no Pod object to inspect"
            return evalgate_review_response(request.uid, False, message)
        denials, warnings = self._pod_findings(evalgate_pod_weights(request.obj))
        if denials:
            message = f"evalgate: Pod {request.namespace}/{request.name} denied: " + "; ".join(
                denials
            )
            _log.info("%s", message)
            return evalgate_review_response(request.uid, False, message, warnings)
        return evalgate_review_response(request.uid, True, None, warnings)

    def _in_scope(self, request: EvalgateReviewRequest) -> bool:
        return (
            request.is_pod
            and request.operation in EVALGATE_CHECKED_OPERATIONS
            and any(fnmatch.fnmatchcase(request.namespace, p) for p in self.config.namespaces)
        )

    def _pod_findings(self, refs: list[EvalgateWeightsRef]) -> tuple[list[str], list[str]]:
        denials: list[str] = []
        warnings: list[str] = []
        verdicts: dict[str, EvalgateDigestVerdict] = {}
        for ref in refs:
            if ref.digest is None:
                denials.append(f"{ref.source} {ref.reference!r}: {ref.problem}")
                continue
            if ref.digest not in verdicts:
                verdicts[ref.digest] = self.check_digest(ref.digest)
            verdict = verdicts[ref.digest]
            if not verdict.allowed:
                denials.append(f"weights {ref.digest} ({ref.source}): {verdict.reason}")
            elif verdict.warning and verdict.warning not in warnings:
                warnings.append(verdict.warning)
        return denials, warnings

    # --- one digest ---------------------------------------------------------------------------

    def check_digest(self, digest: str) -> EvalgateDigestVerdict:
        """Whether ``digest`` is admitted now, and why (module docstring, steps 1-3)."""
        try:
            chain = self._chain(digest)
        except EvalgateRegistryError as exc:
            return EvalgateDigestVerdict(digest, False, f"the registry does not verify: {exc}")
        head = chain.head
        if head is None:
            reason = "no signed decision: the digest is not in the registry"
            return EvalgateDigestVerdict(digest, False, reason)
        refusal = _state_refusal(head)
        if refusal is not None:
            return EvalgateDigestVerdict(digest, False, refusal)
        return self._basis_verdict(digest, head)

    def _basis_verdict(self, digest: str, head: EvalgateRegistryEntry) -> EvalgateDigestVerdict:
        window = self._window(head)
        if isinstance(window, str):
            return EvalgateDigestVerdict(digest, False, window)
        refusal = _window_refusal(window, self._clock())
        if refusal is not None:
            return EvalgateDigestVerdict(digest, False, refusal)
        return EvalgateDigestVerdict(
            digest, True, window.basis.describe(), _warning(digest, head, window.basis)
        )

    # --- caches -------------------------------------------------------------------------------

    def _chain(self, digest: str) -> EvalgateRegistryChain:
        """The verified chain, re-read only when the digest's folder changed; a head seen
        before must still be there (a removed revocation is a rollback, not a pass)."""
        fingerprint = evalgate_registry_signature(self.config.registry, digest)
        cached = self._chains.get(digest)
        if cached is None or cached[0] != fingerprint:
            cached = (fingerprint, self._read_chain(digest))
            self._chains.put(digest, cached)
        chain = cached[1]
        if isinstance(chain, str):
            raise EvalgateRegistryError(chain)
        rollback = evalgate_registry_rollback(self._heads.get(digest), chain)
        if rollback is not None:
            raise EvalgateRegistryError(rollback)
        if chain.head is not None:
            self._heads[digest] = (chain.head.sequence, chain.head.entry_sha256)
        return chain

    def _read_chain(self, digest: str) -> EvalgateRegistryChain | str:
        try:
            return evalgate_registry_read(self.config.registry, digest, self._registry_key)
        except (EvalgateRegistryError, EvalgateSignatureError, EvalgateConfigError) as exc:
            return str(exc)

    def _window(self, head: EvalgateRegistryEntry) -> _Window | str:
        cached = self._windows.get(head.entry_sha256)
        if cached is None:
            cached = self._new_window(head)
            self._windows.put(head.entry_sha256, cached)
        return cached

    def _new_window(self, head: EvalgateRegistryEntry) -> _Window | str:
        try:
            basis = evalgate_check_basis(head.attestations, head.digest, self._verify, admit=False)
        except EvalgateSignatureError as exc:
            return str(exc)
        refusal = self._chain_refusal(basis)
        if refusal is not None:
            return refusal
        if basis.override is None:
            return _Window(basis, None, None)
        try:
            issued = evalgate_parse_time(str(basis.override.get("issued_at")), "issued_at")
            expires = evalgate_parse_time(str(basis.override.get("expires_at")), "expires_at")
        except EvalgateConfigError as exc:
            return f"the override's times are malformed: {exc}"
        return _Window(basis, issued, expires)

    def _chain_refusal(self, basis: EvalgateBasis) -> str | None:
        """With a trust file: the policy approval and the release signature of the decision;
        with ``require_binding``: how its weights were bound (SPEC section 20)."""
        decision = basis.decision
        if self.config.trust is not None:
            refusal = evalgate_decision_approval_refusal(decision, self.config.trust)
            if refusal is None:
                refusal = evalgate_release_refusal(decision, self.config.trust)
            if refusal is not None:
                return f"decision {basis.decision_sha256[:16]}: {refusal}"
        wanted = self.config.require_binding
        weights = decision.get("weights")
        binding = weights.get("binding") if isinstance(weights, Mapping) else None
        if wanted is not None and binding != wanted:
            return (
                f"decision {basis.decision_sha256[:16]}: weights binding is {binding!r}, "
                f"admission requires {wanted!r} (--require-binding)"
            )
        return None

    def _verify(self, envelope: Mapping[str, object]) -> dict[str, Any]:
        """Verify under the gate key, cached by the envelope's digest (failures too)."""
        key = hashlib.sha256(evalgate_canonical_json(envelope)).hexdigest()
        cached = self._verified.get(key)
        if cached is None:
            self.misses += 1
            cached = _verify_or_reason(envelope, self._verifier)
            self._verified.put(key, cached)
        else:
            self.hits += 1
        if isinstance(cached, str):
            raise EvalgateSignatureError(cached)
        return cached

    def health(self) -> str | None:
        """None when the registry folder is readable, else why not (for ``/healthz``)."""
        try:
            os.listdir(self.config.registry)
        except OSError as exc:
            return f"{self.config.registry}: cannot read the registry: {exc.strerror}"
        return None


def _verify_or_reason(
    envelope: Mapping[str, Any], verify: Callable[[Mapping[str, Any]], dict[str, Any]]
) -> dict[str, Any] | str:
    try:
        return verify(envelope)
    except EvalgateSignatureError as exc:
        return str(exc)


def _state_refusal(head: EvalgateRegistryEntry) -> str | None:
    if head.state == "revoked":
        return f"revoked at {head.when} by {head.who}: {head.why}"
    if head.state not in EVALGATE_ADMITTED_STATES:
        return f"registry state is {head.state}: not promoted to gated"
    return None


def _window_refusal(window: _Window, now: datetime) -> str | None:
    basis = window.basis
    if basis.override is None:
        if basis.verdict == "pass":
            return None
        return (
            f"decision {basis.decision_sha256[:16]} has verdict {basis.verdict!r} and no override"
        )
    if window.issued is not None and now < window.issued:
        return f"the override of decision {basis.decision_sha256[:16]} is issued in the future"
    if window.expires is not None and now >= window.expires:
        expired = basis.override.get("expires_at")
        return f"the override of decision {basis.decision_sha256[:16]} expired at {expired}"
    return None


def _warning(digest: str, head: EvalgateRegistryEntry, basis: EvalgateBasis) -> str | None:
    if head.state == "deprecated":
        return f"evalgate: weights {digest} are deprecated (since {head.when})"
    if basis.override is not None:
        return f"evalgate: weights {digest} admitted by override: {basis.describe()}"
    return None
