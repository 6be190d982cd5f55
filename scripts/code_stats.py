"""Print the shape of the code: lines per module, function lengths, test/source ratio, the
modules in the package root, the modules over 400 lines and the ``Any`` share of annotations.

    python scripts/code_stats.py            # a table of modules, then the summary lines

Lines are physical lines of each file (blank lines and comments included, as ``wc -l``);
a function's length is its ``end_lineno - lineno + 1`` (decorators and docstring included).
The ``Any`` share counts every annotated parameter of every function (positional, keyword-only,
``*args``, ``**kwargs``) whose annotation's text holds ``Any`` (``dict[str, Any]`` counts).
"""

from __future__ import annotations

import ast
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _function_lengths(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef)
    return [
        node.end_lineno - node.lineno + 1
        for node in ast.walk(tree)
        if isinstance(node, kinds) and node.end_lineno is not None
    ]


def _any_parameters(path: Path) -> tuple[int, int]:
    """(annotated parameters, those whose annotation mentions ``Any``) of one module."""
    annotated = with_any = 0
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        args = node.args
        extra = [arg for arg in (args.vararg, args.kwarg) if arg is not None]
        for arg in args.posonlyargs + args.args + args.kwonlyargs + extra:
            if arg.annotation is None:
                continue
            annotated += 1
            with_any += "Any" in ast.unparse(arg.annotation)
    return annotated, with_any


def _shape_lines(source: list[Path]) -> list[str]:
    """The root modules, the modules over 400 lines (with their lines) and the Any share."""
    package = ROOT / "pytest_evalgate"
    root = sorted(p.name for p in source if p.parent == package)
    long = [f"{p.relative_to(package)} ({_lines(p)})" for p in source if _lines(p) > 400]
    counts = [_any_parameters(p) for p in source]
    annotated = sum(total for total, _ in counts)
    with_any = sum(found for _, found in counts)
    share = 100 * with_any / annotated if annotated else 0.0
    return [
        f"package root: {len(root)} modules {root}",
        f"modules over 400 lines: {len(long)} {long}",
        f"Any in annotated parameters: {with_any} of {annotated} ({share:.1f}%)",
    ]


def main() -> int:
    source = sorted((ROOT / "pytest_evalgate").rglob("*.py"))
    tests = sorted((ROOT / "tests").rglob("*.py"))
    lengths: list[int] = []
    for path in source:
        lengths += _function_lengths(path)
        print(f"{_lines(path):6d}  {path.relative_to(ROOT)}")
    src_total = sum(_lines(p) for p in source)
    test_total = sum(_lines(p) for p in tests)
    over = [str(p.relative_to(ROOT)) for p in source if _lines(p) > 400]
    print(f"source: {len(source)} modules, {src_total} lines; over 400 lines: {len(over)} {over}")
    print(
        f"functions: {len(lengths)}, median {statistics.median(lengths):.0f} lines, "
        f"90th percentile {statistics.quantiles(lengths, n=10)[-1]:.0f}, max {max(lengths)}"
    )
    ratio = test_total / src_total
    print(f"tests: {len(tests)} files, {test_total} lines; test/source {ratio:.2f}")
    for line in _shape_lines(source):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
