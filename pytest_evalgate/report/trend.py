"""``trend.png``: each slice's pass rate across checkpoints, with its exact interval.

Small multiples, one panel per slice (``all`` first), the checkpoints on the x axis in the order
asked for, the rate as a point joined by a line and the exact interval as an error bar. A
checkpoint without rates (an incomplete or invalid store, see ``trend.py``) has no point, and
its tick says why, so a gap is never mistaken for a value. Drawn with matplotlib's Agg backend.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import TYPE_CHECKING

from pytest_evalgate.aggregate.trend import EvalgateTrend, EvalgateTrendPoint

if TYPE_CHECKING:  # matplotlib loads only when a figure is drawn
    from matplotlib.axes import Axes

_LINE = "#0969da"
_MISSING = "#cf222e"
_COLUMNS = 3


def evalgate_trend_png(trend: EvalgateTrend, path: str) -> bool:
    """Write ``trend.png`` to ``path``; False (nothing written) when no checkpoint has rates."""
    if not any(point.cells for point in trend.points):
        return False
    plt = _pyplot()
    columns = min(_COLUMNS, len(trend.slices))
    rows = math.ceil(len(trend.slices) / columns)
    figure, axes = plt.subplots(
        rows, columns, figsize=(3.6 * columns, 2.6 * rows + 0.6), squeeze=False, sharey=True,
        layout="constrained",
    )  # fmt: skip
    flat = [ax for row in axes for ax in row]
    for ax, name in zip(flat, trend.slices, strict=False):
        _panel(ax, trend, name)
    for ax in flat[len(trend.slices) :]:
        ax.set_visible(False)
    level = f"{100.0 * trend.confidence:g} %"
    figure.suptitle(f"{trend.suite}: pass rate per slice, exact {level} interval", fontsize=10)
    figure.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(figure)
    return True


def _panel(ax: Axes, trend: EvalgateTrend, name: str) -> None:
    xs, rates, below, above = [], [], [], []
    for x, point in enumerate(trend.points):
        cell = point.cells.get(name)
        if cell is not None:
            xs.append(x)
            rates.append(cell.rate)
            below.append(cell.rate - cell.lo)
            above.append(cell.hi - cell.rate)
    ax.errorbar(xs, rates, yerr=[below, above], color=_LINE, marker="o", ms=4, lw=1.4, capsize=3)
    n = next((point.cells[name].cases for point in trend.points if name in point.cells), 0)
    ax.set_title(f"{name} (n={n})", fontsize=9, loc="left")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlim(-0.5, len(trend.points) - 0.5)
    ax.set_xticks(range(len(trend.points)), [_tick(point) for point in trend.points], fontsize=7)
    for label, point in zip(ax.get_xticklabels(), trend.points, strict=True):
        if not point.cells:
            label.set_color(_MISSING)
    ax.grid(axis="y", color="#d0d7de", linewidth=0.6)
    ax.tick_params(axis="y", labelsize=7)


def _tick(point: EvalgateTrendPoint) -> str:
    return point.candidate if point.cells else f"{point.candidate}\n({point.status})"


def _pyplot() -> ModuleType:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot
