"""Issue 19 (part A): property tests over the manifest, policy and record readers.

For any generated document (a valid one with one value anywhere replaced by any JSON-like value,
a key added, or arbitrary text or bytes) the reader either returns a valid object or refuses it
with this package's error type, never another exception, within a bounded time per document
(hypothesis' ``deadline``). Examples are bounded so the module runs in seconds; the hypothesis
database is off, so nothing is written into the repository.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from suitekit import DEFAULT_POLICY, write_suite
from test_store import EXPECT, PREFIX, record

from pytest_evalgate.errors import EvalgateConfigError, EvalgatePolicyError
from pytest_evalgate.formats.canonical import evalgate_canonical_json
from pytest_evalgate.manifest.load import EvalgateManifest, evalgate_load_manifest
from pytest_evalgate.policy.load import evalgate_load_policy
from pytest_evalgate.policy.values import EvalgatePolicy
from pytest_evalgate.store import EvalgateLocalStore, evalgate_read_generation, evalgate_seal
from pytest_evalgate.store.seal import evalgate_seal_line

BOUNDED = settings(
    max_examples=60,
    deadline=timedelta(seconds=3),  # a bound on a hang, not a speed claim
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

NASTY = (
    float("nan"),
    float("inf"),
    -float("inf"),
    "1",
    "0.5",
    True,
    False,
    -1,
    0,
    2**64,
    "../x",
    "",
)
SCALARS = (
    st.sampled_from(NASTY)
    | st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a value inside ``node`` (dict keys and list indexes)."""
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for key, child in items:
        yield (*prefix, key)
        yield from _paths(child, (*prefix, key))


def _replaced(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    copy = json.loads(json.dumps(document))
    node = copy
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return copy


@st.composite
def _mutations(draw: st.DrawFn, document: dict[str, Any]) -> Any:
    """``document`` with one value replaced, or one key added, anywhere."""
    paths = list(_paths(document))
    if draw(st.booleans()):
        return _replaced(document, draw(st.sampled_from(paths)), draw(VALUES))
    containers = [p for p in paths if isinstance(_at(document, p), dict)]
    where = draw(st.sampled_from([(), *containers]))
    copy = json.loads(json.dumps(document))
    target = _at(copy, where)
    target[draw(st.text(max_size=8))] = draw(VALUES)
    return copy


def _at(node: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        node = node[key]
    return node


# --------------------------------------------------------------------------- manifest


@pytest.fixture(scope="module")
def manifest_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("prop-manifest")
    path = write_suite(folder / "s", {"candidate": "simulated://", "baseline": "simulated://"})
    return path, yaml.safe_load(path.read_text())


def _load_manifest(path: Path) -> EvalgateManifest | None:
    try:
        return evalgate_load_manifest(str(path))
    except EvalgateConfigError as exc:
        assert exc.source and exc.key and exc.reason
        return None


@BOUNDED
@given(data=st.data())
def test_any_changed_manifest_loads_or_is_refused_cleanly(
    manifest_file: tuple[Path, dict[str, Any]], data: st.DataObject
) -> None:
    path, document = manifest_file
    changed = data.draw(_mutations(document))
    path.with_name("changed.yaml").write_text(yaml.safe_dump(changed, allow_unicode=True))
    loaded = _load_manifest(path.with_name("changed.yaml"))
    if loaded is not None:
        assert type(loaded.repetitions) is int and loaded.repetitions >= 1 and loaded.cases
        blocks = (loaded.generation, loaded.budget, loaded.perf, loaded.tiers, loaded.judge)
        assert all(math.isfinite(v) for block in blocks for v in _floats(block))


def _floats(node: Any) -> Iterator[float]:
    if isinstance(node, float):
        yield node
    elif isinstance(node, BaseModel):  # the manifest's blocks are its validated models
        yield from _floats(node.model_dump())
    elif isinstance(node, dict):
        for value in node.values():
            yield from _floats(value)


@BOUNDED
@given(blob=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_bytes_as_a_manifest_are_refused_cleanly(
    manifest_file: tuple[Path, dict[str, Any]], blob: bytes
) -> None:
    path = manifest_file[0].with_name("bytes.yaml")
    path.write_bytes(blob)
    assert _load_manifest(path) is None  # no document of 200 bytes is a whole manifest


# --------------------------------------------------------------------------- policy


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("prop-policy") / "gate.yaml"


def _load_policy(path: Path) -> EvalgatePolicy | None:
    try:
        return evalgate_load_policy(path)
    except EvalgatePolicyError as exc:
        assert exc.source == str(path) and exc.key and exc.reason
        return None


POLICY: dict[str, Any] = {
    **DEFAULT_POLICY,
    "rules": [
        {"slice": "all", "rule": "non_inferior", "margin": 0.05},
        {"slice": "billing", "rule": "floor", "max_rate": 0.01},
        {"metric": "ttft_p95", "rule": "perf_ratio", "max_ratio": 1.05},
    ],
    "online": [{"metric": "ttft_p95_ratio", "max": 1.2}],
}


@BOUNDED
@given(data=st.data())
def test_any_changed_policy_loads_or_is_refused_cleanly(
    policy_file: Path, data: st.DataObject
) -> None:
    policy_file.write_text(yaml.safe_dump(data.draw(_mutations(POLICY)), allow_unicode=True))
    policy = _load_policy(policy_file)
    if policy is not None:
        thresholds = [rule.limit for rule in policy.rules if rule.limit is not None]
        assert all(math.isfinite(t) for t in thresholds)
        assert 0.5 < policy.confidence < 1.0


@BOUNDED
@given(blob=st.binary(max_size=200))
def test_any_bytes_as_a_policy_are_refused_cleanly(policy_file: Path, blob: bytes) -> None:
    policy_file.write_bytes(blob)
    assert _load_policy(policy_file) is None


# --------------------------------------------------------------------------- records


@pytest.fixture(scope="module")
def store_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("prop-store")


def _line(document: Any, reseal: bool) -> bytes:
    body = document
    if reseal and isinstance(document, dict):
        with contextlib.suppress(ValueError):  # NaN cannot be sealed: it is stored unsealed
            body = evalgate_seal(document)
    try:
        return evalgate_canonical_json(body)
    except (ValueError, TypeError):  # NaN or infinity: what a careless writer would store
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _read_one(root: Path, line: bytes) -> None:
    """Store ``line`` as the only record of a fresh folder; exactly one outcome must come back."""
    backend = EvalgateLocalStore(str(root))
    folder = root / PREFIX / "shard-0-of-1"
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    (folder / "seg-prop-000001.jsonl").write_bytes(line + b"\n")
    view = evalgate_read_generation(backend, PREFIX, EXPECT)
    taken = len(view.results) + len(view.errors) + len(view.problems)
    assert taken == (1 if line.strip() else 0)
    for kept in [*view.results.values(), *view.errors.values()]:
        assert kept["score"] is None or 0.0 <= kept["score"] <= 1.0


@BOUNDED
@given(data=st.data(), reseal=st.booleans())
def test_any_changed_record_is_read_or_is_a_problem(
    store_root: Path, data: st.DataObject, reseal: bool
) -> None:
    changed = data.draw(_mutations(dict(record("case-1"))))
    _read_one(store_root, _line(changed, reseal))


@BOUNDED
@given(blob=st.binary(max_size=300).filter(lambda b: b"\n" not in b))
def test_any_bytes_as_a_record_are_a_problem(store_root: Path, blob: bytes) -> None:
    _read_one(store_root, blob)


@BOUNDED
@given(output=st.text(max_size=40), category=st.text(max_size=20), cluster=st.text(max_size=20))
def test_a_sealed_line_is_always_the_canonical_json_of_its_record(
    output: str, category: str, cluster: str
) -> None:
    # the writer's line is spliced, not re-encoded (store.seal.evalgate_seal_line)
    rec = dict(record("a"), output=output, category=category, cluster=cluster)
    sealed, line = evalgate_seal_line(rec)
    assert line == evalgate_canonical_json(sealed) + b"\n"
    assert sealed["checksum"] == evalgate_seal(rec)["checksum"]
