"""Mutants of a Python module: the operators of ``bench/mutation.py`` and where they apply.

``evalgate_mutants(source)`` lists every mutant of a module's source in a fixed order;
``evalgate_apply(source, ordinal)`` returns the syntax tree with that one mutant applied. Both
walk the tree the same way, so an ordinal names the same change in both. See ``mutation.py``
for the operators and what is left alone (docstrings, annotations, strings, f-strings).
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    """One change: the ``ordinal``-th site of the module, described for people and for IDs."""

    ordinal: int
    line: int
    function: str
    before: str
    after: str

    @property
    def ident(self) -> str:
        return f"{self.function}: {self.before} -> {self.after}"


# --------------------------------------------------------------------------- operators

_CMP_SWAPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}  # fmt: skip
_BIN_SWAPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div, ast.Pow: ast.Mult, ast.Mod: ast.Div,
}  # fmt: skip


def _alternatives(node: ast.AST) -> Iterator[ast.AST]:
    """Every mutated copy of ``node`` itself (children untouched)."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            swap = _CMP_SWAPS.get(type(op))
            if swap is not None:
                yield _replace_list(node, "ops", i, swap())
    elif isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in _BIN_SWAPS:
        clone = copy.copy(node)
        clone.op = _BIN_SWAPS[type(node.op)]()
        yield clone
    elif isinstance(node, ast.BoolOp):
        clone = copy.copy(node)
        clone.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield clone
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not | ast.USub):
        yield node.operand
    elif isinstance(node, ast.Constant):
        yield from _constant(node)
    elif isinstance(node, ast.Call) and _swappable(node):
        args = [node.args[1], node.args[0], *node.args[2:]]
        yield ast.Call(func=node.func, args=args, keywords=node.keywords)
    yield from _statement(node)


# Swapping the arguments of a symmetric function cannot change behaviour: never generated.
_SYMMETRIC = {"max", "min", "minimum", "maximum", "isclose", "hypot", "gcd", "fmax", "fmin"}


def _swappable(node: ast.Call) -> bool:
    heads = node.args[:2]
    if len(heads) < 2 or any(isinstance(arg, ast.Starred) for arg in heads):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name not in _SYMMETRIC


def _replace_list(node: ast.AST, field: str, index: int, value: ast.AST) -> ast.AST:
    clone = copy.copy(node)
    items = list(getattr(node, field))
    items[index] = value
    setattr(clone, field, items)
    return clone


def _constant(node: ast.Constant) -> Iterator[ast.AST]:
    value = node.value
    if isinstance(value, bool):
        yield ast.Constant(not value)
    elif isinstance(value, int):
        yield ast.Constant(value + 1)
    elif isinstance(value, float):
        yield ast.Constant(value + 1.0 if value in (0.0, 1.0) else value * 2.0)


def _statement(node: ast.AST) -> Iterator[ast.AST]:
    if isinstance(node, ast.Assign) and not _is_none(node.value):
        yield ast.Assign(targets=node.targets, value=ast.Constant(None), type_comment=None)
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        yield ast.Pass()
    elif isinstance(node, ast.Return) and node.value is not None and not _is_none(node.value):
        yield ast.Return(value=ast.Constant(None))
    elif isinstance(node, ast.Break):
        yield ast.Continue()
    elif isinstance(node, ast.Continue):
        yield ast.Break()


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


# --------------------------------------------------------------------------- sites


_SKIPPED_FIELDS = {"annotation", "returns", "type_comment", "decorator_list"}


def _children(node: ast.AST) -> Iterator[tuple[str, int | None, ast.AST]]:
    for field, value in ast.iter_fields(node):
        if field in _SKIPPED_FIELDS:
            continue
        if isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, ast.AST) and not _is_docstring(node, field, index, item):
                    yield field, index, item
        elif isinstance(value, ast.AST):
            yield field, None, value


def _is_docstring(parent: ast.AST, field: str, index: int, item: ast.AST) -> bool:
    return (
        field == "body"
        and index == 0
        and isinstance(item, ast.Expr)
        and isinstance(item.value, ast.Constant)
        and isinstance(item.value.value, str)
    )


def _walk_sites(tree: ast.AST) -> Iterator[tuple[ast.AST, str, int | None, ast.AST, str]]:
    """(parent, field, index, alternative, function) for every mutation site, in source order."""
    stack: list[tuple[ast.AST, str]] = [(tree, "<module>")]
    while stack:
        node, function = stack.pop()
        children = list(_children(node))
        for field, index, child in children:
            if isinstance(child, ast.JoinedStr):
                continue  # f-strings are messages
            for alternative in _alternatives(child):
                if function == "<module>" and isinstance(alternative, ast.Assign):
                    continue  # module constants are mutated through their values instead
                located = ast.fix_missing_locations(ast.copy_location(alternative, child))
                yield node, field, index, located, function
        for _, _, child in reversed(children):
            if not isinstance(child, ast.JoinedStr | ast.Import | ast.ImportFrom):
                stack.append((child, _qualify(function, child)))


def _qualify(function: str, child: ast.AST) -> str:
    if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return child.name if function == "<module>" else f"{function}.{child.name}"
    return function


def evalgate_mutants(source: str) -> list[Mutant]:
    """Every mutant of ``source``, numbered in the order ``evalgate_apply`` counts them."""
    tree = ast.parse(source)
    out: list[Mutant] = []
    for ordinal, (parent, field, index, alternative, function) in enumerate(_walk_sites(tree)):
        original = getattr(parent, field) if index is None else getattr(parent, field)[index]
        before, after = _shown(original, alternative)
        out.append(Mutant(ordinal, getattr(original, "lineno", 0), function, before, after))
    return out


def _shown(original: ast.AST, alternative: ast.AST) -> tuple[str, str]:
    """Both sides as one-line source; long ones cut to a window around where they differ."""
    before, after = (" ".join(ast.unparse(node).split()) for node in (original, alternative))
    if max(len(before), len(after)) <= 70:
        return before, after
    start = 0
    while start < min(len(before), len(after)) and before[start] == after[start]:
        start += 1
    start = max(0, start - 30)
    cut = "..." if start else ""
    return cut + before[start : start + 60] + "...", cut + after[start : start + 60] + "..."


def evalgate_apply(source: str, ordinal: int) -> ast.Module:
    """The syntax tree of ``source`` with mutant ``ordinal`` applied."""
    tree = ast.parse(source)
    for number, (parent, field, index, alternative, _) in enumerate(_walk_sites(tree)):
        if number == ordinal:
            if index is None:
                setattr(parent, field, alternative)
            else:
                getattr(parent, field)[index] = alternative
            return ast.fix_missing_locations(tree)
    raise IndexError(ordinal)
