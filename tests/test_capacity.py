"""``evalgate plan``'s arithmetic and command line (issue 16 part B).

The seed's example is reproduced exactly: 40,000 items x 600 output tokens = 24M tokens; at
3,000 output tokens/s one replica needs 8,000 s (about 2.2 h) and eight need 1,000 s (under 20
minutes). The store-measured path is ``test_capacity_store.py``'s.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from suitekit import make_cases, write_suite

from pytest_evalgate.capacity.plan import (
    EvalgateCapacityInput,
    evalgate_busy_seconds,
    evalgate_capacity_plan,
    evalgate_measure,
    evalgate_replicas_for,
)
from pytest_evalgate.capacity.store import evalgate_pinned_gpus
from pytest_evalgate.cli import main
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.manifest.load import EvalgateCandidate

Capsys = pytest.CaptureFixture[str]
SEED = ["--items", "40000", "--assume-output-tokens", "600", "--tokens-per-s", "3000"]


def _given(
    requests: int = 40_000, tokens: float = 600.0, rate: float = 3000.0, gpus: int = 1
) -> EvalgateCapacityInput:
    return EvalgateCapacityInput("c", requests, tokens, "assumed", rate, "assumed", gpus)


# --------------------------------------------------------------------------- arithmetic


def test_the_seed_example_exactly() -> None:
    one = evalgate_capacity_plan(_given(), 1)
    assert one.output_tokens == 24_000_000
    assert one.replica_s == 8000.0 and one.wall_s == 8000.0
    assert one.gpu_hours == pytest.approx(8000 / 3600) and round(one.wall_s / 3600, 1) == 2.2
    eight = evalgate_capacity_plan(_given(), 8)
    assert eight.wall_s == 1000.0 and eight.wall_s < 20 * 60
    assert eight.gpu_hours == one.gpu_hours  # more replicas: sooner, not cheaper


def test_gpus_per_replica_multiply_gpu_hours_not_wall_time() -> None:
    tp4 = evalgate_capacity_plan(_given(gpus=4), 2)
    assert tp4.gpu_hours == pytest.approx(4 * 8000 / 3600)
    assert tp4.wall_s == 4000.0


def test_replicas_for_a_target_wall_time() -> None:
    assert evalgate_replicas_for(8000.0, 1000.0) == 8  # exact fit, no extra replica
    assert evalgate_replicas_for(8000.0, 1600.0) == 5
    assert evalgate_replicas_for(8000.0, 7999.0) == 2
    assert evalgate_replicas_for(8000.0, 1e9) == 1
    assert evalgate_replicas_for(0.0, 10.0) == 1


@pytest.mark.parametrize(
    ("given", "replicas", "key"),
    [
        (_given(rate=0.0), 1, "output tokens/s per replica"),
        (_given(rate=math.inf), 1, "output tokens/s per replica"),
        (_given(gpus=0), 1, "GPUs per replica"),
        (_given(tokens=-1.0), 1, "output tokens per request"),
        (_given(requests=-1), 1, "requests"),
        (_given(), 0, "--replicas"),
    ],
)
def test_bad_figures_are_refused_naming_them(
    given: EvalgateCapacityInput, replicas: int, key: str
) -> None:
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_capacity_plan(given, replicas)
    assert key in caught.value.key


def test_busy_time_is_the_union_of_the_request_intervals() -> None:
    assert evalgate_busy_seconds([]) == 0.0
    assert evalgate_busy_seconds([(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)]) == 2.0 + 1.0
    assert evalgate_busy_seconds([(0.0, 10.0), (1.0, 2.0), (9.0, 10.0)]) == 10.0
    assert evalgate_busy_seconds([(5.0, 6.0), (0.0, 1.0)]) == 2.0  # any order
    assert evalgate_busy_seconds([(1.0, 1.0), (1.0, 3.0)]) == 2.0


def test_measuring_counts_answers_with_tokens_over_busy_time_per_replica() -> None:
    rows = [
        (10, 1.0, "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:01+00:00"),
        (30, 1.0, "2026-01-01T00:00:00.500000+00:00", "2026-01-01T00:00:01.500000+00:00"),
        (None, 9.0, "2026-01-01T00:01:00+00:00", "2026-01-01T00:01:09+00:00"),  # no count
        (20, 2.0, "2026-01-01T01:00:00+00:00", "2026-01-01T01:00:02+00:00"),  # after a pause
    ]
    one = evalgate_measure(rows, 1)
    assert (one.records, one.output_tokens) == (3, 60)
    assert one.busy_s == pytest.approx(1.5 + 2.0)  # the hour's pause does not count
    assert one.tokens_per_s == pytest.approx(60 / 3.5)
    assert one.tokens_per_request == 20.0 and one.e2e_mean_s == pytest.approx(4.0 / 3)
    assert evalgate_measure(rows, 2).tokens_per_s == pytest.approx(60 / 3.5 / 2)
    assert evalgate_measure([], 1).tokens_per_s is None


# --------------------------------------------------------------------------- command line


def test_plan_reproduces_the_seed_example_from_the_command_line(capsys: Capsys) -> None:
    assert main(["plan", *SEED, "--replicas", "8"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "run: 40,000 requests x 600 output tokens (assumed) = 24,000,000 output tokens",
        "  rate: 3,000 output tokens/s per replica (assumed), 1 GPU(s) per replica",
        "  one replica: 8,000 s (2.22 h); 2.222 GPU-hours",
        "  wall time on 8 replica(s): 1,000 s (16.7 min)",
        "total: 24,000,000 output tokens, 2.222 GPU-hours; wall time 1,000 s (16.7 min)",
    ]


def test_plan_json_holds_the_exact_figures(capsys: Capsys) -> None:
    assert main(["plan", *SEED, "--replicas", "8", "--gpus-per-replica", "2", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    (row,) = document["candidates"]
    assert (row["output_tokens"], row["replica_s"], row["wall_s"]) == (24e6, 8000.0, 1000.0)
    assert row["gpu_hours"] == pytest.approx(2 * 8000 / 3600)
    assert document["total"] == {
        "output_tokens": 24e6, "gpu_hours": row["gpu_hours"], "wall_s": 1000.0,
    }  # fmt: skip


def test_target_hours_gives_the_replicas_needed(capsys: Capsys) -> None:
    assert main(["plan", *SEED, "--target-hours", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "  replicas for 0.5 h: 5\n" in out
    assert "  wall time on 5 replica(s): 1,600 s (26.7 min)\n" in out
    assert main(["plan", *SEED, "--target-hours", "0"]) == 4
    assert "--target-hours: must be a finite number > 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "value", "key"),
    [("--replicas", "0", "--replicas"), ("--gpus-per-replica", "0", "GPUs per replica")],
)
def test_zero_is_refused_never_read_as_the_default(
    option: str, value: str, key: str, capsys: Capsys
) -> None:
    assert main(["plan", *SEED, option, value]) == 4
    assert f"{key}: must be a finite number > 0, got 0\n" in capsys.readouterr().err


def test_replicas_and_target_hours_exclude_each_other(capsys: Capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["plan", *SEED, "--replicas", "2", "--target-hours", "1"])
    assert caught.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("missing", ["--items", "--assume-output-tokens", "--tokens-per-s"])
def test_without_a_suite_every_figure_must_be_stated(missing: str, capsys: Capsys) -> None:
    index = SEED.index(missing)
    argv = SEED[:index] + SEED[index + 2 :]
    assert main(["plan", *argv]) == 4
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"evalgate plan: command line: {missing}: required without a SUITE " + (
        "(nothing to measure from)\n"
    )


def test_a_suite_gives_cases_x_repetitions_per_candidate_and_its_pins_gpus(
    tmp_path: Path, capsys: Capsys
) -> None:
    manifest = write_suite(
        tmp_path / "s",
        {"candidate": "simulated://", "baseline": "simulated://"},
        cases=make_cases(["alpha", "beta"], 5),
        repetitions=3,
    )
    text = manifest.read_text().replace("sha256:" + "ab" * 32, "x", 1)
    text = text.replace("weights_digest: x", "weights_digest: x\n      tensor_parallel: 4", 1)
    manifest.write_text(text)
    store = tmp_path / "no-store"
    argv = ["plan", str(manifest.parent), "--store", str(store), "--assume-output-tokens", "100"]
    assert main([*argv, "--tokens-per-s", "10", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)["candidates"]}
    assert rows["candidate"]["requests"] == rows["baseline"]["requests"] == 10 * 3
    assert rows["candidate"]["output_tokens"] == 3000.0 and rows["candidate"]["replica_s"] == 300
    assert (rows["candidate"]["gpus_per_replica"], rows["baseline"]["gpus_per_replica"]) == (4, 1)
    assert rows["candidate"]["gpu_hours"] == pytest.approx(4 * 300 / 3600)
    assert not store.exists()  # nothing to measure: the store was not even opened


def test_a_suite_with_nothing_stored_names_the_candidate_and_the_option(
    tmp_path: Path, capsys: Capsys
) -> None:
    manifest = write_suite(tmp_path / "s", {"candidate": "simulated://"})
    argv = ["plan", str(manifest.parent), "--store", str(tmp_path / "empty")]
    assert main([*argv, "--tokens-per-s", "10"]) == 4
    err = capsys.readouterr().err
    assert err.startswith(f"evalgate plan: {manifest}: candidate candidate: no stored answer")
    assert "--assume-output-tokens" in err
    assert main([*argv, "--candidate", "nobody", "--tokens-per-s", "10"]) == 4
    assert "--candidate: no candidate 'nobody' in the suite (known: candidate)" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("pins", "gpus"),
    [
        ({}, 1),
        ({"tensor_parallel": 4}, 4),
        ({"tensor_parallel": 4, "pipeline_parallel": 2}, 8),
        ({"tensor_parallel": "4"}, 1),  # not an integer: not guessed at
        ({"tensor_parallel": True}, 1),
        ({"tensor_parallel": 0, "pipeline_parallel": 3}, 3),
    ],
)
def test_gpus_per_replica_come_from_the_pins(pins: dict[str, object], gpus: int) -> None:
    candidate = EvalgateCandidate("c", "m", ("http://x/v1",), None, pins, "c-key")
    assert evalgate_pinned_gpus(candidate) == gpus
