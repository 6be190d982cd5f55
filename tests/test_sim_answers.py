"""Unit tests of the simulator's answer logic: draws, the answer key, the answer-key style, and
the seam (``styles.py``) the app calls, including an app serving a style of the tests' own."""

from __future__ import annotations

import asyncio
import hashlib
import json
import statistics
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.formats.canonical import evalgate_sha256_hex
from pytest_evalgate.simulated import (
    EvalgateSimConfig,
    evalgate_load_answer_key,
    evalgate_prompt_digest,
    evalgate_sim_answer,
    evalgate_sim_normalise,
    evalgate_sim_wrong_answer,
    evalgate_write_answer_key,
)
from pytest_evalgate.simulated.answers import evalgate_sim_keyed_answer
from pytest_evalgate.simulated.app import EvalgateSimApp
from pytest_evalgate.simulated.draws import evalgate_sim_salt, evalgate_sim_uniform
from pytest_evalgate.simulated.protocol import EvalgateSimProtocol
from pytest_evalgate.simulated.styles import (
    EvalgateSimAsk,
    evalgate_sim_answerer,
    evalgate_sim_ask,
    evalgate_sim_key_answerer,
)


def chat(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"question {i}?"}]


KEY = {
    evalgate_prompt_digest(chat(i)): (f"answer {i}", "hard" if i % 2 else "easy")
    for i in range(200)
}


# --------------------------------------------------------------------------- draws


def test_uniform_is_the_documented_hash() -> None:
    digest = hashlib.sha256("\x1f".join(["3", "m", "abc", "None"]).encode()).digest()
    assert evalgate_sim_uniform(3, "m", "abc", None) == int.from_bytes(digest[:8], "big") / 2**64


def test_uniform_is_deterministic_in_range_and_spread() -> None:
    draws = [evalgate_sim_uniform("x", i) for i in range(4000)]
    assert draws == [evalgate_sim_uniform("x", i) for i in range(4000)]
    assert all(0.0 <= u < 1.0 for u in draws) and len(set(draws)) == len(draws)
    assert abs(statistics.fmean(draws) - 0.5) < 0.02


def test_a_cold_request_ignores_its_seed_and_a_warm_one_keeps_it() -> None:
    config = EvalgateSimConfig(seed=4)
    assert evalgate_sim_salt(config, "m", "d", 0.0, 99) == (4, "m", "d")
    assert evalgate_sim_salt(config, "m", "d", 0.5, 99) == (4, "m", "d", 99)
    assert evalgate_sim_salt(config, "m", "d", 1.0, None) == (4, "m", "d", None)


# --------------------------------------------------------------------------- the answer key


def test_the_prompt_digest_is_the_canonical_sha256() -> None:
    assert evalgate_prompt_digest(chat(1)) == evalgate_sha256_hex(chat(1))
    assert evalgate_prompt_digest("complete:") == evalgate_sha256_hex("complete:")
    reordered = [{"content": "question 1?", "role": "user"}]
    assert evalgate_prompt_digest(reordered) == evalgate_prompt_digest(chat(1))


def test_the_written_key_is_json_lines_in_the_documented_format(tmp_path: Path) -> None:
    path = tmp_path / "key.jsonl"
    count = evalgate_write_answer_key(path, [(chat(1), "ünï", "billing"), ("p", "t", "")])
    lines = path.read_text(encoding="utf-8").splitlines()
    assert count == 2 and '"ünï"' in lines[0]  # not \\u-escaped
    assert json.loads(lines[0]) == {
        "prompt_sha256": evalgate_prompt_digest(chat(1)),
        "target": "ünï",
        "category": "billing",
    }
    assert evalgate_load_answer_key(path) == {
        evalgate_prompt_digest(chat(1)): ("ünï", "billing"),
        evalgate_prompt_digest("p"): ("t", ""),
    }


def test_loading_skips_blank_lines_defaults_the_category_and_collapses_twins(
    tmp_path: Path,
) -> None:
    path = tmp_path / "key.jsonl"
    row = '{"prompt_sha256": "ab", "target": "x"}\n'
    path.write_text("\n" + row + "   \n" + row)
    assert evalgate_load_answer_key(path) == {"ab": ("x", "")}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"prompt_sha256": 1, "target": "x"}\n', "fields must be strings"),
        ('{"prompt_sha256": "ab", "target": "x", "category": 2}\n', "fields must be strings"),
        ('["ab", "x"]\n', "not an answer row"),
        ("{not json\n", "not an answer row"),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "key.jsonl"
    path.write_text('{"prompt_sha256": "ok", "target": "y"}\n' + text)
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_load_answer_key(path)
    assert (info.value.source, info.value.key) == (str(path), "line 2")
    assert reason in info.value.reason


def test_a_missing_key_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        evalgate_load_answer_key(tmp_path / "missing.jsonl")


# --------------------------------------------------------------------------- the answer-key style


def test_normalise_drops_case_punctuation_articles_and_spacing() -> None:
    assert evalgate_sim_normalise("  The Router, reset!  An  hour ") == "router reset hour"
    assert evalgate_sim_normalise("...") == ""


def test_a_numeric_target_gets_a_nearby_number_with_its_decimals() -> None:
    for salt in range(50):
        wrong = evalgate_sim_wrong_answer("12.50", str(salt))
        assert wrong != "12.50" and "12.50" not in wrong
        if wrong.replace(".", "").replace("-", "").isdigit():
            assert len(wrong.partition(".")[2]) == 2 and abs(float(wrong) - 12.5) <= 9


def test_unknown_prompts_are_wrong_and_say_so() -> None:
    answer = evalgate_sim_keyed_answer(
        EvalgateSimConfig(accuracy=1.0), KEY, "nope", (0, "m", "nope")
    )
    assert (answer.known, answer.correct, answer.category, answer.digest) == (
        False,
        False,
        None,
        "nope",
    )
    assert answer.text == evalgate_sim_wrong_answer(None, repr((0, "m", "nope")))


def test_accuracy_one_and_zero_are_always_right_and_always_wrong() -> None:
    for accuracy, right in ((1.0, True), (0.0, False)):
        config = EvalgateSimConfig(accuracy=accuracy)
        for i in range(50):
            answer = evalgate_sim_answer(config, KEY, "m", chat(i))
            assert answer.correct is right and answer.known
            assert (answer.text == f"answer {i}") is right


def test_category_accuracy_overrides_apply_per_row() -> None:
    config = EvalgateSimConfig(accuracy=0.0, accuracy_by_category=(("hard", 1.0),))
    answers = [evalgate_sim_answer(config, KEY, "m", chat(i)) for i in range(40)]
    assert [a.correct for a in answers] == [i % 2 == 1 for i in range(40)]
    assert {a.category for a in answers} == {"hard", "easy"}


def test_correctness_is_the_draw_of_the_salt_against_accuracy() -> None:
    config = EvalgateSimConfig(accuracy=0.5, seed=7)
    for i in range(200):
        digest = evalgate_prompt_digest(chat(i))
        salt = evalgate_sim_salt(config, "m", digest, 0.0, None)
        expected = evalgate_sim_uniform(*salt) < 0.5
        assert evalgate_sim_answer(config, KEY, "m", chat(i)).correct is expected


def test_the_model_name_changes_which_cases_are_right() -> None:
    config = EvalgateSimConfig(accuracy=0.5)
    first = [evalgate_sim_answer(config, KEY, "a", chat(i)).correct for i in range(200)]
    second = [evalgate_sim_answer(config, KEY, "b", chat(i)).correct for i in range(200)]
    assert first != second


# --------------------------------------------------------------------------- the seam


def test_an_ask_carries_digest_and_salt_computed_once() -> None:
    config = EvalgateSimConfig(seed=2)
    ask = evalgate_sim_ask(config, "m", chat(3), 0.7, 11)
    assert (ask.model, ask.prompt, ask.temperature, ask.seed) == ("m", chat(3), 0.7, 11)
    assert ask.digest == evalgate_prompt_digest(chat(3))
    assert ask.salt == evalgate_sim_salt(config, "m", ask.digest, 0.7, 11)


def test_the_key_style_answers_exactly_as_evalgate_sim_answer() -> None:
    config = EvalgateSimConfig(accuracy=0.6, seed=3, accuracy_by_category=(("hard", 0.2),))
    answerer = evalgate_sim_key_answerer(config, KEY)
    for i in range(0, 260, 3):  # past 200: unknown prompts too
        for temperature, seed in ((0.0, None), (0.0, 5), (0.9, 5), (1.0, None)):
            ask = evalgate_sim_ask(config, "m", chat(i), temperature, seed)
            expected = evalgate_sim_answer(config, KEY, "m", chat(i), temperature, seed)
            assert answerer(ask) == expected.text


def test_every_config_today_selects_the_key_style() -> None:
    for config in (EvalgateSimConfig(), EvalgateSimConfig(accuracy=0.1, output_tokens=9)):
        chosen = evalgate_sim_answerer(config, KEY)
        reference = evalgate_sim_key_answerer(config, KEY)
        asks = [evalgate_sim_ask(config, "m", chat(i), 0.0, None) for i in range(30)]
        assert [chosen(a) for a in asks] == [reference(a) for a in asks]


class Verdicts:
    """A style of the tests' own (a judge-like one): it records its asks and answers JSON."""

    def __init__(self) -> None:
        self.asks: list[EvalgateSimAsk] = []

    def __call__(self, ask: EvalgateSimAsk) -> str:
        self.asks.append(ask)
        return json.dumps({"score": len(self.asks), "reason": f"read {ask.model}"})


async def _serve_and_post(app: EvalgateSimApp, payloads: list[dict[str, Any]]) -> list[Any]:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: EvalgateSimProtocol(app), "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"
    try:
        async with aiohttp.ClientSession() as session:
            out = []
            for payload in payloads:
                async with session.post(url, json=payload) as response:
                    out.append(
                        await (response.json() if not payload.get("stream") else response.read())
                    )
            return out
    finally:
        server.close()
        await server.wait_closed()


def test_the_app_serves_any_style_through_the_seam() -> None:
    style = Verdicts()
    app = EvalgateSimApp(EvalgateSimConfig(output_tokens=6), style, None)
    payloads: list[dict[str, Any]] = [
        {"model": "judge", "messages": chat(1), "seed": 4},
        {"model": "judge", "messages": chat(2), "temperature": 0, "max_tokens": 2},
        {"model": "judge", "messages": chat(3), "temperature": 0, "stream": True},
    ]
    whole, cut, streamed = asyncio.run(_serve_and_post(app, payloads))
    assert (
        whole["choices"][0]["message"]["content"].strip() == '{"score": 1, "reason": "read judge"}'
    )
    assert whole["usage"]["completion_tokens"] == 6  # the plan pads any style's text
    assert cut["choices"][0]["message"]["content"] == '{"score": 2,'
    assert cut["choices"][0]["finish_reason"] == "length"
    assert b'"content": " \\"reason\\":"' in streamed and streamed.endswith(b"data: [DONE]\n\n")
    assert [a.temperature for a in style.asks] == [1.0, 0.0, 0.0]  # OpenAI's default when unset
    assert style.asks[0].seed == 4 and style.asks[0].prompt == chat(1)
    assert style.asks[0].digest == evalgate_prompt_digest(chat(1))


def test_a_lifted_model_is_right_wherever_the_unlifted_one_is() -> None:
    from pytest_evalgate.simulated import evalgate_parse_simulated_url, evalgate_sim_answer

    prompts = [[{"role": "user", "content": f"q{i}"}] for i in range(2000)]
    key = {
        evalgate_prompt_digest(p): (f"t{i}", "held" if i % 2 else "open")
        for i, p in enumerate(prompts)
    }
    base = evalgate_parse_simulated_url("simulated://?accuracy=0.6&seed=4")
    memoriser = evalgate_parse_simulated_url(
        "simulated://?accuracy=0.6&seed=4&lift=0.2&lift_except=held"
    )
    right: dict[str, list[tuple[bool, bool]]] = {"held": [], "open": []}
    for p in prompts:
        before = evalgate_sim_answer(base, key, "m", p)
        after = evalgate_sim_answer(memoriser, key, "m", p)
        assert after.correct or not before.correct  # never worse on one prompt
        right[str(before.category)].append((before.correct, after.correct))
    held, seen = right["held"], right["open"]
    assert all(b == a for b, a in held)  # the held-out category is untouched
    gain = sum(a for _, a in seen) / len(seen) - sum(b for b, _ in seen) / len(seen)
    assert 0.17 < gain < 0.23
