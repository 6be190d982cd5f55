"""A suite's dataset rows into cases: the row keys, each case's fields, its rendered prompt.

Every row is a JSON object with ``id``, ``category``, ``target`` and exactly one of ``input``
(rendered through ``prompt.template``, with ``prompt.system`` before it for ``api: chat``) or
``messages`` (chat only) or ``turns`` (a scripted conversation, chat only: ``dialogue.case``);
``expect`` (a tool case's trajectory checks), ``cluster``, ``cost`` and ``metadata`` are
optional, and ``target`` may be left out of a ``turns`` or ``expect`` row. A row that is not
such an object, a duplicate case id, or an empty dataset is refused with an
``EvalgateConfigError`` naming the file, the line (and case id) and the key, before any
request. ``evalgate_render_template`` is the one prompt renderer, for eval items and the load
phase alike.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from pytest_evalgate.dialogue.case import (
    EvalgateExpect,
    EvalgateTurn,
    evalgate_parse_expect,
    evalgate_parse_turns,
)
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.formats.jsonlread import evalgate_jsonl_rows
from pytest_evalgate.manifest.choice import (
    evalgate_lettered_prompt,
    evalgate_row_choices,
    evalgate_target_index,
)
from pytest_evalgate.manifest.schema import EvalgateManifestSchema


def evalgate_render_template(template: str, text: str) -> str:
    """The one prompt renderer: ``template`` with ``{input}`` replaced by ``text``.

    ``str.format`` rules, for eval items and the load phase alike: ``{{`` and ``}}`` are literal
    braces. Raises ``KeyError``/``IndexError``/``ValueError`` for a template that does not render
    (the manifest loader refuses such a template with its file and key).
    """
    return template.format(input=text)


@dataclass(frozen=True)
class EvalgateCase:
    """One dataset row. ``prompt`` is the rendered chat messages list or completion text."""

    case_id: str
    category: str
    cluster: str
    target: str
    cost: float
    prompt: tuple[Mapping[str, str], ...] | str
    line: int
    turns: tuple[EvalgateTurn, ...] = ()  # a scripted conversation: prompt ends with turn 1
    expect: EvalgateExpect | None = None  # a tool case's trajectory checks
    choices: tuple[str, ...] = ()  # multiple choice (SPEC 18); ``target`` is then an index

    def evalgate_prompt_json(self) -> list[dict[str, str]] | str:
        """The prompt as builtins, ready for a request body."""
        if isinstance(self.prompt, str):
            return self.prompt
        return [dict(message) for message in self.prompt]


def evalgate_read_cases(
    path: str, dataset_path: str, model: EvalgateManifestSchema
) -> Iterator[EvalgateCase]:
    """The dataset's cases in file order; refuses unreadable or invalid rows, duplicate ids and an
    empty dataset (``EvalgateConfigError`` naming the dataset file and the line)."""
    seen: dict[str, int] = {}
    for number, row in evalgate_jsonl_rows(path, "dataset.path", dataset_path):
        case = _parse_row(dataset_path, number, row, model)
        if case.case_id in seen:
            where = f"line {number}: id {case.case_id!r}"
            raise EvalgateConfigError(
                dataset_path, where, f"duplicate case id (first on line {seen[case.case_id]})"
            )
        seen[case.case_id] = number
        yield case
    if not seen:
        raise EvalgateConfigError(dataset_path, "-", "the dataset has no cases")


_ROW_KEYS = {"id", "input", "messages", "turns", "expect", "target", "category", "cluster"}
_ROW_KEYS |= {"cost", "metadata", "choices"}
EVALGATE_ROW_KEYS: frozenset[str] = frozenset(_ROW_KEYS)
"""Every field a dataset row may have (docs/reference.md's rows table is checked against it)."""


def _parse_row(
    dataset_path: str, number: int, row: object, model: EvalgateManifestSchema
) -> EvalgateCase:
    where = f"line {number}"
    if not isinstance(row, dict):
        raise EvalgateConfigError(dataset_path, where, "a row must be a JSON object")
    unknown = sorted(set(row) - _ROW_KEYS)
    if unknown:
        raise EvalgateConfigError(dataset_path, f"{where}: {unknown[0]}", "unknown key")
    case_id = _row_str(dataset_path, where, row, "id")
    where = f"{where}: id {case_id!r}"
    turns = evalgate_parse_turns(dataset_path, where, row["turns"]) if "turns" in row else ()
    expect = evalgate_parse_expect(dataset_path, where, row["expect"]) if "expect" in row else None
    optional_target = bool(turns) or expect is not None
    choices = evalgate_row_choices(dataset_path, where, row, model)
    if choices:
        return _choice_case(dataset_path, where, row, model, case_id, choices, number)
    return EvalgateCase(
        case_id=case_id,
        category=_row_str(dataset_path, where, row, "category"),
        cluster=_row_cluster(dataset_path, where, row, case_id),
        target=""
        if optional_target and "target" not in row
        else _row_target(dataset_path, where, row),
        cost=_row_cost(dataset_path, where, row),
        prompt=_render_prompt(dataset_path, where, row, model, turns),
        line=number,
        turns=turns,
        expect=expect,
    )


def _choice_case(
    source: str,
    where: str,
    row: Mapping[str, object],
    model: EvalgateManifestSchema,
    case_id: str,
    choices: tuple[str, ...],
    number: int,
) -> EvalgateCase:
    """A multiple-choice row: ``input`` rendered (with the lettered choices for ``method:
    generate``), ``target`` the right choice's index as text."""
    if "input" not in row:
        raise EvalgateConfigError(source, f"{where}: input", "a choices row needs an input")
    text = _render_template(source, where, _row_str(source, where, row, "input"), model)
    if model.evaluator.method == "generate":
        text = evalgate_lettered_prompt(text, choices)
    system = (
        ()
        if model.prompt.system is None or model.api == "completions"
        else ({"role": "system", "content": model.prompt.system},)
    )
    prompt = text if model.api == "completions" else (*system, {"role": "user", "content": text})
    return EvalgateCase(
        case_id=case_id,
        category=_row_str(source, where, row, "category"),
        cluster=_row_cluster(source, where, row, case_id),
        target=str(evalgate_target_index(source, where, row.get("target"), choices)),
        cost=_row_cost(source, where, row) * len(choices),
        prompt=prompt,
        line=number,
        choices=choices,
    )


def _row_str(source: str, where: str, row: Mapping[str, object], key: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value:
        raise EvalgateConfigError(source, f"{where}: {key}", "missing or not a non-empty string")
    return value


def _row_cluster(source: str, where: str, row: Mapping[str, object], case_id: str) -> str:
    if row.get("cluster") is None:
        return case_id
    return _row_str(source, where, row, "cluster")


def _row_target(source: str, where: str, row: Mapping[str, object]) -> str:
    value = row.get("target")
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise EvalgateConfigError(source, f"{where}: target", "missing or not a string or number")
    return str(value)


def _row_cost(source: str, where: str, row: Mapping[str, object]) -> float:
    value = row.get("cost", 1.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise EvalgateConfigError(source, f"{where}: cost", "must be a positive number")
    return float(value)


def _render_prompt(
    source: str,
    where: str,
    row: Mapping[str, object],
    model: EvalgateManifestSchema,
    turns: tuple[EvalgateTurn, ...],
) -> tuple[Mapping[str, str], ...] | str:
    if sum(key in row for key in ("input", "messages", "turns")) != 1:
        reason = "a row needs exactly one of input, messages or turns"
        raise EvalgateConfigError(source, where, reason)
    if "messages" in row:
        return _render_messages(source, where, row["messages"], model)
    if turns and model.api == "completions":
        raise EvalgateConfigError(source, f"{where}: turns", "api: completions needs input rows")
    # A scripted turn is sent as written (prompt.template shapes ``input`` rows only).
    text = (
        turns[0].user
        if turns
        else _render_template(source, where, _row_str(source, where, row, "input"), model)
    )
    if model.api == "completions":
        return text
    system = (
        () if model.prompt.system is None else ({"role": "system", "content": model.prompt.system},)
    )
    return (*system, {"role": "user", "content": text})


def _render_template(source: str, where: str, text: str, model: EvalgateManifestSchema) -> str:
    try:
        return evalgate_render_template(model.prompt.template, text)
    except (KeyError, IndexError, ValueError) as exc:
        raise EvalgateConfigError(
            source, f"{where}: prompt.template", f"cannot render: {exc}"
        ) from None


def _render_messages(
    source: str, where: str, messages: object, model: EvalgateManifestSchema
) -> tuple[Mapping[str, str], ...]:
    if model.api == "completions":
        raise EvalgateConfigError(source, f"{where}: messages", "api: completions needs input rows")
    if not isinstance(messages, list) or not messages or not all(map(_is_message, messages)):
        reason = "must be a non-empty list of {role, content} string objects"
        raise EvalgateConfigError(source, f"{where}: messages", reason)
    has_system = messages[0]["role"] == "system"
    system = (
        ()
        if has_system or model.prompt.system is None
        else ({"role": "system", "content": model.prompt.system},)
    )
    return (*system, *({"role": m["role"], "content": m["content"]} for m in messages))


def _is_message(message: object) -> bool:
    return (
        isinstance(message, dict)
        and set(message) == {"role", "content"}
        and all(isinstance(value, str) for value in message.values())
    )
