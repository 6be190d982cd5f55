"""Shards: which process (pod or xdist worker) runs which case.

``shard_for`` is the contract of SPEC section 2. All repetitions and candidates of a case live in
the case's shard. Within one shard process, xdist worker k of K runs sub-shard k, taken from the
same hash (``(h // N) % K``) so that sub-shards are uniform and independent of the shard index.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.formats.canonical import evalgate_sha256_hex

if TYPE_CHECKING:
    from pytest_evalgate.manifest.load import EvalgateManifest


def evalgate_case_hash(case_id: str) -> int:
    """First 8 bytes of sha256(case_id), big-endian."""
    return int.from_bytes(hashlib.sha256(case_id.encode()).digest()[:8], "big")


def shard_for(case_id: str, n: int) -> int:
    """The shard of ``case_id`` among ``n`` shards (SPEC section 2); 0 of 1 without hashing."""
    return 0 if n == 1 else evalgate_case_hash(case_id) % n


def evalgate_sub_shard(case_id: str, n: int, k: int) -> int:
    """The xdist sub-shard (0..k-1) of a case inside its shard of ``n``."""
    return (evalgate_case_hash(case_id) // n) % k


@dataclass(frozen=True)
class EvalgateShardSpec:
    """This process's shard: ``index`` of ``count``."""

    index: int
    count: int


@dataclass(frozen=True)
class EvalgateTopology:
    """Where this process stands in the run, built once at configure time.

    ``shard`` is ``--evalgate-shard`` (``None`` when not given); ``worker_index`` of
    ``worker_count`` is this process among the xdist workers of its shard (0 of 1 without
    xdist); ``run_id`` names the run that a ``--evalgate-fresh`` generation belongs to (every
    process of one run names the same one).
    """

    shard: EvalgateShardSpec | None = None
    worker_index: int = 0
    worker_count: int = 1
    run_id: str = ""

    @property
    def shard_index(self) -> int:
        """This process's shard index (0 when not sharded)."""
        return self.shard.index if self.shard else 0

    @property
    def shard_count(self) -> int:
        """The number of shards (1 when not sharded)."""
        return self.shard.count if self.shard else 1

    @property
    def sharded(self) -> bool:
        """Whether the run is split over more than one shard."""
        return self.shard_count > 1

    @property
    def parts(self) -> int:
        """How many processes share the run-wide budget: shards x xdist workers."""
        return self.shard_count * self.worker_count

    @property
    def processes(self) -> str:
        """How ``parts`` comes about, for messages: ``2 shards x 1 xdist worker``."""
        return f"{_count(self.shard_count, 'shard')} x {_count(self.worker_count, 'xdist worker')}"

    @property
    def part_index(self) -> int:
        """This process's index among ``parts`` (also its endpoint replica)."""
        return self.shard_index * self.worker_count + self.worker_index

    @property
    def shard_dir(self) -> str:
        """The store folder of this process's shard: ``shard-<i>-of-<N>``."""
        return f"shard-{self.shard_index}-of-{self.shard_count}"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def evalgate_worker_position(workerinput: Mapping[str, Any] | None) -> tuple[int, int]:
    """(worker index, worker count) from xdist's ``workerinput`` (``(0, 1)`` without xdist).

    A worker that replaces a crashed one gets a new id (``gw2`` of 2): it wraps, as the
    scheduler does, so its budget share and prefetch stay in range.
    """
    if not workerinput:
        return 0, 1
    count = int(workerinput["workercount"])
    return int(str(workerinput["workerid"]).removeprefix("gw")) % count, count


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


# --- cost-balanced shard plans (issue 7) -------------------------------------------------------
#
# A plan is a versioned ``case_id -> shard`` assignment written to JSON. It is built by LPT
# (longest processing time first): cases in decreasing cost onto the currently least-loaded
# shard. LPT's makespan is at most (4/3 - 1/(3N)) times the optimum (Graham 1969) and at most
# mean + max cost, which is what the tests hold it to.

_PLAN_KEYS = ("version", "shards", "assignment")


def evalgate_plan_shards(cases: Sequence[tuple[str, float]], n: int) -> dict[str, int]:
    """Assign ``(case_id, cost)`` pairs to ``n`` shards, largest cost first, least-loaded shard.

    Deterministic: cases are taken by decreasing cost, ties by case id; among equally loaded
    shards the one with fewer cases wins (so zero-cost cases still spread), then the lowest
    index. Refuses ``n < 1``, duplicate ids and negative or non-finite
    costs with ``EvalgateConfigError``.
    """
    _check_plan_input(cases, n)
    loads = [(0.0, 0, index) for index in range(n)]
    assignment: dict[str, int] = {}
    for case_id, cost in sorted(cases, key=lambda pair: (-pair[1], pair[0])):
        load, count, index = heapq.heappop(loads)
        assignment[case_id] = index
        heapq.heappush(loads, (load + cost, count + 1, index))
    return dict(sorted(assignment.items()))


def _check_plan_input(cases: Sequence[tuple[str, float]], n: int) -> None:
    if n < 1:
        raise EvalgateConfigError("shard-plan", "shards", f"need at least 1 shard, got {n}")
    seen: set[str] = set()
    for case_id, cost in cases:
        if case_id in seen:
            raise EvalgateConfigError("shard-plan", case_id, "duplicate case id")
        if not math.isfinite(cost) or cost < 0:
            raise EvalgateConfigError("shard-plan", case_id, f"cost must be >= 0, got {cost}")
        seen.add(case_id)


def evalgate_plan_version(assignment: Mapping[str, int]) -> str:
    """``shards-`` + the first 12 hex of sha256 over the canonical JSON of the assignment."""
    return "shards-" + evalgate_sha256_hex(dict(assignment))[:12]


def evalgate_plan_document(plan: Mapping[str, int], n: int) -> dict[str, Any]:
    """The JSON document of a plan: ``{"version", "shards", "assignment"}`` (builtins only)."""
    assignment = dict(sorted(plan.items()))
    return {"version": evalgate_plan_version(assignment), "shards": n, "assignment": assignment}


def evalgate_load_plan(path: str, case_ids: Iterable[str], n: int) -> dict[str, int]:
    """Read and check a plan file against the suite's cases and shard count.

    Refuses (``EvalgateConfigError`` naming the file, the key and the reason) a file that is not
    a JSON plan, a wrong shard count, a version that does not match the assignment, a shard
    index outside ``0..n-1``, a case of the suite the plan misses, and a case the suite lacks.
    """
    document = _read_plan_json(path)
    if document["shards"] != n:
        raise EvalgateConfigError(path, "shards", f"plan is for {document['shards']}, need {n}")
    assignment = _plan_assignment(path, document["assignment"], n)
    expected = evalgate_plan_version(assignment)
    if document["version"] != expected:
        reason = f"{document['version']!r} does not match its content ({expected})"
        raise EvalgateConfigError(path, "version", reason)
    _check_plan_cases(path, assignment, set(case_ids))
    return assignment


def _read_plan_json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except (OSError, ValueError) as exc:
        raise EvalgateConfigError(path, "-", f"cannot read plan: {exc}") from None
    if not isinstance(document, dict):
        raise EvalgateConfigError(path, "-", "a plan is a JSON object")
    for key in _PLAN_KEYS:
        if key not in document:
            raise EvalgateConfigError(path, key, "missing")
    unknown = sorted(set(document) - set(_PLAN_KEYS))
    if unknown:
        raise EvalgateConfigError(path, unknown[0], "unknown key")
    return document


def _plan_assignment(path: str, raw: object, n: int) -> dict[str, int]:
    if not isinstance(raw, dict):
        raise EvalgateConfigError(path, "assignment", "must map case id to shard index")
    for case_id, shard in raw.items():
        # bool is an int subclass; a plan saying ``true`` is a typo, not shard 1
        if isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard < n:
            raise EvalgateConfigError(
                path, f"assignment.{case_id}", f"shard {shard!r} not in 0..{n - 1}"
            )
    return dict(raw)


def _check_plan_cases(path: str, assignment: Mapping[str, int], case_ids: set[str]) -> None:
    missing = sorted(case_ids - set(assignment))
    if missing:
        raise EvalgateConfigError(
            path, "assignment", f"misses {len(missing)} case(s): {missing[:5]}"
        )
    unknown = sorted(set(assignment) - case_ids)
    if unknown:
        reason = f"names {len(unknown)} case(s) not in the suite: {unknown[:5]}"
        raise EvalgateConfigError(path, "assignment", reason)


def evalgate_shard_of(case_id: str, n: int, plan: Mapping[str, int] | None = None) -> int:
    """The shard of a case: from the plan when one is given, else ``shard_for``."""
    return plan[case_id] if plan is not None else shard_for(case_id, n)


def evalgate_hash_plan(case_ids: Iterable[str], n: int) -> dict[str, int]:
    """The plain-hashing assignment (``shard_for``) of the given cases, for comparison."""
    return {case_id: shard_for(case_id, n) for case_id in case_ids}


def evalgate_shard_costs(
    cases: Sequence[tuple[str, float]], assignment: Mapping[str, int], n: int
) -> list[float]:
    """Total cost per shard (index 0..n-1) under ``assignment``."""
    totals = [0.0] * n
    for case_id, cost in cases:
        totals[assignment[case_id]] += cost
    return totals


def evalgate_balance(costs_by_shard: Sequence[float]) -> float:
    """max/mean of the shard costs: 1.0 is perfect; an all-zero or empty load counts as 1.0."""
    if not costs_by_shard:
        return 1.0
    mean = sum(costs_by_shard) / len(costs_by_shard)
    return max(costs_by_shard) / mean if mean > 0 else 1.0


def evalgate_write_plan(
    cases: Sequence[tuple[str, float]], n: int, output: str
) -> tuple[dict[str, Any], float, float]:
    """Plan ``cases`` onto ``n`` shards, write the JSON to ``output`` atomically.

    Returns ``(document, plan_balance, hash_balance)``, the balances as max/mean shard cost.
    """
    document = evalgate_plan_document(evalgate_plan_shards(cases, n), n)
    tmp = f"{output}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, output)
    hashed = evalgate_hash_plan((case_id for case_id, _ in cases), n)
    plan_balance = evalgate_balance(evalgate_shard_costs(cases, document["assignment"], n))
    return document, plan_balance, evalgate_balance(evalgate_shard_costs(cases, hashed, n))


def evalgate_manifest_plan(manifest: EvalgateManifest, n: int) -> dict[str, int] | None:
    """The manifest's checked shard plan for ``n`` shards, or None when it names none."""
    if manifest.shard_plan is None:
        return None
    return evalgate_load_plan(manifest.shard_plan, (case.case_id for case in manifest.cases), n)
