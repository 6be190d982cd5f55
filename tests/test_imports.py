"""``evalgate import`` (issue 33): lm-evaluation-harness samples and Inspect logs, made by the
harnesses themselves against the simulator (tests/data/imports/README.md), gated like runs."""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from pytest_evalgate.aggregate.sources import SourceLedger
from pytest_evalgate.cli.main import main
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.imports import read_inspect_log, read_lm_eval_samples

DATA = Path(__file__).resolve().parent / "data" / "imports"
Capsys = pytest.CaptureFixture[str]
CASE_TEXT = "Answer with the number only"  # in every case's input, never in a report without text


def _samples(name: str) -> Path:
    return next((DATA / "lm_eval" / name).glob("samples_evalgate_imports_*.jsonl"))


def _log(name: str) -> Path:
    return DATA / "inspect" / f"{name}.eval"


def _suite(tmp_path: Path, repetitions: int = 1) -> Path:
    suite = tmp_path / "suite"
    shutil.copytree(DATA / "suite", suite)
    manifest = suite / "evalgate.yaml"
    text = manifest.read_text().replace("repetitions: 1", f"repetitions: {repetitions}")
    manifest.write_text(text)
    return suite


def _import(tmp_path: Path, harness: str, path: Path, candidate: str, *extra: str) -> int:
    store = str(tmp_path / "store")
    suite = str(tmp_path / "suite")
    args = ["import", harness, str(path), "--suite", suite, "--candidate", candidate]
    return main([*args, "--store", store, *extra])


def _gate(tmp_path: Path, *extra: str) -> int:
    suite, store = str(tmp_path / "suite"), str(tmp_path / "store")
    return main(["gate", suite, "--store", store, "--report", str(tmp_path / "rep"), *extra])


def _decision(tmp_path: Path) -> dict[str, object]:
    return json.loads((tmp_path / "rep" / "decision.json").read_text())  # type: ignore[no-any-return]


def _rule(decision: dict[str, object], name: str) -> dict[str, object]:
    rules = decision["rules"]
    assert isinstance(rules, list)
    return next(rule for rule in rules if rule["name"] == name)


def _segments(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "store").rglob("seg-*.jsonl"))


def _copy_samples(tmp_path: Path, name: str = "baseline") -> Path:
    """A copy of a samples file and its results file, in a folder of its own."""
    source = _samples(name)
    folder = tmp_path / f"copy-{name}"
    folder.mkdir()
    stamp = source.stem.rsplit("_", 1)[1]
    shutil.copy(source, folder / source.name)
    shutil.copy(source.parent / f"results_{stamp}.json", folder / f"results_{stamp}.json")
    return folder / source.name


def _results_of(samples: Path) -> Path:
    return samples.parent / f"results_{samples.stem.rsplit('_', 1)[1]}.json"


# --------------------------------------------------------------------------- lm-eval, gated


def test_an_lm_eval_regression_fails_non_inferior(tmp_path: Path, capsys: Capsys) -> None:
    _suite(tmp_path)
    assert _import(tmp_path, "lm-eval", _samples("baseline"), "baseline") == 0
    assert _import(tmp_path, "lm-eval", _samples("regressed"), "candidate") == 0
    assert "48 committed, 0 already stored alike" in capsys.readouterr().out
    assert _gate(tmp_path) == 1
    out = capsys.readouterr().out
    assert "verdict FAIL" in out
    assert f"candidate: imported from lm-eval 0.4.13 {_samples('regressed').name}" in out
    decision = _decision(tmp_path)
    rule = _rule(decision, "non_inferior[all]")
    assert rule["passed"] is False and "regression" in str(rule["reason"])
    assert decision["counts"] == {**decision["counts"], "completed": 96, "missing": 0}  # type: ignore[dict-item]


def test_equal_lm_eval_models_pass(tmp_path: Path, capsys: Capsys) -> None:
    _suite(tmp_path)
    assert _import(tmp_path, "lm-eval", _samples("baseline"), "baseline") == 0
    assert _import(tmp_path, "lm-eval", _samples("same"), "candidate") == 0
    assert _gate(tmp_path) == 0
    assert "verdict PASS" in capsys.readouterr().out
    decision = _decision(tmp_path)
    assert decision["verdict"] == "pass" and decision["attestable"] is True
    assert _rule(decision, "non_inferior[all]")["passed"] is True


def test_the_decision_and_report_name_the_harness_files(tmp_path: Path) -> None:
    _suite(tmp_path)
    _import(tmp_path, "lm-eval", _samples("baseline"), "baseline")
    _import(tmp_path, "lm-eval", _samples("same"), "candidate")
    _gate(tmp_path)
    sources = _decision(tmp_path)["sources"]
    assert isinstance(sources, dict)
    (candidate,) = sources["candidates"]["candidate"]
    data = _samples("same").read_bytes()
    assert candidate["file"] == _samples("same").name
    assert candidate["sha256"] == hashlib.sha256(data).hexdigest()
    assert (candidate["harness"], candidate["version"], candidate["records"]) == (
        "lm-eval", "0.4.13", 48,
    )  # fmt: skip
    assert candidate["task"] == "evalgate_imports" and candidate["task_version"] == "1.0"
    assert sources["missing"] == []
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "## Sources (imported results)" in report and _samples("same").name in report


def test_no_case_text_reaches_the_report_without_report_text(tmp_path: Path) -> None:
    _suite(tmp_path)
    _import(tmp_path, "lm-eval", _samples("baseline"), "baseline")
    _import(tmp_path, "lm-eval", _samples("regressed"), "candidate")
    _gate(tmp_path)
    for path in (tmp_path / "rep").iterdir():
        assert CASE_TEXT.encode() not in path.read_bytes(), path.name
    _gate(tmp_path, "--report-text")  # asked for: the flipped cases' input is shown
    assert CASE_TEXT in (tmp_path / "rep" / "report.md").read_text()


def test_the_aggregate_mode_of_pytest_gates_imported_records(
    tmp_path: Path, pytester: pytest.Pytester
) -> None:
    _suite(pytester.path)
    assert _import(pytester.path, "lm-eval", _samples("baseline"), "baseline") == 0
    assert _import(pytester.path, "lm-eval", _samples("regressed"), "candidate") == 0
    result = pytester.runpytest(
        "--evalgate", "--evalgate-aggregate", "--evalgate-store=store", "suite", "-q",
        "-p", "no:cacheprovider",
    )  # fmt: skip
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*verdict FAIL*", "*non_inferior[[]all]*FAIL*regression*"])
    result.stdout.fnmatch_lines(
        [f"*candidate: imported from lm-eval 0.4.13 {_samples('regressed').name}*"]
    )


# --------------------------------------------------------------------------- Inspect, gated


def test_an_inspect_regression_fails_and_equal_models_pass(tmp_path: Path, capsys: Capsys) -> None:
    _suite(tmp_path, repetitions=2)  # the logs ran 2 epochs: epoch 1 -> r0, epoch 2 -> r1
    assert _import(tmp_path, "inspect", _log("baseline"), "baseline") == 0
    assert _import(tmp_path, "inspect", _log("regressed"), "candidate") == 0
    assert "96 committed" in capsys.readouterr().out
    assert _gate(tmp_path) == 1
    decision = _decision(tmp_path)
    assert _rule(decision, "non_inferior[all]")["passed"] is False
    assert decision["counts"]["completed"] == 192  # type: ignore[index]
    (other := tmp_path / "equal").mkdir()
    _suite(other, repetitions=2)
    assert _import(other, "inspect", _log("baseline"), "baseline") == 0
    assert _import(other, "inspect", _log("same"), "candidate") == 0
    assert _gate(other) == 0
    sources = _decision(other)["sources"]
    assert sources["candidates"]["candidate"][0]["harness"] == "inspect"  # type: ignore[index]


def test_the_inspect_reader_maps_ids_and_epochs() -> None:
    log = read_inspect_log(str(_log("baseline")))
    assert log.source["harness"] == "inspect" and log.source["version"] == "0.3.285"
    assert {sample.repetition for sample in log.samples} == {0, 1}
    assert len(log.samples) == 96 and log.skipped == 0
    first = next(s for s in log.samples if s.case_id == "alpha-000" and s.repetition == 0)
    assert first.at == "samples/alpha-000_epoch_1.json" and first.score in (0.0, 1.0)
    # what the zstandard reader is for: zipfile lists the members but cannot open them
    with zipfile.ZipFile(_log("baseline")) as archive, pytest.raises(NotImplementedError):
        archive.read("header.json")


def test_a_corrupted_inspect_member_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "bad.eval"
    shutil.copy(_log("same"), path)
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("samples/beta-003_epoch_2.json")
    data = bytearray(path.read_bytes())
    name_length = int.from_bytes(data[info.header_offset + 26 : info.header_offset + 28], "little")
    extra = int.from_bytes(data[info.header_offset + 28 : info.header_offset + 30], "little")
    at = info.header_offset + 30 + name_length + extra + info.compress_size // 2
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(EvalgateConfigError) as caught:
        read_inspect_log(str(path))
    assert caught.value.source == str(path)
    assert caught.value.key == "samples/beta-003_epoch_2.json"
    assert "malformed member" in caught.value.reason


def test_an_unknown_inspect_scorer_is_refused(tmp_path: Path, capsys: Capsys) -> None:
    _suite(tmp_path, repetitions=2)
    assert _import(tmp_path, "inspect", _log("same"), "candidate", "--scorer", "judge") == 4
    assert "no score of scorer 'judge'" in capsys.readouterr().err
    assert _segments(tmp_path) == []


# --------------------------------------------------------------------------- exactly once


def test_a_byte_identical_reimport_changes_nothing(tmp_path: Path, capsys: Capsys) -> None:
    _suite(tmp_path)
    assert _import(tmp_path, "lm-eval", _samples("same"), "candidate") == 0
    before = {path: path.read_bytes() for path in _segments(tmp_path)}
    capsys.readouterr()
    assert _import(tmp_path, "lm-eval", _samples("same"), "candidate") == 0
    assert "0 committed, 48 already stored alike" in capsys.readouterr().out
    assert {path: path.read_bytes() for path in _segments(tmp_path)} == before


def test_one_changed_line_makes_the_gate_invalid_naming_it(tmp_path: Path, capsys: Capsys) -> None:
    _suite(tmp_path)
    _import(tmp_path, "lm-eval", _samples("baseline"), "baseline")
    _import(tmp_path, "lm-eval", _samples("same"), "candidate")
    changed = _copy_samples(tmp_path, "same")
    lines = changed.read_text().splitlines(keepends=True)
    row = json.loads(lines[6])
    row["exact_match"] = 1.0 - row["exact_match"]
    lines[6] = json.dumps(row) + "\n"
    changed.write_text("".join(lines))
    capsys.readouterr()
    assert _import(tmp_path, "lm-eval", changed, "candidate") == 1
    out = capsys.readouterr().out
    identity = f"imports-eval-v1/candidate/{row['doc']['id']}[r0]"
    assert f"conflict: {changed}: line 7: {identity}" in out
    assert "1 committed, 47 already stored alike" in out
    assert _gate(tmp_path) == 1
    decision = _decision(tmp_path)
    assert decision["verdict"] == "invalid"
    problems = decision["counts"]["problems"]  # type: ignore[index]
    assert len(problems) == 1 and identity in problems[0] and "conflicting duplicate" in problems[0]


# --------------------------------------------------------------------------- refused


def test_an_unknown_doc_id_is_refused_naming_file_and_line(tmp_path: Path, capsys: Capsys) -> None:
    _suite(tmp_path)
    path = _copy_samples(tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    row = json.loads(lines[2])
    row["doc"]["id"] = "gamma-999"
    lines[2] = json.dumps(row) + "\n"
    path.write_text("".join(lines))
    assert _import(tmp_path, "lm-eval", path, "candidate") == 4
    err = capsys.readouterr().err
    assert f"evalgate import: {path}: line 3: case 'gamma-999' is not in the suite's dataset" in err
    assert _segments(tmp_path) == []  # nothing committed


def test_a_malformed_line_is_refused_naming_file_and_line(tmp_path: Path, capsys: Capsys) -> None:
    _suite(tmp_path)
    path = _copy_samples(tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    lines[9] = lines[9][: len(lines[9]) // 2] + "\n"  # a truncated line
    path.write_text("".join(lines))
    assert _import(tmp_path, "lm-eval", path, "candidate") == 4
    assert f"{path}: line 10: malformed line: not JSON" in capsys.readouterr().err
    assert _segments(tmp_path) == []


def test_a_missing_metric_is_refused_naming_the_line(tmp_path: Path, capsys: Capsys) -> None:
    _suite(tmp_path)
    assert _import(tmp_path, "lm-eval", _samples("same"), "candidate", "--metric", "f1") == 4
    assert f"{_samples('same')}: line 1: malformed sample: no 'f1'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("edit", "what"),
    [
        (lambda results: results["versions"].update(evalgate_imports=2.0), "version 2.0"),
        (
            lambda results: results["configs"]["evalgate_imports"]["generation_kwargs"].update(
                max_gen_toks=64
            ),
            "version 1.0, config",
        ),
    ],
)
def test_a_file_of_another_task_version_or_config_is_refused(
    tmp_path: Path, capsys: Capsys, edit: object, what: str
) -> None:
    _suite(tmp_path)
    assert _import(tmp_path, "lm-eval", _samples("same"), "candidate") == 0
    other = _copy_samples(tmp_path, "regressed")
    results = json.loads(_results_of(other).read_text())
    edit(results)  # type: ignore[operator]
    _results_of(other).write_text(json.dumps(results))
    before = _segments(tmp_path)
    capsys.readouterr()
    assert _import(tmp_path, "lm-eval", other, "candidate") == 4
    err = capsys.readouterr().err
    assert err.startswith(f"evalgate import: {other}: task: another task version or config")
    assert f"than the first import {_samples('same').name}" in err and what in err
    assert _segments(tmp_path) == before


def test_records_of_another_task_in_the_store_make_the_gate_invalid(tmp_path: Path) -> None:
    # the import refuses such a file; a store filled some other way is caught by the gate
    _suite(tmp_path)
    _import(tmp_path, "lm-eval", _samples("baseline"), "baseline")
    _import(tmp_path, "lm-eval", _samples("same"), "candidate")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _suite(elsewhere)
    other = _copy_samples(tmp_path, "regressed")
    results = json.loads(_results_of(other).read_text())
    results["versions"]["evalgate_imports"] = 2.0
    _results_of(other).write_text(json.dumps(results))
    assert _import(elsewhere, "lm-eval", other, "candidate") == 0
    (segment,) = _segments(elsewhere)
    target = tmp_path / "store" / segment.relative_to(elsewhere / "store")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(segment, target.with_name("seg-zz-000001.jsonl"))
    assert _gate(tmp_path) == 1
    decision = _decision(tmp_path)
    assert decision["verdict"] == "invalid"
    problems = decision["counts"]["problems"]  # type: ignore[index]
    assert decision["counts"]["problem_count"] == 48  # type: ignore[index]
    assert f"imported from {other.name}" in problems[0]
    assert f"another task version or config than {_samples('same').name}" in problems[0]


def test_an_unknown_candidate_is_refused(tmp_path: Path, capsys: Capsys) -> None:
    _suite(tmp_path)
    assert _import(tmp_path, "lm-eval", _samples("same"), "release-7") == 4
    assert "no candidate 'release-7' in the manifest" in capsys.readouterr().err


def test_a_samples_file_without_results_is_refused(tmp_path: Path, capsys: Capsys) -> None:
    _suite(tmp_path)
    path = _copy_samples(tmp_path)
    _results_of(path).unlink()
    assert _import(tmp_path, "lm-eval", path, "candidate") == 4
    assert f"{path}: results: no results_" in capsys.readouterr().err


# --------------------------------------------------------------------------- incomplete


def test_items_missing_on_one_side_are_incomplete_with_their_ids(
    tmp_path: Path, capsys: Capsys
) -> None:
    _suite(tmp_path)
    _import(tmp_path, "lm-eval", _samples("baseline"), "baseline")
    path = _copy_samples(tmp_path, "same")
    lines = path.read_text().splitlines(keepends=True)
    kept, dropped = lines[:45], [json.loads(line)["doc"]["id"] for line in lines[45:]]
    path.write_text("".join(kept))
    assert _import(tmp_path, "lm-eval", path, "candidate") == 0
    assert _gate(tmp_path) == 1
    out = capsys.readouterr().out
    assert "verdict INCOMPLETE" in out
    labels = [f"imports-eval-v1/candidate/{case_id}[r0]" for case_id in dropped]
    assert f"missing: {', '.join(labels)}" in out
    decision = _decision(tmp_path)
    assert decision["sources"]["missing"] == labels  # type: ignore[index]
    assert decision["counts"]["missing"] == 3  # type: ignore[index]


# --------------------------------------------------------------------------- mapping, units


def test_doc_id_is_the_row_when_the_doc_has_no_id_field() -> None:
    by_id = read_lm_eval_samples(str(_samples("same")))
    by_row = read_lm_eval_samples(str(_samples("same")), id_field="no_such_field")
    assert all(s.case_id is not None and s.row is None for s in by_id.samples)
    assert [s.row for s in by_row.samples] == list(range(48))
    assert [s.score for s in by_row.samples] == [s.score for s in by_id.samples]


def test_doc_id_rows_map_to_the_same_identities(tmp_path: Path) -> None:
    _suite(tmp_path)
    assert _import(tmp_path, "lm-eval", _samples("same"), "candidate", "--id-field", "x") == 0
    (segment,) = _segments(tmp_path)
    records = [json.loads(line) for line in segment.read_text().splitlines()]
    by_id = read_lm_eval_samples(str(_samples("same")))
    assert [r["identity"]["case_id"] for r in records] == [s.case_id for s in by_id.samples]
    assert records[0]["source"]["at"] == "line 1"
    assert {r["score"] for r in records} <= {0.0, 1.0}


def test_the_config_digest_ignores_the_endpoint_lm_eval_copies_into_metadata() -> None:
    one = read_lm_eval_samples(str(_samples("baseline")))
    two = read_lm_eval_samples(str(_samples("same")))
    results = json.loads(_results_of(_samples("baseline")).read_text())
    assert "base_url" in results["configs"]["evalgate_imports"]["metadata"]
    other = json.loads(_results_of(_samples("same")).read_text())
    metadata = (results, other)
    urls = {r["configs"]["evalgate_imports"]["metadata"]["base_url"] for r in metadata}
    assert len(urls) == 2  # two simulators, two ports: the configs as written differ
    assert one.source["config_digest"] == two.source["config_digest"]


def test_the_ledger_fixes_one_task_per_candidate() -> None:
    ledger = SourceLedger()
    source = {
        "harness": "lm-eval", "version": "0.4.13", "file": "a.jsonl", "sha256": "00",
        "at": "line 1", "task": "t", "task_version": "1.0", "config_digest": "sha256:aa",
    }  # fmt: skip
    assert ledger.check("candidate", {"source": source}) is None
    assert ledger.check("baseline", {"source": {**source, "task_version": "2.0"}}) is None
    other = {**source, "file": "b.jsonl", "config_digest": "sha256:bb"}
    reason = ledger.check("candidate", {"source": other})
    assert reason is not None and "b.jsonl" in reason and "than a.jsonl" in reason
    assert ledger.check("candidate", {}) is None  # a generated record
    assert ledger.summary()["candidate"][0]["records"] == 1


# --------------------------------------------------------------------------- generated + imported


def test_imported_and_generated_records_of_one_identity_never_mix_silently(
    pytester: pytest.Pytester, capsys: Capsys
) -> None:
    suite = _suite(pytester.path)
    manifest = suite / "evalgate.yaml"
    # the simulator the regressed fixture was made with, now called by a test run itself
    url = '"simulated://?accuracy=0.5&seed=1"'
    manifest.write_text(manifest.read_text().replace("http://127.0.0.1:9/v1", url))
    run = pytester.runpytest(
        "--evalgate", "suite", "--evalgate-store=store", "--evalgate-candidate=candidate",
        "-q", "-p", "no:cacheprovider",
    )  # fmt: skip
    run.stdout.fnmatch_lines(["*24 failed, 24 passed*"])
    generated = _segments(pytester.path)
    capsys.readouterr()
    # the same answers, imported: alike (lm-eval logs no finish reason), nothing written
    assert _import(pytester.path, "lm-eval", _samples("regressed"), "candidate") == 0
    assert "0 committed, 48 already stored alike" in capsys.readouterr().out
    assert _segments(pytester.path) == generated
    # another model's answers for the same identities: conflicts, and the gate is invalid
    assert _import(pytester.path, "lm-eval", _samples("same"), "candidate") == 1
    out = capsys.readouterr().out
    assert "from a test run): the gate will be invalid" in out
    _import(pytester.path, "lm-eval", _samples("baseline"), "baseline")
    assert _gate(pytester.path) == 1
    decision = _decision(pytester.path)
    assert decision["verdict"] == "invalid"
    assert decision["counts"]["problem_count"] == 14  # type: ignore[index]


def test_an_inspect_sample_the_dataset_lacks_is_refused_naming_the_member(
    tmp_path: Path, capsys: Capsys
) -> None:
    suite = _suite(tmp_path, repetitions=2)
    cases = suite / "cases.jsonl"
    alpha = [line for line in cases.read_text().splitlines(keepends=True) if '"alpha"' in line]
    old = hashlib.sha256(cases.read_bytes()).hexdigest()
    cases.write_text("".join(alpha))
    new = hashlib.sha256(cases.read_bytes()).hexdigest()
    manifest = suite / "evalgate.yaml"
    manifest.write_text(manifest.read_text().replace(old, new))
    assert _import(tmp_path, "inspect", _log("same"), "candidate") == 4
    err = capsys.readouterr().err
    assert f"{_log('same')}: samples/beta-000_epoch_1.json: case 'beta-000' is not in" in err
    assert _segments(tmp_path) == []


def test_a_malformed_source_member_is_a_store_problem() -> None:
    from pytest_evalgate.store.recordcheck import evalgate_record_problem

    source = read_lm_eval_samples(str(_samples("same"))).source
    record = {
        "identity": {"dataset_revision": "r", "case_id": "c", "candidate": "x", "repetition": 0},
        "definition_digest": "d", "candidate_key": "k", "category": "a", "cluster": "a",
        "output": "5", "score": 1.0, "passed": True, "attempts": 1, "error": None,
        "timing": {}, "usage": {}, "finish_reason": None, "shard": 0, "writer": "w",
        "started_at": "", "finished_at": "", "checksum": "",
        "source": {**source, "at": "line 1"},
    }  # fmt: skip
    assert evalgate_record_problem(record) is None
    del record["source"]["task_version"]  # type: ignore[attr-defined]
    assert "source must hold" in str(evalgate_record_problem(record))
