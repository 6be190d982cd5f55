"""Generate the code-scoring example suite's dataset: ``suites/code/cases.jsonl``.

Deterministic (a fixed seed, no clock, no downloads): running it again rewrites a byte-identical
file, so the committed ``sha256`` pin stays valid. After writing the dataset it updates the
``sha256:`` pin in ``suites/code/evalgate.yaml`` when the manifest exists.

    python scripts/make_code_suite.py            # rewrite suites/code/cases.jsonl
    python scripts/make_code_suite.py --out DIR  # write DIR/cases.jsonl instead

Every case asks for one small Python function; its ``target`` holds the hidden tests, plain
``assert name(args) == expected`` lines whose expected values come from a reference
implementation here (run at generation time, never shipped to the model). Four variants of a
task family share a ``cluster`` (their answers are correlated); families form the categories.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from math import gcd
from pathlib import Path
from typing import Any

SEED = 20261201
VARIANTS = 4
TESTS_PER_CASE = 4
INSTRUCTION = "Answer with the function in one fenced python code block."


@dataclass(frozen=True)
class Family:
    """One kind of task: its category, how a variant reads, and its reference function."""

    name: str
    category: str
    describe: Callable[[int], str]
    reference: Callable[[int], Callable[..., Any]]
    inputs: Callable[[random.Random], tuple[Any, ...]]


def _ints(low: int, high: int, count: int = 1) -> Callable[[random.Random], tuple[Any, ...]]:
    return lambda rng: tuple(rng.randint(low, high) for _ in range(count))


def _int_list(rng: random.Random) -> tuple[Any, ...]:
    return ([rng.randint(-20, 20) for _ in range(rng.randint(1, 7))],)


def _word(rng: random.Random) -> tuple[Any, ...]:
    letters = "abcdeiouxyzmnrst"
    return ("".join(rng.choice(letters) for _ in range(rng.randint(1, 9))),)


def _words(rng: random.Random) -> tuple[Any, ...]:
    return ([_word(rng)[0] for _ in range(rng.randint(1, 5))],)


def _digits(n: int) -> int:
    return sum(int(c) for c in str(abs(n)))


def _is_prime(n: int) -> bool:
    return n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))


def _fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def _collatz(n: int) -> int:
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


FAMILIES = (
    Family("add_k", "arithmetic", lambda k: f"returns x + {k}", lambda k: lambda x: x + k,
           _ints(-100, 100)),
    Family("scale_k", "arithmetic", lambda k: f"returns x * {k + 1}",
           lambda k: lambda x: x * (k + 1), _ints(-50, 50)),
    Family("clamp_k", "arithmetic", lambda k: f"clamps x into [-{k + 2}, {k + 2}]",
           lambda k: lambda x: max(-(k + 2), min(k + 2, x)), _ints(-20, 20)),
    Family("digit_sum_k", "arithmetic",
           lambda k: f"returns the sum of the decimal digits of abs(x), plus {k}",
           lambda k: lambda x: _digits(x) + k, _ints(-99999, 99999)),
    Family("gcd_k", "number_theory", lambda k: f"returns gcd(a, b) * {k + 1}",
           lambda k: lambda a, b: gcd(a, b) * (k + 1), _ints(1, 500, 2)),
    Family("is_prime_k", "number_theory",
           lambda k: f"returns True when x + {k} is a prime number, else False",
           lambda k: lambda x: _is_prime(x + k), _ints(0, 200)),
    Family("fib_k", "number_theory",
           lambda k: f"returns the (n + {k})-th Fibonacci number (fib(0) = 0, fib(1) = 1)",
           lambda k: lambda n: _fib(n + k), _ints(0, 25)),
    Family("collatz_k", "number_theory",
           lambda k: f"returns the number of Collatz steps from n + {k} down to 1",
           lambda k: lambda n: _collatz(n + k), _ints(1, 300)),
    Family("reverse_k", "strings",
           lambda k: f"returns the string s reversed, followed by {k} '!' characters",
           lambda k: lambda s: s[::-1] + "!" * k, _word),
    Family("vowels_k", "strings",
           lambda k: f"returns the number of vowels (aeiou) in s, times {k + 1}",
           lambda k: lambda s: sum(c in "aeiou" for c in s) * (k + 1), _word),
    Family("palindrome_k", "strings",
           lambda k: f"returns True when s[{k}:] reads the same backwards, else False",
           lambda k: lambda s: s[k:] == s[k:][::-1], _word),
    Family("join_k", "strings",
           lambda k: f"joins the list of words with {'-' * (k + 1)!r} between them",
           lambda k: lambda words: ("-" * (k + 1)).join(words), _words),
    Family("max_k", "lists", lambda k: f"returns the largest item of the list xs, plus {k}",
           lambda k: lambda xs: max(xs) + k, _int_list),
    Family("prefix_sums_k", "lists",
           lambda k: f"returns the running sums of the list xs, each plus {k}",
           lambda k: lambda xs: [sum(xs[: i + 1]) + k for i in range(len(xs))], _int_list),
    Family("evens_k", "lists",
           lambda k: f"returns the items of xs divisible by {k + 2}, in order",
           lambda k: lambda xs: [x for x in xs if x % (k + 2) == 0], _int_list),
    Family("rotate_k", "lists",
           lambda k: f"returns the list xs rotated left by {k + 1} places (cyclically)",
           lambda k: lambda xs: xs[(k + 1) % len(xs):] + xs[: (k + 1) % len(xs)], _int_list),
)  # fmt: skip


def _signature(family: Family, args: tuple[Any, ...]) -> str:
    names = {1: "x", 2: "a, b"}
    if family.category == "strings":
        return "words" if isinstance(args[0], list) else "s"
    if family.category == "lists":
        return "xs"
    if family.name in ("fib_k", "collatz_k"):
        return "n"
    return names[len(args)]


def _case(family: Family, variant: int, rng: random.Random) -> dict[str, Any]:
    name = f"{family.name.removesuffix('_k')}_{variant}"
    function = family.reference(variant)
    inputs = [family.inputs(rng) for _ in range(TESTS_PER_CASE)]
    tests = "".join(
        f"assert {name}({', '.join(map(repr, args))}) == {function(*args)!r}\n" for args in inputs
    )
    signature = _signature(family, inputs[0])
    prompt = (
        f"Write a Python function `{name}({signature})` that {family.describe(variant)}.\n"
        f"{INSTRUCTION}"
    )
    return {
        "id": f"{family.name.removesuffix('_k')}-{variant:02d}",
        "input": prompt,
        "target": tests,
        "category": family.category,
        "cluster": family.name.removesuffix("_k"),
    }


def evalgate_code_cases() -> list[dict[str, Any]]:
    """Every case of the suite, in a fixed order, from the fixed seed."""
    rng = random.Random(SEED)
    return [_case(f, v, rng) for f in FAMILIES for v in range(VARIANTS)]


def _write(path: Path, rows: list[dict[str, Any]]) -> str:
    text = "".join(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n" for row in rows)
    path.write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode()).hexdigest()


def _pin(manifest: Path, digest: str) -> None:
    if not manifest.exists():
        return
    text = manifest.read_text(encoding="utf-8")
    pinned = re.sub(r'sha256: "[0-9a-f]*"', f'sha256: "{digest}"', text, count=1)
    manifest.write_text(pinned, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent.parent / "suites/code")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    digest = _write(out / "cases.jsonl", evalgate_code_cases())
    _pin(out / "evalgate.yaml", digest)
    print(f"wrote {out / 'cases.jsonl'} ({len(FAMILIES) * VARIANTS} cases), sha256 {digest}")


if __name__ == "__main__":
    main()
