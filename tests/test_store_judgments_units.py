"""store/judgments.py: judgment records sealed, written as segments and read back verified.

A result supersedes an error of the same key and answers; a judgment of other answers replaces
the one stored (it is stale); two results on the same answers with the same verdict count as a
duplicate, with different verdicts as a conflict naming the key. Every refused line names its
segment, line and reason. An errored judgment keeps an excerpt of the judge's text.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_evalgate.formats.canonical import evalgate_canonical_json
from pytest_evalgate.store import EvalgateLocalStore
from pytest_evalgate.store.judgments import (
    EVALGATE_JUDGE_EXCERPT_CHARS,
    EvalgateJudgmentContext,
    EvalgateJudgmentKey,
    EvalgateJudgmentView,
    evalgate_errored_excerpt,
    evalgate_judgment_key_of,
    evalgate_judgment_prefix,
    evalgate_judgment_record,
    evalgate_read_judgments,
)

JUDGE = "j" * 64
DEFINITION = "d" * 64
CONTEXT = EvalgateJudgmentContext(JUDGE, DEFINITION, "writer-1")
PREFIX = evalgate_judgment_prefix("suite", DEFINITION, JUDGE)
ERROR = {"category": "judge_parse", "status": None, "message": "no verdict in the answer"}


def _key(case: str = "c1", order: str | None = None, repetition: int = 0) -> EvalgateJudgmentKey:
    return EvalgateJudgmentKey("rev-1", case, "cand", repetition, order)


def _facts(output: str | None = "reasoning") -> dict[str, Any]:
    return {
        "baseline": None,
        "category": "alpha",
        "cluster": "alpha-p0",
        "output": output,
        "attempts": 1,
        "e2e_s": 0.25,
        "started_at": "2026-01-01T00:00:00+00:00",
        "finished_at": "2026-01-01T00:00:01+00:00",
    }


def _judgment(
    key: EvalgateJudgmentKey | None = None,
    answers: tuple[str, ...] = ("a" * 64,),
    verdict: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    context: EvalgateJudgmentContext = CONTEXT,
) -> dict[str, Any]:
    if verdict is None and error is None:
        verdict = {"score": 4.0, "value": 0.75, "passed": True}
    return evalgate_judgment_record(
        context, key or _key(), list(answers), _facts(), {"verdict": verdict, "error": error}
    )


def _write(tmp_path: Path, name: str, lines: list[Any]) -> EvalgateLocalStore:
    store = EvalgateLocalStore(str(tmp_path))
    data = b"".join(
        (line if isinstance(line, bytes) else evalgate_canonical_json(line)) + b"\n"
        for line in lines
    )
    store.evalgate_write_atomic(f"{PREFIX}/shard-0/{name}", data)
    return store


def test_the_prefix_and_label_name_suite_definition_judge_and_identity() -> None:
    assert (
        evalgate_judgment_prefix("suite", DEFINITION, JUDGE) == f"suite/{'d' * 16}/judge-{'j' * 16}"
    )
    assert _key().evalgate_label() == "rev-1/cand/c1[r0]"
    assert _key(order="baseline_first", repetition=2).evalgate_label() == (
        "rev-1/cand/c1[r2]/baseline_first"
    )


def test_a_sealed_judgment_round_trips_through_a_segment(tmp_path: Path) -> None:
    record = _judgment()
    assert record["judgment"] == {
        "dataset_revision": "rev-1",
        "case_id": "c1",
        "candidate": "cand",
        "repetition": 0,
        "order": None,
    }
    assert evalgate_judgment_key_of(record) == _key()
    store = _write(tmp_path, "seg-1.jsonl", [record])
    view = evalgate_read_judgments(store, PREFIX, CONTEXT)
    assert view.problems == []
    assert view.results == {_key(): record}
    assert view.errors == {}
    assert view.evalgate_current(_key(), ["a" * 64]) == record
    assert view.evalgate_current(_key(), ["b" * 64]) is None  # other answers: stale
    assert view.evalgate_current(_key("c2"), ["a" * 64]) is None


def test_a_result_supersedes_an_error_in_either_order(tmp_path: Path) -> None:
    errored, result = _judgment(error=ERROR), _judgment()
    for order in ([errored, result], [result, errored]):
        view = EvalgateJudgmentView()
        for record in order:
            view.evalgate_take(record, "seg:1")
        assert view.results == {_key(): result}
        assert view.errors == {}
        assert view.evalgate_current(_key(), ["a" * 64]) == result


def test_an_error_on_other_answers_is_kept_beside_a_stale_result() -> None:
    view = EvalgateJudgmentView()
    view.evalgate_take(_judgment(), "seg:1")
    newer = _judgment(answers=("b" * 64,), error=ERROR)
    view.evalgate_take(newer, "seg:2")
    assert view.evalgate_current(_key(), ["b" * 64]) == newer
    assert view.evalgate_current(_key(), ["a" * 64]) == view.results[_key()]


def test_a_result_on_other_answers_replaces_the_stored_one() -> None:
    view = EvalgateJudgmentView()
    view.evalgate_take(_judgment(), "seg:1")
    view.evalgate_take(_judgment(answers=("b" * 64,), error=ERROR), "seg:2")
    fresh = _judgment(answers=("b" * 64,), verdict={"winner": "A"})
    view.evalgate_take(fresh, "seg:3")
    assert view.results == {_key(): fresh}
    assert view.errors == {}  # the error on these answers is superseded


def test_the_same_verdict_twice_is_a_duplicate_and_another_a_conflict() -> None:
    view = EvalgateJudgmentView()
    view.evalgate_take(_judgment(), "seg:1")
    view.evalgate_take(_judgment(), "seg:2")
    assert (view.duplicates, view.problems) == (1, [])
    other = _judgment(verdict={"score": 1.0, "value": 0.0, "passed": False})
    view.evalgate_take(other, "seg:3")
    assert [str(problem) for problem in view.problems] == [
        "seg:3:0: rev-1/cand/c1[r0]: conflicting judgment: same answers, a different verdict"
    ]
    assert view.results[_key()]["verdict"]["passed"] is True  # the first one stays


def _with(record: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**record, **changes}


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"{truncated", "malformed line (not JSON): a truncated or corrupted judgment"),
        (b'"\xff"', "malformed line (not JSON): a truncated or corrupted judgment"),
        ([1, 2], "malformed judgment: fields differ from the judgment schema"),
        ({"judgment": {}}, "malformed judgment: fields differ from the judgment schema"),
        (
            _with(_judgment(), checksum="0" * 64),
            "checksum mismatch: the judgment was altered or corrupted",
        ),
        (
            _with(_judgment(), attempts=-1),
            "malformed judgment: attempts must be an integer >= 0, not -1",
        ),
        (
            _with(_judgment(), answers="a" * 64),
            "malformed judgment: answers must be a list of checksums",
        ),
        (
            _with(_judgment(), verdict={"winner": "C"}),
            "malformed judgment: verdict.winner must be A, B or tie",
        ),
        (
            _judgment(context=EvalgateJudgmentContext("k" * 64, DEFINITION, "w")),
            f"foreign judge key {'k' * 16}",
        ),
        (
            _judgment(context=EvalgateJudgmentContext(JUDGE, "e" * 64, "w")),
            f"foreign definition digest {'e' * 16}",
        ),
    ],
)
def test_a_refused_line_is_a_problem_naming_segment_line_and_reason(
    tmp_path: Path, line: Any, reason: str
) -> None:
    store = _write(tmp_path, "seg-1.jsonl", [_judgment(_key("ok")), b"", line])
    view = evalgate_read_judgments(store, PREFIX, CONTEXT)
    relpath = f"{PREFIX}/shard-0/seg-1.jsonl"
    assert [(p.file, p.line, p.identity, p.reason) for p in view.problems] == [
        (relpath, 3, "<judgment>", reason)  # the blank line 2 counts
    ]
    assert list(view.results) == [_key("ok")]


def test_an_empty_or_absent_folder_reads_as_no_judgments(tmp_path: Path) -> None:
    view = evalgate_read_judgments(EvalgateLocalStore(str(tmp_path)), PREFIX, CONTEXT)
    assert (view.results, view.errors, view.duplicates, view.problems) == ({}, {}, 0, [])


def test_a_judgment_folder_symlinked_out_of_the_store_is_a_problem(tmp_path: Path) -> None:
    root, outside = tmp_path / "store", tmp_path / "outside"
    (root / PREFIX).mkdir(parents=True)
    (outside / "seg.jsonl").parent.mkdir(parents=True)
    (outside / "seg.jsonl").write_bytes(evalgate_canonical_json(_judgment()) + b"\n")
    (root / PREFIX / "shard-0").symlink_to(outside)
    view = evalgate_read_judgments(EvalgateLocalStore(str(root)), PREFIX, CONTEXT)
    assert view.results == {}
    assert [(p.file, p.identity) for p in view.problems] == [(f"{PREFIX}/shard-0", "<not read>")]
    assert view.problems[0].reason.startswith("refusing to follow a symlink that leaves")


# --- the excerpt of an errored judgment -------------------------------------------------------


def test_a_long_errored_answer_is_cut_to_its_excerpt_saying_what_was_cut() -> None:
    text = "é" * (EVALGATE_JUDGE_EXCERPT_CHARS + 10)
    output, error = evalgate_errored_excerpt(text, ERROR)
    assert output == "é" * EVALGATE_JUDGE_EXCERPT_CHARS
    digest = hashlib.sha256(text.encode()).hexdigest()
    assert error == {
        **ERROR,
        "message": (
            f"no verdict in the answer [the judge's answer read had "
            f"{EVALGATE_JUDGE_EXCERPT_CHARS + 10} characters, sha256 {digest}; its first "
            f"{EVALGATE_JUDGE_EXCERPT_CHARS} are kept]"
        ),
    }


@pytest.mark.parametrize(
    ("output", "error"),
    [
        ("x" * EVALGATE_JUDGE_EXCERPT_CHARS, ERROR),  # at the limit: kept whole
        ("x" * (EVALGATE_JUDGE_EXCERPT_CHARS + 1), None),  # a result keeps its text whole
        (None, ERROR),
    ],
)
def test_short_or_result_text_is_kept_whole(output: str | None, error: Any) -> None:
    assert evalgate_errored_excerpt(output, error) == (output, error)


def test_an_errored_judgment_record_stores_the_excerpt_and_seals_it(tmp_path: Path) -> None:
    text = "y" * (EVALGATE_JUDGE_EXCERPT_CHARS + 1)
    record = evalgate_judgment_record(
        CONTEXT, _key(), ["a" * 64], _facts(output=text), {"verdict": None, "error": ERROR}
    )
    assert record["output"] == "y" * EVALGATE_JUDGE_EXCERPT_CHARS
    assert "characters, sha256 " in record["error"]["message"]
    view = evalgate_read_judgments(_write(tmp_path, "seg-e.jsonl", [record]), PREFIX, CONTEXT)
    assert (view.problems, view.errors) == ([], {_key(): record})  # its checksum holds
    assert json.loads(json.dumps(record))["attempts"] == 1
