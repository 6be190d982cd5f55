"""Shadow stage units: the RequestMirror route (validated against the Gateway API CRD of
``../shared/crds``, skipped with a reason where absent) and ``evalgate shadow render``; the
``shadow:`` rules of gate.yaml and their refusals; one answer read from its bytes; the first-turn
test; pairs written and read back with their checksums; the shadow gate's numbers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import crdkit
import pytest
import yaml

from pytest_evalgate.cli import main
from pytest_evalgate.errors import EvalgateConfigError, EvalgateIntegrityError, EvalgatePolicyError
from pytest_evalgate.policy.load import evalgate_load_policy
from pytest_evalgate.policy.shadow import evalgate_shadow_rules
from pytest_evalgate.shadow import (
    EvalgatePairWriter,
    EvalgateShadowRouteOptions,
    evalgate_read_answer,
    evalgate_read_pairs,
    evalgate_shadow_route,
)
from pytest_evalgate.shadow.pairs import evalgate_pair, evalgate_side
from pytest_evalgate.shadow.proxy import evalgate_first_turn
from pytest_evalgate.shadow.route import evalgate_mirror_share
from pytest_evalgate.shadow.verdict import (
    evalgate_is_refusal,
    evalgate_shadow_decision,
    evalgate_shadow_rule,
)
from pytest_evalgate.store.backend import EvalgateLocalStore

REPO = Path(__file__).resolve().parents[1]
CRDS = REPO.parent / "shared" / "crds"
TINY = REPO / "suites" / "tiny"
OPTIONS = EvalgateShadowRouteOptions(
    stable_pool="support-stable", candidate_pool="support-candidate", route="support-shadow",
    gateway="inference-gateway", percent=5, app="support", namespace="serve",
)  # fmt: skip


@pytest.fixture(scope="module")
def route_schema() -> Any:
    if not CRDS.is_dir():
        pytest.skip(f"{CRDS} is absent (a plain clone has no shared/crds): HTTPRoute unchecked")
    return crdkit.crd_validators(CRDS, ["gateway.networking.k8s.io_httproutes.yaml"])


@pytest.mark.parametrize("percent", [5, 0.5, 100, 12.25])
def test_route_validates_against_the_crd(route_schema: Any, percent: float) -> None:
    import dataclasses

    route = evalgate_shadow_route(dataclasses.replace(OPTIONS, percent=percent))
    route_schema[(route["apiVersion"], route["kind"])].validate(route)
    (rule,) = route["spec"]["rules"]
    mirror = rule["filters"][0]["requestMirror"]
    assert rule["filters"][0]["type"] == "RequestMirror"
    assert mirror["backendRef"]["name"] == "support-candidate"
    assert rule["backendRefs"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "support-stable"}
    ]
    share = mirror.get("percent")
    if share is None:
        fraction = mirror["fraction"]
        share = 100 * fraction["numerator"] / fraction["denominator"]
    assert share == pytest.approx(percent)


def test_a_broken_route_fails_the_crd(route_schema: Any) -> None:
    import jsonschema

    route = evalgate_shadow_route(OPTIONS)
    route["spec"]["rules"][0]["filters"][0]["requestMirror"]["percent"] = 101
    with pytest.raises(jsonschema.ValidationError):
        route_schema[(route["apiVersion"], route["kind"])].validate(route)


def test_mirror_share_forms() -> None:
    assert evalgate_mirror_share(5) == {"percent": 5}
    assert evalgate_mirror_share(0.5) == {"fraction": {"numerator": 50, "denominator": 10000}}


@pytest.mark.parametrize(
    "change, key",
    [
        ({"percent": 0}, "percent"),
        ({"percent": 101}, "percent"),
        ({"percent": 0.001}, "percent"),
        ({"candidate_pool": "support-stable"}, "candidate"),
        ({"route": "Bad_Name"}, "route"),
    ],
)
def test_route_refusals(change: dict[str, Any], key: str) -> None:
    import dataclasses

    with pytest.raises(EvalgateConfigError) as raised:
        evalgate_shadow_route(dataclasses.replace(OPTIONS, **change))
    assert raised.value.key == key


def test_render_command(capsys: pytest.CaptureFixture[str], route_schema: Any) -> None:
    argv = ["shadow", "render", str(TINY), "--stable", "tiny-stable", "--candidate", "tiny-cand",
            "--percent", "10", "--namespace", "serve"]  # fmt: skip
    assert main(argv) == 0
    (route,) = list(yaml.safe_load_all(capsys.readouterr().out))
    route_schema[(route["apiVersion"], route["kind"])].validate(route)
    assert route["metadata"]["name"] == "tiny-eval-shadow"
    assert route["spec"]["rules"][0]["filters"][0]["requestMirror"]["percent"] == 10


def test_render_refuses_a_bad_share(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["shadow", "render", str(TINY), "--stable", "a", "--candidate", "b", "--percent", "0"]
    assert main(argv) == 4
    assert "percent" in capsys.readouterr().err


# ------------------------------------------------------------------------------ policy


def test_shadow_rules_load_and_join_the_digest(tmp_path: Path) -> None:
    base = (TINY / "gate.yaml").read_text()
    path = tmp_path / "gate.yaml"
    path.write_text(base + "shadow:\n  - {metric: latency_ratio, max: 1.2}\n")
    policy = evalgate_load_policy(path)
    (rule,) = policy.shadow
    assert (rule.metric, rule.threshold, rule.min_pairs) == ("latency_ratio", 1.2, 30)
    assert policy.to_dict()["shadow"] == [{"metric": "latency_ratio", "max": 1.2, "min_pairs": 30}]
    plain = tmp_path / "plain.yaml"
    plain.write_text(base)
    assert "shadow" not in evalgate_load_policy(plain).to_dict()


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"metric": "nope", "max": 1.2}, "shadow[0].metric"),
        ({"metric": "latency_ratio"}, "shadow[0].max"),
        ({"metric": "latency_ratio", "max": 1.0}, "shadow[0].max"),
        ({"metric": "error_rate_delta", "max": 0.0}, "shadow[0].max"),
        ({"metric": "latency_ratio", "max": 1.2, "extra": 1}, "shadow[0].extra"),
        ({"metric": "latency_ratio", "max": 1.2, "min_pairs": 0}, "shadow[0].min_pairs"),
    ],
)
def test_shadow_rule_refusals(raw: dict[str, Any], key: str) -> None:
    with pytest.raises(EvalgatePolicyError) as raised:
        evalgate_shadow_rules([raw], "gate.yaml")
    assert raised.value.key == key and raised.value.source == "gate.yaml"


def test_shadow_rules_refuse_a_second_rule_and_a_mapping() -> None:
    twice = [{"metric": "latency_ratio", "max": 1.2}] * 2
    with pytest.raises(EvalgatePolicyError, match="second rule"):
        evalgate_shadow_rules(twice, "gate.yaml")
    with pytest.raises(EvalgatePolicyError, match="list"):
        evalgate_shadow_rules({"metric": "latency_ratio"}, "gate.yaml")


# ------------------------------------------------------------------------------ answers


def test_whole_answer() -> None:
    body = {"choices": [{"message": {"content": "a b c"}, "finish_reason": "length"}],
            "usage": {"completion_tokens": 7}}  # fmt: skip
    answer = evalgate_read_answer(200, "application/json", json.dumps(body).encode())
    assert (answer.text, answer.finish_reason, answer.output_tokens) == ("a b c", "length", 7)
    assert answer.error is None


def test_streamed_answer_with_tool_calls() -> None:
    call = {"index": 0, "function": {"name": "refund", "arguments": "{}"}}
    chunks = [
        {"choices": [{"delta": {"content": "one "}}]},
        {"choices": [{"delta": {"tool_calls": [call]}}]},
        {"choices": [{"delta": {"content": "two"}, "finish_reason": "tool_calls"}]},
    ]
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    answer = evalgate_read_answer(200, "text/event-stream", body + b"data: [DONE]\n\n")
    assert (answer.text, answer.output_tokens, answer.tool_calls) == ("one two", 2, 1)
    assert answer.finish_reason == "tool_calls"


@pytest.mark.parametrize(
    "status, kind, body, error",
    [
        (500, "application/json", b'{"error": {"message": "boom"}}', "HTTP 500: boom"),
        (200, "application/json", b"not json", "not an OpenAI-compatible answer"),
        (200, "application/json", b'{"error": {"message": "x"}}', "an error object in the answer"),
    ],
)
def test_failed_answers(status: int, kind: str, body: bytes, error: str) -> None:
    assert evalgate_read_answer(status, kind, body).error == error


def test_first_turn() -> None:
    user = {"role": "user", "content": "hi"}
    assert evalgate_first_turn(json.dumps({"messages": [user]}).encode())
    tool = {"role": "tool", "tool_call_id": "1", "content": "done"}
    assert not evalgate_first_turn(json.dumps({"messages": [user, tool]}).encode())
    calls = {"role": "assistant", "tool_calls": [{"id": "1"}]}
    assert not evalgate_first_turn(json.dumps({"messages": [user, calls]}).encode())


# ------------------------------------------------------------------------------ pairs, gate


def side(text: str, tokens: int, e2e: float = 0.1, error: str | None = None) -> dict[str, Any]:
    answer = evalgate_read_answer(200, "application/json", b"{}")
    answer = type(answer)(200, text, "stop", tokens, 0, error)
    return evalgate_side(answer, e2e, None, "tok-abcdef")


def test_pairs_round_trip_and_checksums(tmp_path: Path) -> None:
    store = EvalgateLocalStore(str(tmp_path))
    writer = EvalgatePairWriter(store, "tiny-eval", "w1")
    for index in range(3):
        pair = evalgate_pair(b'{"model": "m"}', "/v1/chat/completions",
                             side(f"key tok-abcdef {index}", 3), side("x", 4))  # fmt: skip
        writer.add(pair)
    assert writer.flush() == 3 and writer.flush() == 0
    pairs = evalgate_read_pairs(store, "tiny-eval")
    assert len(pairs) == 3 and pairs[0]["model"] == "m"
    assert "tok-abcdef" not in json.dumps(pairs)
    (segment,) = list(tmp_path.rglob("*.jsonl"))
    segment.write_text(segment.read_text().replace('"x"', '"y"', 1))
    with pytest.raises(EvalgateIntegrityError, match="checksum"):
        evalgate_read_pairs(store, "tiny-eval")


def test_refusals() -> None:
    assert evalgate_is_refusal("  I can\u2019t help with that.")
    assert evalgate_is_refusal("I'm sorry, but no")
    assert not evalgate_is_refusal("Sure, I can't wait to help")
    assert not evalgate_is_refusal("Your refund is on its way")


def gate_policy(tmp_path: Path, rules: str) -> Any:
    suite = tmp_path / "suite"
    shutil.copytree(TINY, suite)
    path = suite / "gate.yaml"
    path.write_text(path.read_text() + "shadow:\n" + rules)
    return evalgate_load_policy(path)


def pairs_of(stable: list[dict[str, Any]], candidate: list[dict[str, Any]]) -> list[Any]:
    return [evalgate_pair(b"{}", "/v1/x", s, c) for s, c in zip(stable, candidate, strict=True)]


def test_gate_numbers(tmp_path: Path) -> None:
    policy = gate_policy(tmp_path, "  - {metric: output_length_ratio, max: 1.15}\n"
                                   "  - {metric: refusal_rate_delta, max: 0.05}\n"
                                   "  - {metric: error_rate_delta, max: 0.05}\n")  # fmt: skip
    stable = [side("fine", 5 * (2 + i % 3)) for i in range(60)]
    longer = [side("fine", 7 * (2 + i % 3)) for i in range(60)]  # 40 % longer
    length, refusal, errors = policy.shadow
    result = evalgate_shadow_rule(length, pairs_of(stable, longer), policy)
    assert result.outcome == "fail" and result.estimate == pytest.approx(1.4, abs=0.03)
    equal = evalgate_shadow_rule(length, pairs_of(stable, stable), policy)
    assert equal.outcome == "pass" and equal.estimate == 1.0
    refusing = [side("I cannot do that" if i % 5 == 0 else "fine", 10) for i in range(60)]
    assert evalgate_shadow_rule(refusal, pairs_of(stable, refusing), policy).outcome == "fail"
    failing = [side("", 0, error="HTTP 500") if i % 4 == 0 else side("ok", 10) for i in range(60)]
    result = evalgate_shadow_rule(errors, pairs_of(stable, failing), policy)
    assert result.outcome == "fail" and result.estimate == pytest.approx(0.25)
    few = evalgate_shadow_rule(length, pairs_of(stable[:5], longer[:5]), policy)
    assert few.outcome == "undecided" and few.pairs == 5


def test_decision_verdicts(tmp_path: Path) -> None:
    policy = gate_policy(tmp_path, "  - {metric: latency_ratio, max: 1.3}\n")
    stable = [side("a", 5, e2e=0.10) for _ in range(40)]
    slow = [side("a", 5, e2e=0.20) for _ in range(40)]
    assert evalgate_shadow_decision("s", policy, pairs_of(stable, slow), "v")["verdict"] == "fail"
    same = evalgate_shadow_decision("s", policy, pairs_of(stable, stable), "v")
    assert same["verdict"] == "pass" and same["counts"]["pairs"] == 40
    assert evalgate_shadow_decision("s", policy, [], "v")["verdict"] == "undecided"


def test_gate_command_needs_shadow_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["shadow", "gate", str(TINY), "--store", str(tmp_path), "--out", str(tmp_path / "d")]
    assert main(argv) == 4
    assert "shadow" in capsys.readouterr().err
