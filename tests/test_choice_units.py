"""Multiple choice (SPEC 18) from inside: the manifest's refusals, the grade of an outcome,
the letter of a generated answer, and the simulator's echo style."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest
from suitekit import make_choice_cases, write_suite

from pytest_evalgate.choice.loglik import evalgate_choice_loglik
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.manifest.choice import evalgate_letter_index, evalgate_lettered_prompt
from pytest_evalgate.manifest.load import EvalgateManifest, evalgate_load_manifest
from pytest_evalgate.runner.choice import evalgate_choice_graded, evalgate_choice_spec
from pytest_evalgate.simulated import EvalgateSimConfig
from pytest_evalgate.simulated.answers import evalgate_prompt_digest
from pytest_evalgate.simulated.choice_style import (
    EvalgateSimVocab,
    evalgate_sim_echo_body,
    evalgate_sim_tokenize,
    evalgate_sim_tokenizer_reply,
)
from pytest_evalgate.store.records import EvalgateOutcome

LOGLIK: dict[str, Any] = {
    "evaluator": {"revision": "mc-1", "scorer": "choice", "method": "loglikelihood"},
    "api": "completions",
    "stream": False,
}


def _load(
    tmp_path: Path, rows: list[dict[str, Any]] | None = None, **extra: Any
) -> EvalgateManifest:
    path = write_suite(
        tmp_path / "suite",
        {"candidate": "simulated://?accuracy=1"},
        cases=rows if rows is not None else make_choice_cases(4),
        extra={**LOGLIK, **extra},
    )
    return evalgate_load_manifest(str(path))


def _refused(
    tmp_path: Path, rows: list[dict[str, Any]] | None = None, **extra: Any
) -> EvalgateConfigError:
    with pytest.raises(EvalgateConfigError) as caught:
        _load(tmp_path, rows, **extra)
    return caught.value


def _row(**changes: Any) -> dict[str, Any]:
    row = {"id": "q-1", "input": "Q?", "choices": ["a", "b", "c"], "target": 1, "category": "x"}
    return {**row, **changes}


def test_a_target_given_as_a_choice_text_becomes_its_index(tmp_path: Path) -> None:
    manifest = _load(tmp_path, [_row(target="c")])
    assert manifest.cases[0].target == "2" and manifest.cases[0].choices == ("a", "b", "c")


@pytest.mark.parametrize(
    ("row", "key", "words"),
    [
        (_row(target=3), "target", "index 3 is not one of the 3 choices"),
        (_row(target="d"), "target", "none of the choices"),
        (_row(target=True), "target", "index or its text"),
        (_row(choices=["a"]), "choices", "at least 2"),
        (_row(choices=["a", "b", "a"]), "choices", "choice 2 repeats choice 0"),
        (_row(choices=["a", ""]), "choices", "non-empty strings"),
        ({**_row(), "messages": [{"role": "user", "content": "x"}]}, "messages", "input only"),
    ],
)
def test_bad_rows_are_refused_naming_the_file_line_case_and_key(
    tmp_path: Path, row: dict[str, Any], key: str, words: str
) -> None:
    error = _refused(tmp_path, [row])
    assert error.source.endswith("cases.jsonl")
    assert error.key == f"line 1: id 'q-1': {key}" and words in error.reason


@pytest.mark.parametrize(
    ("extra", "key", "words"),
    [
        ({"api": "chat"}, "api", "needs api: completions"),
        ({"stream": True}, "stream", "needs stream: false"),
        (
            {"evaluator": {"revision": "e", "scorer": "exact", "method": "generate"}},
            "evaluator.method",
            "only for scorer: choice",
        ),
        (
            {"evaluator": {**LOGLIK["evaluator"], "options": {"metric": "f1"}}},
            "evaluator.options.metric",
            "acc, acc_norm",
        ),
        (
            {"evaluator": {**LOGLIK["evaluator"], "options": {"target_delimiter": 1}}},
            "evaluator.options.target_delimiter",
            "string",
        ),
        (
            {
                "evaluator": {
                    "revision": "e",
                    "scorer": "choice",
                    "method": "generate",
                    "options": {"metric": "acc_norm"},
                }
            },
            "evaluator.options.metric",
            "generate is scored by acc",
        ),
        (
            {"evaluator": {**LOGLIK["evaluator"], "options": {"other": 1}}},
            "evaluator.scorer",
            "unknown option",
        ),
    ],
)
def test_bad_manifest_keys_are_refused(
    tmp_path: Path, extra: dict[str, Any], key: str, words: str
) -> None:
    try:
        manifest = _load(tmp_path, None, **extra)
    except EvalgateConfigError as exc:
        assert exc.key == key and words in exc.reason
        return
    # an unknown option is the scorer's refusal, made when the session builds the scorer
    from pytest_evalgate.scoring import evalgate_make_scorer

    with pytest.raises(EvalgateConfigError, match=words):
        evalgate_make_scorer("choice", manifest.evaluator.options, {}, manifest.path)


def test_choices_rows_under_another_scorer_are_refused(tmp_path: Path) -> None:
    evaluator = {"revision": "e", "scorer": "exact"}
    error = _refused(tmp_path, [_row()], evaluator=evaluator, api="chat", stream=True)
    assert error.key == "line 1: id 'q-1': choices" and "only for scorer: choice" in error.reason


def test_the_spec_sends_the_delimiter_and_each_choice_after_the_context(tmp_path: Path) -> None:
    evaluator = {**LOGLIK["evaluator"], "options": {"target_delimiter": "\n"}}
    manifest = _load(tmp_path, [_row()], evaluator=evaluator)
    spec = evalgate_choice_spec(manifest.cases[0], manifest, 1)
    assert spec == {
        "kind": "choices",
        "context": "Q?",
        "continuations": ["\na", "\nb", "\nc"],
        "max_tokens": 1,
    }


def _outcome(logliks: list[float]) -> EvalgateOutcome:
    choices = [{"loglikelihood": ll, "tokens": 1, "greedy": None} for ll in logliks]
    return {
        "output": "", "finish_reason": "length", "attempts": 3, "error": None,
        "timing": {
            "queued_s": 0.0, "ttft_s": None, "tpot_s": None, "e2e_s": 0.1, "itl_p95_s": None,
        },
        "usage": {"prompt_tokens": 9, "completion_tokens": 0},
        "started_at": "t", "finished_at": "t",
        "choice": {"method": "loglikelihood", "max_tokens": 0, "choices": choices},
    }  # fmt: skip


@pytest.mark.parametrize(("metric", "passed"), [("acc", False), ("acc_norm", True)])
def test_the_metric_option_names_the_pick_that_decides(
    tmp_path: Path, metric: str, passed: bool
) -> None:
    rows = [_row(choices=["x", "longer one"], target=1)]
    evaluator = {**LOGLIK["evaluator"], "options": {"metric": metric}}
    manifest = _load(tmp_path, rows, evaluator=evaluator)
    # acc picks "x" (-1.0 > -2.0); per character "longer one" wins (-0.2 > -1.0)
    graded, grade = evalgate_choice_graded(manifest.cases[0], manifest, _outcome([-1.0, -2.0]))
    facts = graded["choice"]
    assert (facts["acc"], facts["acc_norm"], facts["target"], facts["count"]) == (0, 1, 1, 2)
    assert grade("") == (1.0 if passed else 0.0, passed)
    assert graded["output"] == ("longer one" if passed else "x")


@pytest.mark.parametrize(
    ("answer", "index"),
    [("B", 1), (" C. 42", 2), ("A) yes", 0), ("Blue", None), ("b", None), ("E", None), ("", None)],
)
def test_a_generated_answer_names_a_letter_or_none(answer: str, index: int | None) -> None:
    assert evalgate_letter_index(answer, 4) == index


def test_the_lettered_prompt() -> None:
    assert evalgate_lettered_prompt("Q?", ["x", "y"]) == "Q?\nA. x\nB. y\nAnswer:"


def _echo(
    config: EvalgateSimConfig, prompt: str, plan: dict[str, Any] | None, max_tokens: int
) -> dict[str, Any]:
    plans = {} if plan is None else {evalgate_prompt_digest(prompt): plan}
    body = {"model": "m", "prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": max_tokens}
    reply = evalgate_sim_echo_body(config, body, "r", "m", plans, EvalgateSimVocab())
    return json.loads(reply)  # type: ignore[no-any-return]


def test_the_simulator_tokenizes_with_offsets_and_echoes_the_prompt() -> None:
    assert evalgate_sim_tokenize("Q: a\n b ") == [("Q:", 0), (" a", 2), ("\n b", 4), (" ", 7)]
    reply = _echo(EvalgateSimConfig(), "Q: a b", None, 0)
    choice = reply["choices"][0]
    assert choice["text"] == "Q: a b" and choice["logprobs"]["text_offset"] == [0, 2, 4]
    assert choice["logprobs"]["token_logprobs"][0] is None
    assert reply["usage"] == {"prompt_tokens": 3, "completion_tokens": 0, "total_tokens": 3}
    generated = _echo(EvalgateSimConfig(), "Q: a b", None, 1)["choices"][0]
    assert generated["text"] == "Q: a b the" and generated["logprobs"]["text_offset"][-1] == 6


def test_the_simulator_favours_the_right_choice_at_the_accuracy() -> None:
    config = EvalgateSimConfig(accuracy=0.7, seed=3)
    right_first, cases = 0, 2000
    for case in range(cases):
        context = f"Q{case}?"
        logliks = []
        for index, choice in enumerate(["a", "b", "c", "d"]):
            plan = {
                "group": context,
                "index": index,
                "right": 2,
                "count": 4,
                "context_chars": len(context),
            }
            prompt = f"{context} {choice}"
            logprobs = _echo(config, prompt, plan, 0)["choices"][0]["logprobs"]
            logliks.append(
                evalgate_choice_loglik(logprobs, len(context), len(prompt)).loglikelihood
            )
        right_first += logliks.index(max(logliks)) == 2
    assert abs(right_first / cases - 0.7) < 0.045  # 4.4 standard errors at n=2000


def test_no_logprobs_knob_sends_null() -> None:
    reply = _echo(EvalgateSimConfig(no_logprobs=True), "Q: a", None, 0)
    assert reply["choices"][0]["logprobs"] is None


def test_the_simulator_tokenizes_for_lm_eval_and_takes_token_ids_as_the_prompt() -> None:
    vocab = EvalgateSimVocab()
    status, body = evalgate_sim_tokenizer_reply("/tokenize", {"prompt": "Q: a a"}, vocab)
    tokens = json.loads(body)["tokens"]
    assert status == 200 and tokens == [0, 1, 1]
    status, body = evalgate_sim_tokenizer_reply("/detokenize", {"tokens": [1, 0]}, vocab)
    assert status == 200 and json.loads(body)["prompt"] == " aQ:"
    assert evalgate_sim_tokenizer_reply("/detokenize", {"tokens": [7]}, vocab)[0] == 400
    assert vocab.texts([0, 1]) == ["Q: a"] and vocab.texts([[0], "x"]) == ["Q:", "x"]
    info = json.loads(evalgate_sim_tokenizer_reply("/tokenizer_info", None, vocab)[1])
    assert info["eos_token"] is None


class _Handler(BaseHTTPRequestHandler):
    """A loopback completions server: 400 for max_tokens 0 when asked, logprobs as given."""

    refuse_zero: ClassVar[bool] = False
    logprobs: ClassVar[Any] = None
    seen: ClassVar[list[int]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body["max_tokens"])
        if self.refuse_zero and body["max_tokens"] == 0:
            self._send(400, {"error": {"message": "max_tokens must be at least 1"}})
            return
        choice = {
            "index": 0,
            "text": body["prompt"],
            "logprobs": self.logprobs,
            "finish_reason": "length",
        }
        self._send(200, {"choices": [choice], "model": body["model"]})

    def _send(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def _probe(refuse_zero: bool, logprobs: Any) -> tuple[int | None, list[int], str]:
    import threading
    from http.server import ThreadingHTTPServer

    from pytest_evalgate.client import EvalgateEndpoint
    from pytest_evalgate.runner.choice import evalgate_probe_choices

    handler = type("H", (_Handler,), {"refuse_zero": refuse_zero, "logprobs": logprobs, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    endpoint = EvalgateEndpoint(url, "m", "completions", None, 5.0, 1, stream=False)
    try:
        return evalgate_probe_choices(endpoint, "cand", "evalgate.yaml"), handler.seen, ""
    except EvalgateConfigError as exc:
        return None, handler.seen, str(exc)
    finally:
        server.shutdown()
        server.server_close()


GOOD = {"tokens": ["a", " b"], "token_logprobs": [None, -1.0], "text_offset": [0, 1]}


def test_the_probe_keeps_max_tokens_0_when_the_server_takes_it() -> None:
    assert _probe(False, GOOD)[:2] == (0, [0])


def test_the_probe_falls_back_to_1_after_a_400() -> None:
    assert _probe(True, GOOD)[:2] == (1, [0, 1])


@pytest.mark.parametrize("logprobs", [None, {"tokens": ["a"], "token_logprobs": [None]}])
def test_the_probe_refuses_a_server_without_usable_logprobs(logprobs: Any) -> None:
    max_tokens, seen, message = _probe(False, logprobs)
    assert max_tokens is None and seen == [0]
    assert "candidates.cand" in message and "no log probabilities" in message
