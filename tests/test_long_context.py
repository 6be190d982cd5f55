"""Long context (SPEC 18, issue 32): a case longer than a candidate's pinned ``max_model_len`` is
refused before any request, naming the case; the pin reaches the serving sidecar's arguments;
``evalgate plan`` counts the prompts' prefill tokens next to the output tokens."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from suitekit import make_cases, make_choice_cases, write_suite

from pytest_evalgate.cli.main import main
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.k8s.serving import evalgate_serving_args
from pytest_evalgate.manifest.load import evalgate_load_manifest

PIN = {"weights_digest": "sha256:" + "ab" * 32, "max_model_len": 64}


def _suite(folder: Path, cases: list[dict[str, Any]], pins: dict[str, Any], **extra: Any) -> Path:
    path = write_suite(folder, {"candidate": "simulated://?accuracy=1"}, cases=cases, extra=extra)
    manifest = yaml.safe_load(path.read_text())
    manifest["candidates"]["candidate"]["pins"] = pins
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path


def _long(cases: list[dict[str, Any]], index: int, chars: int) -> list[dict[str, Any]]:
    cases[index] = {**cases[index], "input": "x" * chars}
    return cases


def test_a_case_past_max_model_len_is_refused_naming_it(tmp_path: Path) -> None:
    # 64 tokens: a prompt of 49 tokens (196 characters) + max_tokens 16 = 65 > 64
    path = _suite(tmp_path / "s", _long(make_cases(["alpha"], 4), 2, 196), PIN)
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_load_manifest(str(path))
    error = caught.value
    assert error.source.endswith("cases.jsonl") and error.key == "line 3: id 'alpha-002'"
    assert "about 49 prompt tokens (characters / 4, an estimate) + 16 output tokens" in error.reason
    assert "candidates.candidate.pins.max_model_len 64" in error.reason


def test_a_case_that_fits_is_kept(tmp_path: Path) -> None:
    path = _suite(tmp_path / "s", _long(make_cases(["alpha"], 4), 2, 192), PIN)  # 48 + 16
    assert len(evalgate_load_manifest(str(path)).cases) == 4


def test_a_choice_case_counts_its_longest_choice_and_one_output_token(tmp_path: Path) -> None:
    rows = make_choice_cases(4)
    rows[1] = {**rows[1], "input": "y" * 240, "choices": ["a", "b", "c" * 12, "d"]}
    extra = {
        "evaluator": {"revision": "e", "scorer": "choice"},
        "api": "completions",
        "stream": False,
    }
    # "yyy..." (240) + " " + 12 c's = 253 characters: 64 tokens + 1 output token > 64
    path = _suite(tmp_path / "s", rows, PIN, **extra)
    with pytest.raises(EvalgateConfigError, match=r"about 64 prompt tokens .* \+ 1 output tokens"):
        evalgate_load_manifest(str(path))


@pytest.mark.parametrize("value", [0, "4096", 1.5, True])
def test_a_max_model_len_that_is_no_whole_number_is_refused(tmp_path: Path, value: Any) -> None:
    path = _suite(tmp_path / "s", make_cases(["alpha"], 2), {**PIN, "max_model_len": value})
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_load_manifest(str(path))
    assert caught.value.key == "candidates.candidate.pins.max_model_len"


def test_the_refusal_is_exit_4_before_any_request(pytester: pytest.Pytester) -> None:
    _suite(pytester.path / "suite", _long(make_cases(["alpha"], 4), 0, 400), PIN)
    result = pytester.runpytest(
        "--evalgate", "suite", "-p", "no:cacheprovider", "--evalgate-store=store",
        f"--evalgate-request-log={pytester.path / 'requests.jsonl'}",
    )  # fmt: skip
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*line 1: id 'alpha-000'*max_model_len 64*"])
    log = pytester.path / "requests.jsonl"
    assert not log.exists() or log.read_text() == ""


def test_max_model_len_reaches_the_serving_sidecar(tmp_path: Path) -> None:
    path = _suite(tmp_path / "s", make_cases(["alpha"], 2), {**PIN, "max_model_len": 32768})
    candidate = evalgate_load_manifest(str(path)).candidates["candidate"]
    assert "--max-model-len=32768" in evalgate_serving_args(candidate, 1)
    unpinned = _suite(
        tmp_path / "u", make_cases(["alpha"], 2), {"weights_digest": PIN["weights_digest"]}
    )
    other = evalgate_load_manifest(str(unpinned)).candidates["candidate"]
    assert not any(a.startswith("--max-model-len") for a in evalgate_serving_args(other, 1))


def test_plan_counts_prefill_tokens_of_every_choice_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = make_choice_cases(6)
    extra = {
        "evaluator": {"revision": "e", "scorer": "choice"},
        "api": "completions",
        "stream": False,
        "prompt": {"revision": "p", "template": "{input}\nAnswer:"},
    }
    path = _suite(tmp_path / "s", rows, {"weights_digest": PIN["weights_digest"]}, **extra)
    expected = sum(
        math.ceil(len(f"{row['input']}\nAnswer: {choice}") / 4)
        for row in rows
        for choice in row["choices"]
    )
    argv = ["plan", str(path.parent), "--assume-output-tokens", "1", "--tokens-per-s", "10"]
    assert main([*argv, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["candidates"][0]["prefill_tokens"] == expected
    assert document["total"]["prefill_tokens"] == expected
    assert main(argv) == 0
    assert f"  prefill: {expected:,} prompt tokens (the suite's prompts," in capsys.readouterr().out
