"""Cost-balanced shard plans: balance, determinism, the plan file and each refusal."""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from pathlib import Path

import pytest

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.shard.plan import (
    evalgate_balance,
    evalgate_hash_plan,
    evalgate_load_plan,
    evalgate_plan_document,
    evalgate_plan_shards,
    evalgate_plan_version,
    evalgate_shard_costs,
    evalgate_shard_of,
    evalgate_sub_shard,
    evalgate_write_plan,
    shard_for,
)


# LPT's worst case over the optimum (Graham 1969): 4/3 - 1/(3N).
def _lpt_bound(n: int) -> float:
    return 4 / 3 - 1 / (3 * n)


def _skewed(count: int, seed: int) -> list[tuple[str, float]]:
    """Pareto-like costs: a few long cases (long contexts, judges) among many short ones."""
    rng = random.Random(seed)
    return [(f"case-{i:05d}", round(rng.paretovariate(1.2), 3)) for i in range(count)]


def _makespan(cases: list[tuple[str, float]], plan: dict[str, int], n: int) -> float:
    return max(evalgate_shard_costs(cases, plan, n))


def _optimum(costs: list[float], n: int) -> float:
    best = float("inf")
    for combo in itertools.product(range(n), repeat=len(costs)):
        loads = [0.0] * n
        for cost, shard in zip(costs, combo, strict=True):
            loads[shard] += cost
        best = min(best, max(loads))
    return best


def test_existing_shard_contract_is_unchanged() -> None:
    # SPEC section 2 pins shard_for; these values are sha256-derived and must never move.
    assert shard_for("refund-002", 1) == 0
    h = int.from_bytes(hashlib.sha256(b"refund-002").digest()[:8], "big")
    assert shard_for("refund-002", 7) == h % 7
    assert evalgate_sub_shard("refund-002", 7, 3) == (h // 7) % 3


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_plan_is_never_worse_than_hashing_on_skewed_costs(seed: int, n: int) -> None:
    cases = _skewed(2000, seed)
    plan = evalgate_plan_shards(cases, n)
    hashed = evalgate_hash_plan([c for c, _ in cases], n)
    plan_balance = evalgate_balance(evalgate_shard_costs(cases, plan, n))
    hash_balance = evalgate_balance(evalgate_shard_costs(cases, hashed, n))
    assert plan_balance <= hash_balance
    # LPT list-scheduling bound: makespan <= mean + largest cost.
    total = sum(c for _, c in cases)
    assert _makespan(cases, plan, n) <= total / n + max(c for _, c in cases) + 1e-9


@pytest.mark.parametrize("seed", range(25))
def test_plan_is_within_the_lpt_bound_of_optimal(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([2, 3])
    cases = [(f"k{i}", float(rng.randint(1, 20))) for i in range(rng.randint(5, 9))]
    plan = evalgate_plan_shards(cases, n)
    optimum = _optimum([c for _, c in cases], n)
    assert _makespan(cases, plan, n) <= _lpt_bound(n) * optimum + 1e-9


def test_lpt_worst_case_is_reached_and_bounded() -> None:
    # Graham's tight instance for N=2: costs 3,3,2,2,2 -> LPT 7, optimum 6 (ratio 7/6).
    cases = [("a", 3.0), ("b", 3.0), ("c", 2.0), ("d", 2.0), ("e", 2.0)]
    plan = evalgate_plan_shards(cases, 2)
    assert _makespan(cases, plan, 2) == 7.0
    assert _optimum([3, 3, 2, 2, 2], 2) == 6.0
    assert _lpt_bound(2) == pytest.approx(7.0 / 6.0)  # the bound is tight


def test_plan_is_deterministic_and_order_independent() -> None:
    cases = _skewed(500, 3)
    shuffled = list(cases)
    random.Random(9).shuffle(shuffled)
    assert evalgate_plan_shards(cases, 4) == evalgate_plan_shards(shuffled, 4)
    assert evalgate_plan_document(evalgate_plan_shards(cases, 4), 4) == evalgate_plan_document(
        evalgate_plan_shards(shuffled, 4), 4
    )


def test_ties_break_by_case_id_then_shard_index() -> None:
    plan = evalgate_plan_shards([("b", 1.0), ("a", 1.0), ("c", 1.0), ("d", 1.0)], 3)
    assert plan == {"a": 0, "b": 1, "c": 2, "d": 0}
    # equal loads (here: zero-cost cases) go to the shard with fewer cases, not all to shard 0
    assert evalgate_plan_shards([("x", 0.0), ("y", 0.0), ("z", 0.0)], 2) == {
        "x": 0,
        "y": 1,
        "z": 0,
    }


def test_every_case_is_assigned_to_a_valid_shard() -> None:
    cases = _skewed(300, 1)
    plan = evalgate_plan_shards(cases, 5)
    assert set(plan) == {c for c, _ in cases}
    assert set(plan.values()) == set(range(5))


@pytest.mark.parametrize(
    ("cases", "n", "key"),
    [
        ([("a", 1.0)], 0, "shards"),
        ([("a", 1.0), ("a", 2.0)], 2, "a"),
        ([("a", -1.0)], 2, "a"),
        ([("a", float("nan"))], 2, "a"),
    ],
)
def test_plan_input_refusals(cases: list[tuple[str, float]], n: int, key: str) -> None:
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_plan_shards(cases, n)
    assert info.value.key == key


def test_document_version_is_sha_of_canonical_assignment() -> None:
    doc = evalgate_plan_document({"b": 1, "a": 0}, 2)
    assert doc["shards"] == 2
    assert list(doc["assignment"]) == ["a", "b"]
    assert doc["version"] == "shards-" + hashlib.sha256(b'{"a":0,"b":1}').hexdigest()[:12]
    assert evalgate_plan_document({"a": 1, "b": 0}, 2)["version"] != doc["version"]


def test_balance() -> None:
    assert evalgate_balance([1.0, 1.0, 1.0]) == 1.0
    assert evalgate_balance([3.0, 1.0]) == 1.5
    assert evalgate_balance([0.0, 0.0]) == 1.0
    assert evalgate_balance([]) == 1.0


def test_shard_of_uses_plan_or_hash() -> None:
    assert evalgate_shard_of("x", 4, {"x": 3}) == 3
    assert evalgate_shard_of("x", 4) == shard_for("x", 4)


# --- the plan file --------------------------------------------------------------------------


def _write(path: Path, document: object) -> str:
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)


def test_write_and_load_round_trip(tmp_path: Path) -> None:
    cases = _skewed(200, 2)
    out = str(tmp_path / "plan.json")
    document, plan_balance, hash_balance = evalgate_write_plan(cases, 4, out)
    assert plan_balance <= hash_balance
    assert json.loads(Path(out).read_text()) == document
    loaded = evalgate_load_plan(out, [c for c, _ in cases], 4)
    assert loaded == evalgate_plan_shards(cases, 4)
    assert not list(tmp_path.glob("*.tmp-*"))


def _good(tmp_path: Path) -> tuple[dict[str, object], list[str]]:
    doc = evalgate_plan_document({"a": 0, "b": 1, "c": 1}, 2)
    return doc, ["a", "b", "c"]


def _refusal(path: str, ids: list[str], n: int = 2) -> EvalgateConfigError:
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_load_plan(path, ids, n)
    assert info.value.source == path
    return info.value


def test_load_refuses_a_missing_case(tmp_path: Path) -> None:
    doc, ids = _good(tmp_path)
    err = _refusal(_write(tmp_path / "p.json", doc), [*ids, "d"])
    assert err.key == "assignment" and "misses 1" in err.reason and "'d'" in err.reason


def test_load_refuses_an_unknown_case(tmp_path: Path) -> None:
    doc, _ = _good(tmp_path)
    err = _refusal(_write(tmp_path / "p.json", doc), ["a", "b"])
    assert err.key == "assignment" and "not in the suite" in err.reason and "'c'" in err.reason


def test_load_refuses_a_wrong_shard_count(tmp_path: Path) -> None:
    doc, ids = _good(tmp_path)
    err = _refusal(_write(tmp_path / "p.json", doc), ids, n=3)
    assert err.key == "shards" and "plan is for 2, need 3" in err.reason


def test_load_refuses_a_version_that_does_not_match(tmp_path: Path) -> None:
    doc, ids = _good(tmp_path)
    doc["assignment"] = {"a": 1, "b": 1, "c": 1}  # edited by hand, version kept
    err = _refusal(_write(tmp_path / "p.json", doc), ids)
    assert err.key == "version" and "does not match" in err.reason


@pytest.mark.parametrize("shard", [2, -1, "0", True, 0.5])
def test_load_refuses_a_bad_shard_index(tmp_path: Path, shard: object) -> None:
    doc, ids = _good(tmp_path)
    doc["assignment"] = {"a": 0, "b": shard, "c": 1}
    err = _refusal(_write(tmp_path / "p.json", doc), ids)
    assert err.key == "assignment.b"


@pytest.mark.parametrize(
    ("mutate", "key"),
    [
        (lambda d: d.pop("version"), "version"),
        (lambda d: d.pop("assignment"), "assignment"),
        (lambda d: d.update(extra=1), "extra"),
        (lambda d: d.update(assignment=[1]), "assignment"),
    ],
)
def test_load_refuses_malformed_documents(tmp_path: Path, mutate: object, key: str) -> None:
    doc, ids = _good(tmp_path)
    mutate(doc)  # type: ignore[operator]
    assert _refusal(_write(tmp_path / "p.json", doc), ids).key == key


def test_load_refuses_unreadable_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    assert "cannot read plan" in _refusal(str(bad), ["a"]).reason
    assert "cannot read plan" in _refusal(str(tmp_path / "absent.json"), ["a"]).reason
    assert "JSON object" in _refusal(_write(tmp_path / "list.json", [1]), ["a"]).reason


def test_plan_version_helper_matches_document() -> None:
    plan = evalgate_plan_shards([("a", 2.0), ("b", 1.0)], 2)
    assert evalgate_plan_document(plan, 2)["version"] == evalgate_plan_version(plan)
