"""The load phase's prompts: the perf block's prompts file read into request bodies.

A row is ``{"messages": [...]}`` (sent as is, chat API only) or ``{"input": "..."}`` (rendered
with the manifest's prompt system and template, like a case). Every problem is an
``EvalgateConfigError`` naming the file and line.
"""

from __future__ import annotations

import os
from typing import Any

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.formats.jsonlread import evalgate_jsonl_rows
from pytest_evalgate.manifest.dataset import evalgate_render_template
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.manifest.schema import EvalgatePerfSchema


def evalgate_perf_bodies(manifest: EvalgateManifest) -> list[dict[str, Any]]:
    """Request bodies for the prompts file of ``manifest.perf`` (path relative to the suite).

    A row is ``{"messages": [...]}`` (sent as is, chat API only) or ``{"input": "..."}``
    (rendered with the manifest's prompt system and template, like a case). Generation settings
    are the manifest's, with ``perf.max_tokens`` overriding ``max_tokens`` when set.
    """
    perf = perf_block(manifest)
    path = os.path.join(manifest.suite_dir, perf.prompts)
    generation = manifest.generation.evalgate_request_fields()
    if perf.max_tokens is not None:
        generation["max_tokens"] = perf.max_tokens
    prompts = [_prompt(manifest, path, n, row) for n, row in _rows(path)]
    if not prompts:
        raise EvalgateConfigError(path, "-", "the perf prompts file has no rows")
    return [{**generation, **prompt} for prompt in prompts]


def perf_block(manifest: EvalgateManifest) -> EvalgatePerfSchema:
    if manifest.perf is None:
        raise EvalgateConfigError(manifest.path, "perf", "the manifest has no perf block")
    return manifest.perf


def _rows(path: str) -> list[tuple[int, Any]]:
    # The one safe reader: unreadable, non-UTF-8, invalid JSON and NaN name the file and line.
    return list(evalgate_jsonl_rows(path, "perf.prompts", path))


def _prompt(manifest: EvalgateManifest, path: str, number: int, row: object) -> dict[str, Any]:
    where = f"line {number}"
    if not isinstance(row, dict) or ("messages" in row) == ("input" in row):
        raise EvalgateConfigError(path, where, "a row needs exactly one of messages or input")
    if "messages" in row:
        if manifest.api != "chat" or not isinstance(row["messages"], list) or not row["messages"]:
            raise EvalgateConfigError(path, where, "messages must be a non-empty list (chat API)")
        return {"messages": row["messages"]}
    if not isinstance(row["input"], str):
        raise EvalgateConfigError(path, f"{where}: input", "must be a string")
    return _render_input(manifest, path, where, row["input"])


def _render_input(manifest: EvalgateManifest, path: str, where: str, text: str) -> dict[str, Any]:
    prompt = manifest.definition["prompt"]
    try:
        rendered = evalgate_render_template(str(prompt.get("template") or "{input}"), text)
    except (KeyError, IndexError, ValueError) as exc:
        reason = f"prompt.template cannot render: {exc}"
        raise EvalgateConfigError(path, where, reason) from None
    if manifest.api == "completions":
        return {"prompt": rendered}
    system = prompt.get("system")
    head = [] if system is None else [{"role": "system", "content": system}]
    return {"messages": [*head, {"role": "user", "content": rendered}]}
