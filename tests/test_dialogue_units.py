"""The pure parts of conversations and tool loops (SPEC 17, issue 31): the fixture's checks,
one tool call run, the loop over a scripted model, grading, transcripts, and the client's
reading of tool calls from whole and streamed answers."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from pytest_evalgate.client.checks import EvalgateCaps
from pytest_evalgate.client.read import EvalgateAttempt, EvalgateSse, evalgate_tool_calls_of
from pytest_evalgate.client.types import EvalgateCallError, EvalgateCallResult
from pytest_evalgate.dialogue.case import (
    EvalgateExpect,
    EvalgateExpectedCall,
    EvalgateTurn,
    evalgate_parse_expect,
    evalgate_parse_turns,
)
from pytest_evalgate.dialogue.fixture import evalgate_fixture_wire, evalgate_load_fixture
from pytest_evalgate.dialogue.grade import (
    evalgate_dialogue_outcome,
    evalgate_grade_tools,
    evalgate_grade_turns,
)
from pytest_evalgate.dialogue.loop import evalgate_run_dialogue
from pytest_evalgate.dialogue.toolrun import (
    EvalgateToolBox,
    EvalgateToolState,
    evalgate_idempotency_key,
)
from pytest_evalgate.dialogue.transcript import evalgate_transcript_text
from pytest_evalgate.errors import EvalgateConfigError, EvalgateError, EvalgateToolServiceError

ORDER = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}},
    "required": ["order_id"],
    "additionalProperties": False,
}


def _tools(**extra: Any) -> list[dict[str, Any]]:
    return [
        {
            "name": "lookup_order",
            "parameters": ORDER,
            "results": [{"when": {"order_id": "A1"}, "result": {"status": "shipped"}}],
            "default": {"error": "unknown order"},
        },
        {"name": "refund", "parameters": ORDER, "side_effects": True, "results": []},
        {"name": "delete_account", "parameters": ORDER, "default": {"status": "deleted"}},
        *extra.get("more", []),
    ]


def _fixture(tmp_path: Path, tools: list[dict[str, Any]], revision: str = "t1") -> Path:
    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump({"revision": revision, "tools": tools}))
    return path


def _box(tmp_path: Path, tools: list[dict[str, Any]] | None = None) -> EvalgateToolBox:
    fixture = evalgate_load_fixture(str(_fixture(tmp_path, tools or _tools())), "t1")
    return EvalgateToolBox(evalgate_fixture_wire(fixture, {}))


# -- the fixture -------------------------------------------------------------------------------


def test_a_good_fixture_loads_with_its_digest_and_openai_schemas(tmp_path: Path) -> None:
    path = _fixture(tmp_path, _tools())
    fixture = evalgate_load_fixture(str(path), "t1")
    assert [tool.name for tool in fixture.tools] == ["lookup_order", "refund", "delete_account"]
    assert [tool.kind for tool in fixture.tools] == ["canned", "canned", "canned"]
    assert fixture.digest == __import__("hashlib").sha256(path.read_bytes()).hexdigest()
    entry = fixture.tools[0].evalgate_openai()
    assert entry["type"] == "function" and entry["function"]["parameters"] == ORDER
    assert fixture.tools[1].side_effects and not fixture.tools[0].side_effects


@pytest.mark.parametrize(
    ("tools", "key", "reason"),
    [
        (_tools(more=[{"name": "refund", "parameters": ORDER, "results": []}]),
         "tools[3] refund", "declared twice"),
        ([{"name": "x", "parameters": {"type": "string"}, "results": []}],
         "tools[0] x: parameters", "type object"),
        ([{"name": "x", "parameters": {"type": "object", "properties": 3}, "results": []}],
         "tools[0] x: parameters", "not a JSON Schema"),
        ([{"name": "x", "parameters": ORDER, "results": [{"when": {"order": "A"}, "result": 1}]}],
         "tools[0] x: results[0]", "does not match"),
        ([{"name": "x", "parameters": ORDER, "call": "python:no_such_module_zz:fn"}],
         "tools[0] x: call", "cannot import"),
        ([{"name": "x", "parameters": ORDER, "results": [], "call": "python:os:getcwd"}],
         "tools[0] x", "exactly one of"),
        ([{"name": "x", "parameters": ORDER, "results": [], "colour": 1}],
         "tools[0] x: colour", "unknown key"),
        ([{"name": "bad name!", "parameters": ORDER, "results": []}], "tools[0]", "name must"),
        ([{"name": "x", "parameters": ORDER, "service": {"command": []}}],
         "tools[0] x: service.command", "non-empty list"),
    ],
)  # fmt: skip
def test_a_bad_fixture_names_the_file_the_tool_and_the_reason(
    tmp_path: Path, tools: list[dict[str, Any]], key: str, reason: str
) -> None:
    path = _fixture(tmp_path, tools)
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_load_fixture(str(path), "t1")
    assert caught.value.source == str(path)
    assert caught.value.key == key
    assert reason in caught.value.reason


def test_a_fixture_of_another_revision_is_refused(tmp_path: Path) -> None:
    path = _fixture(tmp_path, _tools(), revision="t2")
    with pytest.raises(EvalgateConfigError, match="revision 't2' is not the manifest's 't1'"):
        evalgate_load_fixture(str(path), "t1")


def test_a_python_tool_is_imported_from_the_fixtures_folder(tmp_path: Path) -> None:
    (tmp_path / "my_tools_mod.py").write_text(
        "def hello(arguments, context):\n"
        "    context['state']['seen'] = context['idempotency_key']\n"
        "    return {'hi': arguments['order_id']}\n"
    )
    tools = [{"name": "hello", "parameters": ORDER, "call": "python:my_tools_mod:hello"}]
    box = _box(tmp_path, tools)
    mock = EvalgateToolState()
    call = {"id": "c", "name": "hello", "arguments": '{"order_id": "Z"}'}
    answer = asyncio.run(box.evalgate_run(call, "ident", 2, 1, mock))
    assert json.loads(answer.content) == {"hi": "Z"} and answer.invalid is None
    assert mock.state["seen"] == evalgate_idempotency_key("ident", 2, 1)


# -- one tool call -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "reason"),
    [
        ({"name": "nope", "arguments": "{}"}, "unknown tool 'nope'"),
        ({"name": "lookup_order", "arguments": '{"order_id": '}, "not JSON"),
        ({"name": "lookup_order", "arguments": "[1]"}, "not a JSON object"),
        ({"name": "lookup_order", "arguments": '{"order_id": 5}'}, "do not match its schema"),
        ({"name": "lookup_order", "arguments": '{"order_id": "A1", "x": 1}'}, "do not match"),
    ],
)
def test_an_invalid_call_is_the_models_failure_and_runs_nothing(
    tmp_path: Path, call: dict[str, str], reason: str
) -> None:
    mock = EvalgateToolState()
    answer = asyncio.run(_box(tmp_path).evalgate_run(call, "i", 0, 0, mock))
    assert answer.invalid is not None and reason in answer.invalid
    assert json.loads(answer.content) == {"error": answer.invalid}
    assert mock.state == {} and mock.applied == {}


def test_canned_results_match_exact_arguments_else_the_default(tmp_path: Path) -> None:
    box = _box(tmp_path)
    mock = EvalgateToolState()
    hit = {"name": "lookup_order", "arguments": '{"order_id": "A1"}'}
    miss = {"name": "lookup_order", "arguments": '{"order_id": "B9"}'}
    assert json.loads(asyncio.run(box.evalgate_run(hit, "i", 0, 0, mock)).content) == {
        "status": "shipped"
    }
    assert json.loads(asyncio.run(box.evalgate_run(miss, "i", 0, 1, mock)).content) == {
        "error": "unknown order"
    }


def test_a_side_effect_is_applied_once_per_idempotency_key(tmp_path: Path) -> None:
    box = _box(tmp_path)
    mock = EvalgateToolState()
    call = {"name": "refund", "arguments": '{"order_id": "A1"}'}
    asyncio.run(box.evalgate_run(call, "i", 1, 0, mock))
    asyncio.run(box.evalgate_run(call, "i", 1, 0, mock))  # the same (identity, step, call)
    assert mock.state == {"refund": 1}
    asyncio.run(box.evalgate_run(call, "i", 2, 0, mock))  # a second refund, a new key
    assert mock.state == {"refund": 2}
    assert evalgate_idempotency_key("i", 1, 0) != evalgate_idempotency_key("j", 1, 0)


class _Service(BaseHTTPRequestHandler):
    seen: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Service.seen.append({"path": self.path, **payload})
        body = json.dumps({"result": {"ok": payload["arguments"]["order_id"]}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def service() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Service)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    _Service.seen.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_service_tool_gets_the_arguments_identity_and_key(tmp_path: Path, service: str) -> None:
    tools = [{"name": "refund", "parameters": ORDER, "side_effects": True,
              "service": {"command": ["true"]}}]  # fmt: skip
    fixture = evalgate_load_fixture(str(_fixture(tmp_path, tools)), "t1")
    box = EvalgateToolBox(evalgate_fixture_wire(fixture, {"refund": service}))
    mock = EvalgateToolState()
    call = {"name": "refund", "arguments": '{"order_id": "A7"}'}

    async def run() -> str:
        try:
            return (await box.evalgate_run(call, "rev/c/case/r0", 3, 0, mock)).content
        finally:
            await box.evalgate_close()

    assert json.loads(asyncio.run(run())) == {"ok": "A7"}
    assert _Service.seen == [
        {
            "path": "/call/refund",
            "arguments": {"order_id": "A7"},
            "identity": "rev/c/case/r0",
            "idempotency_key": evalgate_idempotency_key("rev/c/case/r0", 3, 0),
        }
    ]
    assert mock.state == {"refund": 1}


def test_an_unreachable_service_is_a_tool_service_error(tmp_path: Path) -> None:
    tools = [{"name": "refund", "parameters": ORDER, "service": {"command": ["true"]}}]
    fixture = evalgate_load_fixture(str(_fixture(tmp_path, tools)), "t1")
    box = EvalgateToolBox(evalgate_fixture_wire(fixture, {"refund": "http://127.0.0.1:9"}))
    call = {"name": "refund", "arguments": '{"order_id": "A7"}'}
    with pytest.raises(EvalgateToolServiceError, match="mock service failed") as caught:
        asyncio.run(box.evalgate_run(call, "i", 0, 0, EvalgateToolState()))
    assert isinstance(caught.value, EvalgateError)


# -- the loop over a scripted model ------------------------------------------------------------


def _result(
    output: str | None = None,
    calls: Sequence[Mapping[str, str]] = (),
    error: EvalgateCallError | None = None,
) -> EvalgateCallResult:
    finish = "tool_calls" if calls else "stop"
    return EvalgateCallResult(
        output, finish, 10, 2, 0.01, None, (), 0.02, 0.0, 1, error, 0.0,
        tool_calls=tuple(dict(c) for c in calls),
    )  # fmt: skip


class _Model:
    """A scripted model: answers in order, keeps every request body it got."""

    def __init__(self, answers: list[EvalgateCallResult]) -> None:
        self.answers = answers
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, body: Mapping[str, Any]) -> EvalgateCallResult:
        self.bodies.append(json.loads(json.dumps(body)))
        return self.answers[min(len(self.bodies) - 1, len(self.answers) - 1)]


BODY = {"messages": [{"role": "user", "content": "Where is A1?"}], "tools": []}
LIMITS = {"kind": "tools", "box": 0, "max_steps": 4, "max_tool_calls": 8, "timeout_s": 30}


def _loop(
    tmp_path: Path, model: _Model, **limits: Any
) -> tuple[EvalgateCallResult, dict[str, Any]]:
    spec = {**LIMITS, **limits}
    return asyncio.run(evalgate_run_dialogue(model, BODY, spec, {0: _box(tmp_path)}, "ident"))


def test_a_tool_loop_runs_the_call_and_sends_its_result_back(tmp_path: Path) -> None:
    call = {"id": "c1", "name": "lookup_order", "arguments": '{"order_id": "A1"}'}
    model = _Model([_result(calls=[call]), _result("It has shipped.")])
    result, facts = _loop(tmp_path, model)
    assert result.output == "It has shipped." and result.error is None
    assert result.prompt_tokens == 20 and result.completion_tokens == 4 and result.attempts == 2
    assert facts["end"] == "answer" and facts["tool_calls"] == 1 and len(facts["steps"]) == 2
    second = model.bodies[1]["messages"]
    assert second[1]["tool_calls"][0]["function"]["name"] == "lookup_order"
    assert second[2] == {"role": "tool", "tool_call_id": "c1", "content": '{"status": "shipped"}'}
    assert facts["calls"] == [{"step": 0, "name": "lookup_order", "arguments": call["arguments"]}]


def test_a_model_that_never_stops_calling_ends_by_max_steps(tmp_path: Path) -> None:
    call = {"id": "", "name": "lookup_order", "arguments": '{"order_id": "A1"}'}
    result, facts = _loop(tmp_path, _Model([_result(calls=[call])]), max_steps=3)
    assert facts["end"] == "max_steps" and len(facts["steps"]) == 3
    assert result.error is None and facts["tool_calls"] == 3
    assert evalgate_dialogue_outcome(facts) == "max_steps"


def test_too_many_calls_end_by_max_tool_calls(tmp_path: Path) -> None:
    call = {"id": "", "name": "lookup_order", "arguments": '{"order_id": "A1"}'}
    model = _Model([_result(calls=[call, call, call])])
    _, facts = _loop(tmp_path, model, max_tool_calls=2)
    assert facts["end"] == "max_tool_calls" and facts["tool_calls"] == 2


def test_a_slow_loop_ends_by_its_timeout_as_an_outcome(tmp_path: Path) -> None:
    class Slow(_Model):
        async def __call__(self, body: Mapping[str, Any]) -> EvalgateCallResult:
            await asyncio.sleep(5)
            return _result("late")

    result, facts = _loop(tmp_path, Slow([]), timeout_s=0.05)
    assert facts["end"] == "timeout" and result.error is None and result.output is None


def test_an_endpoint_error_on_a_step_is_the_identitys_error(tmp_path: Path) -> None:
    call = {"id": "", "name": "lookup_order", "arguments": '{"order_id": "A1"}'}
    error = EvalgateCallError("server_error", 500, "boom", False)
    result, facts = _loop(tmp_path, _Model([_result(calls=[call]), _result(error=error)]))
    assert result.error == error and facts["end"] == "error"


def test_an_invalid_call_is_recorded_and_the_model_sees_why(tmp_path: Path) -> None:
    bad = {"id": "b", "name": "lookup_order", "arguments": "{oops"}
    model = _Model([_result(calls=[bad]), _result("sorry")])
    _, facts = _loop(tmp_path, model)
    assert [item["name"] for item in facts["invalid"]] == ["lookup_order"]
    assert "not JSON" in json.loads(model.bodies[1]["messages"][2]["content"])["error"]
    assert evalgate_dialogue_outcome(facts) == "tool_call_invalid"


def test_turns_are_sent_one_after_the_models_previous_answer(tmp_path: Path) -> None:
    model = _Model([_result("Lyon"), _result("4"), _result("30")])
    body = {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "u1"}]}
    spec = {"kind": "turns", "users": ["u1", "u2", "u3"]}
    result, facts = asyncio.run(evalgate_run_dialogue(model, body, spec, {}, "i"))
    assert facts["outputs"] == ["Lyon", "4", "30"] and result.output == "30"
    assert [m["content"] for m in model.bodies[2]["messages"]] == [
        "S",
        "u1",
        "Lyon",
        "u2",
        "4",
        "u3",
    ]
    assert len(model.bodies) == 3 and result.attempts == 3


# -- grading -----------------------------------------------------------------------------------


def _exact(output: str, target: str) -> float:
    return float(output == target)


def test_turns_score_the_share_of_passing_turns_or_all_of_them() -> None:
    turns = [EvalgateTurn("a", "x"), EvalgateTurn("b", None), EvalgateTurn("c", "z")]
    facts = {"outputs": ["x", "anything", "wrong"]}
    share = evalgate_grade_turns(turns, facts, lambda _turn: _exact, 0.5, "share")
    assert share == (0.5, True, ["turn 3 wrong"])
    strict = evalgate_grade_turns(turns, facts, lambda _turn: _exact, 1.0, "all")
    assert strict[:2] == (0.0, False)


def _facts(**extra: Any) -> dict[str, Any]:
    base = {"invalid": [], "end": "answer", "calls": [], "tool_calls": 0, "state": {}}
    return {**base, **extra}


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"step": 0, "name": name, "arguments": json.dumps(arguments)}


def test_a_trajectory_passes_with_the_required_call_and_fails_on_a_forbidden_one() -> None:
    expect = EvalgateExpect(
        calls=(EvalgateExpectedCall("lookup_order", {"order_id": "A1"}),),
        forbidden=("delete_account",),
        max_calls=2,
    )
    good = _facts(calls=[_call("lookup_order", order_id="A1", extra=1)], tool_calls=1)
    assert evalgate_grade_tools(expect, good, "shipped", "shipped", _exact, 1.0) == (1.0, True, [])
    bad = _facts(
        calls=[_call("lookup_order", order_id="A1"), _call("delete_account")], tool_calls=2
    )
    score, passed, failures = evalgate_grade_tools(expect, bad, "shipped", "shipped", _exact, 1.0)
    assert (score, passed, failures) == (0.0, False, ["forbidden call delete_account"])


_A1 = [_call("lookup_order", order_id="A1")]
_INVALID = [{"step": 0, "name": "lookup_order", "reason": "not JSON"}]


@pytest.mark.parametrize(
    ("facts", "output", "failure"),
    [
        (_facts(calls=[_call("lookup_order", order_id="B2")], tool_calls=1), "ok", "missing call"),
        (_facts(calls=_A1 * 4, tool_calls=4), "ok", "more than max_calls"),
        (_facts(calls=_A1, tool_calls=1), "no", "final answer wrong"),
        (_facts(calls=_A1, tool_calls=1, end="max_steps"), "ok", "ended by max_steps"),
        (_facts(calls=_A1, tool_calls=1, invalid=_INVALID), "ok", "tool_call_invalid"),
        (_facts(calls=_A1, tool_calls=1, state={"refund": 2}), "ok", "final state refund differs"),
    ],
)
def test_each_failed_check_is_named(facts: dict[str, Any], output: str, failure: str) -> None:
    expect = EvalgateExpect(
        calls=(EvalgateExpectedCall("lookup_order", {"order_id": "A1"}),),
        max_calls=3,
        state={"refund": 1} if facts["state"] else None,
    )
    score, passed, failures = evalgate_grade_tools(expect, facts, output, "ok", _exact, 1.0)
    assert (score, passed) == (0.0, False)
    assert any(failure in text for text in failures), failures
    assert not any("A1" in text or "B2" in text for text in failures)  # no eval text


def test_expect_and_turns_rows_are_checked() -> None:
    expect = evalgate_parse_expect("d.jsonl", "line 1", {"calls": [{"name": "x"}], "max_calls": 2})
    assert expect.calls[0].name == "x" and expect.max_calls == 2
    with pytest.raises(EvalgateConfigError, match=r"expect.max_calls"):
        evalgate_parse_expect("d.jsonl", "line 1", {"max_calls": -1})
    with pytest.raises(EvalgateConfigError, match=r"expect.shape"):
        evalgate_parse_expect("d.jsonl", "line 1", {"shape": 1})
    with pytest.raises(EvalgateConfigError, match="no turn has a target"):
        evalgate_parse_turns("d.jsonl", "line 2", [{"user": "hi"}])
    with pytest.raises(EvalgateConfigError, match=r"turns\[1\].user"):
        evalgate_parse_turns("d.jsonl", "line 2", [{"user": "a", "target": "b"}, {"user": ""}])
    turns = evalgate_parse_turns(
        "d.jsonl", "l", [{"user": "a", "target": 3, "check": {"scorer": "numeric"}}]
    )
    assert turns[0].target == "3" and turns[0].check == {"scorer": "numeric"}


def test_a_transcript_reads_calls_and_results_by_tool_name() -> None:
    facts = {
        "transcript": [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "lookup_order", "arguments": '{"order_id": "A1"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": '{"status": "shipped"}'},
            {"role": "assistant", "content": "It\nshipped."},
        ]
    }  # fmt: skip
    assert evalgate_transcript_text(facts).splitlines() == [
        'assistant -> lookup_order({"order_id": "A1"})',
        'tool lookup_order: {"status": "shipped"}',
        "assistant: It shipped.",
    ]


# -- the client reads tool calls ---------------------------------------------------------------


def test_a_whole_answers_tool_calls_are_read_with_their_arguments_as_text() -> None:
    calls = evalgate_tool_calls_of(
        [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]
    )
    assert calls == [{"id": "c", "name": "f", "arguments": '{"a": 1}'}]
    assert evalgate_tool_calls_of(None) == []


def test_a_streams_tool_call_pieces_are_joined_by_index() -> None:
    caps = EvalgateCaps(text_chars=10_000, body_bytes=1 << 20, max_tokens=None, request_bytes=0)
    sse = EvalgateSse(EvalgateAttempt(sent=0.0), "delta", caps)
    pieces = [
        {"index": 0, "id": "c0", "function": {"name": "lookup", "arguments": '{"order'}},
        {"index": 1, "id": "c1", "function": {"name": "refund", "arguments": "{}"}},
        {"index": 0, "function": {"arguments": '_id": "A1"}'}},
    ]
    for piece in pieces:
        chunk = {"choices": [{"index": 0, "delta": {"tool_calls": [piece]}, "finish_reason": None}]}
        sse.feed(b"data: " + json.dumps(chunk).encode() + b"\n\n", 1.0)
    assert sse.evalgate_tool_calls() == [
        {"id": "c0", "name": "lookup", "arguments": '{"order_id": "A1"}'},
        {"id": "c1", "name": "refund", "arguments": "{}"},
    ]


def test_a_judge_reads_a_conversations_whole_transcript() -> None:
    from pytest_evalgate.runner.judge_work import evalgate_judged_answer

    facts = {
        "transcript": [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c", "function": {"name": "refund", "arguments": '{"order_id": "A2"}'}}]},
            {"role": "tool", "tool_call_id": "c", "content": '{"status": "refunded"}'},
            {"role": "assistant", "content": "Refunded."},
        ]
    }  # fmt: skip
    text = evalgate_judged_answer({"output": "Refunded.", "dialogue": facts})
    assert 'refund({"order_id": "A2"})' in text and "tool refund:" in text
    assert text.endswith("assistant: Refunded.")
    assert evalgate_judged_answer({"output": "plain"}) == "plain"
