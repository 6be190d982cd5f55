"""Judged run wall time against the slower stage alone: is judging pipelined with generation?

N cases x 2 candidates answered by a slow simulated candidate and judged (pointwise) by a slow
simulated judge, each stage with its own budget. In one invocation, side by side:

1. the judged run into an empty store: generation and judging together (``full``);
2. the same suite with only ``judge.revision`` changed, on that store: every stored answer is
   judged again and no answer is requested (``judging alone``);
3. the same cases and candidates with an exact scorer into an empty store: no judge at all
   (``generation alone``).

Target (issue 11): ``full`` <= 1.2 x the slower of the two stages alone (sequential stages would
take their sum). Every run pays the same pytest start-up and simulator spawn.
Run: ``python bench/judge.py [--cases 200] [--latency-ms 200] [--concurrency 16]``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from judgekit import requests, set_judge, split, write_judged_suite
from suitekit import make_cases, write_suite


def _run(suite: Path, store: Path, log: Path) -> float:
    command = [
        sys.executable, "-m", "pytest", "--evalgate", str(suite), "-q", "-p", "no:cacheprovider",
        f"--evalgate-store={store}", f"--evalgate-request-log={log}",
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(command, cwd=suite.parent, capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"run failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    per_category = max(1, args.cases // 2)
    cases = make_cases(["alpha", "beta"], per_category)
    slow = f"latency_ms={args.latency_ms:g}"
    budget = {"max_concurrency": args.concurrency, "max_attempts": 3, "timeout_s": 30}
    with tempfile.TemporaryDirectory(prefix="evalgate-bench-judge-") as folder:
        root = Path(folder)
        judged = write_judged_suite(
            root / "judged", cases=cases, golden=False,
            candidate=f"simulated://?accuracy=0.9&seed=1&{slow}",
            baseline=f"simulated://?accuracy=0.9&seed=2&{slow}",
            judge_url=f"simulated://?judge=1&accuracy=0.9&seed=5&{slow}",
            judge={"budget": budget},
        )  # fmt: skip
        _budget(judged, budget)
        log = root / "requests.jsonl"
        full = _run(judged.parent, root / "store", log)
        after_full = len(requests(log))
        set_judge(judged, revision="judge-prompt-v2")
        judging = _run(judged.parent, root / "store", log)
        answers, judge = split(requests(log)[after_full:])
        plain = write_suite(
            root / "plain",
            {"candidate": f"simulated://?accuracy=0.9&seed=1&{slow}",
             "baseline": f"simulated://?accuracy=0.9&seed=2&{slow}"},
            cases=cases, budget=budget,
        )  # fmt: skip
        generation = _run(plain.parent, root / "store-plain", root / "plain.jsonl")
    slower = max(judging, generation)
    identities = 2 * len(cases)
    print(f"cases {len(cases)} x 2 candidates = {identities} answers, {identities} judgments")
    print(f"latency {args.latency_ms:g} ms per request (candidates and judge), "
          f"max_concurrency {args.concurrency} per stage")  # fmt: skip
    print(f"generation alone   {generation:6.2f} s")
    print(f"judging alone      {judging:6.2f} s   ({len(judge)} judge requests, "
          f"{len(answers)} candidate requests)")  # fmt: skip
    print(f"full judged run    {full:6.2f} s")
    print(f"full / slower stage = {full / slower:.3f}  (target <= 1.2; sequential would be "
          f"about {(generation + judging) / slower:.2f})")  # fmt: skip
    return 0


def _budget(path: Path, budget: dict[str, object]) -> None:
    import yaml

    raw = yaml.safe_load(path.read_text())
    raw["budget"] = budget
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


if __name__ == "__main__":
    raise SystemExit(main())
