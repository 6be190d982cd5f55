"""``extract: fenced``: the first fenced code block of an answer, else the whole answer."""

from __future__ import annotations

import pytest

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.sandbox import evalgate_extract_code

FIRST = "def add(a, b):\n    return a + b\n"


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        (f"Here you go:\n```python\n{FIRST}```\nDone.", FIRST),
        (f"```\n{FIRST}```", FIRST),
        (f"```py title='x'\n{FIRST}```", FIRST),
        (f"~~~python\n{FIRST}~~~\n", FIRST),
        (f"````python\n{FIRST}```\nstill code\n````\n", FIRST + "```\nstill code\n"),
        (f"```python\n{FIRST}``````\n", FIRST),
        (f"  ```python\n  {FIRST.splitlines()[0]}\n      return a + b\n  ```\n", FIRST),
        (f"```python\n{FIRST}\n```", FIRST + "\n"),
    ],
    ids=["labelled", "bare", "info-string", "tildes", "longer-fence", "long-close", "indented",
         "blank-line"],
)  # fmt: skip
def test_the_first_fenced_block_is_the_code(answer: str, code: str) -> None:
    assert evalgate_extract_code(answer) == code


def test_only_the_first_of_several_blocks_is_taken() -> None:
    answer = f"```python\n{FIRST}```\nand a test:\n```python\nassert add(1, 2) == 3\n```\n"
    assert evalgate_extract_code(answer, "fenced") == FIRST


def test_the_first_block_wins_whatever_its_label() -> None:
    answer = "Output:\n```text\n5\n```\n```python\nprint(5)\n```\n"
    assert evalgate_extract_code(answer) == "5\n"


def test_an_answer_without_a_fence_is_the_code_itself() -> None:
    assert evalgate_extract_code(FIRST) == FIRST
    assert evalgate_extract_code("") == ""


def test_inline_backticks_and_deep_indents_are_not_fences() -> None:
    inline = "Use ```add(1, 2)``` to add.\n" + FIRST
    assert evalgate_extract_code(inline) == inline
    indented = "    ```python\n    x = 1\n    ```\n"
    assert evalgate_extract_code(indented) == indented


def test_an_unclosed_block_runs_to_the_end_of_a_cut_off_answer() -> None:
    answer = f"```python\n{FIRST}def sub(a, b):\n    return a -"
    assert evalgate_extract_code(answer) == FIRST + "def sub(a, b):\n    return a -\n"


def test_a_closing_fence_must_match_the_opening_character() -> None:
    answer = f"~~~\n{FIRST}```\n~~~\n"
    assert evalgate_extract_code(answer) == FIRST + "```\n"


def test_an_empty_block_is_empty_code() -> None:
    assert evalgate_extract_code("```python\n```\nprint(1)\n") == ""


def test_an_unknown_mode_is_a_configuration_error() -> None:
    with pytest.raises(EvalgateConfigError, match="extract: must be one of fenced"):
        evalgate_extract_code(FIRST, "last")
