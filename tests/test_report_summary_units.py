"""report/: the terminal summary's exact lines, the report folder's helpers and trend.png.

The summary is plain lines of ids and numbers: the verdict line (definition digest cut to 16),
counts and errors, the first 10 problems, rates, a load phase, the judge, the rule table (its
threshold column widened for no_regression's test level), flips (the first 20, then a count)
and canary hits.
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any, cast

import pytest
from reportkit import failing_decision, sample_decision

from pytest_evalgate.aggregate.trend import EvalgateTrend, EvalgateTrendCell, EvalgateTrendPoint
from pytest_evalgate.report import (
    EVALGATE_ENVELOPE_NAME,
    evalgate_append_step_summary,
    evalgate_summary_lines,
)
from pytest_evalgate.report.shape import EvalgateDecision
from pytest_evalgate.report.trend import evalgate_trend_png
from pytest_evalgate.report.write import evalgate_envelope_states, evalgate_folder_context


def _lines(decision: dict[str, Any]) -> list[str]:
    return evalgate_summary_lines(cast(EvalgateDecision, decision))


def _plain() -> dict[str, Any]:
    """The sample decision without rules, rates or flips: only the head lines remain."""
    decision = sample_decision()
    decision.update(rules=[], rates={}, flipped={"count": 0, "cases": []})
    return decision


def test_a_plain_decision_has_the_verdict_counts_and_no_flips() -> None:
    assert _lines(_plain()) == [
        "suite demo-suite (dddddddddddddddd): verdict PASS",
        "identities completed 160/160, missing 0, errors none, duplicates collapsed 0",
        "flipped cases: none",
    ]


def test_a_partial_selection_says_it_cannot_be_attested() -> None:
    decision = _plain()
    decision["partial"] = True
    decision["verdict"] = "invalid"
    head = _lines(decision)[0]
    assert head == (
        "suite demo-suite (dddddddddddddddd): verdict INVALID (partial selection: not attestable)"
    )


def test_errors_are_listed_in_order_and_only_ten_problems_shown() -> None:
    decision = _plain()
    decision["counts"].update(
        errors={"timeout": 2, "server_error": 1},
        missing=3,
        completed=157,
        duplicates_collapsed=4,
        problems=[f"problem {n}" for n in range(12)],
    )
    lines = _lines(decision)
    assert lines[1] == (
        "identities completed 157/160, missing 3, errors timeout 2, server_error 1, "
        "duplicates collapsed 4"
    )
    assert lines[2:12] == [f"INVALID: problem {n}" for n in range(10)]
    assert lines[12] == "flipped cases: none"


def test_rates_give_passed_of_scored_per_slice() -> None:
    decision = _plain()
    decision["rates"] = sample_decision()["rates"]
    assert _lines(decision)[2:4] == [
        "candidate: all 70/80, alpha 34/40, beta 36/40",
        "baseline: all 68/80, alpha 34/40, beta 34/40",
    ]


def test_the_rule_table_has_one_row_per_rule_with_signed_numbers() -> None:
    decision = _plain()
    rules = sample_decision()["rules"]
    decision["rules"] = [rules[0], rules[6]]  # non_inferior[all], max_delta[error_rate]
    table = _lines(decision)[2:5]
    assert table[0] == f"{'rule':<34} {'estimate':>9} {'interval':>21} {'threshold':>9}  result"
    assert table[1] == (
        f"{'non_inferior[all]':<34} {'+0.0250':>9} {'[-0.0500, +0.1000]':>21} "
        f"{'-0.1000':>9}  pass: passes: lower bound -0.0500 > -0.1000"
    )
    assert table[2] == (
        f"{'max_delta[error_rate]':<34} {'+0.0000':>9} {'[-, -]':>21} "
        f"{'+0.0020':>9}  pass: passes: error rate delta +0.0000 <= 0.002"
    )


def test_no_regression_widens_the_threshold_column_to_its_test_level() -> None:
    decision = failing_decision()
    decision.update(rates={}, flipped={"count": 0, "cases": []})
    cell = "α = 0.05 (test level)"
    lines = _lines(decision)
    header = next(line for line in lines if line.startswith("rule "))
    assert header.endswith(f"{'threshold':>{len(cell)}}  result")
    row = next(line for line in lines if line.startswith("no_regression[alpha]"))
    assert f" {cell}  FAIL: drop detected" in row
    widths = {len(line) - len(line.split("  ")[-1]) for line in lines if line.startswith("non_")}
    assert len(widths) == 1  # every row's result starts in the same column


def test_flips_show_the_first_twenty_then_how_many_more() -> None:
    decision = _plain()
    cases = [
        {"case_id": f"c{n}", "category": "a", "baseline": 1.0, "candidate": 0.0} for n in range(23)
    ]
    decision["flipped"] = {"count": 23, "cases": cases}
    line = _lines(decision)[-1]
    shown = ", ".join(f"c{n} (1.0->0.0)" for n in range(20))
    assert line == f"flipped cases (23): {shown}, +3 more"
    decision["flipped"] = {"count": 2, "cases": cases[:2]}
    assert _lines(decision)[-1] == "flipped cases (2): c0 (1.0->0.0), c1 (1.0->0.0)"


def test_canary_hits_are_the_last_line() -> None:
    decision = _plain()
    decision["canary_hits"] = 2
    assert _lines(decision)[-1] == "CANARY: 2 output(s) contain the canary string"


def _phase(**overrides: Any) -> dict[str, Any]:
    phase: dict[str, Any] = {
        "profile": "poisson",
        "duration_s": 30.0,
        "requested_rate": 4.0,
        "achieved_rate": {"candidate": 3.96, "baseline": 4.01},
        "delay_p50_s": 0.0012,
        "delay_p95_s": 0.0104,
        "judgeable": True,
        "reason": "",
    }
    phase.update(overrides)
    return phase


def test_a_load_phase_gives_rates_delays_and_whether_it_was_judged() -> None:
    decision = _plain()
    decision["perf_phase"] = _phase()
    assert _lines(decision)[2:4] == [
        "load phase (poisson, 30 s): requested 4/s, achieved candidate 4.0/s, baseline 4.0/s; "
        "scheduling delay p50 1.2 ms, p95 10.4 ms",
        "load phase judged",
    ]
    decision["perf_phase"] = _phase(
        judgeable=False, reason="achieved rate too low", delay_p50_s=None, delay_p95_s=None
    )
    lines = _lines(decision)
    assert lines[2].endswith("scheduling delay p50 - ms, p95 - ms")
    assert lines[3] == "load phase NOT JUDGED: achieved rate too low"


def test_the_judge_lines_name_the_judge_inconsistency_and_agreement() -> None:
    decision = _plain()
    decision["judge"] = {
        "model": "judge-70b",
        "revision": "judge-v1",
        "mode": "pairwise",
        "key": "k" * 40,
        "inconsistency": {
            "beta": {"inconsistent": 1, "pairs": 20},
            "all": {"inconsistent": 3, "pairs": 40},
        },
        "agreement": {
            "kappa": 0.8123,
            "interval": [0.7, 0.9],
            "raw_agreement": 0.9,
            "n": 50,
            "weights": "quadratic",
        },
    }
    assert _lines(decision)[2:5] == [
        "judged by judge-70b (judge-v1, pairwise), judge key kkkkkkkkkkkkkkkk",
        "position inconsistency (pairs judged both ways): all 3/40, beta 1/20",
        "judge agreement with people: kappa +0.8123 [+0.7000, +0.9000], raw +0.9000, "
        "n 50 (quadratic)",
    ]
    decision["judge"] = {"model": "j", "revision": "r", "mode": "pointwise", "key": "abc"}
    assert _lines(decision)[2:4] == [
        "judged by j (r, pointwise), judge key abc",
        "flipped cases: none",
    ]


def test_sandbox_facts_follow_the_flips() -> None:
    decision = _plain()
    nearest = {"p50": 0.0123, "p95": 0.0456}
    decision["sandbox"] = {
        "isolation": ["bwrap"],
        "sandboxed": False,
        "unsandboxed_executions": 3,
        "executions": 10,
        "outcomes": {"candidate": {"passed": 7, "failed": 3}},
        "sandbox_errors": 1,
        "pass_at_k": 2,
        "start_s": nearest,
        "run_s": nearest,
        "reason": "no bwrap on this machine",
    }
    assert _lines(decision)[3:] == [
        "sandbox: isolation bwrap, 10 executions, start p50 12 ms p95 46 ms, "
        "scores are pass@2 per case",
        "sandbox outcomes candidate: passed 7, failed 3",
        "sandbox errors (no result, retried next run): 1",
        "UNSANDBOXED: 3 executions; no bwrap on this machine",
    ]


def test_the_summary_holds_no_case_text() -> None:
    decision = sample_decision()
    decision["definition_parts"]["prompt.system"] = "SECRET SYSTEM PROMPT"
    assert not any("SECRET" in line for line in _lines(decision))


# --- the report folder's helpers --------------------------------------------------------------


def _envelope(path: Path, predicate: object, *, urlsafe: bool = True, pad: bool = False) -> None:
    statement = json.dumps({"predicate": predicate}).encode()
    encode = base64.urlsafe_b64encode if urlsafe else base64.standard_b64encode
    payload = encode(statement).decode()
    path.write_text(json.dumps({"payload": payload if pad else payload.rstrip("=")}))


@pytest.mark.parametrize(("urlsafe", "pad"), [(True, False), (True, True), (False, True)])
def test_an_envelope_states_the_decision_in_its_payload(
    tmp_path: Path, urlsafe: bool, pad: bool
) -> None:
    decision = cast(EvalgateDecision, sample_decision())
    path = tmp_path / EVALGATE_ENVELOPE_NAME
    _envelope(path, decision, urlsafe=urlsafe, pad=pad)
    assert evalgate_envelope_states(str(path), decision)
    other = copy.deepcopy(sample_decision())
    other["verdict"] = "fail"
    assert not evalgate_envelope_states(str(path), cast(EvalgateDecision, other))


@pytest.mark.parametrize(
    "text",
    ["not json", "{}", '{"payload": "!!!"}', '{"payload": "W10"}', '{"payload": 3}', "[]"],
)
def test_an_unreadable_envelope_states_nothing(tmp_path: Path, text: str) -> None:
    path = tmp_path / EVALGATE_ENVELOPE_NAME
    path.write_text(text)
    assert not evalgate_envelope_states(str(path), cast(EvalgateDecision, sample_decision()))
    assert not evalgate_envelope_states(str(tmp_path / "absent.json"), cast(Any, {}))


def test_a_folder_s_context_says_whether_an_envelope_lies_in_it(tmp_path: Path) -> None:
    absent = evalgate_folder_context(str(tmp_path)).signature
    assert absent is not None and absent.state == "absent"
    (tmp_path / EVALGATE_ENVELOPE_NAME).write_text("{}")
    signature = evalgate_folder_context(str(tmp_path)).signature
    assert signature is not None
    assert (signature.state, signature.envelope) == ("present", EVALGATE_ENVELOPE_NAME)


def test_the_step_summary_is_appended_to_ending_in_a_newline(tmp_path: Path) -> None:
    path = tmp_path / "summary.md"
    evalgate_append_step_summary(str(path), "# one")
    evalgate_append_step_summary(str(path), "two\n")
    evalgate_append_step_summary(str(path), "ünïcode")
    assert path.read_text(encoding="utf-8") == "# one\ntwo\nünïcode\n"


# --- trend.png --------------------------------------------------------------------------------


def _point(name: str, rates: dict[str, tuple[int, int]] | None) -> EvalgateTrendPoint:
    if rates is None:
        return EvalgateTrendPoint(name, "m", "incomplete", "3 identities missing")
    cells = {
        slice_name: EvalgateTrendCell(k, n, k / n, max(0.0, k / n - 0.1), min(1.0, k / n + 0.1))
        for slice_name, (k, n) in rates.items()
    }
    return EvalgateTrendPoint(name, "m", "complete", cells=cells)


def _trend(*points: EvalgateTrendPoint, slices: tuple[str, ...] = ("all", "a")) -> EvalgateTrend:
    return EvalgateTrend("suite", "d" * 64, 0.95, slices, points)


def test_no_trend_png_when_no_checkpoint_has_rates(tmp_path: Path) -> None:
    path = tmp_path / "trend.png"
    assert not evalgate_trend_png(_trend(_point("c1", None), _point("c2", None)), str(path))
    assert not path.exists()


def test_a_trend_png_is_written_with_gaps_for_checkpoints_without_rates(tmp_path: Path) -> None:
    path = tmp_path / "trend.png"
    points = (
        _point("c1", {"all": (3, 4), "a": (1, 2)}),
        _point("c2", None),
        _point("c3", {"all": (4, 4), "a": (2, 2)}),
    )
    slices = ("all", "a", "b", "c")  # four panels: two rows of three, two hidden
    assert evalgate_trend_png(_trend(*points, slices=slices), str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert _trend(*points).complete is False
    assert _trend(points[0], points[2]).complete is True
