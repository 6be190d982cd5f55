"""The manifest's conversation and tool keys (SPEC 17), checked against each other.

``evalgate_manifest_tools(path, suite_dir, model, cases)`` loads the ``tools`` block's fixture
(``dialogue.fixture``) and refuses, naming the file and key: ``scorer: tools`` without a
``tools`` block, a ``tools`` block scored by another scorer than ``tools`` or ``judge`` (a
judge reads the transcript), tools or ``turns`` rows under ``api: completions``, ``turns``
rows under ``scorer: tools`` or ``code``, an ``expect`` that names a tool the
fixture does not declare, and a turn's ``check`` that names no built-in scorer.
``evalgate_tools_definition`` is the definition digest's ``tools`` member: the fixture's
revision and sha256 and the loop's limits (absent for suites without tools, so their digests
are what they were).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from pytest_evalgate.dialogue.case import evalgate_tool_names
from pytest_evalgate.dialogue.fixture import EvalgateToolFixture, evalgate_load_fixture
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.manifest.dataset import EvalgateCase
from pytest_evalgate.manifest.schema import EvalgateManifestSchema
from pytest_evalgate.scoring import EVALGATE_BUILTIN_SCORERS, evalgate_make_scorer

EVALGATE_TOOLS_SCORER = "tools"
EVALGATE_ANSWER_SCORER_OPTION = "answer_scorer"


def evalgate_manifest_tools(
    path: str, suite_dir: str, model: EvalgateManifestSchema, cases: Sequence[EvalgateCase]
) -> EvalgateToolFixture | None:
    """The suite's loaded tool fixture (None without a ``tools`` block); see the docstring."""
    scorer = model.evaluator.scorer
    if scorer == EVALGATE_TOOLS_SCORER and model.tools is None:
        raise EvalgateConfigError(path, "tools", "scorer 'tools' needs a tools block")
    if model.tools is not None and scorer not in (EVALGATE_TOOLS_SCORER, "judge"):
        reason = "a tools block is scored by scorer 'tools' (or 'judge', reading the transcript)"
        raise EvalgateConfigError(path, "evaluator.scorer", reason)
    _check_turns(path, model, cases)
    if model.tools is None:
        return None
    if model.api != "chat":
        raise EvalgateConfigError(path, "tools", "tool calling needs api: chat")
    fixture_path = os.path.join(suite_dir, model.tools.fixture)
    fixture = evalgate_load_fixture(fixture_path, model.tools.revision)
    declared = {tool.name for tool in fixture.tools}
    for case in cases:
        unknown = sorted(evalgate_tool_names(case.expect) - declared) if case.expect else []
        if unknown:
            where = f"line {case.line}: id {case.case_id!r}: expect"
            reason = f"names tool {unknown[0]!r}, which {model.tools.fixture} does not declare"
            raise EvalgateConfigError(model.dataset.path, where, reason)
    return fixture


def _check_turns(path: str, model: EvalgateManifestSchema, cases: Sequence[EvalgateCase]) -> None:
    for case in cases:
        where = f"line {case.line}: id {case.case_id!r}"
        if case.turns and model.evaluator.scorer in (EVALGATE_TOOLS_SCORER, "judge", "code"):
            reason = (
                f"turns rows are scored per turn by a text scorer, not {model.evaluator.scorer!r}"
            )
            raise EvalgateConfigError(model.dataset.path, f"{where}: turns", reason)
        for number, turn in enumerate(case.turns):
            if turn.check is None:
                continue
            name = str(turn.check["scorer"])
            if name not in EVALGATE_BUILTIN_SCORERS:
                reason = f"check.scorer must be a built-in scorer {list(EVALGATE_BUILTIN_SCORERS)}"
                raise EvalgateConfigError(model.dataset.path, f"{where}: turns[{number}]", reason)
            scorer = evalgate_make_scorer(name, turn.check.get("options", {}), {}, path)
            try:  # a target the check cannot read (numeric: no number) is refused at load
                scorer(turn.target or "", turn.target or "")
            except EvalgateConfigError as exc:
                where_turn = f"{where}: turns[{number}].target"
                raise EvalgateConfigError(model.dataset.path, where_turn, exc.reason) from None
    if model.evaluator.turns is not None and not any(case.turns for case in cases):
        raise EvalgateConfigError(path, "evaluator.turns", "no dataset row has turns")


def evalgate_tools_definition(
    model: EvalgateManifestSchema, fixture: EvalgateToolFixture | None
) -> dict[str, Any]:
    """The definition digest's ``tools`` member, or {} for a suite without tools."""
    if model.tools is None or fixture is None:
        return {}
    limits = model.tools.model_dump(exclude={"fixture"})
    return {"tools": {**limits, "sha256": fixture.digest}}
