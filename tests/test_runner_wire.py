"""The runner's wire protocol: every message round-trips, malformed lines are named, and the
child process speaks it on its own (``python -m pytest_evalgate.runner`` against a real loopback
simulator, no ``EvalgateRunner`` in between).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_evalgate.client import EvalgateCallError, EvalgateCallResult, EvalgateEndpoint
from pytest_evalgate.errors import EvalgateConfigError, EvalgateError, EvalgateWireError
from pytest_evalgate.formats.canonical import evalgate_canonical_json
from pytest_evalgate.runner.child import evalgate_outcome
from pytest_evalgate.runner.wire import (
    EvalgateLimits,
    EvalgateWireClose,
    EvalgateWireEndpoint,
    EvalgateWireFailure,
    EvalgateWireHalted,
    EvalgateWireLog,
    EvalgateWireRequest,
    EvalgateWireResult,
    EvalgateWireSetup,
    EvalgateWireUrge,
    evalgate_asyncio_loop_wanted,
    evalgate_decode_for_child,
    evalgate_decode_for_parent,
    evalgate_encode,
    evalgate_encode_result,
)
from pytest_evalgate.simulated import EvalgateSimConfig
from pytest_evalgate.simulated.server import EvalgateSimServer
from pytest_evalgate.store import EVALGATE_OUTCOME_FIELDS, EVALGATE_SERVED_FIELDS, EvalgateOutcome

ENDPOINT = EvalgateEndpoint("http://127.0.0.1:9/v1", "m", "chat", "sk-test", 10.0, 2, False)
OTHER = EvalgateEndpoint("http://127.0.0.1:1/v1", "m2", "completions", None, 1.5, 4)


def outcome(**changes: Any) -> EvalgateOutcome:
    base: dict[str, Any] = {
        "output": "42 ünï\n\"quoted\"",
        "finish_reason": "stop",
        "attempts": 2,
        "error": None,
        "timing": {
            "queued_s": 0.001, "ttft_s": 0.0125, "tpot_s": 0.003, "e2e_s": 0.05,
            "itl_p95_s": 0.004,
        },
        "usage": {"prompt_tokens": 11, "completion_tokens": 1},
        "started_at": "2026-01-02T03:04:05.000006+00:00",
        "finished_at": "2026-01-02T03:04:05.100006+00:00",
    }  # fmt: skip
    base.update(changes)
    return base  # type: ignore[return-value]


TO_CHILD = [
    EvalgateWireSetup(64, EvalgateLimits(64, 12.5, None)),
    EvalgateWireSetup(1, EvalgateLimits(1, None, 2_000_000.0)),
    EvalgateWireEndpoint(0, ENDPOINT),
    EvalgateWireEndpoint(3, OTHER),
    EvalgateWireRequest(
        7, 0, 2, {"messages": [{"role": "user", "content": "q\n?"}], "seed": 3}, "r/c/a/r0", 9,
        False,
    ),
    EvalgateWireRequest(8, 1, 0, {"prompt": "plain"}, "r/c/b/r1", 1, True),
    EvalgateWireUrge(7),
    EvalgateWireClose(),
]  # fmt: skip

TO_PARENT = [
    EvalgateWireResult(7, 63, False, outcome()),
    EvalgateWireResult(
        8, 0, True,
        outcome(output=None, error={"category": "auth", "status": 401, "message": "no key"}),
    ),
    EvalgateWireHalted(9, 4, "auth: no key"),
    EvalgateWireLog("AIMD: limit 64 -> 32 after 429"),
    EvalgateWireFailure("KeyError: 3"),
]  # fmt: skip


@pytest.mark.parametrize("message", TO_CHILD, ids=lambda m: m.kind)
def test_every_message_to_the_child_round_trips(message: Any) -> None:
    line = evalgate_encode(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1  # one line, newlines escaped
    decoded = evalgate_decode_for_child(line)
    assert decoded == message and type(decoded) is type(message)


@pytest.mark.parametrize("message", TO_PARENT, ids=lambda m: m.kind)
def test_every_message_to_the_parent_round_trips(message: Any) -> None:
    line = evalgate_encode(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    decoded = evalgate_decode_for_parent(line)
    assert decoded == message and type(decoded) is type(message)


@pytest.mark.parametrize("message", TO_PARENT[:2], ids=["answer", "fatal"])
def test_a_result_with_its_outcome_encoded_once_reads_as_the_same_message(message: Any) -> None:
    canonical = evalgate_canonical_json(message.outcome)  # what the journal line holds
    line = evalgate_encode_result(message, canonical)
    assert line.endswith(b"}\n") and line.count(b"\n") == 1
    assert canonical in line  # the journal's bytes, not a second encoding
    decoded = evalgate_decode_for_parent(line)
    assert decoded == message == evalgate_decode_for_parent(evalgate_encode(message))
    assert json.loads(line) == json.loads(evalgate_encode(message))


def test_the_asyncio_loop_switch_takes_0_or_1_and_names_itself_otherwise() -> None:
    assert evalgate_asyncio_loop_wanted({}) is False
    assert evalgate_asyncio_loop_wanted({"PYTEST_EVALGATE_ASYNCIO_LOOP": ""}) is False
    assert evalgate_asyncio_loop_wanted({"PYTEST_EVALGATE_ASYNCIO_LOOP": "0"}) is False
    assert evalgate_asyncio_loop_wanted({"PYTEST_EVALGATE_ASYNCIO_LOOP": "1"}) is True
    for bad in ("yes", "true", " 1", "2"):
        with pytest.raises(EvalgateConfigError, match=f"ASYNCIO_LOOP: must be 0 or 1.*{bad!r}"):
            evalgate_asyncio_loop_wanted({"PYTEST_EVALGATE_ASYNCIO_LOOP": bad})


def test_messages_carry_their_kind_and_named_fields() -> None:
    line = evalgate_encode(EvalgateWireRequest(5, 1, 2, {"prompt": "p"}, "id", 3, False))
    data = json.loads(line)
    assert data == {
        "kind": "work", "index": 5, "endpoint": 1, "halt": 2, "body": {"prompt": "p"},
        "identity": "id", "est_tokens": 3, "urgent": False, "journal": None,
    }  # fmt: skip
    assert b", " not in line and b": " not in line  # compact separators


def test_nested_values_are_rebuilt_as_their_types() -> None:
    endpoint = evalgate_decode_for_child(evalgate_encode(EvalgateWireEndpoint(0, ENDPOINT)))
    assert isinstance(endpoint, EvalgateWireEndpoint)
    assert isinstance(endpoint.endpoint, EvalgateEndpoint) and endpoint.endpoint == ENDPOINT
    setup = evalgate_decode_for_child(evalgate_encode(TO_CHILD[0]))
    assert isinstance(setup, EvalgateWireSetup) and isinstance(setup.limits, EvalgateLimits)


def test_every_kind_has_one_class_and_each_direction_its_own() -> None:
    kinds = [m.kind for m in TO_CHILD + TO_PARENT]
    unique = {type(m): m.kind for m in TO_CHILD + TO_PARENT}
    assert len(set(unique.values())) == len(unique) == 9
    assert set(kinds) == set(unique.values())


@pytest.mark.parametrize(
    ("line", "match"),
    [
        (b"{not json\n", "not a JSON line"),
        (b"\xff\xfe\n", "not a JSON line"),
        (b"", "not a JSON line"),
        (b"[1, 2, 3]\n", "not a JSON object"),
        (b'{"index": 1}\n', "unexpected message kind None"),
        (b'{"kind": ["work"], "index": 1}\n', "unexpected message kind"),
        (b'{"kind": "nonsense"}\n', "unexpected message kind 'nonsense'"),
        (b'{"kind": "urge"}\n', "malformed 'urge' message"),
        (b'{"kind": "urge", "index": 1, "extra": 2}\n', "malformed 'urge' message"),
        (b'{"kind": "setup", "concurrency": 2}\n', "malformed 'setup' message"),
        (b'{"kind": "setup", "concurrency": 2, "limits": {"max_concurrency": 2}}\n', "malformed"),
        (b'{"kind": "endpoint", "index": 0, "endpoint": "http://x"}\n', "malformed 'endpoint'"),
        (b'{"kind": "result", "index": 0}\n', "unexpected message kind 'result'"),  # parent's
    ],
)
def test_a_malformed_line_to_the_child_is_a_clear_error(line: bytes, match: str) -> None:
    with pytest.raises(EvalgateWireError, match=match) as caught:
        evalgate_decode_for_child(line)
    assert isinstance(caught.value, EvalgateError)  # one exception tree


def test_a_message_for_the_other_direction_is_refused() -> None:
    with pytest.raises(EvalgateWireError, match="unexpected message kind 'result'"):
        evalgate_decode_for_child(evalgate_encode(TO_PARENT[0]))
    with pytest.raises(EvalgateWireError, match="unexpected message kind 'work'"):
        evalgate_decode_for_parent(evalgate_encode(TO_CHILD[4]))


@pytest.mark.parametrize(
    "bad",
    [
        {k: v for k, v in outcome().items() if k != "usage"},
        {**outcome(), "surplus": 1},
        "not an outcome",
    ],
    ids=["missing-field", "extra-field", "not-a-dict"],
)
def test_a_result_with_a_malformed_outcome_is_refused(bad: Any) -> None:
    line = json.dumps(
        {"kind": "result", "index": 0, "in_flight": 0, "fatal": False, "outcome": bad}
    )
    with pytest.raises(EvalgateWireError, match="outcome fields differ"):
        evalgate_decode_for_parent(line.encode())


def test_the_error_names_the_line_and_stays_short() -> None:
    line = b'{"kind": "urge", "pad": "' + b"x" * 5000 + b'"}\n'
    with pytest.raises(EvalgateWireError) as caught:
        evalgate_decode_for_child(line)
    text = str(caught.value)
    assert '{"kind": "urge"' in text and text.endswith("...") and len(text) < 400


def test_an_unencodable_value_is_refused_when_encoding() -> None:
    with pytest.raises(TypeError, match="not a wire value: object"):
        evalgate_encode(EvalgateWireRequest(0, 0, 0, {"x": object()}, "id", 1, False))


# -- the child's outcome of a call result ------------------------------------------------------


def _call_result(**changes: Any) -> EvalgateCallResult:
    fields: dict[str, Any] = {
        "output": "4", "finish_reason": "stop", "prompt_tokens": 11, "completion_tokens": 1,
        "ttft_s": 0.0125, "tpot_s": 0.003, "itl_s": (), "e2e_s": 0.05, "queued_s": 0.001,
        "attempts": 1, "error": None, "sent_at": 0.0, "model": "m-served",
        "system_fingerprint": "fp_1",
    }  # fmt: skip
    fields.update(changes)
    return EvalgateCallResult(**fields)


def test_the_outcome_holds_the_record_fields_of_a_call() -> None:
    made = evalgate_outcome(_call_result(), "t0", "t1")
    assert set(made) == EVALGATE_OUTCOME_FIELDS | EVALGATE_SERVED_FIELDS
    assert (made.get("model"), made.get("system_fingerprint")) == ("m-served", "fp_1")
    assert made["timing"] == {
        "queued_s": 0.001, "ttft_s": 0.0125, "tpot_s": 0.003, "e2e_s": 0.05, "itl_p95_s": None,
    }  # fmt: skip
    assert made["usage"] == {"prompt_tokens": 11, "completion_tokens": 1}
    assert (made["started_at"], made["finished_at"], made["error"]) == ("t0", "t1", None)
    again = evalgate_decode_for_parent(evalgate_encode(EvalgateWireResult(0, 0, False, made)))
    assert isinstance(again, EvalgateWireResult) and again.outcome == made


def test_the_outcome_keeps_the_nearest_rank_p95_of_the_inter_token_latencies() -> None:
    itl = tuple(float(i) for i in range(1, 21))  # 20 values: rank ceil(0.95 * 20) = 19
    assert evalgate_outcome(_call_result(itl_s=itl[::-1]), "a", "b")["timing"]["itl_p95_s"] == 19.0
    assert evalgate_outcome(_call_result(itl_s=(0.5,)), "a", "b")["timing"]["itl_p95_s"] == 0.5


def test_the_outcome_keeps_null_served_fields_when_the_endpoint_reported_none() -> None:
    made = evalgate_outcome(_call_result(model=None, system_fingerprint=None), "a", "b")
    assert {key: made.get(key, "absent") for key in EVALGATE_SERVED_FIELDS} == {
        "model": None,
        "system_fingerprint": None,
    }


def test_the_outcome_error_leaves_fatal_out() -> None:
    error = EvalgateCallError("auth", 401, "bad key", True)
    made = evalgate_outcome(_call_result(output=None, error=error), "a", "b")
    assert made["error"] == {"category": "auth", "status": 401, "message": "bad key"}


# -- the child process, spoken to directly -----------------------------------------------------


@pytest.fixture
def server() -> Iterator[EvalgateSimServer]:
    sim = EvalgateSimServer(EvalgateSimConfig(accuracy=1.0)).start()
    yield sim
    sim.stop()


def _run_child(lines: list[bytes], timeout: float = 60.0) -> tuple[int, list[Any], str]:
    """Feed ``lines`` to a fresh child, wait for its exit; (status, messages, stderr)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest_evalgate.runner"],
        input=b"".join(lines),
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    messages = [evalgate_decode_for_parent(line) for line in done.stdout.splitlines()]
    return done.returncode, messages, done.stderr.decode(errors="replace")


def _endpoint(sim: EvalgateSimServer) -> EvalgateEndpoint:
    return EvalgateEndpoint(sim.base_url, "m", "chat", None, 10.0, 2, False)


def _request(index: int, halt: int = 0) -> EvalgateWireRequest:
    body = {"messages": [{"role": "user", "content": f"q {index}"}], "max_tokens": 4}
    return EvalgateWireRequest(index, 0, halt, body, f"v1/cand/c{index}/r0", 8, False)


def test_the_child_answers_every_work_and_exits_0_after_close(server: EvalgateSimServer) -> None:
    lines = [
        evalgate_encode(EvalgateWireSetup(4, EvalgateLimits(4, None, None))),
        evalgate_encode(EvalgateWireEndpoint(0, _endpoint(server))),
        *(evalgate_encode(_request(i)) for i in range(6)),
        evalgate_encode(EvalgateWireUrge(5)),
        evalgate_encode(EvalgateWireClose()),
    ]
    status, messages, stderr = _run_child(lines)
    assert status == 0, stderr
    results = [m for m in messages if isinstance(m, EvalgateWireResult)]
    assert sorted(m.index for m in results) == list(range(6))
    assert all(m.outcome["error"] is None and not m.fatal for m in results)
    assert all(m.outcome["output"] for m in results)
    assert server.stats()["requests_total"] == 6


def test_a_fatal_error_closes_the_stop_channel_for_later_works() -> None:
    sim = EvalgateSimServer(EvalgateSimConfig(fail_401=True)).start()
    try:
        lines = [
            evalgate_encode(EvalgateWireSetup(4, EvalgateLimits(4, None, None))),
            evalgate_encode(EvalgateWireEndpoint(0, _endpoint(sim))),
            *(evalgate_encode(_request(i, halt=3)) for i in range(5)),
            evalgate_encode(EvalgateWireClose()),
        ]
        status, messages, stderr = _run_child(lines)
        requests = sim.stats()["requests_total"]
    finally:
        sim.stop()
    assert status == 0, stderr
    results = [m for m in messages if isinstance(m, EvalgateWireResult)]
    halted = [m for m in messages if isinstance(m, EvalgateWireHalted)]
    assert [m.index for m in results] == [0] and results[0].fatal  # the probe alone
    error = results[0].outcome["error"]
    assert error is not None and error["category"] == "auth"
    assert sorted(m.index for m in halted) == [1, 2, 3, 4]
    assert {m.reason.split(":")[0] for m in halted} == {"auth"}
    assert requests == 1


def test_a_malformed_line_makes_the_child_fail_loudly(server: EvalgateSimServer) -> None:
    lines = [evalgate_encode(EvalgateWireSetup(2, EvalgateLimits(2, None, None))), b"{oops\n"]
    status, messages, _ = _run_child(lines)
    assert status == 1
    assert isinstance(messages[-1], EvalgateWireFailure)
    assert "EvalgateWireError" in messages[-1].reason and "{oops" in messages[-1].reason


def test_the_child_wants_the_setup_first() -> None:
    status, messages, _ = _run_child([evalgate_encode(EvalgateWireClose())])
    assert status == 1
    assert isinstance(messages[-1], EvalgateWireFailure)
    assert "expected the setup first" in messages[-1].reason


def test_a_second_setup_is_refused() -> None:
    setup = evalgate_encode(EvalgateWireSetup(1, EvalgateLimits(1, None, None)))
    status, messages, _ = _run_child([setup, setup])
    assert status == 1
    assert isinstance(messages[-1], EvalgateWireFailure)
    assert "unexpected 'setup' message" in messages[-1].reason


def test_stdin_ending_without_close_exits_3_without_a_request(server: EvalgateSimServer) -> None:
    lines = [
        evalgate_encode(EvalgateWireSetup(2, EvalgateLimits(2, None, None))),
        evalgate_encode(EvalgateWireEndpoint(0, _endpoint(server))),
    ]
    status, messages, _ = _run_child(lines)
    assert (status, messages) == (3, [])
    assert server.stats()["requests_total"] == 0
