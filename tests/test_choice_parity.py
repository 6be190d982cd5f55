"""Parity with lm-evaluation-harness (SPEC 18): evalgate's arithmetic over the simulator's
echoed answers equals, item by item, what lm-eval 0.4.13's ``local-completions`` computed from
the same simulator (its own ``--log_samples`` output, tests/data/choice/README.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from suitekit import make_choice_cases, write_suite

from pytest_evalgate.choice.loglik import (
    evalgate_acc_norm_pick,
    evalgate_acc_pick,
    evalgate_choice_loglik,
)
from pytest_evalgate.endpoints.resolve import evalgate_answer_rows
from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.simulated import EvalgateSimConfig, evalgate_write_answer_key
from pytest_evalgate.simulated.answers import evalgate_load_choice_plans
from pytest_evalgate.simulated.choice_style import EvalgateSimVocab, evalgate_sim_echo_body

SAMPLES = Path(__file__).parent / "data" / "choice" / "samples_evalgate_mc.jsonl"


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("parity")
    path = write_suite(
        folder / "suite",
        {"candidate": "http://127.0.0.1:9/v1"},
        cases=make_choice_cases(200),
        extra={
            "evaluator": {"revision": "e1", "scorer": "choice", "method": "loglikelihood"},
            "api": "completions",
            "stream": False,
            "prompt": {"revision": "p1", "template": "{input}\nAnswer:"},
        },
    )
    evalgate_write_answer_key(
        folder / "key.jsonl", evalgate_answer_rows(evalgate_load_manifest(str(path)))
    )
    return evalgate_load_choice_plans(folder / "key.jsonl")


def _samples() -> list[dict[str, Any]]:
    return [json.loads(line) for line in SAMPLES.read_text().splitlines()]


def _loglik(plans: dict[str, dict[str, Any]], context: str, continuation: str) -> float:
    config = EvalgateSimConfig(accuracy=0.7, seed=1)
    body = {"model": "sim", "prompt": context + continuation, "echo": True, "logprobs": 1,
            "max_tokens": 0}  # fmt: skip
    reply = json.loads(evalgate_sim_echo_body(config, body, "r", "sim", plans, EvalgateSimVocab()))
    logprobs = reply["choices"][0]["logprobs"]
    return evalgate_choice_loglik(logprobs, len(context), len(context + continuation)).loglikelihood


def test_the_fixture_is_lm_evals_200_items() -> None:
    samples = _samples()
    assert len(samples) == 200 and {s["doc"]["id"] for s in samples} == {
        row["id"] for row in make_choice_cases(200)
    }


def test_every_loglikelihood_acc_and_acc_norm_equal_lm_evals(
    plans: dict[str, dict[str, Any]],
) -> None:
    disagree = []
    acc_differs_from_acc_norm = 0
    for sample in _samples():
        doc = sample["doc"]
        context = doc["input"] + "\nAnswer:"
        ours = [_loglik(plans, context, " " + choice) for choice in doc["choices"]]
        theirs = [float(resp[0]) for resp in sample["filtered_resps"]]
        acc = float(evalgate_acc_pick(ours) == doc["target"])
        acc_norm = float(evalgate_acc_norm_pick(ours, doc["choices"]) == doc["target"])
        if ours != theirs or acc != sample["acc"] or acc_norm != sample["acc_norm"]:
            disagree.append(doc["id"])
        acc_differs_from_acc_norm += acc != acc_norm
    assert disagree == []
    assert acc_differs_from_acc_norm > 0  # the items tell acc_norm's per-character pick apart
