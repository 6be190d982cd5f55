"""One prompt renderer: eval items and the load phase render a template the same way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_evalgate.manifest.dataset import evalgate_render_template
from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.perf.prompts import evalgate_perf_bodies
from tests.suitekit import write_suite

BRACED = 'Answer in JSON like {{"answer": ...}}.\nQ: {input}'


def test_format_rules_braces_are_literal_and_input_is_substituted() -> None:
    expected = 'Answer in JSON like {"answer": ...}.\nQ: 2+2?'
    assert evalgate_render_template(BRACED, "2+2?") == expected
    assert evalgate_render_template("{input}", "{not a field}") == "{not a field}"


@pytest.mark.parametrize("template", ["{question}", "{0}", "{input"])
def test_a_template_that_does_not_render_raises(template: str) -> None:
    with pytest.raises((KeyError, IndexError, ValueError)):
        evalgate_render_template(template, "x")


def _braced_suite(tmp_path: Path, template: str) -> Path:
    cases = [{"id": "c-1", "input": "2+2?", "target": "4", "category": "math"}]
    extra = {
        "prompt": {"revision": "p1", "template": template},
        "perf": {"prompts": "prod.jsonl", "rate": 2, "duration_s": 1},
    }
    path = write_suite(tmp_path, {"candidate": "simulated://"}, cases=cases, extra=extra)
    (tmp_path / "prod.jsonl").write_text(json.dumps({"input": "2+2?"}) + "\n")
    return path


def test_the_load_phase_renders_a_braced_template_like_an_eval_item(tmp_path: Path) -> None:
    # Regression: the load phase used str.replace, so "{{" stayed doubled there while eval items
    # (str.format) got one brace: the two phases sent different prompts for the same input.
    manifest = evalgate_load_manifest(str(_braced_suite(tmp_path, BRACED)))
    item_prompt = manifest.cases[0].evalgate_prompt_json()
    load_body = evalgate_perf_bodies(manifest)[0]
    assert isinstance(item_prompt, list)
    assert load_body["messages"] == item_prompt
    assert load_body["messages"][-1]["content"] == 'Answer in JSON like {"answer": ...}.\nQ: 2+2?'
