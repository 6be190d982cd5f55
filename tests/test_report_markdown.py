"""report.md: golden files for whole reports, and the pieces (verdict reasons, escaping, slice
rows, what changed, facts) one by one.

Regenerate the golden files after an intended change with
``EVALGATE_UPDATE_GOLDEN=1 python -m pytest tests/test_report_markdown.py`` and read the diff.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
from reportkit import failing_decision, sample_decision, with_facts

from pytest_evalgate.report import (
    EvalgateReportContext,
    EvalgateSignatureStatus,
    evalgate_markdown,
    evalgate_verdict_reason,
)
from pytest_evalgate.report.changes import evalgate_definition_changes, evalgate_pin_changes
from pytest_evalgate.report.facts import (
    evalgate_facts,
    evalgate_rate,
    evalgate_rule_rows,
    evalgate_slice_rows,
)
from pytest_evalgate.report.markdown import evalgate_md_cell

GOLDEN = Path(__file__).parent / "data" / "report"


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("EVALGATE_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{name} differs from its golden file"


def _previous(decision: dict[str, Any]) -> dict[str, Any]:
    previous = copy.deepcopy(decision)
    previous["created_at"] = "2026-01-01T00:00:00+00:00"
    previous["definition_parts"]["prompt.revision"] = "prompt-v0"
    previous["definition_parts"]["generation.max_tokens"] = 32
    previous["policy"]["digest"] = "0" * 64
    return previous


# --------------------------------------------------------------------------- golden files


def test_golden_pass_rendered_from_the_record_alone() -> None:
    _golden("pass.md", evalgate_markdown(sample_decision()))


def test_golden_fail_signed_with_history_and_facts() -> None:
    decision = with_facts(failing_decision())
    context = EvalgateReportContext(
        EvalgateSignatureStatus("signed", keyid="ab12" * 16, envelope="decision.dsse.json"),
        previous=_previous(decision),
        searched=True,
    )
    _golden("fail.md", evalgate_markdown(decision, context))


def test_golden_files_are_real_markdown_tables() -> None:
    text = (GOLDEN / "fail.md").read_text()
    lines = text.splitlines()
    assert lines[0] == "# Release gate: demo-suite"
    assert lines[2].startswith("**Verdict: FAIL**: 2 of 7 rules failed: non_inferior[alpha]")
    assert "```" not in text  # not the terminal output in a code block any more
    for header in ("## Slices", "## Rules", "## Latency", "## Errors", "## Flipped cases (3)",
                   "## Judge", "## Sandbox", "## What changed since the baseline"):  # fmt: skip
        assert header in lines, header
    # every table row has as many cells as its header
    tables = [line for line in lines if line.startswith("| ")]
    assert len(tables) > 30
    for index, line in enumerate(lines):
        if line.startswith("| :--") or line.startswith("| --:"):
            width = lines[index - 1].count(" | ")
            for row in lines[index + 1 :]:
                if not row.startswith("| "):
                    break
                assert row.replace("\\|", "").count(" | ") == width, row


# --------------------------------------------------------------------------- the verdict line


def test_the_verdict_line_comes_first_with_its_reason() -> None:
    lines = evalgate_markdown(sample_decision()).splitlines()
    assert lines[:3] == [
        "# Release gate: demo-suite",
        "",
        "**Verdict: PASS**: all 7 rules pass over 160/160 identities.",
    ]


def test_reasons_of_every_verdict() -> None:
    decision = sample_decision()
    failing = failing_decision()
    assert evalgate_verdict_reason(failing).startswith(
        "2 of 7 rules failed: non_inferior[alpha] fails: lower bound -0.3000 <= -0.1500"
    )
    assert "(and no_regression[alpha])" in evalgate_verdict_reason(failing)
    incomplete = copy.deepcopy(decision)
    incomplete["verdict"] = "incomplete"
    incomplete["counts"].update(completed=150, missing=7, errors={"timeout": 3})
    assert evalgate_verdict_reason(incomplete) == (
        "only 150 of 160 identities have a result (7 missing, 3 errored: timeout 3), so the "
        "rules cannot decide; a rerun resumes and retries them."
    )
    invalid = copy.deepcopy(decision)
    invalid["verdict"] = "invalid"
    invalid["counts"].update(problems=["seg-1.jsonl line 3: checksum mismatch"], problem_count=2)
    assert evalgate_verdict_reason(invalid) == (
        "the store failed verification with 2 problem(s), first: seg-1.jsonl line 3: checksum "
        "mismatch."
    )
    partial = copy.deepcopy(decision)
    partial["verdict"] = "partial"
    assert "selection of the suite" in evalgate_verdict_reason(partial)
    assert "never authorises a release" in evalgate_verdict_reason(partial)
    partial["canary_hits"] = 2
    assert evalgate_verdict_reason(partial).endswith(
        "; 2 output(s) contain the suite's canary string."
    )


# --------------------------------------------------------------------------- tables


def test_slice_rows_carry_n_rates_delta_interval_threshold_and_result() -> None:
    rows = {row.name: row for row in evalgate_slice_rows(failing_decision())}
    assert list(rows) == ["all", "alpha", "beta"]
    alpha = rows["alpha"]
    assert (alpha.n, alpha.baseline, alpha.candidate) == ("20", "34/40 (85.0 %)", "34/40 (85.0 %)")
    assert (alpha.delta, alpha.interval, alpha.threshold) == (
        "-0.2000",
        "[-0.3000, -0.1000]",
        "-0.1500",
    )
    assert alpha.result == "FAIL: non_inferior, no_regression"
    assert (alpha.fixed, alpha.broken) == (("alpha-003",), ("alpha-007",))
    beta = rows["beta"]  # must_improve is its paired rule; the floor does not give the delta
    assert (beta.delta, beta.threshold, beta.result) == ("+0.0500", "+0.0000", "pass")
    assert rows["all"].fixed == ("alpha-003", "beta-001")


def test_no_regression_rows_show_alpha_as_the_test_level() -> None:
    # issue 37: "+0.0500" in the threshold column read as the bar the delta had to pass
    decision = sample_decision()
    rows = {row.name: row for row in evalgate_rule_rows(decision)}
    assert rows["no_regression[alpha]"].threshold == "α = 0.05 (test level)"
    assert rows["non_inferior[alpha]"].threshold == "-0.1500"
    only = copy.deepcopy(decision)
    only["rules"] = [rule for rule in only["rules"] if rule["rule"] == "no_regression"]
    slices = {row.name: row for row in evalgate_slice_rows(only)}
    assert slices["alpha"].threshold == "α = 0.05 (test level)"
    assert "| α = 0.05 (test level) |" in evalgate_markdown(decision)


def test_excluded_cases_are_listed_with_their_reasons() -> None:
    decision = sample_decision()
    assert "Excluded cases" not in evalgate_markdown(decision)  # none: no section
    decision["exclusions"] = [{"case": "alpha-009", "reason": "longer than the context | 2k"}]
    text = evalgate_markdown(decision)
    assert "## Excluded cases (`dataset.exclude`)" in text
    assert "| `alpha-009` | longer than the context \\| 2k |" in text


def test_a_slice_without_paired_numbers_says_so() -> None:
    decision = sample_decision()
    decision["rules"] = [rule for rule in decision["rules"] if rule["slice"] != "beta"]
    del decision["slices"]  # a record from before slices were counted
    rows = {row.name: row for row in evalgate_slice_rows(decision)}
    assert (rows["beta"].n, rows["beta"].delta, rows["beta"].result) == ("-", "-", "no rule")
    assert rows["alpha"].n == "20"  # from its rule


def test_rates_show_denominators() -> None:
    assert evalgate_rate({"passed": 19, "scored": 30}) == "19/30 (63.3 %)"
    assert evalgate_rate({"passed": 0, "scored": 0}) == "-"
    assert evalgate_rate(None) == "-"


def test_cells_cannot_break_the_table_or_inject_html() -> None:
    assert evalgate_md_cell("a|b\nc <script>&") == "a\\|b c &lt;script>&amp;"
    decision = sample_decision()
    decision["rules"][0]["reason"] = "odd | reason <b>"
    text = evalgate_markdown(decision)
    assert "odd \\| reason &lt;b>" in text and "<b>" not in text


def test_code_spans_stay_literal() -> None:
    decision = sample_decision()
    decision["flipped"]["cases"][0]["case_id"] = "a&b<1>"
    text = evalgate_markdown(decision)
    assert "`a&b<1>`" in text  # entities inside a code span would be shown as typed


def test_errors_by_category_from_the_eval_and_the_load_phase() -> None:
    decision = failing_decision()
    decision["perf_phase"] = {"errors": {"candidate": {"timeout": 4}, "baseline": {}}}
    text = evalgate_markdown(decision)
    assert "| eval | timeout | 2 |" in text and "| eval | server_error | 1 |" in text
    assert "| load phase, candidate | timeout | 4 |" in text
    assert "None: every requested identity has a result." in evalgate_markdown(sample_decision())


def test_flipped_cases_by_id_and_a_count_beyond_the_list() -> None:
    decision = sample_decision()
    decision["flipped"]["count"] = 1203
    text = evalgate_markdown(decision)
    assert "## Flipped cases (1203)" in text
    assert "| `alpha` | 1 | `alpha-003` | 1 | `alpha-007` |" in text
    assert "1200 more flipped case(s) are counted but not listed." in text
    none = sample_decision()
    none["flipped"] = {"count": 0, "cases": []}
    assert "None: no case changed between baseline and candidate." in evalgate_markdown(none)


# --------------------------------------------------------------------------- what changed


def test_pins_of_candidate_against_baseline() -> None:
    rows = {row.name: row for row in evalgate_pin_changes(sample_decision())}
    assert list(rows)[:4] == ["model", "weights_digest", "serving_image", "tokenizer"]
    assert rows["weights_digest"].changed and rows["quantization"].changed
    assert (rows["quantization"].before, rows["quantization"].now) == ("bf16", "fp8")
    assert not rows["tokenizer"].changed and not rows["tensor_parallel"].changed
    text = evalgate_markdown(sample_decision())
    assert "Candidate against baseline: 3 of 7 pins differ." in text
    assert "| `quantization` | `bf16` | `fp8` | changed |" in text


def test_a_pin_only_one_side_has_is_a_change() -> None:
    decision = sample_decision()
    decision["candidate"]["pins"]["pipeline_parallel"] = 2
    rows = {row.name: row for row in evalgate_pin_changes(decision)}
    assert (rows["pipeline_parallel"].before, rows["pipeline_parallel"].now) == ("-", "2")
    assert rows["pipeline_parallel"].changed


def test_definition_changes_since_the_last_decision() -> None:
    decision = sample_decision()
    rows = {row.name: row for row in evalgate_definition_changes(decision, _previous(decision))}
    assert set(rows) == {"definition.prompt.revision", "definition.generation.max_tokens",
                         "policy.digest"}  # fmt: skip
    assert (rows["definition.prompt.revision"].before, rows["definition.prompt.revision"].now) == (
        "prompt-v0", "prompt-v1",
    )  # fmt: skip
    assert evalgate_definition_changes(decision, copy.deepcopy(decision)) == []
    assert evalgate_definition_changes(decision, None) == []


def test_an_old_record_without_parts_compares_the_digest() -> None:
    decision = sample_decision()
    old = copy.deepcopy(decision)
    del old["definition_parts"]
    old["definition_digest"] = "0" * 64
    rows = evalgate_definition_changes(decision, old)
    assert [(row.name, row.before, row.now) for row in rows] == [
        ("definition_digest", "0" * 64, "d" * 64)
    ]


@pytest.mark.parametrize(
    ("context", "sentence"),
    [
        (
            EvalgateReportContext(),
            "Not compared: this report was rendered from decision.json alone.",
        ),
        (EvalgateReportContext(searched=True), "No earlier decision of this suite is kept"),
    ],
)
def test_the_history_sentence(context: EvalgateReportContext, sentence: str) -> None:
    assert sentence in evalgate_markdown(sample_decision(), context)


def test_unchanged_since_the_last_decision() -> None:
    decision = sample_decision()
    previous = copy.deepcopy(decision)
    previous["created_at"] = "2025-12-31T23:59:59+00:00"
    text = evalgate_markdown(decision, EvalgateReportContext(previous=previous, searched=True))
    assert (
        "Unchanged since the decision of 2025-12-31T23:59:59+00:00 (verdict pass): same "
        "definition, policy and compared models."
    ) in text


# --------------------------------------------------------------------------- facts, signature


def test_judge_and_sandbox_facts_when_present_only() -> None:
    plain = evalgate_markdown(sample_decision())
    assert "## Judge" not in plain and "## Sandbox" not in plain
    decision = with_facts(sample_decision())
    assert ("agreement.kappa", "0.8123") in evalgate_facts(decision, "judge")
    assert ("sandboxed", "yes") in evalgate_facts(decision, "sandbox")
    text = evalgate_markdown(decision)
    assert "| `agreement.kappa` | 0.8123 |" in text and "| `isolation` | bwrap |" in text
    decision["sandbox"] = "unsandboxed"  # a stage may publish a bare value
    assert evalgate_facts(decision, "sandbox") == [("sandbox", "unsandboxed")]


@pytest.mark.parametrize(
    ("status", "text"),
    [
        (EvalgateSignatureStatus("unsigned"), "not signed: no signing key was given"),
        (EvalgateSignatureStatus("refused", detail="verdict 'partial' is never signed"),
         "not signed: verdict 'partial' is never signed"),
        (EvalgateSignatureStatus("signed", keyid="k1", envelope="decision.dsse.json"),
         "signed: DSSE envelope decision.dsse.json, ECDSA P-256 key id k1"),
        (EvalgateSignatureStatus("absent"), "no decision.dsse.json beside decision.json"),
    ],
)  # fmt: skip
def test_the_signature_line(status: EvalgateSignatureStatus, text: str) -> None:
    assert text in evalgate_markdown(sample_decision(), EvalgateReportContext(status))


def test_case_text_only_from_the_context() -> None:
    decision = sample_decision()
    texts = {"alpha-003": {"input": "What is 3+3?", "target": "6", "candidate": "6",
                           "baseline": "five | " + "x" * 300}}  # fmt: skip
    plain = evalgate_markdown(decision)
    assert "What is 3+3?" not in plain and "Case text" not in plain
    text = evalgate_markdown(decision, EvalgateReportContext(texts=texts))
    assert "Case text (shown because --evalgate-report-text asked for it):" in text
    row = next(line for line in text.splitlines() if line.startswith("| `alpha-003` | What"))
    assert "| 6 | five \\| xxx" in row and row.endswith("x... | 6 |")  # cut at 200 characters


def test_the_capacity_sweep_is_shown_when_the_load_window_was_not_judged() -> None:
    decision = sample_decision()
    decision["perf"] = {}  # the window at perf.rate did not count: no latency samples
    step = {
        "requested_rate": 20.0, "achieved_rate": {"candidate": 20.0, "baseline": 19.5},
        "ttft_p95_s": {"candidate": 1.489, "baseline": 0.2}, "tpot_p95_s": {"candidate": 0.01},
        "errored": {"candidate": 2}, "counts": {"candidate": True, "baseline": True},
    }  # fmt: skip
    decision["perf_phase"] = {
        "reason": "NOT JUDGED: load generator could not keep up",
        "sweep": [step],
        "max_rate_at_slo": [{"slo": {"ttft_p95_s": 0.5, "tpot_p95_s": 0.05},
                             "rates": {"candidate": 10.0, "baseline": 20.0}}],
    }  # fmt: skip
    text = evalgate_markdown(decision)  # type: ignore[arg-type]
    assert "Load phase: NOT JUDGED: load generator could not keep up" in text
    assert "### Capacity sweep (open loop, both models over the same windows)" in text
    assert "tpot p95 <= 0.05 s): baseline 20/s, candidate 10/s." in text
    assert "| 20/s | candidate | 20.00/s |" in text
    del decision["perf_phase"]["sweep"]
    assert "## Latency" not in evalgate_markdown(decision)  # type: ignore[arg-type]
