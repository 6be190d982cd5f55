"""A live progress line for long evaluation runs.

``EvalgateProgressLine.evalgate_line(progress)`` renders the runner's ``EvalgateProgress``
counters as one line::

    evalgate: 4,210/10,000 done (42%) | 64 in flight | errors: rate_limited 3, timeout 1 |
    1,830 out tok/s | eta 0:00:05

``evalgate_maybe_line(progress)`` returns that line at most once per ``interval_s`` (a rate
limiter on a monotonic clock) and None in between, so a hook that fires per item costs one
clock read most of the time. The output-token rate is measured over the interval since the
previous line (what the endpoint does now), falling back to the average since the start.

The counters are updated by the item loop as the runner's results arrive and read here, in the
same thread, so a line is at most one update stale.

Pure of pytest. ``evalgate_progress_wanted`` says when to show the line: on a terminal, not
under ``-q``, and not in an xdist worker (which has no terminal of its own).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Protocol


class EvalgateProgressLike(Protocol):
    """What the line reads: the fields of ``runner.parent.EvalgateProgress``."""

    done: int
    expected: int
    in_flight: int
    output_tokens: int
    started: float

    @property
    def errors(self) -> Mapping[str, int]:
        """Errored identities by category."""


def evalgate_progress_wanted(isatty: bool, verbosity: int, is_worker: bool) -> bool:
    """Whether to show a live line: a terminal, verbosity >= 0 (not ``-q``), not a worker."""
    return isatty and verbosity >= 0 and not is_worker


class EvalgateProgressLine:
    """Renders progress lines and limits how often they are due.

    ``clock`` must be the clock of ``EvalgateProgress.started`` (``time.monotonic``); tests
    pass a fake one.
    """

    def __init__(
        self, interval_s: float = 2.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._last_at: float | None = None
        self._last_tokens = 0

    def evalgate_maybe_line(self, progress: EvalgateProgressLike) -> str | None:
        """The line when ``interval_s`` has passed since the last one (or none was shown)."""
        now = self._clock()
        if self._last_at is not None and now - self._last_at < self.interval_s:
            return None
        return self.evalgate_line(progress)

    def evalgate_line(self, progress: EvalgateProgressLike) -> str:
        """The progress line now; also restarts the interval and the token-rate window."""
        now = self._clock()
        rate = self._token_rate(progress, now)
        self._last_at, self._last_tokens = now, progress.output_tokens
        parts = [
            _done_text(progress.done, progress.expected),
            f"{progress.in_flight} in flight",
            _errors_text(dict(progress.errors)),
            f"{rate:,.0f} out tok/s",
        ]
        eta = _eta_text(progress.done, progress.expected, now - progress.started)
        if eta:
            parts.append(eta)
        return "evalgate: " + " | ".join(parts)

    def _token_rate(self, progress: EvalgateProgressLike, now: float) -> float:
        if self._last_at is not None and now > self._last_at:
            return (progress.output_tokens - self._last_tokens) / (now - self._last_at)
        elapsed = now - progress.started
        return progress.output_tokens / elapsed if elapsed > 0 else 0.0


def _done_text(done: int, expected: int) -> str:
    share = f" ({100 * done // expected}%)" if expected else ""
    return f"{done:,}/{expected:,} done{share}"


def _errors_text(errors: Mapping[str, int]) -> str:
    counted = sorted((name, n) for name, n in errors.items() if n)
    if not counted:
        return "no errors"
    return "errors: " + ", ".join(f"{name} {n:,}" for name, n in counted)


def _eta_text(done: int, expected: int, elapsed: float) -> str:
    # Average pace since the start: steadier than the last interval's, good enough for an ETA.
    if done <= 0 or done >= expected or elapsed <= 0:
        return ""
    seconds = round((expected - done) * elapsed / done)
    hours, rest = divmod(seconds, 3600)
    return f"eta {hours}:{rest // 60:02d}:{rest % 60:02d}"
