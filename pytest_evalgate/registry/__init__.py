"""The model registry (SPEC section 14): per weights digest, an append-only chain of signed
state transitions, each linked to the one before it.

Modules: :mod:`.chain` (the entry format, reading and verifying a chain, transitions, rollback,
the folder fingerprint), :mod:`.basis` (the decision and override an entry rests on),
:mod:`.write` (append, promote, revoke).

Layout of a registry folder (``--registry PATH``; it may live under the result store's root)::

    PATH/
      gate.pub                 the gate's public key: promotions verify decisions under it
      sha256-<hex>/            one folder per weights digest
        000001.json            entry 1, a DSSE envelope (canonical JSON and a newline)
        000002.json            entry 2, ...
        .tmp-*                 a write in progress (never read)

Contracts:

- An entry is an in-toto Statement (predicateType :data:`EVALGATE_REGISTRY_ENTRY_TYPE`,
  subject = the weights digest) signed with the registry key (ECDSA P-256, DSSE, as
  :mod:`pytest_evalgate.attest.dsse`). Its predicate holds ``sequence``, ``digest``, ``state``,
  ``previous_state``, ``previous_entry`` (hex sha256 of the previous entry's signed payload),
  ``who``, ``when``, ``why``, ``attestation_sha256`` (the decision's payload sha256, the id
  overrides name), ``override_sha256`` and ``attestations`` (copies of the decision envelope
  and of the override envelope it rests on).
- :func:`evalgate_registry_read` verifies a whole chain: contiguous sequence numbers, canonical
  bytes, every signature, every link, every transition. An edited, removed (inside the chain) or
  reordered entry raises :class:`EvalgateRegistryError`. A removed *last* entry leaves a shorter
  valid chain; :func:`evalgate_registry_rollback` detects it against a remembered head.
- Transitions (:func:`evalgate_transition_refusal`): ``candidate -> gated -> canary -> ga ->
  deprecated`` one step at a time, the first entry is ``candidate``, ``revoked`` from any state
  (also as the first entry), nothing after ``revoked``.
- Promotion to ``gated``, ``canary`` or ``ga`` needs a basis that admits the digest now
  (:func:`evalgate_check_basis`): a decision that verifies under ``gate.pub``, names this digest
  and passed, or that failed with a valid, unexpired override naming it. Without new
  attestations a promotion carries the previous entry's basis forward (and re-checks it).
- Entries are published with a hard link (never replaces a file): of two concurrent writers of
  the same sequence number exactly one succeeds.
"""

from __future__ import annotations

from pytest_evalgate.registry.basis import (
    EVALGATE_REGISTRY_GATE_KEY,
    EvalgateBasis,
    EvalgateVerifier,
    evalgate_check_basis,
    evalgate_registry_gate_key,
)
from pytest_evalgate.registry.chain import (
    EVALGATE_GATED_STATES,
    EVALGATE_REGISTRY_ENTRY_TYPE,
    EVALGATE_REGISTRY_STATES,
    EvalgateRegistryChain,
    EvalgateRegistryEntry,
    evalgate_digest_folder,
    evalgate_parse_digest,
    evalgate_registry_describe,
    evalgate_registry_read,
    evalgate_registry_rollback,
    evalgate_registry_signature,
    evalgate_transition_refusal,
)
from pytest_evalgate.registry.write import (
    EvalgateRegistryDraft,
    evalgate_registry_append,
    evalgate_registry_promote,
    evalgate_registry_revoke,
)

__all__ = [
    "EVALGATE_GATED_STATES",
    "EVALGATE_REGISTRY_ENTRY_TYPE",
    "EVALGATE_REGISTRY_GATE_KEY",
    "EVALGATE_REGISTRY_STATES",
    "EvalgateBasis",
    "EvalgateRegistryChain",
    "EvalgateRegistryDraft",
    "EvalgateRegistryEntry",
    "EvalgateVerifier",
    "evalgate_check_basis",
    "evalgate_digest_folder",
    "evalgate_parse_digest",
    "evalgate_registry_append",
    "evalgate_registry_describe",
    "evalgate_registry_gate_key",
    "evalgate_registry_promote",
    "evalgate_registry_read",
    "evalgate_registry_revoke",
    "evalgate_registry_rollback",
    "evalgate_registry_signature",
    "evalgate_transition_refusal",
]
