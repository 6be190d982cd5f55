"""Figures: the forest plot (``forest.png``, and inline SVG for report.html) and the latency
distributions of candidate and baseline (inline SVG), drawn with matplotlib's Agg backend.

The forest plot shows every rule on the paired candidate-minus-baseline scale, grouped by
slice (one band per slice, n paired cases on the axis), each rule's interval and estimate
coloured by its result, the non-inferiority margin drawn as a region from -margin to 0, and the
verdict in the title. Floors (a failure rate) and perf ratios live on other scales and are left
to the tables.
"""

from __future__ import annotations

import inspect
import io
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from pytest_evalgate.report.facts import EVALGATE_DELTA_RULES, evalgate_latency_rows
from pytest_evalgate.report.shape import EvalgateDecision, EvalgateRuleRecord

if TYPE_CHECKING:  # matplotlib loads only when a figure is drawn
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

_COLOURS = {"pass": "#1a7f37", "fail": "#cf222e", "not evaluated": "#6e7781"}
_MARKERS = {"non_inferior": "o", "must_improve": "^", "no_regression": "s", "pairwise": "D"}
_STYLES = {"pass": "-", "fail": "--", "not evaluated": ":"}
_MARGIN_COLOUR = "#f6c177"
_SIDE_COLOURS = {"candidate": "#0969da", "baseline": "#8c959f"}
_WIDTH_IN = 8.0


def evalgate_forest_rules(decision: EvalgateDecision) -> dict[str, list[EvalgateRuleRecord]]:
    """Slice -> its rules that have an interval on the paired scale, ``all`` first."""
    groups: dict[str, list[EvalgateRuleRecord]] = {}
    for rule in decision["rules"]:
        if rule["rule"] in EVALGATE_DELTA_RULES and rule.get("slice") and _has_interval(rule):
            groups.setdefault(str(rule["slice"]), []).append(rule)
    return dict(sorted(groups.items(), key=lambda item: (item[0] != "all", item[0])))


def _has_interval(rule: EvalgateRuleRecord) -> bool:
    return rule.get("lo") is not None and rule.get("hi") is not None


def evalgate_forest_png(decision: EvalgateDecision, path: str) -> bool:
    """Write ``forest.png``; False (nothing written) when no rule has a paired interval."""
    figure = _forest_figure(decision)
    if figure is None:
        return False
    figure.savefig(path, dpi=110, metadata={"Software": None})
    _close(figure)
    return True


def evalgate_forest_svg(decision: EvalgateDecision) -> str | None:
    """The forest plot as an inline ``<svg>`` element (text kept as text), or None."""
    figure = _forest_figure(decision)
    return None if figure is None else _svg(figure, "forest plot of the paired rules")


def evalgate_latency_svg(decision: EvalgateDecision) -> str | None:
    """Box plots of each latency metric, candidate against baseline, from the decision's
    quantile summary (whiskers p5-p99, box p25-p75, median line, p95 cross); None without
    samples."""
    rows = [
        (metric, side, quantiles)
        for metric, side, figures in evalgate_latency_rows(decision)
        if (quantiles := figures.get("quantiles"))
    ]
    metrics = list(dict.fromkeys(metric for metric, _side, _quantiles in rows))
    if not metrics:
        return None
    plt = _pyplot()
    figure, axes = plt.subplots(len(metrics), 1, figsize=(6.4, 1.25 * len(metrics) + 0.5))
    for ax, metric in zip(_as_list(axes), metrics, strict=True):
        # baseline drawn first (bottom), so the candidate is the upper box
        _latency_axes(ax, metric, [(s, f) for m, s, f in reversed(rows) if m == metric])
    figure.tight_layout()
    return _svg(figure, "latency distributions of candidate and baseline")


def _latency_axes(ax: Axes, metric: str, sides: Sequence[tuple[str, Mapping[str, float]]]) -> None:
    """``sides``: (side, quantiles) of one metric."""
    stats = [_box(side, quantiles) for side, quantiles in sides]
    boxes = ax.bxp(stats, showfliers=False, patch_artist=True, widths=0.55, **_horizontal(ax))
    for patch, (side, _figures) in zip(boxes["boxes"], sides, strict=True):
        patch.set_facecolor(_SIDE_COLOURS[side])
        patch.set_alpha(0.55)
    for row, (_side, quantiles) in enumerate(sides, start=1):
        ax.plot([1000.0 * quantiles["p95"]], [row], "x", color="black", markersize=6)
    ax.set_title(f"{metric} (ms)", fontsize=9, loc="left")
    ax.tick_params(labelsize=8)
    lo = min(box["whislo"] for box in stats)
    hi = max(box["whishi"] for box in stats)
    pad = 0.06 * max(hi - lo, 1e-6)
    ax.set_xlim(max(0.0, lo - pad), hi + pad)  # the spread, not the distance from zero


def _horizontal(ax: Axes) -> dict[str, Any]:
    # matplotlib 3.10 added ``orientation`` and 3.11 deprecated ``vert``: use what this one has.
    if "orientation" in inspect.signature(ax.bxp).parameters:
        return {"orientation": "horizontal"}
    return {"vert": False}


def _box(side: str, quantiles: Mapping[str, float]) -> dict[str, Any]:
    ms = {key: 1000.0 * float(value) for key, value in quantiles.items()}
    return {
        "label": side,
        "whislo": ms["p5"],
        "q1": ms["p25"],
        "med": ms["p50"],
        "q3": ms["p75"],
        "whishi": ms["p99"],
    }


# --------------------------------------------------------------------------- forest


def _forest_figure(decision: EvalgateDecision) -> Figure | None:
    groups = evalgate_forest_rules(decision)
    if not groups:
        return None
    plt = _pyplot()
    height = 0.62 * len(groups) + 2.1
    figure: Figure
    axes: Axes
    figure, axes = plt.subplots(figsize=(_WIDTH_IN, height), layout="constrained")
    for band, rules in enumerate(groups.values()):
        _forest_band(axes, len(groups) - 1 - band, rules)
    axes.axvline(0.0, color="#57606a", linestyle="--", linewidth=1)
    axes.set_xlim(*_xlim(groups))
    _forest_axes(axes, decision, groups)
    handles = _legend(groups)
    figure.legend(
        handles=handles, fontsize=8, loc="outside lower center", ncol=min(len(handles), 5)
    )
    return figure


def _forest_band(axes: Axes, y: float, rules: Sequence[EvalgateRuleRecord]) -> None:
    offsets = _offsets(len(rules))
    for rule, dy in zip(rules, offsets, strict=True):
        threshold = rule.get("threshold")
        if rule["rule"] == "non_inferior" and threshold is not None:
            axes.fill_betweenx(
                [y - 0.4, y + 0.4], threshold, 0.0, color=_MARGIN_COLOUR, alpha=0.45, lw=0
            )
            axes.plot([threshold] * 2, [y - 0.4, y + 0.4], color="#bc4c00", lw=1)
        elif rule["rule"] == "must_improve" and threshold is not None:
            axes.plot([threshold] * 2, [y - 0.4, y + 0.4], color="#57606a", lw=1.5)
        result = _result(rule)
        colour = _COLOURS[result]
        style = _STYLES[result]  # not colour alone: a failed rule's line is dashed, marker hollow
        ends = [_at(rule["lo"]), _at(rule["hi"])]
        axes.plot(ends, [y + dy, y + dy], color=colour, linewidth=2.2, ls=style)
        marker = _MARKERS.get(str(rule["rule"]), "o")
        face = "white" if result == "fail" else colour
        axes.plot([_at(rule["estimate"])], [y + dy], marker, color=colour, mfc=face, markersize=6.5)


def _xlim(groups: Mapping[str, Sequence[EvalgateRuleRecord]]) -> tuple[float, float]:
    """Room on both sides of every interval and threshold, so a margin's edge stays visible."""
    values = [0.0]
    for rules in groups.values():
        for rule in rules:
            values += [_at(rule["lo"]), _at(rule["hi"])]
            threshold = rule.get("threshold")
            if rule["rule"] in ("non_inferior", "must_improve") and threshold is not None:
                values.append(threshold)
    lo, hi = min(values), max(values)
    pad = 0.08 * max(hi - lo, 1e-3)
    return lo - pad, hi + pad


def _at(value: float | None) -> float:
    """A coordinate: None (a number the record does not have) is NaN, which matplotlib draws as
    a gap, as it does None. The plotted rules all have their interval (``_has_interval``)."""
    return math.nan if value is None else value


def _offsets(count: int) -> list[float]:
    if count == 1:
        return [0.0]
    step = 0.56 / (count - 1)
    return [0.28 - step * i for i in range(count)]


def _result(rule: EvalgateRuleRecord) -> str:
    if not rule.get("evaluated", True):
        return "not evaluated"
    return "pass" if rule["passed"] else "fail"


def _forest_axes(
    axes: Axes, decision: EvalgateDecision, groups: Mapping[str, Sequence[EvalgateRuleRecord]]
) -> None:
    labels = [f"{name}\nn={_n(decision, name, rules)}" for name, rules in groups.items()]
    axes.set_yticks(range(len(groups)), list(reversed(labels)), fontsize=9)
    axes.set_ylim(-0.6, len(groups) - 0.4)
    for y in range(len(groups) - 1):
        axes.axhline(y + 0.5, color="#d0d7de", linewidth=0.8)
    axes.set_xlabel(
        "candidate - baseline (paired, cluster bootstrap interval); floors and perf ratios are"
        " in the tables",
        fontsize=8.5,
    )
    axes.set_title(_title(decision), fontsize=11, loc="left")


def _n(decision: EvalgateDecision, name: str, rules: Sequence[EvalgateRuleRecord]) -> str:
    entry = (decision.get("slices") or {}).get(name)
    return str(entry["n_cases"] if entry else rules[0].get("n_cases", "?"))


def _title(decision: EvalgateDecision) -> str:
    rules = decision["rules"]
    passed = sum(1 for rule in rules if rule["passed"])
    return (
        f"{decision['suite']}: verdict {decision['verdict'].upper()} "
        f"({passed}/{len(rules)} rules pass)"
    )


def _legend(groups: Mapping[str, Sequence[EvalgateRuleRecord]]) -> list[Artist]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    kinds = sorted({str(rule["rule"]) for rules in groups.values() for rule in rules})
    results = sorted({_result(rule) for rules in groups.values() for rule in rules})
    handles: list[Artist] = [
        Line2D([], [], color=_COLOURS[r], linewidth=2.2, ls=_STYLES[r], label=r) for r in results
    ]
    handles += [
        Line2D([], [], color="black", marker=_MARKERS.get(k, "o"), ls="", label=k) for k in kinds
    ]
    if "non_inferior" in kinds:
        handles.append(Patch(color=_MARGIN_COLOUR, alpha=0.45, label="margin (-m to 0)"))
    return handles


# --------------------------------------------------------------------------- matplotlib


def _pyplot() -> ModuleType:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


def _as_list(axes: object) -> list[Axes]:
    """``subplots``' axes: one ``Axes``, or an array of them."""
    from matplotlib.axes import Axes

    return [axes] if isinstance(axes, Axes) else list(cast("Iterable[Axes]", axes))


def _close(figure: Figure) -> None:
    _pyplot().close(figure)


def _svg(figure: Figure, label: str) -> str:
    """The figure as an inline ``<svg>``: no XML prologue, no fixed size (it scales to its
    container), text as text, ids salted so reruns give the same bytes."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "evalgate"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    _close(figure)
    text = buffer.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, count=1, flags=re.S)
    head, rest = text.split(">", 1)
    head = re.sub(r'\s(width|height)="[^"]*"', "", head)
    return f'{head} role="img" aria-label="{label}">{rest}'
