"""The runner's pytest side without a child: what a work sends, how it is graded and sealed,
and the committer thread that writes segments off the item loop (a real folder store).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import suitekit

from pytest_evalgate.client import EvalgateEndpoint
from pytest_evalgate.errors import EvalgateError
from pytest_evalgate.manifest.load import EvalgateManifest, evalgate_load_manifest
from pytest_evalgate.runner.committer import EvalgateCommitter
from pytest_evalgate.runner.wire import EvalgateWireRequest, evalgate_encode
from pytest_evalgate.runner.work import (
    EvalgateSuiteRun,
    EvalgateWork,
    evalgate_estimate_tokens,
    evalgate_identity_header,
    evalgate_request_body,
)
from pytest_evalgate.scoring import evalgate_make_scorer
from pytest_evalgate.store import (
    EVALGATE_RECORD_FIELDS,
    EvalgateIdentity,
    EvalgateLocalStore,
    EvalgateOutcome,
    EvalgateSegmentWriter,
    evalgate_seal,
)

ROWS = [
    {"id": "a", "input": "x" * 40, "target": "yes", "category": "k", "cluster": "ca"},
    {"id": "b", "input": "short", "target": "no", "category": "k"},
]


def _suite(tmp_path: Path, **extra: Any) -> EvalgateManifest:
    path = suitekit.write_suite(
        tmp_path / "suite", {"cand": "http://127.0.0.1:1/v1"}, cases=ROWS, extra=extra
    )
    return evalgate_load_manifest(str(path))


def _work(manifest: EvalgateManifest, case_id: str, repetition: int = 0) -> EvalgateWork:
    endpoint = EvalgateEndpoint("http://127.0.0.1:1/v1", "m", "chat", None, 10.0, 2, False)
    scorer = evalgate_make_scorer("exact", {}, {}, "evalgate.yaml")
    run = EvalgateSuiteRun(manifest, scorer, 1.0, {"cand": endpoint}, {"cand": "p"}, {"cand": "k"})
    case = manifest.evalgate_case(case_id)
    key = EvalgateIdentity(manifest.dataset_revision, case_id, "cand", repetition)
    return EvalgateWork(key, run, case, "cand", repetition, 5)


def _outcome(output: str | None, error: Any = None) -> EvalgateOutcome:
    return {
        "output": output,
        "finish_reason": "stop",
        "attempts": 1,
        "error": error,
        "timing": {
            "queued_s": 0.0,
            "ttft_s": None,
            "tpot_s": None,
            "e2e_s": 0.1,
            "itl_p95_s": None,
        },
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
        "started_at": "t0",
        "finished_at": "t1",
    }


def test_the_body_holds_the_generation_settings_and_the_chat_prompt(tmp_path: Path) -> None:
    manifest = _suite(tmp_path)
    body = evalgate_request_body(_work(manifest, "b"))
    assert body == {
        "temperature": 0.0,
        "max_tokens": 16,
        "seed": 7,
        "messages": [{"role": "user", "content": "short"}],
    }


def test_a_repetition_offsets_the_seed_and_nothing_else(tmp_path: Path) -> None:
    manifest = _suite(tmp_path)
    first = evalgate_request_body(_work(manifest, "b", 0))
    third = evalgate_request_body(_work(manifest, "b", 2))
    assert third["seed"] == first["seed"] + 2
    assert {k: v for k, v in third.items() if k != "seed"} == {
        k: v for k, v in first.items() if k != "seed"
    }
    assert manifest.generation.seed == 7  # the manifest's settings are not changed


def test_a_completions_suite_sends_a_prompt_string(tmp_path: Path) -> None:
    manifest = _suite(tmp_path, api="completions")
    body = evalgate_request_body(_work(manifest, "b"))
    assert body["prompt"] == "short" and "messages" not in body


def test_a_body_without_a_seed_has_none(tmp_path: Path) -> None:
    manifest = _suite(tmp_path, generation={"temperature": 0.7, "max_tokens": 8})
    assert "seed" not in evalgate_request_body(_work(manifest, "a", 3))


def test_the_identity_header_names_revision_candidate_case_and_repetition(
    tmp_path: Path,
) -> None:
    manifest = _suite(tmp_path)
    assert evalgate_identity_header(_work(manifest, "a", 1)) == "test-v1/cand/a/r1"


def test_the_token_estimate_is_a_quarter_of_the_prompt_plus_max_tokens(tmp_path: Path) -> None:
    manifest = _suite(tmp_path)
    assert evalgate_estimate_tokens(_work(manifest, "a")) == 40 // 4 + 1 + 16
    assert evalgate_estimate_tokens(_work(manifest, "b")) == 5 // 4 + 1 + 16


def test_a_work_crosses_the_wire_as_builtins(tmp_path: Path) -> None:
    work = _work(_suite(tmp_path), "a")
    body = evalgate_request_body(work)
    request = EvalgateWireRequest(0, 0, 0, body, evalgate_identity_header(work), 27, False)
    assert b'"identity":"test-v1/cand/a/r0"' in evalgate_encode(request)


def test_a_work_grades_by_the_suite_scorer_and_threshold(tmp_path: Path) -> None:
    work = _work(_suite(tmp_path), "a")
    assert work.evalgate_grade("yes") == (1.0, True)
    assert work.evalgate_grade("no") == (0.0, False)


def test_a_work_seals_its_record_with_the_suite_and_case_facts(tmp_path: Path) -> None:
    manifest = _suite(tmp_path)
    work = _work(manifest, "a", 1)
    record = work.evalgate_seal(_outcome("yes"), "writer-1")
    assert set(record) == EVALGATE_RECORD_FIELDS and evalgate_seal(record) == record
    assert record["identity"] == {
        "dataset_revision": "test-v1", "case_id": "a", "candidate": "cand", "repetition": 1,
    }  # fmt: skip
    assert (record["definition_digest"], record["candidate_key"]) == (
        manifest.definition_digest,
        "k",
    )
    assert (record["category"], record["cluster"], record["shard"]) == ("k", "ca", 5)
    assert (record["score"], record["passed"], record["writer"]) == (1.0, True, "writer-1")


def test_a_work_seals_an_error_without_a_score(tmp_path: Path) -> None:
    work = _work(_suite(tmp_path), "a")
    error = {"category": "server_error", "status": 503, "message": "busy"}
    record = work.evalgate_seal(_outcome("yes", error), "w")
    assert record["error"] == error and record["score"] is None and record["passed"] is None


# -- the committer ------------------------------------------------------------------------------


class _BrokenStore(EvalgateLocalStore):
    """A real folder store whose disk is full after ``good`` segments."""

    def __init__(self, root: str, good: int) -> None:
        super().__init__(root)
        self.good = good

    def evalgate_write_atomic(self, relpath: str, data: bytes, *, durable: bool = True) -> None:
        if self.good <= 0:
            raise OSError(28, "No space left on device")
        self.good -= 1
        super().evalgate_write_atomic(relpath, data, durable=durable)


def _sealed(case_id: str) -> dict[str, Any]:
    return {"identity": {"case_id": case_id}, "checksum": "0"}


def test_the_committer_writes_taken_segments_in_order_and_the_tail_at_stop(
    tmp_path: Path,
) -> None:
    backend = EvalgateLocalStore(str(tmp_path / "store"))
    writer = EvalgateSegmentWriter(backend, "shard-0-of-1", writer="w")
    committer = EvalgateCommitter(writer)
    committer.start()
    writer.evalgate_add("p", _sealed("a"))
    committer.evalgate_put(writer.evalgate_take())
    writer.evalgate_add("p", _sealed("b"))  # never taken: the stop writes it
    committer.evalgate_stop()
    assert not committer.is_alive()
    assert backend.evalgate_list("p") == [
        "p/shard-0-of-1/seg-w-000001.jsonl",
        "p/shard-0-of-1/seg-w-000002.jsonl",
    ]
    assert writer.committed == 2


def test_the_committer_runs_in_its_own_thread(tmp_path: Path) -> None:
    seen: list[str] = []

    class Recording(EvalgateLocalStore):
        def evalgate_write_atomic(self, relpath: str, data: bytes, *, durable: bool = True) -> None:
            seen.append(threading.current_thread().name)
            super().evalgate_write_atomic(relpath, data, durable=durable)

    writer = EvalgateSegmentWriter(Recording(str(tmp_path / "s")), "d", writer="w")
    committer = EvalgateCommitter(writer)
    committer.start()
    writer.evalgate_add("p", _sealed("a"))
    committer.evalgate_put(writer.evalgate_take())
    committer.evalgate_stop()
    assert seen == ["evalgate-committer"]


def test_a_failed_commit_reaches_the_item_loop_at_the_next_hand_over(tmp_path: Path) -> None:
    writer = EvalgateSegmentWriter(_BrokenStore(str(tmp_path / "s"), 0), "d", writer="w")
    committer = EvalgateCommitter(writer)
    committer.start()
    writer.evalgate_add("p", _sealed("a"))
    committer.evalgate_put(writer.evalgate_take())
    committer.join(10)  # the thread ends at its first failure
    assert not committer.is_alive()
    with pytest.raises(EvalgateError, match=r"commit failed: .*No space left"):
        committer.evalgate_put([])
    with pytest.raises(EvalgateError, match="commit failed"):
        committer.evalgate_stop()
    assert writer.committed == 0


def test_a_commit_failure_after_good_segments_keeps_them(tmp_path: Path) -> None:
    backend = _BrokenStore(str(tmp_path / "s"), 1)
    writer = EvalgateSegmentWriter(backend, "d", writer="w")
    committer = EvalgateCommitter(writer)
    committer.start()
    writer.evalgate_add("p", _sealed("a"))
    committer.evalgate_put(writer.evalgate_take())
    writer.evalgate_add("p", _sealed("b"))
    with pytest.raises(EvalgateError, match="commit failed"):
        committer.evalgate_stop()
    assert backend.evalgate_list("p") == ["p/d/seg-w-000001.jsonl"] and writer.committed == 1
