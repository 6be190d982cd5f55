"""report/record.py: the parts of decision.json built from plain values, exactly.

- ``definition_parts``: the definition flattened to dotted keys (sorted), a list as its
  canonical JSON, a text over 64 characters as its sha256, an empty mapping kept as ``{}``;
- ``rule_record``: one rule's numbers, NaN (does not apply) as None, ``threshold`` the bound
  the policy's number sets (``-margin`` for the margin rules);
- ``sources_record`` and ``sources_notes``: which harness files imported results came from.
"""

from __future__ import annotations

import hashlib
import json
import math
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_evalgate.formats.canonical import evalgate_canonical_json
from pytest_evalgate.report.record import (
    evalgate_definition_parts,
    evalgate_rule_record,
    evalgate_sources_notes,
    evalgate_sources_record,
)

NAN = float("nan")


# --- definition parts -------------------------------------------------------------------------


def test_the_definition_is_flattened_to_sorted_dotted_keys() -> None:
    definition = {
        "prompt": {"template": "{input}", "revision": "p1"},
        "generation": {"seed": 7, "temperature": 0.0, "stop": None},
        "repetitions": 2,
        "judge": None,
        "api": "chat",
    }
    parts = evalgate_definition_parts(definition)
    assert parts == {
        "api": "chat",
        "generation.seed": 7,
        "generation.stop": None,
        "generation.temperature": 0.0,
        "judge": None,
        "prompt.revision": "p1",
        "prompt.template": "{input}",
        "repetitions": 2,
    }
    assert list(parts) == sorted(parts)


def test_deeper_mappings_join_every_level() -> None:
    parts = evalgate_definition_parts({"evaluator": {"options": {"choice": {"delimiter": " "}}}})
    assert parts == {"evaluator.options.choice.delimiter": " "}


def test_an_empty_mapping_is_kept_as_an_empty_object() -> None:
    assert evalgate_definition_parts({"evaluator": {"options": {}}, "x": 1}) == {
        "evaluator.options": {},
        "x": 1,
    }
    assert evalgate_definition_parts({}) == {}


@pytest.mark.parametrize("value", [[1, "a", None], ("stop", "end"), [], [{"b": 1, "a": 2}]])
def test_a_list_becomes_its_canonical_json(value: Any) -> None:
    expected = evalgate_canonical_json(list(value)).decode()
    assert evalgate_definition_parts({"generation": {"stop": value}}) == {
        "generation.stop": expected
    }


def test_a_text_over_64_characters_becomes_its_sha256() -> None:
    long = "Ü" * 65
    at_limit = "x" * 64
    parts = evalgate_definition_parts({"prompt": {"system": long, "template": at_limit}})
    digest = hashlib.sha256(json.dumps(long, ensure_ascii=False).encode()).hexdigest()
    assert parts == {"prompt.system": f"sha256:{digest}", "prompt.template": at_limit}


def test_a_long_list_is_hashed_like_a_long_text() -> None:
    value = [f"stop-{n}" for n in range(20)]
    text = evalgate_canonical_json(value).decode()
    assert len(text) > 64
    digest = hashlib.sha256(json.dumps(text, ensure_ascii=False).encode()).hexdigest()
    assert evalgate_definition_parts({"stop": value}) == {"stop": f"sha256:{digest}"}


def test_changing_one_leaf_changes_only_its_part() -> None:
    before = {"prompt": {"revision": "p1", "system": "s" * 100}, "generation": {"seed": 7}}
    after = {"prompt": {"revision": "p1", "system": "t" * 100}, "generation": {"seed": 7}}
    a, b = evalgate_definition_parts(before), evalgate_definition_parts(after)
    assert {key for key in a if a[key] != b[key]} == {"prompt.system"}


def test_a_leaf_that_is_no_json_scalar_is_refused() -> None:
    with pytest.raises(TypeError, match="Object of type set is not JSON serializable"):
        evalgate_definition_parts({"odd": {1, 2}})


# --- rule records -----------------------------------------------------------------------------


def _result(**overrides: Any) -> Any:
    fields: dict[str, Any] = {
        "name": "non_inferior[all]",
        "rule": "non_inferior",
        "passed": True,
        "reason": "passes: lower bound -0.0500 > -0.1000",
        "slice": "all",
        "metric": None,
        "evaluated": True,
        "n_cases": 40,
        "n_clusters": 20,
        "estimate": 0.025,
        "lo": -0.05,
        "hi": 0.1,
        "se": 0.03,
        "t_lo": -0.04,
        "t_hi": 0.09,
        "limit": 0.1,
        "p_value": NAN,
        "p_adjusted": NAN,
    }
    fields.update(overrides)
    return SimpleNamespace(**fields)


def test_a_rule_record_keeps_the_numbers_and_makes_nan_none() -> None:
    record = evalgate_rule_record(_result())
    assert record == {
        "name": "non_inferior[all]",
        "rule": "non_inferior",
        "passed": True,
        "reason": "passes: lower bound -0.0500 > -0.1000",
        "slice": "all",
        "metric": None,
        "evaluated": True,
        "n_cases": 40,
        "n_clusters": 20,
        "estimate": 0.025,
        "lo": -0.05,
        "hi": 0.1,
        "se": 0.03,
        "t_lo": -0.04,
        "t_hi": 0.09,
        "threshold": -0.1,  # a margin rule's bound is -margin
        "p_value": None,
        "p_adjusted": None,
    }
    evalgate_canonical_json(record)  # no NaN left: canonical JSON accepts it


@pytest.mark.parametrize(
    ("rule", "limit", "threshold"),
    [
        ("non_inferior", 0.05, -0.05),
        ("pairwise", 0.02, -0.02),
        ("must_improve", 0.0, 0.0),
        ("floor", 0.2, 0.2),
        ("no_regression", 0.05, 0.05),
        ("perf_ratio", 1.05, 1.05),
        ("max_delta", 0.002, 0.002),
        ("min_rate", NAN, None),
    ],
)
def test_the_threshold_is_the_bound_the_rule_s_number_sets(
    rule: str, limit: float, threshold: float | None
) -> None:
    assert evalgate_rule_record(_result(rule=rule, limit=limit))["threshold"] == threshold


@pytest.mark.parametrize("value", [NAN, math.inf, -math.inf])
def test_every_non_finite_number_becomes_none(value: float) -> None:
    names = ("estimate", "lo", "hi", "se", "t_lo", "t_hi", "p_value", "p_adjusted")
    record = evalgate_rule_record(_result(**dict.fromkeys(names, value)))
    assert {name: record[name] for name in names} == dict.fromkeys(names)  # type: ignore[literal-required]


def test_a_rule_not_evaluated_keeps_its_reason_and_counts() -> None:
    result = _result(evaluated=False, passed=True, reason="no cases in slice beta", n_cases=0)
    record = evalgate_rule_record(result)
    assert (record["evaluated"], record["reason"], record["n_cases"]) == (
        False,
        "no cases in slice beta",
        0,
    )


# --- imported sources -------------------------------------------------------------------------


def _file(name: str, records: int, **overrides: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "harness": "lm-eval",
        "version": "0.4.13",
        "file": name,
        "sha256": "ab" * 32,
        "task": "arith",
        "task_version": "2.0",
        "config_digest": "sha256:" + "cd" * 32,
        "records": records,
    }
    item.update(overrides)
    return item


def test_no_imported_record_means_no_sources_block() -> None:
    assert evalgate_sources_record(SimpleNamespace(sources={}, missing_ids=())) is None  # type: ignore[arg-type]


def test_the_sources_block_lists_files_per_candidate_and_what_is_missing() -> None:
    files = {"baseline": [_file("a.jsonl", 40)], "candidate": [_file("b.jsonl", 38)]}
    aggregate = SimpleNamespace(sources=files, missing_ids=("rev/candidate/c1/r0", "x"))
    record = evalgate_sources_record(aggregate)  # type: ignore[arg-type]
    assert record == {"candidates": files, "missing": ["rev/candidate/c1/r0", "x"]}
    assert record is not None and record["candidates"]["baseline"][0] is not files["baseline"][0]


def test_the_notes_name_each_file_and_then_the_missing_identities() -> None:
    record: Any = {
        "candidates": {
            "baseline": [_file("samples_a.jsonl", 40)],
            "candidate": [
                _file(
                    "run.eval", 20, harness="inspect", version="0.3.285", sha256="0123456789" * 7
                ),
                _file("run2.eval", 18, harness="inspect", version="0.3.285"),
            ],
        },
        "missing": ["rev/candidate/c1/r0", "rev/candidate/c2/r0"],
    }
    assert evalgate_sources_notes(record) == [
        "baseline: imported from lm-eval 0.4.13 samples_a.jsonl (sha256 abababababab, task "
        "arith version 2.0, 40 records)",
        "candidate: imported from inspect 0.3.285 run.eval (sha256 012345678901, task arith "
        "version 2.0, 20 records)",
        "candidate: imported from inspect 0.3.285 run2.eval (sha256 abababababab, task arith "
        "version 2.0, 18 records)",
        "missing: rev/candidate/c1/r0, rev/candidate/c2/r0",
    ]


def test_notes_without_missing_identities_have_no_missing_line() -> None:
    record: Any = {"candidates": {"baseline": [_file("a.jsonl", 1)]}, "missing": []}
    notes = evalgate_sources_notes(record)
    assert len(notes) == 1 and not notes[0].startswith("missing")
