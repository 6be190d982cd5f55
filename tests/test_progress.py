"""The live progress line: text, token rate, ETA, rate limiting, when it is wanted."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from pytest_evalgate.runner.parent import EvalgateProgress
from pytest_evalgate.session.progress import EvalgateProgressLine, evalgate_progress_wanted


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def progress(**values: object) -> EvalgateProgress:
    state = EvalgateProgress(started=100.0)
    for name, value in values.items():
        setattr(state, name, value)
    return state


def test_line_shows_done_in_flight_errors_rate_and_eta() -> None:
    clock = FakeClock(110.0)
    state = progress(
        done=2500, expected=10000, in_flight=64, output_tokens=20000,
        errors=Counter({"timeout": 2, "rate_limited": 1, "auth": 0}),
    )  # fmt: skip
    line = EvalgateProgressLine(clock=clock).evalgate_line(state)
    assert line == (
        "evalgate: 2,500/10,000 done (25%) | 64 in flight | errors: rate_limited 1, timeout 2"
        " | 2,000 out tok/s | eta 0:00:30"
    )


def test_no_errors_and_no_eta_before_the_first_result() -> None:
    line = EvalgateProgressLine(clock=FakeClock(100.0)).evalgate_line(progress(expected=5))
    assert line == "evalgate: 0/5 done (0%) | 0 in flight | no errors | 0 out tok/s"


def test_finished_run_has_no_eta_and_empty_run_no_percentage() -> None:
    line = EvalgateProgressLine(clock=FakeClock(101.0)).evalgate_line(progress(done=3, expected=3))
    assert line.startswith("evalgate: 3/3 done (100%) |") and "eta" not in line
    empty = EvalgateProgressLine(clock=FakeClock(101.0)).evalgate_line(progress())
    assert empty.startswith("evalgate: 0/0 done |")


def test_token_rate_is_measured_over_the_last_interval() -> None:
    clock = FakeClock(110.0)
    state = progress(done=10, expected=100, output_tokens=10000)  # 1,000/s on average
    line = EvalgateProgressLine(clock=clock)
    assert "1,000 out tok/s" in line.evalgate_line(state)
    clock.now, state.output_tokens = 112.0, 10100  # the endpoint slowed to 50/s
    assert "50 out tok/s" in line.evalgate_line(state)


def test_eta_uses_the_average_pace_and_shows_hours() -> None:
    clock = FakeClock(100.0 + 3600.0)
    line = EvalgateProgressLine(clock=clock).evalgate_line(progress(done=1000, expected=3500))
    assert line.endswith("eta 2:30:00")


def test_maybe_line_is_rate_limited_on_time() -> None:
    clock = FakeClock(100.0)
    line = EvalgateProgressLine(interval_s=2.0, clock=clock)
    state = progress(expected=10)
    assert line.evalgate_maybe_line(state) is not None  # the first call shows at once
    clock.now = 101.9
    assert line.evalgate_maybe_line(state) is None
    clock.now = 102.0
    state.done = 4
    shown = line.evalgate_maybe_line(state)
    assert shown is not None and "4/10 done" in shown
    assert line.evalgate_maybe_line(state) is None


def test_reads_the_runner_counters_type() -> None:
    # The real EvalgateProgress (default clock: monotonic) renders without a fake clock.
    text = EvalgateProgressLine().evalgate_line(EvalgateProgress(expected=2))
    assert text.startswith("evalgate: 0/2 done (0%) | 0 in flight | no errors |")


@pytest.mark.parametrize(
    ("isatty", "verbosity", "worker", "wanted"),
    [
        (True, 0, False, True),
        (True, 2, False, True),
        (False, 0, False, False),  # CI logs
        (True, -1, False, False),  # -q
        (True, 0, True, False),  # xdist worker
    ],
)
def test_wanted_only_on_a_terminal_without_q(
    isatty: bool, verbosity: int, worker: bool, wanted: bool
) -> None:
    assert evalgate_progress_wanted(isatty, verbosity, worker) is wanted


def test_pytests_progress_never_passes_100_percent(pytester: pytest.Pytester) -> None:
    # issue 37: the gate's rule reports count as tests, so "[115%]" was printed
    from suitekit import make_cases, write_suite

    write_suite(
        pytester.path / "suite",
        {"candidate": "simulated://?accuracy=0.9&seed=5", "baseline": "simulated://?seed=6"},
        cases=make_cases(["alpha", "beta"], 4),
    )
    result = pytester.runpytest("--evalgate", "suite", "-p", "no:cacheprovider",
                                "--evalgate-store=store")  # fmt: skip
    shown = [int(n) for n in re.findall(r"\[\s*(\d+)%\]", result.stdout.str())]
    assert shown and max(shown) == 100, result.stdout.str()
