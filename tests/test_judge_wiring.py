"""The judge's wiring without a run: manifest part, judgment records, judged aggregation views,
the gate's judge rules, the simulated judge's truth and the items' judged views."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from judgekit import set_judge, write_judged_suite
from suitekit import make_cases

from pytest_evalgate.aggregate.judged import EvalgateJudgeFacts, evalgate_judge_overlay
from pytest_evalgate.errors import EvalgateConfigError, EvalgatePolicyError
from pytest_evalgate.gate.judge import evalgate_judge_rule
from pytest_evalgate.gate.rules import evalgate_evaluate
from pytest_evalgate.judge.agreement import evalgate_pointwise_agreement
from pytest_evalgate.judge.golden import EvalgateGoldenPointwise
from pytest_evalgate.judge.pairwise import (
    EvalgatePairJudgment,
    evalgate_pair_outcome,
    evalgate_pairwise_cases,
)
from pytest_evalgate.judge.spec import EvalgateJudgeScale
from pytest_evalgate.manifest.judge import evalgate_definition_evaluator
from pytest_evalgate.manifest.load import EvalgateManifest, evalgate_load_manifest
from pytest_evalgate.policy.load import evalgate_load_policy
from pytest_evalgate.runner.judge_views import evalgate_judged_view
from pytest_evalgate.simulated.answers import evalgate_load_answer_key
from pytest_evalgate.simulated.judge_style import (
    evalgate_sim_judge_answerer,
    evalgate_sim_key_truth,
    evalgate_write_judge_truth,
)
from pytest_evalgate.simulated.knobs import EvalgateSimConfig
from pytest_evalgate.simulated.styles import EvalgateSimAsk, evalgate_sim_answerer
from pytest_evalgate.store import (
    EvalgateIdentity,
    EvalgateLocalStore,
    EvalgateRecord,
    EvalgateStoreView,
    evalgate_record,
)
from pytest_evalgate.store.judgments import (
    EvalgateJudgmentContext,
    EvalgateJudgmentKey,
    evalgate_judgment_prefix,
    evalgate_judgment_record,
    evalgate_read_judgments,
)

# --------------------------------------------------------------------------- manifest


def _manifest(tmp_path: Path, **kwargs: Any) -> EvalgateManifest:
    return evalgate_load_manifest(str(write_judged_suite(tmp_path / "s", **kwargs)))


def test_the_judge_is_out_of_the_generation_digest_and_in_the_judge_key(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path)
    assert manifest.judged is not None
    assert manifest.definition["judge"] is None
    assert manifest.definition["evaluator"] == {"scorer": "judge"}
    path = Path(manifest.path)
    for change in ({"revision": "v2"}, {"model": "other-judge"}, {"seed": 9}):
        set_judge(path, **change)
        changed = evalgate_load_manifest(str(path))
        assert changed.definition_digest == manifest.definition_digest, change
        assert changed.judged is not None and changed.judged.key != manifest.judged.key, change
        manifest = changed
    set_judge(path, base_url="simulated://?judge=1&accuracy=0.5", budget={"max_concurrency": 2})
    moved = evalgate_load_manifest(str(path))
    assert moved.judged is not None and moved.judged.key == manifest.judged.key  # transport


def test_the_evaluator_revision_and_rubric_rejudge_but_never_regenerate(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path)
    path = Path(manifest.path)
    raw = yaml.safe_load(path.read_text())
    raw["evaluator"]["revision"] = "e2"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    (path.parent / "rubric.md").write_text("A new rubric.\n")
    changed = evalgate_load_manifest(str(path))
    assert changed.definition_digest == manifest.definition_digest
    assert changed.judged is not None and manifest.judged is not None
    assert changed.judged.key != manifest.judged.key


def test_other_scorers_keep_their_evaluator_in_the_digest() -> None:
    dumped = {"revision": "r1", "scorer": "exact", "options": {}}
    assert evalgate_definition_evaluator(dumped) == dumped


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda raw: raw.pop("judge"), "judge"),
        (lambda raw: raw["evaluator"].pop("rubric"), "evaluator.rubric"),
        (lambda raw: raw["evaluator"].update(mode="pairwise"), "evaluator.scale"),
        (lambda raw: raw["evaluator"].update(mode="sideways"), "evaluator.mode"),
        (lambda raw: raw["judge"].update(golden="nowhere.jsonl"), "judge.golden"),
        (lambda raw: raw["judge"].update(colour="red"), "judge.colour"),
        (lambda raw: raw["evaluator"].update(scorer="exact"), "evaluator.mode"),
    ],
)
def test_judged_manifest_refusals_name_the_key(tmp_path: Path, edit: Any, key: str) -> None:
    path = write_judged_suite(tmp_path / "s")
    raw = yaml.safe_load(path.read_text())
    edit(raw)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_load_manifest(str(path))
    assert caught.value.key == key


def test_a_judge_block_beside_another_scorer_is_still_checked(tmp_path: Path) -> None:
    path = write_judged_suite(tmp_path / "s", models={"candidate": "judge-model"})
    raw = yaml.safe_load(path.read_text())
    raw["evaluator"] = {"revision": "e1", "scorer": "exact"}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_load_manifest(str(path))
    assert caught.value.key == "judge.model"


# --------------------------------------------------------------------------- judgment records

CONTEXT = EvalgateJudgmentContext("k" * 64, "d" * 64, "writer-1")
KEY = EvalgateJudgmentKey("rev", "case-1", "candidate", 0, None)
FACTS = {
    "category": "alpha", "cluster": "c1", "output": '{"score": 5}', "attempts": 1,
    "e2e_s": 0.1, "started_at": "2026-01-01T00:00:00+00:00",
    "finished_at": "2026-01-01T00:00:01+00:00",
}  # fmt: skip
GOOD = {"verdict": {"score": 5.0, "value": 1.0, "passed": True, "reason": "r"}, "error": None}
BAD = {"verdict": None, "error": {"category": "judge_unparseable", "status": None, "message": "x"}}


def _write(backend: EvalgateLocalStore, name: str, *records: dict[str, Any]) -> None:
    prefix = evalgate_judgment_prefix("suite", CONTEXT.definition_digest, CONTEXT.judge_key)
    body = "".join(json.dumps(record, sort_keys=True) + "\n" for record in records)
    backend.evalgate_write_atomic(f"{prefix}/shard-0-of-1/{name}.jsonl", body.encode())


def _read(backend: EvalgateLocalStore) -> Any:
    prefix = evalgate_judgment_prefix("suite", CONTEXT.definition_digest, CONTEXT.judge_key)
    return evalgate_read_judgments(backend, prefix, CONTEXT)


def test_judgment_records_are_sealed_verified_and_keyed(tmp_path: Path) -> None:
    backend = EvalgateLocalStore(str(tmp_path))
    record = evalgate_judgment_record(CONTEXT, KEY, ["a1"], FACTS, GOOD)
    tampered = {**record, "output": "changed"}
    foreign = evalgate_judgment_record(
        EvalgateJudgmentContext("f" * 64, "d" * 64, "w"), KEY, ["a1"], FACTS, GOOD
    )
    _write(backend, "seg-a", record, record, tampered, foreign)
    view = _read(backend)
    assert view.results[KEY]["verdict"] == GOOD["verdict"]
    assert view.duplicates == 1
    reasons = sorted(problem.reason for problem in view.problems)
    assert reasons[0].startswith("checksum mismatch") and reasons[1].startswith("foreign judge")
    assert view.evalgate_current(KEY, ["a1"]) is not None
    assert view.evalgate_current(KEY, ["other answer"]) is None  # stale: re-judged


def test_a_result_supersedes_errors_and_conflicts_are_problems(tmp_path: Path) -> None:
    backend = EvalgateLocalStore(str(tmp_path))
    error = evalgate_judgment_record(CONTEXT, KEY, ["a1"], FACTS, BAD)
    good = evalgate_judgment_record(CONTEXT, KEY, ["a1"], FACTS, GOOD)
    other = {"verdict": {**GOOD["verdict"], "score": 4.0}, "error": None}
    conflicting = evalgate_judgment_record(CONTEXT, KEY, ["a1"], FACTS, other)
    _write(backend, "seg-1", error)
    assert _read(backend).evalgate_current(KEY, ["a1"])["error"]["category"] == "judge_unparseable"
    _write(backend, "seg-2", good, error)
    view = _read(backend)
    assert view.evalgate_current(KEY, ["a1"])["error"] is None and not view.errors
    _write(backend, "seg-3", conflicting)
    assert [p.reason for p in _read(backend).problems] == [
        "conflicting judgment: same answers, a different verdict"
    ]


# --------------------------------------------------------------------------- judged views


def _record(identity: EvalgateIdentity, output: str) -> EvalgateRecord:
    outcome: Any = {
        "output": output, "finish_reason": "stop", "attempts": 1, "error": None,
        "timing": {"queued_s": 0.0, "ttft_s": None, "tpot_s": None, "e2e_s": 0.1,
                   "itl_p95_s": None},
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
        "started_at": "t0", "finished_at": "t1",
    }  # fmt: skip
    return evalgate_record(
        identity, outcome, lambda o: (None, None), definition_digest="d", candidate_key="k",
        category="alpha", cluster="c", shard=0, writer="w",
    )  # fmt: skip


def _store_judgments(tmp_path: Path, manifest: EvalgateManifest, rows: list[Any]) -> Any:
    backend = EvalgateLocalStore(str(tmp_path / "store"))
    assert manifest.judged is not None
    context = EvalgateJudgmentContext(manifest.judged.key, manifest.definition_digest, "w")
    prefix = evalgate_judgment_prefix(manifest.suite, manifest.definition_digest, context.judge_key)
    lines = [evalgate_judgment_record(context, key, answers, FACTS, v) for key, answers, v in rows]
    body = "".join(json.dumps(line) + "\n" for line in lines).encode()
    backend.evalgate_write_atomic(f"{prefix}/shard-0-of-1/seg-w-1.jsonl", body)
    return backend


def test_pointwise_overlay_grades_errors_and_leaves_unjudged_answers_missing(
    tmp_path: Path,
) -> None:
    manifest = _manifest(tmp_path, cases=make_cases(["alpha"], 3))
    revision = manifest.dataset_revision
    ids = [EvalgateIdentity(revision, f"alpha-00{i}", "candidate", 0) for i in range(3)]
    records = [_record(identity, f"answer {i}") for i, identity in enumerate(ids)]
    view = EvalgateStoreView(results=dict(zip(ids, records, strict=True)))
    low = {"verdict": {"score": 2.0, "value": 0.25, "passed": False, "reason": ""}, "error": None}
    backend = _store_judgments(tmp_path, manifest, [
        (EvalgateJudgmentKey(*ids[0], None), [records[0]["checksum"]], low),
        (EvalgateJudgmentKey(*ids[1], None), [records[1]["checksum"]], BAD),
    ])  # fmt: skip
    graded = evalgate_judge_overlay(backend, manifest, {"candidate": view}, None)["candidate"]
    assert graded.results[ids[0]]["score"] == 0.25 and graded.results[ids[0]]["passed"] is False
    assert graded.errors[ids[1]]["error"]["category"] == "judge_unparseable"
    assert ids[2] not in graded.results and ids[2] not in graded.errors  # missing
    assert view.results[ids[0]]["score"] is None  # the stored view itself is untouched


def test_pairwise_overlay_scores_the_candidate_and_mirrors_the_baseline(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, mode="pairwise", cases=make_cases(["alpha"], 1))
    mine = EvalgateIdentity(manifest.dataset_revision, "alpha-000", "candidate", 0)
    theirs = mine._replace(candidate="baseline")
    a, b = _record(mine, "mine"), _record(theirs, "theirs")
    answers = [a["checksum"], b["checksum"]]

    def winner(value: str) -> dict[str, Any]:
        return {"verdict": {"winner": value, "reason": ""}, "error": None}

    backend = _store_judgments(tmp_path, manifest, [
        (EvalgateJudgmentKey(*mine, "candidate_first"), answers, winner("A")),
        (EvalgateJudgmentKey(*mine, "baseline_first"), answers, winner("B")),
    ])  # fmt: skip
    views = {
        "candidate": EvalgateStoreView(results={mine: a}),
        "baseline": EvalgateStoreView(results={theirs: b}),
    }
    graded = evalgate_judge_overlay(backend, manifest, views, ("candidate", "baseline"))
    assert graded["candidate"].results[mine]["score"] == 1.0  # a consistent win
    assert graded["baseline"].results[theirs]["score"] == 0.0
    assert graded["baseline"].results[theirs]["passed"] is False


def test_item_views_grade_errors_and_pairs() -> None:
    base = {"output": "x", "error": None, "score": None, "passed": None}
    point = evalgate_judged_view(base, [{"verdict": GOOD["verdict"], "error": None}])
    assert point["score"] == 1.0 and point["passed"] is True
    failed = evalgate_judged_view(base, [BAD])
    assert failed["error"]["category"] == "judge_unparseable" and failed["passed"] is None
    assert failed["error"]["message"].startswith("judge: ")
    first_a = {"verdict": {"winner": "A"}, "error": None}
    pair = [first_a, first_a]
    tie = evalgate_judged_view(base, pair)
    assert tie["score"] == 0.5 and tie["passed"] is True and "inconsistent" in tie["judge_outcome"]
    loss = evalgate_judged_view(base, [{"verdict": {"winner": "B"}, "error": None},
                                       {"verdict": {"winner": "A"}, "error": None}])  # fmt: skip
    assert loss["score"] == 0.0 and loss["passed"] is False
    assert evalgate_judged_view(base, {})["passed"] is True  # a pairwise baseline item
    errored = {**base, "error": {"category": "timeout", "status": None, "message": "m"}}
    assert evalgate_judged_view(errored, [BAD])["error"]["category"] == "timeout"


# --------------------------------------------------------------------------- gate rules

JUDGE_FACTS = {"key": "ab" * 32, "model": "judge-70b", "revision": "jp-1", "mode": "pairwise"}


def _facts(wins: int, losses: int, ties: int, agreement: Any = None) -> EvalgateJudgeFacts:
    pairs = []
    for i, (first, second) in enumerate(
        [("A", "B")] * wins + [("B", "A")] * losses + [("tie", "tie")] * ties
    ):
        outcome = evalgate_pair_outcome(first, second)  # type: ignore[arg-type]
        pairs.append(EvalgatePairJudgment(f"c{i:03d}", "alpha", f"cl{i}", 0, outcome))
    return EvalgateJudgeFacts(JUDGE_FACTS, evalgate_pairwise_cases(pairs), {}, agreement, "none")


def test_the_pairwise_rule_bounds_the_net_win_rate() -> None:
    options = {"confidence": 0.95, "resamples": 2000, "seed": 0}
    good = evalgate_judge_rule("pairwise", "all", 0.1, _facts(40, 10, 50), **options)
    assert good["passed"] and good["estimate"] == pytest.approx(0.3) and good["lo"] > -0.1
    bad = evalgate_judge_rule("pairwise", "all", 0.1, _facts(10, 40, 50), **options)
    assert not bad["passed"] and bad["hi"] < 0 and "judge-70b" in bad["reason"]
    none = evalgate_judge_rule("pairwise", "all", 0.1, None, **options)
    assert none["evaluated"] is False and not none["passed"]


def test_the_agreement_rule_names_the_judge_when_it_fails() -> None:
    scale = EvalgateJudgeScale(1, 5, 4.0)
    golden = [EvalgateGoldenPointwise(f"c{i % 30}", "o", 1 + i % 5, i) for i in range(150)]
    scores = [float(1 + (i * 7) % 5) for i in range(150)]  # unrelated to the labels
    weak = evalgate_pointwise_agreement(golden, scores, scale, resamples=500)
    options = {"confidence": 0.95, "resamples": 500, "seed": 0}
    result = evalgate_judge_rule("judge_agreement", "kappa", 0.6, _facts(1, 1, 1, weak), **options)
    assert not result["passed"]
    assert "the judge failed, not the candidate" in result["reason"]
    assert "judge-70b" in result["reason"]
    labels = [float(g.label) for g in golden]
    exact = evalgate_pointwise_agreement(golden, labels, scale, resamples=500)
    assert evalgate_judge_rule("judge_agreement", "kappa", 0.6, _facts(1, 1, 1, exact), **options)[
        "passed"
    ]


def test_policies_take_the_judge_rules(tmp_path: Path) -> None:
    path = tmp_path / "gate.yaml"
    rules = [{"slice": "all", "rule": "pairwise", "margin": 0.05},
             {"rule": "judge_agreement", "min_kappa": 0.6}]  # fmt: skip
    path.write_text(yaml.safe_dump({"version": "v", "rules": rules}))
    policy = evalgate_load_policy(path)
    assert [rule.to_dict() for rule in policy.rules] == [
        {"rule": "pairwise", "slice": "all", "margin": 0.05},
        {"rule": "judge_agreement", "metric": "kappa", "min_kappa": 0.6},
    ]
    path.write_text(yaml.safe_dump({"version": "v", "rules": [{"rule": "pairwise", "margin": 2}]}))
    with pytest.raises(EvalgatePolicyError):
        evalgate_load_policy(path)


def test_the_gate_evaluates_judge_rules_from_the_gate_input(tmp_path: Path) -> None:
    from pytest_evalgate.aggregate.paired import EvalgateGateInput

    path = tmp_path / "gate.yaml"
    path.write_text(yaml.safe_dump(
        {"version": "v", "rules": [{"slice": "all", "rule": "pairwise", "margin": 0.05}]}
    ))  # fmt: skip
    n = 3
    data = EvalgateGateInput(
        case_ids=tuple(f"c{i}" for i in range(n)), categories=np.array(["alpha"] * n),
        clusters=np.array([f"k{i}" for i in range(n)]), candidate_scores=np.ones(n),
        baseline_scores=np.zeros(n), candidate_fail_counts=np.zeros(n, dtype=np.int64),
        candidate_trials=np.ones(n, dtype=np.int64), judge=_facts(40, 5, 5),
    )  # fmt: skip
    result = evalgate_evaluate(evalgate_load_policy(path), data).rules[0]
    assert result.name == "pairwise[all]" and result.passed and result.n_cases == 50


# --------------------------------------------------------------------------- the simulated judge


def test_the_simulated_judge_reads_its_truth_from_the_answer_key(tmp_path: Path) -> None:
    path = tmp_path / "truth.jsonl"
    labels = [("Q?", "labelled", 0.25), ("Q?", "labelled", 0.75)]
    evalgate_write_judge_truth(str(path), [("What is 2 + 2?", "Four.")], labels)
    truth = evalgate_sim_key_truth(evalgate_load_answer_key(path))
    assert truth("What is 2 + 2?", "  four ") == 1.0
    assert truth("What is 2 + 2?", "five") == 0.0
    assert truth("Q?", "labelled") == 0.5  # two labels average
    assert truth("unknown", "x") is None


def test_a_judge_knob_turns_the_simulator_into_a_judge(tmp_path: Path) -> None:
    from pytest_evalgate.judge.prompt import evalgate_pointwise_messages
    from pytest_evalgate.simulated.answers import evalgate_prompt_digest

    manifest = _manifest(tmp_path)
    assert manifest.judged is not None
    messages = evalgate_pointwise_messages(manifest.judged.evaluator, "Q", "A", "A")
    ask = EvalgateSimAsk("judge", messages, 0.0, 0, evalgate_prompt_digest(messages), ())
    config = EvalgateSimConfig(judge=True, accuracy=1.0)
    path = tmp_path / "truth.jsonl"
    evalgate_write_judge_truth(str(path), [("Q", "A")])
    key = evalgate_load_answer_key(path)
    text = evalgate_sim_answerer(config, key)(ask)
    assert "simulated judge" in text and '"score": 5' in text
    assert evalgate_sim_judge_answerer(config, key)(ask) == text
    plain = evalgate_sim_answerer(EvalgateSimConfig(accuracy=1.0), key)(ask)
    assert "simulated judge" not in plain
