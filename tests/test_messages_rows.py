"""Dataset rows that carry a ``messages`` history (SPEC sections 2 and 17, issue 31 step 1):
loaded into the request's chat messages, refused with file, line and key when malformed, and
answered end to end by the simulator through the plugin, with and without ``-n 2``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from suitekit import write_suite

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.manifest.load import evalgate_load_manifest

GOOD = "simulated://?accuracy=1.0&seed=1"


def _rows(count: int = 6) -> list[dict[str, Any]]:
    rows = []
    for i in range(count):
        history = [
            {"role": "user", "content": f"My order is number {i}."},
            {"role": "assistant", "content": "Thanks, noted."},
            {"role": "user", "content": f"What is {i} + {i}?"},
        ]
        category = "alpha" if i % 2 else "beta"
        rows.append(
            {"id": f"m-{i:03d}", "messages": history, "target": str(2 * i), "category": category}
        )
    return rows


def _manifest(tmp_path: Path, rows: list[dict[str, Any]], **extra: Any) -> Path:
    return write_suite(tmp_path / "suite", {"candidate": GOOD}, cases=rows, extra=extra or None)


def test_a_messages_row_is_the_request_history_with_the_system_prompt_first(
    tmp_path: Path,
) -> None:
    prompt = {"revision": "p1", "template": "{input}", "system": "Be brief."}
    manifest = evalgate_load_manifest(str(_manifest(tmp_path, _rows(2), prompt=prompt)))
    messages = manifest.cases[1].evalgate_prompt_json()
    assert messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "My order is number 1."},
        {"role": "assistant", "content": "Thanks, noted."},
        {"role": "user", "content": "What is 1 + 1?"},
    ]


def test_a_row_with_its_own_system_message_keeps_it_alone(tmp_path: Path) -> None:
    rows = _rows(1)
    rows[0]["messages"].insert(0, {"role": "system", "content": "Row system."})
    prompt = {"revision": "p1", "template": "{input}", "system": "Suite system."}
    manifest = evalgate_load_manifest(str(_manifest(tmp_path, rows, prompt=prompt)))
    messages = manifest.cases[0].evalgate_prompt_json()
    assert isinstance(messages, list)
    assert [m["content"] for m in messages if m["role"] == "system"] == ["Row system."]


@pytest.mark.parametrize(
    "messages",
    [
        [],
        "hello",
        [{"role": "user"}],
        [{"role": "user", "content": 3}],
        [{"role": "user", "content": "x", "name": "extra"}],
    ],
)
def test_malformed_messages_name_the_file_line_and_key(tmp_path: Path, messages: Any) -> None:
    rows = _rows(2)
    rows[1]["messages"] = messages
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_load_manifest(str(_manifest(tmp_path, rows)))
    text = str(caught.value)
    assert "cases.jsonl" in text and "line 2" in text and "messages" in text


def test_a_row_with_both_input_and_messages_is_refused(tmp_path: Path) -> None:
    rows = _rows(1)
    rows[0]["input"] = "also this"
    with pytest.raises(EvalgateConfigError, match="exactly one of input, messages or turns"):
        evalgate_load_manifest(str(_manifest(tmp_path, rows)))


def test_messages_rows_need_the_chat_api(tmp_path: Path) -> None:
    with pytest.raises(EvalgateConfigError, match="api: completions needs input rows"):
        evalgate_load_manifest(str(_manifest(tmp_path, _rows(1), api="completions")))


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]])
def test_a_messages_suite_runs_end_to_end_against_the_simulator(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    write_suite(
        pytester.path / "suite",
        {"candidate": GOOD, "baseline": GOOD},
        cases=_rows(6),
    )
    result = pytester.runpytest("--evalgate", "suite", "-p", "no:cacheprovider", *xdist)
    result.assert_outcomes(passed=12 + 1)  # 6 cases x 2 candidates, +1 the gate rule
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*verdict PASS*", "*identities completed 12/12*"])
