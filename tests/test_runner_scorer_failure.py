"""A scorer that raises while the runner seals a result stops the run with its reason; before,
the item loop waited forever for the results that came in the same read as the failing one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from suitekit import write_suite


def test_a_raising_scorer_ends_the_run_with_its_reason(tmp_path: Path) -> None:
    (tmp_path / "raise_scorer.py").write_text(
        "def boom(output, target):\n    raise ValueError('scorer exploded')\n"
    )
    sim = "simulated://?accuracy=1&seed=1"
    write_suite(
        tmp_path / "suite",
        {"candidate": sim, "baseline": sim},
        extra={"evaluator": {"revision": "e1", "scorer": "python:raise_scorer:boom"}},
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--evalgate", "suite", "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path,
        env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,  # the bug this guards against was a hang
        check=False,
    )
    assert run.returncode != 0
    assert "a result could not be scored: scorer exploded" in run.stdout + run.stderr
