"""judge/spec.py and judge/refusals.py: the judge: block, the judged evaluator, the judge key and
the refusals."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.formats.canonical import evalgate_sha256_hex
from pytest_evalgate.judge import refusals, spec
from pytest_evalgate.manifest.load import EvalgateCandidate

SOURCE = "suites/s/evalgate.yaml"

# SPEC section 10's block, word for word.
SPEC_BLOCK: dict[str, Any] = {
    "model": "judge-70b",
    "base_url": "http://judge.eval-llm.svc:8000/v1",
    "api_key_env": "JUDGE_API_KEY",
    "revision": "judge-prompt-v1",
    "temperature": 0,
    "seed": 0,
    "pins": {"weights_digest": "sha256:abc", "family": "judge-family", "training_run": "run-7"},
    "budget": {
        "max_concurrency": 16,
        "requests_per_second": 50,
        "max_attempts": 4,
        "timeout_s": 120,
    },
    "golden": "golden.jsonl",
}


def _config_error(call: Callable[[], object]) -> EvalgateConfigError:
    with pytest.raises(EvalgateConfigError) as caught:
        call()
    return caught.value


def _judge(suite_dir: str = "suite", **changes: Any) -> spec.EvalgateJudge:
    raw = {**SPEC_BLOCK, **changes}
    return spec.evalgate_judge(suite_dir, spec.evalgate_judge_config(SOURCE, raw))


def _evaluator(**changes: Any) -> spec.EvalgateJudgedEvaluator:
    base = spec.EvalgateJudgedEvaluator(
        revision="rubric-v2",
        mode="pointwise",
        rubric_path="suite/rubric.md",
        rubric_text="Score 5 for a correct, complete answer.\n",
        rubric_sha256=spec.evalgate_rubric_digest("Score 5 for a correct, complete answer.\n"),
        scale=spec.EvalgateJudgeScale(1, 5, 4),
    )
    return dataclasses.replace(base, **changes)


def _candidate(name: str, model: str, *urls: str, **pins: Any) -> EvalgateCandidate:
    served = urls or ("http://127.0.0.1:1/v1",)
    return EvalgateCandidate(name, model, tuple(served), None, pins, f"{name}-x")


# --------------------------------------------------------------------------- the judge: block


def test_the_spec_block_validates_into_a_frozen_judge() -> None:
    judge = _judge("suites/s")
    assert judge.model == "judge-70b" and judge.revision == "judge-prompt-v1"
    assert judge.temperature == 0.0 and judge.seed == 0 and judge.api_key_env == "JUDGE_API_KEY"
    assert judge.family == "judge-family" and judge.training_run == "run-7"
    assert judge.budget.max_concurrency == 16 and judge.budget.requests_per_second == 50
    assert judge.golden_path == str(Path("suites/s/golden.jsonl"))
    assert judge.allow_sampling is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        judge.model = "other"  # type: ignore[misc]


def test_defaults_of_a_minimal_block() -> None:
    raw = {"model": "j", "base_url": "http://127.0.0.1:9/v1", "revision": "r1"}
    judge = spec.evalgate_judge("s", spec.evalgate_judge_config(SOURCE, raw))
    assert (judge.temperature, judge.seed, judge.golden_path, dict(judge.pins)) == (
        0.0,
        None,
        None,
        {},
    )
    assert judge.family is None and judge.training_run is None
    assert judge.budget.model_dump() == {
        "max_concurrency": 16,
        "requests_per_second": None,
        "tokens_per_minute": None,
        "max_attempts": 4,
        "timeout_s": 120.0,
    }


@pytest.mark.parametrize(
    ("changes", "key", "reason"),
    [
        ({"modle": "x"}, "judge.modle", "unknown key"),
        ({"budget": {"burst": 3}}, "judge.budget.burst", "unknown key"),
        (
            {"budget": {"max_concurrency": 0}},
            "judge.budget.max_concurrency",
            "greater than or equal",
        ),
        ({"budget": {"max_attempts": 21}}, "judge.budget.max_attempts", "less than or equal"),
        ({"temperature": -0.1}, "judge.temperature", "greater than or equal"),
        ({"model": ""}, "judge.model", "at least 1"),
        ({"seed": "zero"}, "judge.seed", "valid integer"),
        ({"pins": {"family": ["a"]}}, "judge.pins.family", "valid"),
        ({"allow_sampling": "maybe"}, "judge.allow_sampling", "valid boolean"),
    ],
)
def test_a_bad_judge_block_names_file_key_and_reason(
    changes: dict[str, Any], key: str, reason: str
) -> None:
    error = _config_error(lambda: spec.evalgate_judge_config(SOURCE, {**SPEC_BLOCK, **changes}))
    assert error.source == SOURCE
    assert error.key.startswith(key)
    assert reason in error.reason
    assert str(error).startswith(f"{SOURCE}: {key}")


def test_a_missing_key_and_a_non_mapping_are_refused() -> None:
    raw = {k: v for k, v in SPEC_BLOCK.items() if k != "revision"}
    error = _config_error(lambda: spec.evalgate_judge_config(SOURCE, raw))
    assert (error.key, error.reason) == ("judge.revision", "missing required key")
    error = _config_error(lambda: spec.evalgate_judge_config(SOURCE, ["judge-70b"]))
    assert (error.key, error.reason) == ("judge", "must be a mapping")


def test_every_problem_of_a_block_is_listed_in_one_message() -> None:
    raw = {**SPEC_BLOCK, "modle": "x", "temperature": -1}
    error = _config_error(lambda: spec.evalgate_judge_config(SOURCE, raw))
    assert "judge.modle" in str(error) and "judge.temperature" in str(error)


# --------------------------------------------------------------------------- the evaluator


R, S = "r.md", {"min": 1, "max": 5, "pass": 4}


@pytest.mark.parametrize(
    ("raw", "key", "reason"),
    [
        ({"rubric": R}, "evaluator.scale", "pointwise judging needs a scale"),
        ({"rubric": R, "mode": "pairwise", "scale": S}, "evaluator.scale", "has no scale"),
        ({"rubric": R, "mode": "ranked"}, "evaluator.mode", "'pointwise' or 'pairwise'"),
        ({"mode": "pairwise"}, "evaluator.rubric", "missing required key"),
        ({"rubric": R, "scale": {**S, "min": 5, "max": 5}}, "evaluator.scale", "below"),
        ({"rubric": R, "scale": {**S, "pass": 6}}, "evaluator.scale", "within"),
        ({"rubric": R, "scale": {**S, "min": 1.5}}, "evaluator.scale.min", "integer"),
        ({"rubric": R, "scale": {**S, "min": True}}, "evaluator.scale.min", "integer"),
        ({"rubric": R, "scale": {"min": 1, "max": 5}}, "evaluator.scale.pass", "missing"),
        ({"rubric": R, "scale": {**S, "step": 1}}, "evaluator.scale.step", "unknown key"),
    ],
)  # fmt: skip
def test_a_bad_judged_evaluator_names_its_key(raw: dict[str, Any], key: str, reason: str) -> None:
    error = _config_error(lambda: spec.evalgate_judged_evaluator_config(SOURCE, raw))
    assert (error.source, error.key) == (SOURCE, key)
    assert reason in error.reason


def test_the_judged_evaluator_reads_its_rubric_and_digests_the_text(tmp_path: Path) -> None:
    (tmp_path / "rubric.md").write_bytes(b"Correct and kind.\r\nNo guessing.\r\n")
    raw = {"mode": "pointwise", "rubric": "rubric.md", "scale": {"min": 1, "max": 5, "pass": 4}}
    config = spec.evalgate_judged_evaluator_config(SOURCE, raw)
    evaluator = spec.evalgate_judged_evaluator(SOURCE, str(tmp_path), "rubric-v2", config)
    assert evaluator.rubric_text == "Correct and kind.\nNo guessing.\n"
    lf_digest = hashlib.sha256(b"Correct and kind.\nNo guessing.\n").hexdigest()
    assert evaluator.rubric_sha256 == lf_digest  # a CRLF checkout keeps the judge key
    assert evaluator.rubric_path == str(tmp_path / "rubric.md")
    assert evaluator.scale == spec.EvalgateJudgeScale(1, 5, 4.0)
    assert (evaluator.revision, evaluator.mode) == ("rubric-v2", "pointwise")


@pytest.mark.parametrize(
    ("content", "reason"),
    [(None, "cannot read"), (b"  \n\n", "is empty"), (b"\xff\xfe", "not UTF-8")],
)
def test_a_missing_empty_or_binary_rubric_is_refused(
    tmp_path: Path, content: bytes | None, reason: str
) -> None:
    if content is not None:
        (tmp_path / "rubric.md").write_bytes(content)
    config = spec.evalgate_judged_evaluator_config(
        SOURCE, {"mode": "pairwise", "rubric": "rubric.md"}
    )
    error = _config_error(
        lambda: spec.evalgate_judged_evaluator(SOURCE, str(tmp_path), "r", config)
    )
    assert (error.source, error.key) == (SOURCE, "evaluator.rubric")
    assert reason in error.reason and "rubric.md" in error.reason


def test_scale_arithmetic() -> None:
    scale = spec.EvalgateJudgeScale(1, 5, 4)
    assert [scale.evalgate_normalise(s) for s in (1, 2, 3, 4, 5)] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert (
        scale.evalgate_passes(4) and scale.evalgate_passes(4.5) and not scale.evalgate_passes(3.99)
    )
    assert scale.evalgate_points() == (1, 2, 3, 4, 5)
    assert scale.evalgate_json() == {"min": 1, "max": 5, "pass": 4}
    assert spec.EvalgateJudgeScale(0, 10, 7.5).evalgate_normalise(7.5) == 0.75


# --------------------------------------------------------------------------- the judge key


def test_the_key_is_the_digest_of_its_material() -> None:
    judge, evaluator = _judge(), _evaluator()
    material = spec.evalgate_judge_key_material(judge, evaluator)
    assert spec.evalgate_judge_key(judge, evaluator) == evalgate_sha256_hex(material)
    assert set(material) == {
        "prompt_format", "model", "pins", "revision", "temperature", "seed",
        "evaluator_revision", "rubric_sha256", "mode", "scale",
    }  # fmt: skip
    assert material["prompt_format"] == spec.EVALGATE_JUDGE_PROMPT_FORMAT
    assert material["scale"] == {"min": 1, "max": 5, "pass": 4}
    assert len(spec.evalgate_judge_key(judge, evaluator)) == 64


PINS = SPEC_BLOCK["pins"]
MEANING_CHANGES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "model": ({"model": "judge-405b"}, {}),
    "pins.weights_digest": ({"pins": {**PINS, "weights_digest": "sha256:def"}}, {}),
    "pins.family": ({"pins": {**PINS, "family": "other"}}, {}),
    "pins added": ({"pins": {**PINS, "quantization": "fp8"}}, {}),
    "revision": ({"revision": "judge-prompt-v2"}, {}),
    "temperature": ({"temperature": 0.5, "allow_sampling": True}, {}),
    "seed": ({"seed": 1}, {}),
    "seed unset": ({"seed": None}, {}),
    "max_tokens written": ({"max_tokens": 64}, {}),
    "top_p written": ({"top_p": 0.5}, {}),
    "evaluator revision": ({}, {"revision": "rubric-v3"}),
    "rubric text": ({}, {"rubric_sha256": spec.evalgate_rubric_digest("Other.")}),
    "mode": ({}, {"mode": "pairwise", "scale": None}),
    "scale.min": ({}, {"scale": spec.EvalgateJudgeScale(0, 5, 4)}),
    "scale.max": ({}, {"scale": spec.EvalgateJudgeScale(1, 10, 4)}),
    "scale.pass": ({}, {"scale": spec.EvalgateJudgeScale(1, 5, 3)}),
}


@pytest.mark.parametrize("field", sorted(MEANING_CHANGES))
def test_the_key_changes_with_each_field_that_changes_a_judgment(field: str) -> None:
    base = spec.evalgate_judge_key(_judge(), _evaluator())
    judge_changes, evaluator_changes = MEANING_CHANGES[field]
    changed = spec.evalgate_judge_key(_judge(**judge_changes), _evaluator(**evaluator_changes))
    assert changed != base


TRANSPORT_CHANGES: dict[str, dict[str, Any]] = {
    "base_url": {"base_url": "http://127.0.0.1:9999/v1"},
    "api_key_env": {"api_key_env": "OTHER_KEY"},
    "budget": {"budget": {"max_concurrency": 2, "timeout_s": 5, "max_attempts": 1}},
    "golden": {"golden": "other-golden.jsonl"},
    "allow_sampling": {"allow_sampling": True},
}


@pytest.mark.parametrize("field", sorted(TRANSPORT_CHANGES))
def test_the_key_ignores_transport_calibration_and_the_suite_folder(field: str) -> None:
    base = spec.evalgate_judge_key(_judge(), _evaluator())
    changed = _judge(**TRANSPORT_CHANGES[field])
    assert changed != _judge()  # the change is real ...
    assert spec.evalgate_judge_key(changed, _evaluator()) == base  # ... and not in the key
    moved = _judge("elsewhere/suite")
    assert spec.evalgate_judge_key(moved, _evaluator(rubric_path="elsewhere/r.md")) == base


def test_unwritten_generation_settings_keep_the_key_of_a_block_without_them() -> None:
    # judgments stored before judge.max_tokens existed keep their key (spec.EvalgateJudgeConfig)
    material = spec.evalgate_judge_key_material(_judge(), _evaluator())
    assert "max_tokens" not in material and "top_p" not in material
    written = spec.evalgate_judge_key_material(_judge(max_tokens=64, top_p=0.5), _evaluator())
    assert (written["max_tokens"], written["top_p"]) == (64, 0.5)


@pytest.mark.parametrize(
    ("changes", "key"),
    [({"max_tokens": 0}, "judge.max_tokens"), ({"top_p": 1.5}, "judge.top_p")],
)
def test_bad_judge_generation_settings_are_refused(changes: dict[str, Any], key: str) -> None:
    with pytest.raises(EvalgateConfigError) as info:
        _judge(**changes)
    assert info.value.key == key


def test_temperature_written_as_int_or_float_gives_one_key() -> None:
    assert spec.evalgate_judge_key(_judge(temperature=0), _evaluator()) == spec.evalgate_judge_key(
        _judge(temperature=0.0), _evaluator()
    )


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("model", ["judge-70b", "Judge-70B", " judge-70b "])
def test_a_judge_that_is_a_candidate_is_refused(model: str) -> None:
    candidates = {
        "baseline": _candidate("baseline", "app-r16"),
        "candidate": _candidate("candidate", model),
    }
    error = _config_error(
        lambda: refusals.evalgate_refuse_judge_candidates(SOURCE, _judge(), candidates)
    )
    assert (error.source, error.key) == (SOURCE, "judge.model")
    assert "'candidate'" in error.reason


@pytest.mark.parametrize(("pin", "value"), [("family", "judge-family"), ("training_run", "run-7")])
def test_a_judge_sharing_a_candidates_family_or_training_run_is_refused(
    pin: str, value: str
) -> None:
    candidates = {"candidate": _candidate("candidate", "app-r17", **{pin: value})}
    error = _config_error(
        lambda: refusals.evalgate_refuse_judge_candidates(SOURCE, _judge(), candidates)
    )
    assert (error.source, error.key) == (SOURCE, f"judge.pins.{pin}")
    assert repr(value) in error.reason and "'candidate'" in error.reason


@pytest.mark.parametrize(
    "url",
    [
        "http://judge.eval-llm.svc:8000/v1",
        "HTTP://Judge.Eval-LLM.svc:8000/v1/",
        "http://judge.eval-llm.svc:8000/v1//",
    ],
)
def test_a_judge_on_a_candidates_base_url_is_refused(url: str) -> None:
    # The same server under another model name is the model under test grading itself.
    candidates = {"candidate": _candidate("candidate", "app-r17", "http://10.0.0.1/v1", url)}
    error = _config_error(
        lambda: refusals.evalgate_refuse_judge_candidates(SOURCE, _judge(), candidates)
    )
    assert (error.source, error.key) == (SOURCE, "judge.base_url")
    assert "'candidate'" in error.reason and "http://judge.eval-llm.svc:8000/v1" in error.reason


@pytest.mark.parametrize(
    ("judge_url", "candidate_url"),
    [
        ("http://judge.svc/v1", "http://judge.svc:80/v1"),
        ("https://judge.svc:443/v1/", "https://JUDGE.svc/v1"),
    ],
)
def test_a_default_port_is_the_same_base_url(judge_url: str, candidate_url: str) -> None:
    candidates = {"candidate": _candidate("candidate", "app-r17", candidate_url)}
    error = _config_error(
        lambda: refusals.evalgate_refuse_judge_candidates(
            SOURCE, _judge(base_url=judge_url), candidates
        )
    )
    assert error.key == "judge.base_url"


@pytest.mark.parametrize(
    "url",
    [
        "http://judge.eval-llm.svc:8001/v1",  # another port
        "https://judge.eval-llm.svc:8000/v1",  # another scheme
        "http://judge.eval-llm.svc:8000/v2",  # another path
    ],
)
def test_a_judge_on_another_base_url_passes(url: str) -> None:
    candidates = {"candidate": _candidate("candidate", "app-r17", url)}
    refusals.evalgate_refuse_judge_candidates(SOURCE, _judge(), candidates)


def test_a_judge_on_a_candidates_weights_digest_is_refused() -> None:
    candidates = {"candidate": _candidate("candidate", "app-r17", weights_digest="sha256:abc")}
    error = _config_error(
        lambda: refusals.evalgate_refuse_judge_candidates(SOURCE, _judge(), candidates)
    )
    assert (error.source, error.key) == (SOURCE, "judge.pins.weights_digest")
    assert "'sha256:abc'" in error.reason and "'candidate'" in error.reason


def test_unrelated_candidates_and_missing_pins_pass() -> None:
    candidates = {
        "candidate": _candidate("candidate", "app-r17", family="app-family", training_run="run-9"),
        "baseline": _candidate("baseline", "app-r16"),
    }
    refusals.evalgate_refuse_judge_candidates(SOURCE, _judge(), candidates)
    bare = _judge(pins={})
    refusals.evalgate_refuse_judge_candidates(
        SOURCE, bare, {"c": _candidate("c", "m", family="judge-family")}
    )


def test_sampling_needs_allow_sampling() -> None:
    error = _config_error(
        lambda: refusals.evalgate_refuse_sampling(SOURCE, _judge(temperature=0.7))
    )
    assert (error.source, error.key) == (SOURCE, "judge.temperature")
    assert "allow_sampling" in error.reason and "0.7" in error.reason
    refusals.evalgate_refuse_sampling(SOURCE, _judge(temperature=0.7, allow_sampling=True))
    refusals.evalgate_refuse_sampling(SOURCE, _judge(temperature=0))


def test_a_named_golden_file_must_exist(tmp_path: Path) -> None:
    error = _config_error(
        lambda: refusals.evalgate_refuse_missing_golden(SOURCE, _judge(str(tmp_path)))
    )
    assert (error.source, error.key) == (SOURCE, "judge.golden")
    assert "golden.jsonl" in error.reason
    (tmp_path / "golden.jsonl").write_text("{}\n")
    refusals.evalgate_refuse_missing_golden(SOURCE, _judge(str(tmp_path)))
    refusals.evalgate_refuse_missing_golden(SOURCE, _judge(str(tmp_path), golden=None))


def _suite(tmp_path: Path) -> tuple[spec.EvalgateJudge, spec.EvalgateJudgedEvaluator]:
    (tmp_path / "rubric.md").write_text("Correct answers score high.\n")
    (tmp_path / "golden.jsonl").write_text("{}\n")
    config = spec.evalgate_judged_evaluator_config(
        SOURCE, {"mode": "pairwise", "rubric": "rubric.md"}
    )
    evaluator = spec.evalgate_judged_evaluator(SOURCE, str(tmp_path), "r1", config)
    return _judge(str(tmp_path)), evaluator


def test_check_judge_passes_a_sound_suite_and_names_the_first_problem(tmp_path: Path) -> None:
    judge, evaluator = _suite(tmp_path)
    fine = {
        "candidate": _candidate("candidate", "app-r17"),
        "baseline": _candidate("baseline", "app-r16"),
    }
    refusals.evalgate_check_judge(SOURCE, judge, evaluator, fine)
    bad_judge = dataclasses.replace(judge, temperature=1.0)
    same = {"candidate": _candidate("candidate", "judge-70b")}
    error = _config_error(lambda: refusals.evalgate_check_judge(SOURCE, bad_judge, evaluator, same))
    assert error.key == "judge.temperature"  # sampling is checked first
    error = _config_error(lambda: refusals.evalgate_check_judge(SOURCE, judge, evaluator, same))
    assert error.key == "judge.model"


@pytest.mark.parametrize(
    ("remove", "key"), [("rubric.md", "evaluator.rubric"), ("golden.jsonl", "judge.golden")]
)
def test_check_judge_refuses_a_file_removed_after_loading(
    tmp_path: Path, remove: str, key: str
) -> None:
    judge, evaluator = _suite(tmp_path)
    (tmp_path / remove).unlink()
    candidates = {"candidate": _candidate("candidate", "app-r17")}
    error = _config_error(
        lambda: refusals.evalgate_check_judge(SOURCE, judge, evaluator, candidates)
    )
    assert (error.source, error.key) == (SOURCE, key)
