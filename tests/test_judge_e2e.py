"""The judge end to end (SPEC section 10, issue 11): real ``pytest --evalgate`` runs against
simulated candidates and a simulated judge, their request logs and the store.

What is shown: each answer judged once (pointwise) or twice (pairwise, both orders); a rerun
requests nothing; changing only the judge re-judges every stored answer of both candidates
with zero candidate requests (in a run and with ``evalgate rejudge``); the refusals exit 4
before any request; an uncalibrated judge fails the gate with the judge named; position bias
shows up as inconsistency and the swap removes it from the net win rate.
"""

from __future__ import annotations

import functools
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from assertkit import evalgate_decided_exit
from judgekit import (
    decision,
    judgment_counts,
    judgment_lines,
    requests,
    run_cli_inprocess,
    run_pytest_inprocess,
    set_judge,
    split,
    write_judged_suite,
)
from suitekit import make_cases

from pytest_evalgate.judge.pairwise import (
    EvalgatePairJudgment,
    evalgate_net_win_rate,
    evalgate_pair_outcome,
    evalgate_pairwise_cases,
)
from pytest_evalgate.judge.parse import EvalgateWinner
from pytest_evalgate.manifest.load import evalgate_load_manifest

pytestmark = pytest.mark.slow

CASES = 20  # make_cases(["alpha", "beta"], 10)
GOLDEN_POINTWISE = 3 * CASES
GOLDEN_PAIRWISE = 2 * CASES


RunPytest = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run_pytest(pytester: pytest.Pytester) -> RunPytest:
    """``judgekit.run_pytest_inprocess`` bound to this test's pytester: every run here is a
    whole ``pytest --evalgate`` session (real simulators, runner child, xdist workers), only
    the session itself shares this process instead of starting a Python of its own."""
    return functools.partial(run_pytest_inprocess, pytester)


def _suite(tmp_path: Path, **kwargs: object) -> tuple[Path, Path, Path]:
    path = write_judged_suite(tmp_path / "suite", **kwargs)  # type: ignore[arg-type]
    return path, tmp_path / "store", tmp_path / "requests.jsonl"


def test_pointwise_judges_each_answer_once_and_a_rerun_requests_nothing(
    tmp_path: Path, run_pytest: RunPytest
) -> None:
    path, store, log = _suite(tmp_path)
    report = tmp_path / "report"
    done = run_pytest(path.parent, store, log, f"--evalgate-report={report}")
    assert done.returncode == evalgate_decided_exit(done.stdout), done.stderr
    answers, judged = split(requests(log))
    assert len(answers) == 2 * CASES and len(set(answers)) == 2 * CASES
    assert len(judged) == 2 * CASES + GOLDEN_POINTWISE
    counts = judgment_counts(store)
    assert len(counts) == 2 * CASES + GOLDEN_POINTWISE and set(counts.values()) == {1}
    made = decision(report)
    manifest = evalgate_load_manifest(str(path))
    assert manifest.judged is not None
    assert made["judge"]["key"] == manifest.judged.key
    assert made["judge"]["model"] == "judge-model"
    assert made["judge"]["agreement"]["n"] == GOLDEN_POINTWISE
    assert (
        f"judged by judge-model (judge-prompt-v1, pointwise), judge key {made['judge']['key'][:16]}"
        in done.stdout
    )
    again = run_pytest(path.parent, store, log)
    assert again.returncode == done.returncode
    assert len(requests(log)) == len(answers) + len(judged)  # nothing requested again


def test_pointwise_items_pass_at_the_scale_and_scores_feed_the_paired_rules(
    tmp_path: Path,
    run_pytest: RunPytest,
) -> None:
    # The candidate always answers right (the judge, accuracy 1, gives 5), the baseline never
    # (1): every candidate item passes, every baseline item fails, the paired difference is 1.
    path, store, log = _suite(
        tmp_path,
        candidate="simulated://?accuracy=1.0&seed=1",
        baseline="simulated://?accuracy=0.0&seed=2",
        judge_url="simulated://?judge=1&accuracy=1.0&seed=5",
        rules=[{"slice": "all", "rule": "must_improve", "target": 0.5}],
    )
    report = tmp_path / "report"
    done = run_pytest(path.parent, store, log, f"--evalgate-report={report}", "-rf")
    assert done.returncode == 0, done.stdout
    assert f"{CASES} failed, {CASES + 1} passed" in done.stdout  # + the gate rule's item
    assert "wrong answer" in done.stdout and "baseline::" in done.stdout
    rule = decision(report)["rules"][0]
    assert rule["estimate"] == pytest.approx(1.0)


def test_unparseable_verdicts_are_errors_never_wrong_answers(
    tmp_path: Path, run_pytest: RunPytest
) -> None:
    path, store, log = _suite(
        tmp_path, judge_url="simulated://?judge=1&accuracy=1.0&unparseable_rate=1.0&seed=5",
        golden=False,
    )  # fmt: skip
    report = tmp_path / "report"
    done = run_pytest(path.parent, store, log, f"--evalgate-report={report}")
    assert done.returncode == 1
    assert f"{2 * CASES} errors" in done.stdout and "wrong answer" not in done.stdout
    made = decision(report)
    assert made["verdict"] == "incomplete"
    assert made["counts"]["errors"] == {"judge_unparseable": 2 * CASES}
    lines = judgment_lines(store)
    assert {line["error"]["category"] for line in lines} == {"judge_unparseable"}
    # Stored and counted, and requested again by the next run (never reused as a verdict).
    run_pytest(path.parent, store, log)
    _answers, judged = split(requests(log))
    assert Counter(judged) == Counter({identity: 2 for identity in set(judged)})


@pytest.mark.parametrize(("mode", "per_answer"), [("pointwise", 1), ("pairwise", 2)])
def test_changing_only_the_judge_revision_rejudges_without_candidate_requests(
    tmp_path: Path, run_pytest: RunPytest, mode: str, per_answer: int
) -> None:
    path, store, log = _suite(tmp_path, mode=mode, golden=False)
    ran = run_pytest(path.parent, store, log)
    assert ran.returncode == evalgate_decided_exit(ran.stdout)
    first = requests(log)
    answers, judged = split(first)
    assert len(answers) == 2 * CASES
    assert len(judged) == 2 * CASES  # pointwise: 1 per answer; pairwise: 2 per pair
    set_judge(path, revision="judge-prompt-v2")
    again = run_pytest(path.parent, store, log)
    assert again.returncode == evalgate_decided_exit(again.stdout) == ran.returncode
    again_answers, again_judged = split(requests(log)[len(first) :])
    assert again_answers == []  # zero requests to either candidate endpoint
    stored_answers = 2 * CASES
    pairs = CASES
    assert len(again_judged) == (stored_answers if mode == "pointwise" else 2 * pairs)
    assert len(again_judged) == per_answer * (stored_answers if mode == "pointwise" else pairs)
    keys = {line["judge_key"] for line in judgment_lines(store)}
    assert len(keys) == 2  # the old judgments stay, under their own key


def test_evalgate_rejudge_needs_no_candidate_endpoint(
    tmp_path: Path, run_pytest: RunPytest
) -> None:
    path, store, log = _suite(tmp_path, mode="pairwise")
    first = run_pytest(path.parent, store, log)
    assert first.returncode == evalgate_decided_exit(first.stdout)
    set_judge(path, revision="judge-prompt-v3")
    gated = run_cli_inprocess("gate", str(path.parent), "--store", str(store), cwd=tmp_path)
    assert gated.returncode == 1  # nothing judged under the new key: incomplete, never mixed
    assert "verdict INCOMPLETE" in gated.stdout and "must be re-baselined" in gated.stdout
    cli_log = tmp_path / "cli-requests.jsonl"
    done = run_cli_inprocess(
        "rejudge", str(path.parent), "--store", str(store), "--request-log", str(cli_log),
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answers, judged = split(requests(cli_log))
    assert answers == []
    assert len(judged) == 2 * CASES + GOLDEN_PAIRWISE  # two per pair, one per golden row
    assert "judge requests 80, judgments reused 0" in done.stdout
    before = len(requests(log))
    last = run_pytest(path.parent, store, log)
    assert last.returncode == evalgate_decided_exit(last.stdout)
    assert len(requests(log)) == before  # the next run finds every judgment stored


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"models": {"candidate": "judge-model"}}, "judge.model"),
        ({"candidate_pins": {"family": "judge-family"}}, "judge.pins.family"),
        ({"candidate_pins": {"training_run": "judge-run-1"}}, "judge.pins.training_run"),
        ({"rubric": None}, "evaluator.rubric"),
        ({"judge": {"temperature": 0.7}}, "judge.temperature"),
    ],
)
def test_refusals_exit_4_before_any_request(
    tmp_path: Path, run_pytest: RunPytest, changes: dict[str, object], key: str
) -> None:
    path, store, log = _suite(tmp_path, **changes)
    done = run_pytest(path.parent, store, log)
    assert done.returncode == 4
    assert key in done.stderr + done.stdout
    assert requests(log) == []
    assert not store.exists() or not any(store.rglob("*.jsonl"))


_GOLDEN_DEFECTS = [
    (b'{"case_id": "alpha-000", "output": "x", "label": 9}\n', "line 1: label: 9 is outside"),
    (b'{"case_id": "alpha-000", "output": "x", "label": true}\n', "line 1: label: not an"),
    (b'{"case_id": "alpha-000", "output": "x", "label": 2.5}\n', "line 1: label: not an"),
    (b'{"case_id": "nope", "output": "x", "label": 3}\n', "line 1: case_id: no case 'nope'"),
    (b'{"case_id": "alpha-000", "output": "x", "label": 3}\n{bad\n', "line 2: not valid JSON"),
    (b"", "the golden set has no rows"),
    (b"\xff\xfe\n", "the golden set is not UTF-8"),
]


@pytest.mark.parametrize(("text", "reason"), _GOLDEN_DEFECTS)
def test_a_malformed_golden_set_is_exit_4_naming_file_and_line_before_any_request(
    tmp_path: Path, run_pytest: RunPytest, text: bytes, reason: str
) -> None:
    # It was an INTERNALERROR traceback (exit 3) from the judge's simulator start, or from the
    # calibration after every answer was requested: the golden set is read at manifest load.
    path, store, log = _suite(tmp_path)
    (path.parent / "golden.jsonl").write_bytes(text)
    # the first row also under xdist (its controller loads the manifest, not a worker); the
    # other rows take the same load path in one process, at a third of the CPU
    workers = ("-n", "2") if reason == _GOLDEN_DEFECTS[0][1] else ()
    done = run_pytest(path.parent, store, log, *workers)
    output = done.stdout + done.stderr
    assert done.returncode == 4, output
    assert "INTERNALERROR" not in output
    assert "golden.jsonl: " in output and reason in output
    assert requests(log) == []
    gated = run_cli_inprocess("gate", str(path.parent), f"--store={store}", cwd=tmp_path)
    assert gated.returncode == 4 and reason in gated.stderr, gated.stdout + gated.stderr


def test_a_judge_budget_smaller_than_its_processes_is_exit_4_before_any_request(
    tmp_path: Path,
    run_pytest: RunPytest,
) -> None:
    # judge.budget is run-wide like the candidates' budget: one slot cannot serve two workers
    path, store, log = _suite(tmp_path, judge={"budget": {"max_concurrency": 1, "timeout_s": 10}})
    done = run_pytest(path.parent, store, log, "-n", "2")
    assert done.returncode == 4, done.stdout + done.stderr
    assert (
        "evalgate.yaml: judge.budget.max_concurrency: 1 is less than the 2 processes sharing it"
        " (1 shard x 2 xdist workers)" in done.stderr + done.stdout
    )
    assert requests(log) == []
    assert not store.exists() or not any(store.rglob("*.jsonl"))


def test_an_uncalibrated_judge_fails_the_gate_naming_the_judge(
    tmp_path: Path, run_pytest: RunPytest
) -> None:
    rules = [
        {"slice": "all", "rule": "non_inferior", "margin": 0.5},
        {"rule": "judge_agreement", "min_kappa": 0.6},
    ]
    cases = make_cases(["alpha", "beta"], 30)
    path, store, log = _suite(
        tmp_path, rules=rules, cases=cases, judge_url="simulated://?judge=1&accuracy=0.95&seed=5"
    )
    report = tmp_path / "report"
    assert run_pytest(path.parent, store, log, f"--evalgate-report={report}").returncode == 0
    good = decision(report)["rules"][1]
    assert good["passed"] and good["lo"] >= 0.6
    set_judge(path, base_url="simulated://?judge=1&accuracy=0.2&seed=5", revision="weak")
    done = run_pytest(path.parent, store, log, f"--evalgate-report={report}")
    assert done.returncode == 1
    bad = decision(report)["rules"][1]
    assert not bad["passed"] and bad["lo"] < 0.6
    assert "the judge failed, not the candidate" in bad["reason"]
    assert "judge-model" in bad["reason"]
    assert decision(report)["rules"][0]["passed"]  # the candidate itself is fine


def test_position_bias_is_inconsistency_and_the_swap_removes_it(
    tmp_path: Path, run_pytest: RunPytest
) -> None:
    # Two candidates of equal quality (both always wrong, each its own way): the judge is
    # unsure of every pair and prefers answer A with probability 0.3.
    cases = make_cases(["alpha", "beta", "gamma"], 100)
    path, store, log = _suite(
        tmp_path, mode="pairwise", cases=cases, golden=False,
        candidate="simulated://?accuracy=0.0&seed=1", baseline="simulated://?accuracy=0.0&seed=2",
        judge_url="simulated://?judge=1&accuracy=0.9&position_bias=0.3&seed=5",
    )  # fmt: skip
    report = tmp_path / "report"
    done = run_pytest(path.parent, store, log, f"--evalgate-report={report}")
    assert done.returncode == 0, done.stdout
    made = decision(report)
    rule = made["rules"][0]
    assert rule["lo"] < 0.0 < rule["hi"]  # both orders: the net win rate's interval covers 0
    assert "position inconsistency (pairs judged both ways): all " in done.stdout
    assert "| `inconsistency.all.rate` |" in (report / "report.md").read_text()
    rate = made["judge"]["inconsistency"]["all"]["rate"]
    assert made["judge"]["inconsistency"]["all"]["pairs"] == 300
    assert abs(rate - 0.3) < 4 * (0.3 * 0.7 / 300) ** 0.5  # within Monte Carlo error
    one_order = _one_order_net_win_rate(store)
    assert abs(one_order - 0.3) < 0.12  # candidate first only: biased by about the bias


_SWAPPED: dict[str, EvalgateWinner] = {"A": "B", "B": "A", "tie": "tie"}


def _one_order_net_win_rate(store: Path) -> float:
    pairs = []
    for line in judgment_lines(store):
        part = line["judgment"]
        if part["order"] != "candidate_first":
            continue
        winner: EvalgateWinner = line["verdict"]["winner"]
        # One order alone, read as if it were both: A = win, B = loss, tie = tie.
        outcome = evalgate_pair_outcome(winner, _SWAPPED[winner])
        pairs.append(
            EvalgatePairJudgment(part["case_id"], line["category"], line["cluster"], 0, outcome)
        )
    return evalgate_net_win_rate(evalgate_pairwise_cases(pairs), 200, 0, 0.95).estimate
