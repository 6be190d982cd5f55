"""Cells (SPEC section 21): a rollout named by cells, one Rollout and HTTPRoute each, in waves.

``cells.yaml``::

    cells:
      - {name: use1a, route: support-use1a, namespace: serve-use1a,
         pools: {stable: support-stable, canary: support-canary},
         selector: 'cell="use1a"'}              # optional; default namespace="<namespace>"
      - ...
    cross_cell_bake: 1h                         # optional (default 1h)

Every cell gets its own AnalysisTemplate (the online rules' queries restricted to the cell's
``selector``), InferencePools, HTTPRoute and Rollout (``rollout.py``'s objects, named
``<rollout>-<cell>`` for the Rollout), so each cell is its own blast radius. The wave plan: the
first cell goes through every weight step (1, 5, 25, 50 %, each with its bake, then a person
promotes it to 100 %), then a bake of ``cross_cell_bake`` with the first cell at 100 %, then the
next cell, one cell a wave, in file order. Every Rollout but the first cell's is rendered with
``paused: true``: Argo Rollouts has no ordering between objects, so a paused Rollout is how a
later cell waits (``kubectl argo rollouts resume`` starts it, as the plan says).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import pydantic

from pytest_evalgate.canary.analysis import evalgate_analysis_template
from pytest_evalgate.canary.promql import evalgate_selector
from pytest_evalgate.canary.rollout import (
    EVALGATE_CANARY_WEIGHTS,
    EvalgateRolloutOptions,
    evalgate_rollout_objects,
)
from pytest_evalgate.errors import EvalgateConfigError, EvalgateYamlError
from pytest_evalgate.formats.strictmodel import EVALGATE_STRICT_MODEL
from pytest_evalgate.formats.yamlread import evalgate_load_yaml
from pytest_evalgate.policy.online import EVALGATE_DURATION_PATTERN
from pytest_evalgate.policy.values import EvalgatePolicy

_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


@dataclass(frozen=True)
class EvalgateCell:
    """One cell: its name, route, pools, namespace and the label matchers of its metrics."""

    name: str
    route: str
    stable_pool: str
    canary_pool: str
    namespace: str
    selector: str


@dataclass(frozen=True)
class EvalgateCells:
    """The cells of a rollout, in wave order, and the bake between waves."""

    cells: tuple[EvalgateCell, ...]
    cross_cell_bake: str = "1h"
    source: str = "cells.yaml"

    def cell(self, name: str) -> EvalgateCell:
        """The cell called ``name``; ``EvalgateConfigError`` naming the known ones."""
        for cell in self.cells:
            if cell.name == name:
                return cell
        known = ", ".join(cell.name for cell in self.cells)
        raise EvalgateConfigError(self.source, "cells", f"no cell {name!r} (cells: {known})")


class _Pools(pydantic.BaseModel):
    model_config = EVALGATE_STRICT_MODEL
    stable: Annotated[str, pydantic.Field(pattern=_NAME, max_length=63)]
    canary: Annotated[str, pydantic.Field(pattern=_NAME, max_length=63)]


class _Cell(pydantic.BaseModel):
    model_config = EVALGATE_STRICT_MODEL
    name: Annotated[str, pydantic.Field(pattern=_NAME, max_length=40)]
    route: Annotated[str, pydantic.Field(pattern=_NAME, max_length=63)]
    namespace: Annotated[str, pydantic.Field(pattern=_NAME, max_length=63)]
    pools: _Pools
    selector: str | None = None


class _Cells(pydantic.BaseModel):
    model_config = EVALGATE_STRICT_MODEL
    cells: Annotated[list[_Cell], pydantic.Field(min_length=1, max_length=1000)]
    cross_cell_bake: Annotated[str, pydantic.Field(pattern=EVALGATE_DURATION_PATTERN)] = "1h"


def evalgate_load_cells(path: str | Path) -> EvalgateCells:
    """Read and validate ``cells.yaml``; ``EvalgateConfigError(file, key, reason)`` if wrong
    (unknown keys, names that are not DNS labels, equal pools, two cells with one name or one
    route in one namespace, a selector that is not label matchers)."""
    source = str(path)
    try:
        raw = evalgate_load_yaml(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise EvalgateConfigError(source, "<file>", f"cannot read: {error}") from None
    except EvalgateYamlError as error:
        raise EvalgateConfigError(source, "<yaml>", error.reason) from None
    try:
        model = _Cells.model_validate(raw)
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
        raise EvalgateConfigError(source, key.lstrip(".") or "<root>", _reason(first)) from None
    cells = tuple(_cell(index, item, source) for index, item in enumerate(model.cells))
    _refuse_twins(cells, source)
    return EvalgateCells(cells, model.cross_cell_bake, source)


def _reason(error: Any) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown key"
    if error["type"] == "missing":
        return "missing required key"
    if error["type"] == "string_pattern_mismatch":
        return f"a lowercase DNS label or a duration like 1h (got {error['input']!r})"
    return f"{error['msg']} (got {error['input']!r})"


def _cell(index: int, item: _Cell, source: str) -> EvalgateCell:
    if item.pools.stable == item.pools.canary:
        reason = "the canary pool must differ from stable"
        raise EvalgateConfigError(source, f"cells[{index}].pools.canary", reason)
    try:
        selector = evalgate_selector(item.selector or f'namespace="{item.namespace}"')
    except EvalgateConfigError as error:
        raise EvalgateConfigError(source, f"cells[{index}].selector", error.reason) from None
    pools = item.pools
    return EvalgateCell(item.name, item.route, pools.stable, pools.canary, item.namespace, selector)


def _refuse_twins(cells: tuple[EvalgateCell, ...], source: str) -> None:
    names: set[str] = set()
    routes: set[tuple[str, str]] = set()
    for index, cell in enumerate(cells):
        if cell.name in names:
            raise EvalgateConfigError(source, f"cells[{index}].name", f"{cell.name!r} twice")
        if (cell.namespace, cell.route) in routes:
            reason = f"route {cell.route!r} is another cell's in namespace {cell.namespace!r}"
            raise EvalgateConfigError(source, f"cells[{index}].route", reason)
        names.add(cell.name)
        routes.add((cell.namespace, cell.route))


def evalgate_cell_options(
    base: EvalgateRolloutOptions, cell: EvalgateCell
) -> EvalgateRolloutOptions:
    """``base`` (the suite's names and bakes) specialised to one cell."""
    return dataclasses.replace(
        base, stable_pool=cell.stable_pool, canary_pool=cell.canary_pool,
        rollout=_cut(f"{base.rollout}-{cell.name}"), route=cell.route, namespace=cell.namespace,
    )  # fmt: skip


def _cut(name: str) -> str:
    return name[:63].rstrip("-")


def evalgate_cell_objects(
    base: EvalgateRolloutOptions, cells: EvalgateCells, policy: EvalgatePolicy, prometheus: str
) -> list[dict[str, Any]]:
    """Every cell's AnalysisTemplate (its queries restricted to the cell's selector), pools,
    HTTPRoute and Rollout, in wave order; later cells' Rollouts paused."""
    objects: list[dict[str, Any]] = []
    for index, cell in enumerate(cells.cells):
        template = evalgate_analysis_template(
            policy, base.analysis_template, prometheus, selector=cell.selector,
            namespace=cell.namespace,
        )  # fmt: skip
        rendered = [template, *evalgate_rollout_objects(evalgate_cell_options(base, cell))]
        for obj in rendered:
            obj["metadata"].setdefault("labels", {})["evalgate.dev/cell"] = cell.name
            if obj["kind"] == "Rollout" and index > 0:
                obj["spec"]["paused"] = True  # waits for its wave (see the module)
        objects += rendered
    return objects


def evalgate_wave_plan(base: EvalgateRolloutOptions, cells: EvalgateCells) -> list[str]:
    """The wave plan, one line a step, in order."""
    steps = ", ".join(
        f"{weight} % for {bake}"
        for weight, bake in zip(EVALGATE_CANARY_WEIGHTS, base.bakes, strict=True)
    )
    lines: list[str] = []
    for index, cell in enumerate(cells.cells):
        rollout = evalgate_cell_options(base, cell).rollout
        start = (
            "starts at once"
            if index == 0
            else (f"kubectl argo rollouts resume {rollout} -n {cell.namespace}")
        )
        lines.append(
            f"wave {index + 1}: cell {cell.name} ({start}): {steps}, then promote to 100 %"
            f" (kubectl argo rollouts promote {rollout} -n {cell.namespace})"
        )
        if index + 1 < len(cells.cells):
            lines.append(
                f"bake {cells.cross_cell_bake} across cells: cell {cell.name} at 100 %, "
                f"canary check --cell {cell.name} passing, before wave {index + 2}"
            )
    return lines


def evalgate_cell_selector(cell: EvalgateCell, extra: str) -> str:
    """The cell's matchers joined with ``extra`` (already validated) for ``canary check``."""
    return ",".join(part for part in (cell.selector, extra) if part)
