"""The process topology value, the usage-error boundary and the base-URL override."""

from __future__ import annotations

import pytest

from pytest_evalgate.errors import EvalgateConfigError, EvalgateStoreError
from pytest_evalgate.manifest.load import evalgate_base_url_env, evalgate_base_url_override
from pytest_evalgate.session.usage import evalgate_usage_errors
from pytest_evalgate.shard.plan import EvalgateShardSpec, EvalgateTopology, evalgate_worker_position


def test_a_lone_process_is_part_zero_of_one_in_shard_zero_of_one() -> None:
    alone = EvalgateTopology()
    assert (alone.shard_index, alone.shard_count, alone.parts, alone.part_index) == (0, 1, 1, 0)
    assert alone.shard_dir == "shard-0-of-1"
    assert not alone.sharded


@pytest.mark.parametrize(
    ("shard", "worker", "workers", "part", "parts"),
    [((2, 4), 0, 1, 2, 4), ((2, 4), 1, 3, 7, 12), ((0, 1), 1, 2, 1, 2), ((3, 4), 2, 3, 11, 12)],
)
def test_parts_number_every_process_of_the_run_once(
    shard: tuple[int, int], worker: int, workers: int, part: int, parts: int
) -> None:
    topology = EvalgateTopology(EvalgateShardSpec(*shard), worker, workers, "run")
    assert (topology.part_index, topology.parts) == (part, parts)
    assert topology.shard_dir == f"shard-{shard[0]}-of-{shard[1]}"
    assert topology.sharded == (shard[1] > 1)


def test_part_indexes_of_a_whole_run_are_a_permutation() -> None:
    parts = [EvalgateTopology(EvalgateShardSpec(s, 3), w, 2) for s in range(3) for w in range(2)]
    seen = sorted(part.part_index for part in parts)
    assert seen == list(range(6))


def test_processes_say_how_the_parts_come_about_in_the_singular_and_plural() -> None:
    assert EvalgateTopology().processes == "1 shard x 1 xdist worker"
    assert EvalgateTopology(EvalgateShardSpec(1, 4), 0, 2).processes == "4 shards x 2 xdist workers"
    assert EvalgateTopology(None, 0, 3).processes == "1 shard x 3 xdist workers"


def test_a_shard_of_one_is_not_sharded_but_keeps_its_folder_name() -> None:
    topology = EvalgateTopology(EvalgateShardSpec(0, 1))
    assert not topology.sharded and topology.shard is not None
    assert topology.shard_dir == "shard-0-of-1"


@pytest.mark.parametrize(
    ("workerinput", "expected"),
    [
        (None, (0, 1)),
        ({}, (0, 1)),
        ({"workerid": "gw0", "workercount": 2}, (0, 2)),
        ({"workerid": "gw1", "workercount": 2}, (1, 2)),
        ({"workerid": "gw2", "workercount": 2}, (0, 2)),  # replaces a crashed worker: wraps
        ({"workerid": "gw5", "workercount": 3}, (2, 3)),
    ],
)
def test_worker_position_from_xdist_workerinput(
    workerinput: dict[str, object] | None, expected: tuple[int, int]
) -> None:
    assert evalgate_worker_position(workerinput) == expected


def test_a_config_error_becomes_a_usage_error_with_its_message() -> None:
    expected = r"^gate\.yaml: rules\[0\]: unknown rule$"
    with pytest.raises(pytest.UsageError, match=expected), evalgate_usage_errors():
        raise EvalgateConfigError("gate.yaml", "rules[0]", "unknown rule")


@pytest.mark.parametrize("error", [KeyError("x"), ValueError("bug"), EvalgateStoreError("disk")])
def test_anything_else_passes_through_unchanged(error: Exception) -> None:
    # A bug or a store failure must not exit 4 as if the user's file were wrong.
    with pytest.raises(type(error)) as info, evalgate_usage_errors():
        raise error
    assert info.value is error


def test_the_base_url_env_name_is_upper_case_with_underscores() -> None:
    assert evalgate_base_url_env("candidate") == "PYTEST_EVALGATE_BASE_URL_CANDIDATE"
    assert evalgate_base_url_env("r17-fp8.q") == "PYTEST_EVALGATE_BASE_URL_R17_FP8_Q"


def test_the_override_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_EVALGATE_BASE_URL_BASELINE", raising=False)
    assert evalgate_base_url_override("baseline") is None
    monkeypatch.setenv("PYTEST_EVALGATE_BASE_URL_BASELINE", "")
    assert evalgate_base_url_override("baseline") is None  # empty: no override
    monkeypatch.setenv("PYTEST_EVALGATE_BASE_URL_BASELINE", "http://127.0.0.1:9/v1")
    assert evalgate_base_url_override("baseline") == "http://127.0.0.1:9/v1"
