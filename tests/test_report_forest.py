"""forest.png and the inline SVG figures: grouped by slice, n on the axis, the margin as a
region, rules coloured by result, the verdict in the title; latency box plots from the
decision's quantile summary."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_hex
from reportkit import failing_decision, sample_decision

from pytest_evalgate.report.forest import (
    _forest_figure,
    evalgate_forest_png,
    evalgate_forest_rules,
    evalgate_forest_svg,
    evalgate_latency_svg,
)


def _figure(decision: dict[str, Any]) -> Any:
    figure = _forest_figure(decision)
    assert figure is not None
    return figure


def _close(figure: Any) -> None:
    from matplotlib import pyplot

    pyplot.close(figure)


def test_rules_are_grouped_by_slice_all_first_and_off_scale_rules_left_out() -> None:
    groups = evalgate_forest_rules(sample_decision())
    assert list(groups) == ["all", "alpha", "beta"]
    assert [rule["name"] for rule in groups["alpha"]] == [
        "non_inferior[alpha]", "no_regression[alpha]",
    ]  # fmt: skip
    names = {rule["name"] for rules in groups.values() for rule in rules}
    assert "floor[beta]" not in names and "perf_ratio[ttft_p95]" not in names


def test_the_axis_names_each_slice_with_its_n_and_the_title_the_verdict() -> None:
    figure = _figure(failing_decision())
    axes = figure.axes[0]
    labels = [label.get_text() for label in axes.get_yticklabels()]
    assert labels == ["beta\nn=20", "alpha\nn=20", "all\nn=40"]  # all at the top
    assert axes.get_title(loc="left") == "demo-suite: verdict FAIL (5/7 rules pass)"
    _close(figure)


def test_the_margin_is_a_region_from_minus_margin_to_zero() -> None:
    figure = _figure(sample_decision())
    axes = figure.axes[0]
    regions = [c for c in axes.collections if isinstance(c, PolyCollection)]
    assert len(regions) == 2  # non_inferior[all] and non_inferior[alpha]
    spans = sorted(
        (round(float(path.vertices[:, 0].min()), 6), round(float(path.vertices[:, 0].max()), 6))
        for region in regions
        for path in region.get_paths()
    )
    assert spans == [(-0.15, 0.0), (-0.1, 0.0)]
    lo, hi = axes.get_xlim()
    assert lo < -0.15 and hi > 0.12  # the margin's edge and every interval are in view
    _close(figure)


def _interval_colours(figure: Any) -> dict[tuple[float, float], str]:
    colours = {}
    axes = figure.axes[0]
    for line in axes.get_lines():
        xs = list(line.get_xdata())
        # intervals are in data coordinates (slice separators span the axes instead)
        if len(xs) == 2 and xs[0] != xs[1] and line.get_transform() == axes.transData:
            colours[(round(xs[0], 6), round(xs[1], 6))] = to_hex(line.get_color())
    return colours


def _interval_rows(figure: Any) -> list[tuple[tuple[float, float], float]]:
    axes = figure.axes[0]
    return [
        ((float(line.get_xdata()[0]), float(line.get_xdata()[1])), float(line.get_ydata()[0]))
        for line in axes.get_lines()
        if len(line.get_xdata()) == 2
        and line.get_xdata()[0] != line.get_xdata()[1]
        and line.get_transform() == axes.transData
    ]


def test_each_rule_is_coloured_by_its_result_and_failures_are_not_only_colour() -> None:
    passing = _interval_colours(_figure(sample_decision()))
    assert set(passing.values()) == {"#1a7f37"}
    figure = _figure(failing_decision())
    failing = _interval_colours(figure)
    assert failing[(-0.3, -0.1)] == "#cf222e"
    assert failing[(-0.05, 0.1)] == "#1a7f37"
    dashed = [line for line in figure.axes[0].get_lines() if line.get_linestyle() == "--"]
    assert any(list(line.get_xdata()) == [-0.3, -0.1] for line in dashed)
    legend = [text.get_text() for text in figure.legends[0].get_texts()]
    assert {"fail", "pass", "non_inferior", "no_regression", "margin (-m to 0)"} <= set(legend)
    _close(figure)


def test_the_png_is_written(tmp_path: Path) -> None:
    path = tmp_path / "forest.png"
    assert evalgate_forest_png(sample_decision(), str(path))
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (880, int(110 * (0.62 * 3 + 2.1)))


def test_no_paired_interval_no_plot(tmp_path: Path) -> None:
    decision = sample_decision()
    decision["rules"] = [rule for rule in decision["rules"] if rule["rule"] == "floor"]
    assert not evalgate_forest_png(decision, str(tmp_path / "forest.png"))
    assert not (tmp_path / "forest.png").exists()
    assert evalgate_forest_svg(decision) is None


def test_svg_is_inline_text_and_the_same_bytes_each_time() -> None:
    first = evalgate_forest_svg(sample_decision())
    assert first is not None and first.startswith("<svg") and "<?xml" not in first
    assert "<metadata" not in first and "alpha" in first  # text stays text
    assert first == evalgate_forest_svg(sample_decision())


def test_latency_box_plots_from_the_quantile_summary() -> None:
    svg = evalgate_latency_svg(sample_decision())
    assert svg is not None
    for metric in ("ttft (ms)", "tpot (ms)", "itl (ms)", "e2e (ms)"):
        assert metric in svg
    assert svg.count(">candidate<") == 4 and svg.count(">baseline<") == 4
    older = sample_decision()
    for sides in older["perf"].values():
        for figures in sides.values():
            figures["quantiles"] = None  # a record from before the summary was kept
    assert evalgate_latency_svg(older) is None


@pytest.mark.parametrize("count", [1, 2, 3])
def test_rules_of_a_slice_sit_apart_inside_its_band(count: int) -> None:
    decision = sample_decision()
    extra = [dict(decision["rules"][1], name=f"non_inferior[alpha]#{i}") for i in range(count)]
    decision["rules"] = extra
    figure = _figure(decision)
    ys = sorted({round(float(y), 6) for (_lo, _hi), y in _interval_rows(figure)})
    assert len(ys) == count and all(-0.4 < y < 0.4 for y in ys)
    _close(figure)
