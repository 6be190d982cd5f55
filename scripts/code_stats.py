"""Print the shape of the code: lines per module, function lengths, test/source ratio.

    python scripts/code_stats.py            # a table of modules, then the summary lines

Lines are physical lines of each file (blank lines and comments included, as ``wc -l``);
a function's length is its ``end_lineno - lineno + 1`` (decorators and docstring included).
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
