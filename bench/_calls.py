"""Bench helper of the model-call benches (``tools.py``, ``mc.py``): the candidate's pytest run,
its request phase read back from the store's records, and the rows they print (the bare loop,
evalgate against the bound and the bare loop, the target)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any


def run_candidate(manifest: Path, work: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    """``pytest --evalgate`` on the suite's candidate only, in ``work``; (the run, its wall s)."""
    started = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--evalgate", str(manifest), "-q",
         "-p", "no:cacheprovider", "--evalgate-candidate", "candidate"],
        cwd=work, capture_output=True, text=True, check=False,
    )  # fmt: skip
    return run, time.perf_counter() - started


def phase_from_records(store: Path, calls: Callable[[dict[str, Any]], int]) -> tuple[float, int]:
    """(first start to last finish over the records, the model calls they made)."""
    first, last, total = float("inf"), 0.0, 0
    for path in store.rglob("seg-*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            first = min(first, datetime.fromisoformat(record["started_at"]).timestamp())
            last = max(last, datetime.fromisoformat(record["finished_at"]).timestamp())
            total += calls(record)
    return last - first, total


def print_rates(
    head: str,
    units: tuple[str, str],
    run: subprocess.CompletedProcess[str],
    bare: tuple[float, int],
    phase: tuple[float, int],
    whole_s: float,
    bound: float,
) -> None:
    """The bench's rows; ``units`` is (what a call is called, its rate's unit)."""
    noun, rate_unit = units
    (bare_s, bare_n), (phase_s, n) = bare, phase
    bare_rate, rate, whole = bare_n / bare_s, n / phase_s, n / whole_s
    last = (run.stdout.strip().splitlines() or [""])[-1]
    print(f"{head}; pytest exit {run.returncode}: {last}")
    print(f"bare loop  {bare_n} {noun} {bare_rate:7.0f} {rate_unit} = {bare_rate / bound:4.0%}"
          " of bound")  # fmt: skip
    print(f"evalgate   {n} {noun} {rate:7.0f} {rate_unit} = {rate / bound:4.0%} of bound = "
          f"{rate / bare_rate:4.0%} of bare | whole command {whole_s:.2f} s "
          f"({whole:.0f} {rate_unit} = {whole / bound:.0%} of bound)")  # fmt: skip
    print(f"target: request phase >= 80 % of bound: {'met' if rate / bound >= 0.8 else 'NOT met'}")
