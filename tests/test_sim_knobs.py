"""Unit tests of the simulator's knobs (``simulated/knobs.py``): names, parsing, ranges, URLs."""

from __future__ import annotations

import dataclasses
import random
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.simulated import (
    EvalgateSimConfig,
    evalgate_parse_simulated_url,
    evalgate_sim_config_from_knobs,
    evalgate_sim_config_url,
    evalgate_sim_knob_names,
)
from pytest_evalgate.simulated.knobs import EVALGATE_SIM_HANG_LIMIT_S

# The knob names are part of the user contract (manifests hold simulated:// URLs): a rename
# breaks every suite that uses it, so the list is spelled out here, not derived.
KNOBS = (
    "accuracy", "seed", "latency_ms", "ttft_ms", "tpot_ms", "jitter", "output_tokens",
    "output_jitter", "fail_401", "fail_400", "quota", "fail_429_first", "retry_after",
    "fail_500_first", "fail_rate", "hang_first", "hang_s", "canary", "canary_rate",
    "service_slots", "lift", "lift_except",
    "code", "code_loop", "code_memory", "code_fork", "code_escape", "code_echo",
    "judge", "position_bias", "verbosity_bias", "unparseable_rate",  # the simulated judge's
    "fault",  # issue 19: misbehaving answers
    "served_model",  # issue 30: answers under another model name
    "tool_accuracy", "tool_invalid", "tool_loop",  # issue 31: the tool-using style
    "refuse_max_tokens_0", "no_logprobs",  # issue 32: the echo style (choice_style)
)  # fmt: skip


def test_knob_names_are_the_contract_in_field_order() -> None:
    assert evalgate_sim_knob_names() == KNOBS


def test_every_knob_name_is_a_config_field_except_the_category_table() -> None:
    names = {f.name for f in dataclasses.fields(EvalgateSimConfig)}
    assert names - set(evalgate_sim_knob_names()) == {"accuracy_by_category"}


def test_defaults_are_a_correct_quick_faultless_model() -> None:
    config = EvalgateSimConfig()
    assert (config.accuracy, config.seed, config.latency_ms) == (0.9, 0, 0.0)
    assert (config.ttft_ms, config.tpot_ms, config.output_tokens) == (None, None, None)
    assert not (config.fail_401 or config.fail_400 or config.quota)
    assert (config.fail_429_first, config.fail_500_first, config.hang_first) == (0, 0, 0)
    assert config.hang_s == EVALGATE_SIM_HANG_LIMIT_S == 300.0


def test_config_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        EvalgateSimConfig().accuracy = 0.5  # type: ignore[misc]


# --------------------------------------------------------------------------- from knob pairs


@pytest.mark.parametrize(
    ("text", "value"),
    [
        *[("1", True), ("true", True), ("YES", True), (" on ", True)],
        *[("0", False), ("False", False), ("no", False), ("off", False)],
    ],
)
def test_boolean_knobs_take_the_usual_spellings(text: str, value: bool) -> None:
    assert evalgate_sim_config_from_knobs([("quota", text)]).quota is value


def test_numbers_take_their_field_types() -> None:
    config = evalgate_sim_config_from_knobs(
        [("seed", "7"), ("latency_ms", "2.5"), ("output_tokens", "12"), ("retry_after", "3")]
    )
    assert (config.seed, config.latency_ms, config.output_tokens) == (7, 2.5, 12)
    assert isinstance(config.seed, int) and isinstance(config.output_tokens, int)
    assert isinstance(config.retry_after, float) and config.retry_after == 3.0


def test_optional_knobs_stay_none_unless_given() -> None:
    config = evalgate_sim_config_from_knobs([("ttft_ms", "0")])
    assert config.ttft_ms == 0.0 and config.tpot_ms is None and config.retry_after is None


def test_category_accuracies_are_sorted_and_override_accuracy() -> None:
    config = evalgate_sim_config_from_knobs(
        [("accuracy.zeta", "0.1"), ("accuracy", "0.6"), ("accuracy.alpha", "1")]
    )
    assert config.accuracy_by_category == (("alpha", 1.0), ("zeta", 0.1))
    assert config.accuracy_for("zeta") == 0.1 and config.accuracy_for("alpha") == 1.0
    assert config.accuracy_for("other") == 0.6 and config.accuracy_for(None) == 0.6


def test_an_empty_category_name_is_a_category_too() -> None:
    config = evalgate_sim_config_from_knobs([("accuracy.", "0.25")])
    assert config.accuracy_for("") == 0.25 and config.accuracy_for("x") == 0.9


@pytest.mark.parametrize(
    ("pairs", "knob", "reason"),
    [
        ([("speed", "1")], "speed", "unknown knob"),
        ([("accuracy_by_category", "x")], "accuracy_by_category", "unknown knob"),
        ([("seed", "1"), ("seed", "1")], "seed", "given twice"),
        ([("accuracy.x", "0.1"), ("accuracy.x", "0.2")], "accuracy.x", "given twice"),
        ([("seed", "1.5")], "seed", "1.5"),
        ([("seed", "-1")], "seed", ">= 0"),
        ([("latency_ms", "inf")], "latency_ms", "finite"),
        ([("latency_ms", "nan")], "latency_ms", "finite"),
        ([("latency_ms", "")], "latency_ms", "float"),
        ([("fail_rate", "1.01")], "fail_rate", "[0, 1]"),
        ([("jitter", "2")], "jitter", "[0, 1]"),
        ([("output_jitter", "1.5")], "output_jitter", "[0, 1]"),
        ([("accuracy.hard", "-0.1")], "accuracy.hard", ">= 0"),
        ([("hang_s", "300.5")], "hang_s", "<= 300"),
        ([("quota", "2")], "quota", "0 or 1"),
    ],
)
def test_bad_knobs_name_source_knob_and_reason(
    pairs: list[tuple[str, str]], knob: str, reason: str
) -> None:
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_sim_config_from_knobs(pairs, source="here")
    assert (info.value.source, info.value.key) == ("here", knob)
    assert reason in info.value.reason


def test_an_unknown_knob_lists_the_known_ones() -> None:
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_sim_config_from_knobs([("acuracy", "1")])
    for name in (*KNOBS, "accuracy.<category>"):
        assert name in info.value.reason


def test_the_default_source_is_the_scheme() -> None:
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_sim_config_from_knobs([("speed", "1")])
    assert info.value.source == "simulated://"


def test_edges_of_the_ranges_are_allowed() -> None:
    config = evalgate_sim_config_from_knobs(
        [("accuracy", "0"), ("fail_rate", "1"), ("hang_s", "300"), ("accuracy.x", "1.0")]
    )
    assert (config.accuracy, config.fail_rate, config.hang_s) == (0.0, 1.0, 300.0)


# --------------------------------------------------------------------------- URLs


def test_the_url_of_the_default_config_has_no_knobs() -> None:
    assert evalgate_sim_config_url(EvalgateSimConfig()) == "simulated://?"
    assert evalgate_parse_simulated_url("simulated://?") == EvalgateSimConfig()
    assert evalgate_parse_simulated_url("simulated:///") == EvalgateSimConfig()


def test_the_url_renders_only_non_default_knobs_and_booleans_as_digits() -> None:
    config = EvalgateSimConfig(accuracy=0.5, fail_401=True, hang_first=2)
    pairs = parse_qsl(urlsplit(evalgate_sim_config_url(config)).query)
    assert pairs == [("accuracy", "0.5"), ("fail_401", "1"), ("hang_first", "2")]


def test_category_names_are_escaped_in_the_url() -> None:
    config = EvalgateSimConfig(accuracy_by_category=(("a&b c", 0.25), ("x=y", 0.5)))
    url = evalgate_sim_config_url(config)
    assert "&b" not in url.partition("accuracy.")[2].partition("=")[0]
    assert evalgate_parse_simulated_url(url) == config


def _random_config(rng: random.Random) -> EvalgateSimConfig:
    draw: dict[str, Any] = {
        "accuracy": rng.random(),
        "seed": rng.randrange(10**6),
        "latency_ms": rng.choice([0.0, rng.uniform(0, 500)]),
        "ttft_ms": rng.choice([None, rng.uniform(0, 100)]),
        "tpot_ms": rng.choice([None, 0.0, rng.uniform(0, 20)]),
        "jitter": rng.random(),
        "output_tokens": rng.choice([None, rng.randrange(200)]),
        "output_jitter": rng.random(),
        "fail_401": rng.random() < 0.2,
        "fail_400": rng.random() < 0.2,
        "quota": rng.random() < 0.2,
        "fail_429_first": rng.randrange(4),
        "retry_after": rng.choice([None, rng.uniform(0, 5)]),
        "fail_500_first": rng.randrange(4),
        "fail_rate": rng.random(),
        "hang_first": rng.randrange(3),
        "hang_s": rng.uniform(0, 300),
    }
    names = rng.sample(["billing", "a b", "ünï", "x.y", "hard"], rng.randrange(4))
    draw["accuracy_by_category"] = tuple(sorted((n, rng.random()) for n in names))
    return EvalgateSimConfig(**draw)


def test_random_configs_round_trip_through_their_urls() -> None:
    rng = random.Random(11)
    for _ in range(500):
        config = _random_config(rng)
        assert evalgate_parse_simulated_url(evalgate_sim_config_url(config)) == config


def test_a_url_parses_to_the_config_of_its_knob_pairs() -> None:
    url = "simulated://?accuracy=0.7&accuracy.hard=0.2&seed=5&fail_500_first=2"
    expected = evalgate_sim_config_from_knobs(parse_qsl(urlsplit(url).query))
    assert evalgate_parse_simulated_url(url) == expected
    assert expected.fail_500_first == 2 and expected.accuracy_for("hard") == 0.2


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("simulated://?accuracy", "query"),
        ("simulated://?&&", "query"),
        ("simulated://?accuracy=", "accuracy"),
        ("simulated://models/x", "path"),
        ("https://api.example/v1", "scheme"),
        ("", "scheme"),
    ],
)
def test_malformed_urls_are_config_errors_naming_the_url(url: str, key: str) -> None:
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_parse_simulated_url(url)
    assert (info.value.source, info.value.key) == (url, key)


def test_lift_raises_every_category_but_the_excepted_ones() -> None:
    config = evalgate_parse_simulated_url(
        "simulated://?accuracy=0.7&accuracy.beta=0.95&lift=0.1&lift_except=held,other"
    )
    assert config.accuracy_for("alpha") == pytest.approx(0.8)
    assert config.accuracy_for("beta") == 1.0  # capped
    assert config.accuracy_for("held") == config.accuracy_for("other") == 0.7
    assert config.evalgate_unlifted() == frozenset({"held", "other"})
    assert EvalgateSimConfig(accuracy=0.7).accuracy_for("held") == 0.7
    with pytest.raises(EvalgateConfigError, match="lift"):
        evalgate_parse_simulated_url("simulated://?lift=1.5")


def test_the_fault_knob_takes_only_known_faults() -> None:
    assert evalgate_parse_simulated_url("simulated://?fault=echo_key").fault == "echo_key"
    with pytest.raises(EvalgateConfigError, match="unknown fault 'nope' \\(known: truncate_stream"):
        evalgate_parse_simulated_url("simulated://?fault=nope")
