"""Mutation check: mutate one module, run the tests that exercise it, count what they catch.

Run from the repo root (not part of CI: it is slow by design, and the machine is shared):

    python bench/mutation.py pytest_evalgate/stats.py                 # default tests, 100 mutants
    python bench/mutation.py gate.rules --max-mutants 150 --seed 1 --timeout 60
    python bench/mutation.py pytest_evalgate/store/reader.py --tests tests/test_store.py
    python bench/mutation.py stats --all --survivors                  # every mutant, list survivors

Each mutant is one small change to the module's syntax tree (operators below). The runner
imports the heavy third-party packages once, then forks one child per mutant; the child installs
an import hook that serves the mutated module in place of the file and runs pytest in-process on
the module's test files (``-x``, no cache, no randomisation), so a mutant costs the tests' own
time and no interpreter start. The child's exit decides: pytest exit 0 means the mutant
**survived**; any failure (a failed test, an import or collection error) means **killed**; a child
still running after ``--timeout`` seconds is killed by its PID and counted **timed out** (an
infinite loop is caught, not a pass). The unmutated module is run first and must pass.

Operators: comparison swaps (``<``/``<=``/``>``/``>=``/``==``/``!=``/``in``/``is``), arithmetic
swaps (``+ -``, ``* /``, ``// /``, ``** *``, ``% /``, augmented assignments), ``and``/``or``,
dropping ``not`` and unary minus, number and boolean constants (``n -> n + 1``, ``0.0 -> 1.0``,
``True <-> False``), ``x = f()`` -> ``x = None``, dropping an expression statement, ``return x``
-> ``return None``, swapping a call's first two positional arguments, ``break <-> continue``.
Docstrings, annotations and string constants are not mutated (message text is not behaviour).

Bounded: ``--max-mutants`` sampled with ``--seed`` from all sites (``--all`` for every one),
``--timeout`` per mutant, and the process runs under ``nice`` (``--nice``), one child at a time.
Mutants listed as equivalent in docs/testing.md (lines ``- `ID` reason``) are counted apart and
left out of the score; ``--survivors`` prints each survivor's ID in that form.
"""

from __future__ import annotations

import argparse
import ast
import importlib.abc
import importlib.util
import os
import random
import re
import signal
import sys
import time
from pathlib import Path

from mutants import Mutant, evalgate_apply, evalgate_mutants

ROOT = Path(__file__).resolve().parent.parent

# The fastest test files that exercise each module (pure unit tests first; no subprocesses).
DEFAULT_TESTS: dict[str, tuple[str, ...]] = {
    # exact-value files first: with -x a mutant they kill costs only their run
    "pytest_evalgate/stats.py": ("tests/test_stats_exact.py", "tests/test_stats.py"),
    "pytest_evalgate/gate/rules.py": (
        "tests/test_gate_rules_exact.py",
        "tests/test_gate_more_exact.py",
        "tests/test_gate_rules.py",
    ),
    "pytest_evalgate/gate/single.py": (
        "tests/test_gate_more_exact.py",
        "tests/test_gate_rules_exact.py",
        "tests/test_gate_rules.py",
    ),
    "pytest_evalgate/gate/judge.py": (
        "tests/test_gate_more_exact.py",
        "tests/test_judge_pairwise.py",
        "tests/test_judge_wiring.py",
    ),
    "pytest_evalgate/aggregate/combine.py": (
        "tests/test_aggregate_fields.py",
        "tests/test_aggregate.py",
        "tests/test_aggregate_golden.py",
    ),
    "pytest_evalgate/aggregate/paired.py": (
        "tests/test_aggregate_fields.py",
        "tests/test_aggregate.py",
        "tests/test_aggregate_golden.py",
    ),
    "pytest_evalgate/aggregate/table.py": (
        "tests/test_aggregate_fields.py",
        "tests/test_aggregate_golden.py",
        "tests/test_aggregate.py",
    ),
    "pytest_evalgate/store/table.py": (
        "tests/test_store_table.py",
        "tests/test_aggregate_golden.py",
        "tests/test_aggregate_fields.py",
        "tests/test_aggregate_memory.py",
    ),
    "pytest_evalgate/aggregate/code.py": (
        "tests/test_aggregate_fields.py",
        "tests/test_sandbox_passk.py",
    ),
    "pytest_evalgate/store/records.py": ("tests/test_store_exact.py", "tests/test_records.py"),
    "pytest_evalgate/store/seal.py": ("tests/test_store_exact.py", "tests/test_records.py"),
    "pytest_evalgate/store/reader.py": ("tests/test_store_exact.py", "tests/test_store.py"),
    "pytest_evalgate/store/writer.py": ("tests/test_store_exact.py", "tests/test_store.py"),
    "pytest_evalgate/store/generations.py": ("tests/test_store_exact.py", "tests/test_store.py"),
    "pytest_evalgate/scoring.py": ("tests/test_scoring_exact.py", "tests/test_scoring.py"),
    "pytest_evalgate/judge/agreement.py": (
        "tests/test_judge_sandbox_exact.py",
        "tests/test_judge_agreement.py",
    ),
    "pytest_evalgate/judge/golden.py": ("tests/test_judge_agreement.py",),
    "pytest_evalgate/sandbox/passk.py": (
        "tests/test_judge_sandbox_exact.py",
        "tests/test_sandbox_passk.py",
    ),
}
# The store's tests run on both backends; the S3 half starts a server per test, so it is left out.
DEFAULT_KEYWORDS = {
    name: "not s3" for name in DEFAULT_TESTS if name.startswith("pytest_evalgate/store/")
}
# Imported once in the parent so that each forked child starts warm.
WARM_IMPORTS = (
    "numpy", "scipy.stats", "scipy.special", "statsmodels.api", "pydantic", "yaml", "pytest",
    "boto3", "httpx", "aiohttp", "matplotlib", "cryptography",
)  # fmt: skip
EQUIVALENTS_FILE = ROOT / "docs" / "testing.md"


# --------------------------------------------------------------------------- running


class _Serve(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``name`` from a code object instead of its file (installed in the child only)."""

    def __init__(self, name: str, path: Path, code: object) -> None:
        self.name, self.path, self.code = name, path, code

    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname != self.name:
            return None
        return importlib.util.spec_from_file_location(fullname, self.path, loader=self)

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return None

    def exec_module(self, module):  # type: ignore[no-untyped-def]
        exec(self.code, module.__dict__)


def _run_child(name: str, path: Path, tree: ast.Module | None, tests: list[str]) -> int:
    # ``tests`` are pytest's arguments: test files, and ``-k EXPR`` when a keyword was given.
    import pytest

    if tree is not None:
        sys.meta_path.insert(0, _Serve(name, path, compile(tree, str(path), "exec")))
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    args = [*tests, "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist"]
    # Plain asserts: rewriting the package's modules in every child cost more than the tests.
    args += ["--assert=plain", "-p", "no:hypothesispytest"]
    return int(pytest.main(args))


def _fork(name: str, path: Path, tree: ast.Module | None, tests: list[str], timeout: float) -> str:
    pid = os.fork()
    if pid == 0:
        try:
            code = _run_child(name, path, tree, tests)
        except BaseException:
            code = 3
        os._exit(0 if code == 0 else 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return "survived" if os.waitstatus_to_exitcode(status) == 0 else "killed"
        time.sleep(0.02)  # polling a child's exit; the deadline bounds it
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "timeout"


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _resolve(target: str) -> Path:
    """The file of ``target``: a path (``pytest_evalgate/gate/rules.py``) or a module's name in
    the package, dotted or slashed (``stats``, ``gate.rules``, ``store/reader``,
    ``pytest_evalgate.gate.rules``). A package is refused with its modules named: its
    ``__init__`` only re-exports, so there is nothing of its own to mutate."""
    package = ROOT / "pytest_evalgate"
    inside = target.removeprefix("pytest_evalgate.").removesuffix(".py").replace(".", "/")
    for candidate in (Path(target), ROOT / target, package / f"{inside}.py"):
        if candidate.is_file():
            return candidate.resolve()
    if (package / inside / "__init__.py").is_file():
        dotted = inside.replace("/", ".")
        names = sorted(p.stem for p in (package / inside).glob("*.py") if p.stem != "__init__")
        choices = ", ".join(f"{dotted}.{name}" for name in names)
        raise SystemExit(f"mutation: {target!r} is a package; name one of its modules: {choices}")
    raise SystemExit(f"mutation: no module {target!r}")


def _equivalents(relative: str) -> set[str]:
    if not EQUIVALENTS_FILE.is_file():
        return set()
    pattern = re.compile(r"^- `" + re.escape(relative) + r" :: (.+?)`")
    text = EQUIVALENTS_FILE.read_text(encoding="utf-8").splitlines()
    return {m.group(1) for line in text if (m := pattern.match(line))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "module",
        help="a path (pytest_evalgate/gate/rules.py) or a module's name (stats, gate.rules)",
    )
    parser.add_argument("--tests", nargs="+", help="test files to run (default: the module's)")
    parser.add_argument("-k", "--keyword", help="pytest -k expression (default: the module's)")
    parser.add_argument("--max-mutants", type=int, default=100)
    parser.add_argument("--all", action="store_true", help="every mutant, no sampling")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=0.0, help="seconds (default 5x baseline)")
    parser.add_argument("--nice", type=int, default=5)
    parser.add_argument("--survivors", action="store_true", help="print every survivor's ID")
    parser.add_argument(
        "--compare", nargs="+", help="also score these files alone (the tests before a change)"
    )
    parser.add_argument(
        "--rerun", type=Path, help="an earlier run's output: run only its survivors again"
    )
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    os.nice(args.nice)
    path = _resolve(args.module)
    relative = path.relative_to(ROOT).as_posix()
    tests = list(args.tests or DEFAULT_TESTS.get(relative, ()))
    tests = [t for t in tests if (ROOT / t).is_file()]
    if not tests:
        raise SystemExit(f"mutation: no test files for {relative}; pass --tests")
    keyword = args.keyword if args.keyword is not None else DEFAULT_KEYWORDS.get(relative)
    args.pytest_extra = ["-k", keyword] if keyword else []
    return _report(path, relative, tests, args)


def _report(path: Path, relative: str, tests: list[str], args: argparse.Namespace) -> int:
    _warm()
    name, source = _module_name(path), path.read_text(encoding="utf-8")
    mutants = evalgate_mutants(source)
    sample = mutants if args.all else _sample(mutants, args.max_mutants, args.seed)
    previous = _previous(args.rerun, relative) if args.rerun else None
    if previous is not None:
        sample = [m for m in sample if (m.line, m.ident) in previous[0]]
    started = time.monotonic()
    if _fork(name, path, None, tests + args.pytest_extra, 600.0) != "survived":
        raise SystemExit(f"mutation: the tests fail on the unmutated {relative}: {' '.join(tests)}")
    baseline = time.monotonic() - started
    timeout = args.timeout or max(10.0, 5.0 * baseline)
    runs = _Runs(name, path, source, (tests, list(args.compare or []), args.pytest_extra), timeout)
    tallies = {label: _Tally() for label in runs.labels()}
    equivalent = _equivalents(relative)
    for number, mutant in enumerate(sample, start=1):
        outcomes = runs.evalgate_run(mutant)
        for label, outcome in outcomes.items():
            tallies[label].evalgate_add(mutant, outcome, mutant.ident in equivalent)
        shown = ", ".join(f"{label} {outcome}" for label, outcome in outcomes.items())
        print(f"[{number}/{len(sample)}] line {mutant.line}: {shown}", file=sys.stderr, flush=True)
    elapsed = time.monotonic() - started
    how = "all" if len(sample) == len(mutants) else f"sampled {len(sample)} with seed {args.seed}"
    print(
        f"{relative}: {len(mutants)} mutants, {how}; {elapsed:.0f} s (unmutated {baseline:.1f} s)"
    )
    for label, tally in tallies.items():
        files = runs.files(label)
        print(f"{label} ({' '.join(files)}): {tally.evalgate_line()}")
        survivors = tally.survivors if args.survivors else tally.survivors[:20]
        for mutant in survivors:
            print(f"  survived line {mutant.line}: - `{relative} :: {mutant.ident}`")
    if previous is not None:
        _print_rerun(previous, tallies[runs.labels()[-1]], args.rerun)
    return 0


_TALLY = re.compile(r"^(?:after|tests) \(.*\): .*score [\d.na]+% \((\d+)/(\d+)\)$")
_SURVIVOR = re.compile(r"^  survived line (\d+): - `(.+?) :: (.+)`$")


def _previous(output: Path, relative: str) -> tuple[set[tuple[int, str]], int, int]:
    """Survivors (line, ID) and (caught, scored) of the last tally of an earlier run's output."""
    survivors: set[tuple[int, str]] = set()
    caught = scored = 0
    section = False
    for line in output.read_text(encoding="utf-8").splitlines():
        if match := _TALLY.match(line):
            caught, scored, section = int(match[1]), int(match[2]), True
            survivors = set()
        elif section and (found := _SURVIVOR.match(line)) and found[2] == relative:
            survivors.add((int(found[1]), found[3]))
    return survivors, caught, scored


def _print_rerun(
    previous: tuple[set[tuple[int, str]], int, int], tally: _Tally, output: Path
) -> None:
    _, caught, scored = previous
    now = tally.counts["killed"] + tally.counts["timeout"]
    scored -= tally.counts["equivalent"]
    score = 100.0 * (caught + now) / scored if scored else float("nan")
    print(
        f"with {output}: {caught} caught before, {now} of its {sum(tally.counts.values())}"
        f" survivors caught now, {tally.counts['equivalent']} equivalent;"
        f" score {score:.1f}% ({caught + now}/{scored})"
    )


class _Runs:
    """Runs one mutant against the test files, and first against ``compare`` (the files as they
    were before a change) when given: a mutant the old files kill is killed by both, so "before"
    and "after" cost one pass."""

    def __init__(
        self,
        name: str,
        path: Path,
        source: str,
        files: tuple[list[str], list[str], list[str]],
        timeout: float,
    ) -> None:
        self.name, self.path, self.source, self.timeout = name, path, source, timeout
        self.tests, self.compare, self.extra = files

    def labels(self) -> list[str]:
        return ["before", "after"] if self.compare else ["tests"]

    def files(self, label: str) -> list[str]:
        if label == "before":
            return self.compare
        return self.compare + [t for t in self.tests if t not in self.compare]

    def evalgate_run(self, mutant: Mutant) -> dict[str, str]:
        tree = evalgate_apply(self.source, mutant.ordinal)
        if not self.compare:
            return {"tests": self._fork(tree, self.tests)}
        old = self._fork(tree, self.compare)
        if old != "survived":
            return {"before": old, "after": old}
        added = [t for t in self.tests if t not in self.compare]
        return {"before": old, "after": self._fork(tree, added) if added else old}

    def _fork(self, tree: ast.Module, files: list[str]) -> str:
        return _fork(self.name, self.path, tree, files + self.extra, self.timeout)


class _Tally:
    def __init__(self) -> None:
        self.counts = {"killed": 0, "survived": 0, "timeout": 0, "equivalent": 0}
        self.survivors: list[Mutant] = []

    def evalgate_add(self, mutant: Mutant, outcome: str, equivalent: bool) -> None:
        if outcome == "survived" and equivalent:
            outcome = "equivalent"
        self.counts[outcome] += 1
        if outcome == "survived":
            self.survivors.append(mutant)

    def evalgate_line(self) -> str:
        counts = self.counts
        scored = sum(counts.values()) - counts["equivalent"]
        caught = counts["killed"] + counts["timeout"]
        score = 100.0 * caught / scored if scored else float("nan")
        return (
            f"killed {counts['killed']}, survived {counts['survived']}, timed out"
            f" {counts['timeout']}, equivalent {counts['equivalent']};"
            f" score {score:.1f}% ({caught}/{scored})"
        )


def _warm() -> None:
    # Children share compiled modules through __pycache__ (ignored by git) rather than each
    # compiling the package from source again; the mutated module never comes from there.
    sys.dont_write_bytecode = False
    for module in WARM_IMPORTS:
        try:
            __import__(module)
        except ImportError:
            continue
    if "matplotlib" in sys.modules:  # the suite's conftest imports pyplot on the Agg backend
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot


def _sample(mutants: list[Mutant], size: int, seed: int) -> list[Mutant]:
    if size >= len(mutants):
        return mutants
    return sorted(random.Random(seed).sample(mutants, size), key=lambda m: m.ordinal)


if __name__ == "__main__":
    sys.exit(main())
