"""Shards: which process (pod or xdist worker) runs which case.

``shard_for`` is the contract of SPEC section 2. All repetitions and candidates of a case live in
the case's shard. Within one shard process, xdist worker k of K runs sub-shard k, taken from the
same hash (``(h // N) % K``) so that sub-shards are uniform and independent of the shard index.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from pytest_evalgate.errors import EvalgateConfigError


def evalgate_case_hash(case_id: str) -> int:
    """First 8 bytes of sha256(case_id), big-endian."""
    return int.from_bytes(hashlib.sha256(case_id.encode()).digest()[:8], "big")


def shard_for(case_id: str, n: int) -> int:
    """The shard of ``case_id`` among ``n`` shards (SPEC section 2)."""
    return evalgate_case_hash(case_id) % n


def evalgate_sub_shard(case_id: str, n: int, k: int) -> int:
    """The xdist sub-shard (0..k-1) of a case inside its shard of ``n``."""
    return (evalgate_case_hash(case_id) // n) % k


@dataclass(frozen=True)
class EvalgateShardSpec:
    """This process's shard: ``index`` of ``count``."""

    index: int
    count: int


def evalgate_parse_shard(text: str, source: str = "--evalgate-shard") -> EvalgateShardSpec:
    """Parse ``I/N`` or ``auto/N`` (``auto`` reads ``JOB_COMPLETION_INDEX``)."""
    head, sep, tail = text.partition("/")
    if not sep:
        raise EvalgateConfigError(source, text, "expected I/N, for example 0/4 or auto/4")
    if head == "auto":
        head = os.environ.get("JOB_COMPLETION_INDEX", "")
        if not head:
            raise EvalgateConfigError(source, text, "auto needs JOB_COMPLETION_INDEX set")
    try:
        index, count = int(head), int(tail)
    except ValueError:
        raise EvalgateConfigError(source, text, "I and N must be whole numbers") from None
    if count < 1 or not 0 <= index < count:
        raise EvalgateConfigError(source, text, f"need 0 <= I < N and N >= 1, got {index}/{count}")
    return EvalgateShardSpec(index, count)
