"""imports/: the two harness readers on files written here, one fact each.

lm-eval: the file name gives task and time stamp, the results file beside it gives versions and
config (its ``metadata`` left out of the digest), each line one scored sample. Inspect: a zip
archive of ``header.json`` and ``samples/*.json`` (stored, deflated or zstd members). Every
refusal names the file and the place (line or member) and the reason.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any

import pytest

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.formats.canonical import evalgate_sha256_hex
from pytest_evalgate.imports import HarnessFile, read_inspect_log, read_lm_eval_samples
from pytest_evalgate.imports.sample import config_digest, file_sha256, member, unit_score

STAMP = "2026-12-06T13-08-40.142288"
TASK = "my_task"
CONFIG: dict[str, Any] = {"task": TASK, "num_fewshot": 0, "metadata": {"url": "http://a"}}


def _results(folder: Path, **overrides: Any) -> Path:
    results: dict[str, Any] = {
        "configs": {TASK: CONFIG},
        "versions": {TASK: 2.0},
        "lm_eval_version": "0.4.13",
        "date": 0,
    }
    results.update(overrides)
    path = folder / f"results_{STAMP}.json"
    path.write_text(json.dumps(results), encoding="utf-8")
    return path


def _row(doc_id: int, score: object, **doc: Any) -> dict[str, Any]:
    return {"doc_id": doc_id, "doc": doc, "exact_match": score, "filtered_resps": ["a"]}


def _samples(folder: Path, rows: list[Any], *, results: bool = True) -> Path:
    if results:
        _results(folder)
    path = folder / f"samples_{TASK}_{STAMP}.jsonl"
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _refusal(call: Any, *args: Any, **kwargs: Any) -> EvalgateConfigError:
    with pytest.raises(EvalgateConfigError) as caught:
        call(*args, **kwargs)
    return caught.value


# --- sample helpers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"), [(True, 1.0), (False, 0.0), (0, 0.0), (1, 1.0), (0.25, 0.25)]
)
def test_unit_score_accepts_bools_and_numbers_in_0_to_1(value: object, expected: float) -> None:
    score = unit_score(value, "f.jsonl", "line 3", "metric 'm'")
    assert score == expected
    assert type(score) is float


@pytest.mark.parametrize("value", [-0.01, 1.5, float("nan"), float("inf"), "1", None, [1]])
def test_unit_score_refuses_anything_else_naming_file_place_and_value(value: object) -> None:
    error = _refusal(unit_score, value, "f.jsonl", "line 3", "metric 'm'")
    assert (error.source, error.key) == ("f.jsonl", "line 3")
    assert error.reason == f"metric 'm' {value!r} is not a score in 0..1"


def test_member_returns_the_value_or_names_the_missing_key() -> None:
    assert member({"a": None}, "a", "f", "line 1") is None
    error = _refusal(member, {"a": 1}, "b", "f", "line 9")
    assert str(error) == "f: line 9: malformed sample: no 'b'"


def test_digests_are_the_sha256_of_bytes_and_of_canonical_json() -> None:
    assert file_sha256(b"abc") == hashlib.sha256(b"abc").hexdigest()
    assert config_digest({"b": 1, "a": 2}) == "sha256:" + evalgate_sha256_hex({"a": 2, "b": 1})
    assert config_digest({"a": 1}) != config_digest({"a": 2})


# --- lm-eval ----------------------------------------------------------------------------------


def test_lm_eval_samples_carry_ids_rows_scores_and_outputs(tmp_path: Path) -> None:
    rows = [
        _row(0, 1.0, id="case-a"),
        _row(1, 0.0),  # no id field: the dataset's row names it
        {**_row(2, True, id=7), "filtered_resps": [[["nested"]]]},
        {"doc_id": 3, "doc": {"id": "d"}, "exact_match": 0.5, "resps": [[{"k": 1}]]},
        {"doc_id": 4, "doc": {"id": "e"}, "exact_match": 0, "filtered_resps": []},
    ]
    read = read_lm_eval_samples(str(_samples(tmp_path, rows)), repetition=2)
    assert isinstance(read, HarnessFile)
    assert [s.at for s in read.samples] == ["line 1", "line 2", "line 3", "line 4", "line 5"]
    assert [s.case_id for s in read.samples] == ["case-a", None, "7", "d", "e"]
    assert [s.row for s in read.samples] == [None, 1, None, None, None]
    assert [s.score for s in read.samples] == [1.0, 0.0, 1.0, 0.5, 0.0]
    assert [s.output for s in read.samples] == ["a", "a", "nested", '{"k":1}', None]
    assert {s.repetition for s in read.samples} == {2}
    assert {s.started_at for s in read.samples} == {"1970-01-01T00:00:00+00:00"}
    assert read.skipped == 0


def test_lm_eval_source_facts_leave_the_config_metadata_out(tmp_path: Path) -> None:
    path = _samples(tmp_path, [_row(0, 1.0, id="a")])
    source = read_lm_eval_samples(str(path)).source
    kept = {key: value for key, value in CONFIG.items() if key != "metadata"}
    assert source == {
        "harness": "lm-eval",
        "version": "0.4.13",
        "file": path.name,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "task": TASK,
        "task_version": "2.0",
        "config_digest": config_digest(kept),
    }
    _results(tmp_path, configs={TASK: {**CONFIG, "metadata": {"url": "http://other"}}})
    assert read_lm_eval_samples(str(path)).source == source
    _results(tmp_path, configs={TASK: {**CONFIG, "num_fewshot": 5}})
    assert read_lm_eval_samples(str(path)).source["config_digest"] != source["config_digest"]


def test_lm_eval_task_key_is_harness_task_version_and_digest(tmp_path: Path) -> None:
    read = read_lm_eval_samples(str(_samples(tmp_path, [_row(0, 1.0)])))
    harness, task, version, digest = read.task_key
    assert (harness, task, version) == ("lm-eval", TASK, "2.0")
    assert digest.startswith("sha256:")


def test_lm_eval_without_version_or_date_says_unknown_and_no_time(tmp_path: Path) -> None:
    path = _samples(tmp_path, [_row(0, 1.0)], results=False)
    _results(tmp_path, lm_eval_version=None, date="yesterday")
    read = read_lm_eval_samples(str(path))
    assert read.source["version"] == "unknown"  # a null version is as unknown as none
    assert read.samples[0].started_at == read.samples[0].finished_at == ""
    results = json.loads((tmp_path / f"results_{STAMP}.json").read_text(encoding="utf-8"))
    del results["lm_eval_version"]
    (tmp_path / f"results_{STAMP}.json").write_text(json.dumps(results), encoding="utf-8")
    assert read_lm_eval_samples(str(path)).source["version"] == "unknown"


def test_a_metric_other_than_exact_match_is_read(tmp_path: Path) -> None:
    rows = [{"doc_id": 0, "doc": {}, "acc": 0.75}]
    read = read_lm_eval_samples(str(_samples(tmp_path, rows)), metric="acc")
    assert read.samples[0].score == 0.75
    assert read.samples[0].output is None


def test_id_field_chooses_which_document_member_names_the_case(tmp_path: Path) -> None:
    path = _samples(tmp_path, [_row(0, 1.0, id="by-id", key="by-key")])
    assert read_lm_eval_samples(str(path), id_field="key").samples[0].case_id == "by-key"
    assert read_lm_eval_samples(str(path), id_field="absent").samples[0].row == 0


@pytest.mark.parametrize(
    "name", ["samples_task.jsonl", "results_x.json", "samples_task_x.json", "other_a_b.jsonl"]
)
def test_a_wrong_file_name_is_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text("{}\n", encoding="utf-8")
    error = _refusal(read_lm_eval_samples, str(path))
    assert (error.source, error.key) == (str(path), "file name")
    assert "samples_<task>_<time>.jsonl" in error.reason


def test_a_missing_results_file_is_refused_naming_it(tmp_path: Path) -> None:
    path = _samples(tmp_path, [_row(0, 1.0)], results=False)
    error = _refusal(read_lm_eval_samples, str(path))
    assert (error.source, error.key) == (str(path), "results")
    assert error.reason.startswith(f"no results_{STAMP}.json beside it")


@pytest.mark.parametrize(
    ("text", "reason"),
    [("{not json", "unreadable results file"), ("[1, 2]", "not an lm-eval results file")],
)
def test_an_unreadable_results_file_is_refused_naming_that_file(
    tmp_path: Path, text: str, reason: str
) -> None:
    path = _samples(tmp_path, [_row(0, 1.0)], results=False)
    results = tmp_path / f"results_{STAMP}.json"
    results.write_text(text, encoding="utf-8")
    error = _refusal(read_lm_eval_samples, str(path))
    assert error.source == str(results)
    assert error.reason.startswith(reason)


@pytest.mark.parametrize(
    "overrides",
    [{"configs": {}}, {"versions": {}}, {"configs": None}, {"versions": [TASK]}],
)
def test_results_without_the_task_s_config_or_version_are_refused(
    tmp_path: Path, overrides: dict[str, Any]
) -> None:
    path = _samples(tmp_path, [_row(0, 1.0)], results=False)
    _results(tmp_path, **overrides)
    error = _refusal(read_lm_eval_samples, str(path))
    assert error.key == "results"
    assert error.reason == f"the results file beside it has no config and version of task {TASK!r}"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{oops", "malformed line: not JSON"),
        ("[1]", "malformed line: not a JSON object"),
        ('{"doc": {}, "exact_match": 1}', "malformed sample: no 'doc_id'"),
        ('{"doc_id": 0, "exact_match": 1}', "malformed sample: no 'doc'"),
        ('{"doc_id": -1, "doc": {}, "exact_match": 1}', "malformed sample: doc_id -1"),
        ('{"doc_id": true, "doc": {}, "exact_match": 1}', "malformed sample: doc_id True"),
        ('{"doc_id": "0", "doc": {}, "exact_match": 1}', "malformed sample: doc_id '0'"),
        ('{"doc_id": 0, "doc": {}}', "malformed sample: no 'exact_match'"),
        ('{"doc_id": 0, "doc": {}, "exact_match": 2}', "metric 'exact_match' 2 is not a score"),
    ],
)
def test_a_bad_line_is_refused_naming_file_and_line(tmp_path: Path, line: str, reason: str) -> None:
    path = _samples(tmp_path, [_row(0, 1.0), "", line])
    error = _refusal(read_lm_eval_samples, str(path))
    assert (error.source, error.key) == (str(path), "line 3")  # blank lines count
    assert error.reason.startswith(reason)


def test_a_file_of_blank_lines_has_no_samples(tmp_path: Path) -> None:
    path = _samples(tmp_path, ["", "  "])
    assert str(_refusal(read_lm_eval_samples, str(path))) == f"{path}: -: no samples in the file"


# --- Inspect ----------------------------------------------------------------------------------


def _header(**eval_overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "task": "arith",
        "task_version": 3,
        "packages": {"inspect_ai": "0.3.285"},
        "task_args": {"n": 1},
        "solver": None,
        "scorers": [{"name": "match"}],
        "dataset": {"name": "d", "samples": 2, "location": "x.jsonl", "run_id": "ignored"},
        "config": {"epochs": 2, "log_dir": "ignored"},
        "run_id": "ignored",
    }
    spec.update(eval_overrides)
    return {"eval": spec, "plan": {"steps": ["generate"]}, "status": "success"}


def _inspect_sample(sample_id: object, epoch: object, value: object, **extra: Any) -> Any:
    output = {"completion": "42", "choices": [{"stop_reason": "stop"}]}
    return {
        "id": sample_id,
        "epoch": epoch,
        "output": output,
        "scores": {"match": {"value": value}},
        "started_at": "2026-12-06T10:00:00",
        "completed_at": "2026-12-06T10:00:01",
        **extra,
    }


def _log(
    tmp_path: Path,
    samples: dict[str, Any],
    header: Any = None,
    compression: int = zipfile.ZIP_DEFLATED,
    name: str = "run.eval",
) -> Path:
    path = tmp_path / name
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        if header is not False:
            archive.writestr("header.json", json.dumps(header or _header()))
        for member_name, row in samples.items():
            text = row if isinstance(row, str) else json.dumps(row)
            archive.writestr(f"samples/{member_name}.json", text)
    return path


def test_inspect_samples_map_ids_epochs_grades_and_times(tmp_path: Path) -> None:
    samples = {
        "a_epoch_1": _inspect_sample("a", 1, "C"),
        "a_epoch_2": _inspect_sample("a", 2, "I"),
        "b_epoch_1": _inspect_sample(7, 1, "P"),
        "b_epoch_2": _inspect_sample(7, 2, 0.25, output="no dict"),
        "c_epoch_1": _inspect_sample("c", 1, "N"),
    }
    read = read_inspect_log(str(_log(tmp_path, samples)))
    got = [(s.at, s.case_id, s.repetition, s.score) for s in read.samples]
    assert got == [
        ("samples/a_epoch_1.json", "a", 0, 1.0),
        ("samples/a_epoch_2.json", "a", 1, 0.0),
        ("samples/b_epoch_1.json", "7", 0, 0.5),
        ("samples/b_epoch_2.json", "7", 1, 0.25),
        ("samples/c_epoch_1.json", "c", 0, 0.0),
    ]
    first, odd = read.samples[0], read.samples[3]
    assert (first.output, first.finish_reason) == ("42", "stop")
    assert (first.started_at, first.finished_at) == ("2026-12-06T10:00:00", "2026-12-06T10:00:01")
    assert (odd.output, odd.finish_reason) == (None, None)
    assert read.skipped == 0


def test_samples_that_ended_in_an_error_are_skipped_and_counted(tmp_path: Path) -> None:
    samples = {
        "a_epoch_1": _inspect_sample("a", 1, "C"),
        "b_epoch_1": {"id": "b", "error": {"message": "timeout"}},
    }
    read = read_inspect_log(str(_log(tmp_path, samples)))
    assert [s.case_id for s in read.samples] == ["a"]
    assert read.skipped == 1
    only_errors = {"b_epoch_1": {"id": "b", "error": "boom"}}
    error = _refusal(read_inspect_log, str(_log(tmp_path, only_errors, name="e.eval")))
    assert (error.key, error.reason) == ("samples/", "no scored samples in the log")


def test_inspect_source_digest_ignores_run_ids_and_places(tmp_path: Path) -> None:
    samples = {"a_epoch_1": _inspect_sample("a", 1, "C")}
    path = _log(tmp_path, samples)
    source = read_inspect_log(str(path)).source
    assert {k: v for k, v in source.items() if k != "config_digest"} == {
        "harness": "inspect",
        "version": "0.3.285",
        "file": "run.eval",
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "task": "arith",
        "task_version": "3",
    }
    moved = _header(
        run_id="other",
        dataset={"name": "d", "samples": 2, "location": "x.jsonl", "run_id": "another"},
        config={"epochs": 2, "log_dir": "elsewhere"},
    )
    same = read_inspect_log(str(_log(tmp_path, samples, moved, name="b.eval"))).source
    assert same["config_digest"] == source["config_digest"]
    for changed in (_header(task_args={"n": 2}), _header(config={"epochs": 3})):
        other = read_inspect_log(str(_log(tmp_path, samples, changed, name="c.eval"))).source
        assert other["config_digest"] != source["config_digest"]


def test_an_inspect_header_without_versions_says_unknown_and_0(tmp_path: Path) -> None:
    header = {"eval": {"task": "t"}}
    source = read_inspect_log(str(_log(tmp_path, {"a": _inspect_sample("a", 1, 1)}, header))).source
    assert (source["version"], source["task_version"]) == ("unknown", "0")


def test_stored_members_are_read_as_well(tmp_path: Path) -> None:
    path = _log(tmp_path, {"a": _inspect_sample("a", 1, 1.0)}, compression=zipfile.ZIP_STORED)
    assert [s.score for s in read_inspect_log(str(path)).samples] == [1.0]


def test_a_named_scorer_chooses_among_several(tmp_path: Path) -> None:
    row = _inspect_sample("a", 1, "C")
    row["scores"]["other"] = {"value": 0.5}
    path = _log(tmp_path, {"a": row})
    assert read_inspect_log(str(path), scorer="other").samples[0].score == 0.5
    assert read_inspect_log(str(path), scorer="match").samples[0].score == 1.0
    error = _refusal(read_inspect_log, str(path))
    assert error.key == "samples/a.json"
    assert error.reason == "several scorers (match, other): name one with --scorer"
    missing = _refusal(read_inspect_log, str(path), scorer="nope")
    assert missing.reason == "no score of scorer 'nope'"


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ("[1]", "malformed sample: not a JSON object"),
        ("{bad", "malformed member"),
        ({"id": "a", "scores": {}}, "malformed sample: no 'epoch'"),
        (_inspect_sample("a", 0, "C"), "malformed sample: epoch 0"),
        (_inspect_sample("a", True, "C"), "malformed sample: epoch True"),
        ({**_inspect_sample("a", 1, "C"), "scores": {}}, "malformed sample: no scores"),
        ({**_inspect_sample("a", 1, "C"), "scores": []}, "malformed sample: no scores"),
        ({"epoch": 1, "scores": {"m": {"value": 1}}}, "malformed sample: no 'id'"),
        ({**_inspect_sample("a", 1, "C"), "scores": {"m": 1}}, "no score of scorer 'm'"),
        (_inspect_sample("a", 1, "X"), "scorer 'match' value 'X' is not a score in 0..1"),
        (_inspect_sample("a", 1, 3), "scorer 'match' value 3 is not a score in 0..1"),
    ],
)
def test_a_bad_sample_is_refused_naming_file_and_member(
    tmp_path: Path, row: Any, reason: str
) -> None:
    path = _log(tmp_path, {"ok": _inspect_sample("z", 1, 1), "x_epoch_1": row})
    error = _refusal(read_inspect_log, str(path))
    assert (error.source, error.key) == (str(path), "samples/x_epoch_1.json")
    assert error.reason.startswith(reason)


@pytest.mark.parametrize(
    ("header", "key", "reason"),
    [
        (False, "header.json", "no such member: not an Inspect .eval log"),
        ({"eval": {"no": "task"}}, "header.json", "malformed header: no eval.task"),
        ({"eval": "x"}, "header.json", "malformed header: no eval.task"),
    ],
)
def test_a_bad_header_is_refused(tmp_path: Path, header: Any, key: str, reason: str) -> None:
    path = _log(tmp_path, {"a": _inspect_sample("a", 1, 1)}, header)
    error = _refusal(read_inspect_log, str(path))
    assert (error.source, error.key, error.reason) == (str(path), key, reason)


def test_a_file_that_is_no_zip_archive_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plain.eval"
    path.write_text("not a zip", encoding="utf-8")
    error = _refusal(read_inspect_log, str(path))
    assert (error.source, error.key) == (str(path), "-")
    assert error.reason.startswith("not an Inspect .eval log (a zip archive)")


# --- Inspect's zstd members (zip method 93), written by hand --------------------------------


def _zstd_log(tmp_path: Path, members: dict[str, bytes], *, crc_of: bytes | None = None) -> Path:
    """A zip archive whose members are zstd-compressed (method 93), as Inspect writes them;
    ``crc_of`` replaces the bytes each member's CRC-32 is computed of (to corrupt it)."""
    zstandard = pytest.importorskip("zstandard")
    path = tmp_path / "zstd.eval"
    local, central, offset = b"", b"", 0
    for name, data in members.items():
        packed = zstandard.ZstdCompressor().compress(data)
        crc = zlib.crc32(crc_of if crc_of is not None else data)
        encoded = name.encode()
        fields = (20, 0, 93, 0, 0, crc, len(packed), len(data), len(encoded), 0)
        header = b"PK\x03\x04" + _pack("<HHHHHIIIHH", *fields) + encoded
        entry = (20, 20, 0, 93, 0, 0, crc, len(packed), len(data), len(encoded), 0, 0, 0, 0, 0)
        central += b"PK\x01\x02" + _pack("<HHHHHHIIIHHHHHI", *entry) + _pack("<I", offset)
        central += encoded
        local += header + packed
        offset += len(header) + len(packed)
    end = _pack("<HHHHIIH", 0, 0, len(members), len(members), len(central), offset, 0)
    path.write_bytes(local + central + b"PK\x05\x06" + end)
    return path


def _pack(fmt: str, *values: int) -> bytes:
    return struct.pack(fmt, *values)


def test_zstd_members_are_decompressed_and_read(tmp_path: Path) -> None:
    members = {
        "header.json": json.dumps(_header()).encode(),
        "samples/a_epoch_1.json": json.dumps(_inspect_sample("a", 1, "C")).encode(),
    }
    read = read_inspect_log(str(_zstd_log(tmp_path, members)))
    assert [(s.case_id, s.score) for s in read.samples] == [("a", 1.0)]
    assert read.source["task"] == "arith"


def test_a_zstd_member_whose_crc_does_not_match_is_refused(tmp_path: Path) -> None:
    members = {"header.json": json.dumps(_header()).encode()}
    path = _zstd_log(tmp_path, members, crc_of=b"other bytes")
    error = _refusal(read_inspect_log, str(path))
    assert (error.key, error.reason) == ("header.json", "malformed member: CRC-32 mismatch")
