"""Write suites/mc's dataset: 4-choice arithmetic questions in 3 categories (SPEC 18).

Deterministic (a seeded ``random.Random``): running it again writes the same bytes, so the
manifest's pin stays valid. ``mc_rows(count, seed)`` is also what the tests and benches use.

    python scripts/make_mc_suite.py            # suites/mc/cases.jsonl (48 cases)
    python scripts/make_mc_suite.py --cases 200 --out DIR/cases.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

_OPERATIONS = {
    "addition": ("plus", lambda a, b: a + b),
    "subtraction": ("minus", lambda a, b: a - b),
    "multiplication": ("times", lambda a, b: a * b),
}
_NEAR = (-11, -10, -3, -2, -1, 1, 2, 3, 10, 11)


def _question(rng: random.Random, number: int, category: str, seen: set[str]) -> dict[str, Any]:
    word, operation = _OPERATIONS[category]
    while True:  # every question once: a repeated one would repeat its draws in the simulator
        a, b = rng.randint(12, 99), rng.randint(2, 11 if category == "multiplication" else 99)
        if category == "subtraction" and b > a:
            a, b = b, a
        question = f"Question: What is {a} {word} {b}?"
        if question not in seen:
            seen.add(question)
            break
    right = operation(a, b)
    wrong = rng.sample([right + d for d in _NEAR], 3)
    return _row(number, category, question, str(right), [str(w) for w in wrong], rng)


def _row(
    number: int, category: str, question: str, right: str, wrong: list[str], rng: random.Random
) -> dict[str, Any]:
    choices = [right, *map(str, wrong)]
    rng.shuffle(choices)
    return {
        "id": f"{category}-{number:03d}",
        "input": question,
        "choices": choices,
        "target": choices.index(right),
        "category": category,
    }


def mc_rows(count: int, seed: int = 0) -> list[dict[str, Any]]:
    """``count`` multiple-choice rows, categories in turn, each question once, 4 choices."""
    rng, seen = random.Random(seed), set()
    names = sorted(_OPERATIONS)
    return [_question(rng, n, names[n % 3], seen) for n in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    default = Path(__file__).parent.parent / "suites" / "mc" / "cases.jsonl"
    parser.add_argument("--out", default=str(default))
    args = parser.parse_args()
    rows = mc_rows(args.cases, args.seed)
    Path(args.out).write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    print(f"wrote {len(rows)} cases to {args.out}")


if __name__ == "__main__":
    main()
