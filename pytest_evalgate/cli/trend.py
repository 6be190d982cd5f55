"""``evalgate trend SUITE --candidates A B C``: checkpoints of one suite side by side.

Prints each slice's pass rate and exact interval per checkpoint (``trend.py``) and writes
``trend.png``. Exit 0 when every checkpoint's store was complete and verified, 1 when one was
not (it is reported, and left out of the table and the figure), 4 for an unknown candidate.
"""

from __future__ import annotations

import argparse

from pytest_evalgate.cli.command import EvalgateCommand


def evalgate_trend_commands() -> tuple[EvalgateCommand, ...]:
    """The ``trend`` subcommand."""
    help_text = "pass rate per slice across checkpoints"
    # OSError: the --png path cannot be written (a wrong path on the command line: exit 4)
    return (EvalgateCommand("trend", help_text, _add, _trend, usage_errors=(OSError,)),)


def _add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("suite", help="suite folder or its evalgate.yaml")
    parser.add_argument(
        "--candidates", nargs="+", required=True, metavar="NAME",
        help="the checkpoints (candidate names of the manifest), in the order to show",
    )  # fmt: skip
    parser.add_argument(
        "--store", default=".evalgate", help="result store root (a folder or s3://bucket/prefix)"
    )
    parser.add_argument("--png", default="trend.png", help="where to write the figure")
    parser.add_argument(
        "--confidence", type=float, default=0.95, help="two-sided level of the exact intervals"
    )


def _trend(args: argparse.Namespace) -> bool:
    import os

    from pytest_evalgate.aggregate.trend import evalgate_trend, evalgate_trend_lines
    from pytest_evalgate.errors import EvalgateConfigError
    from pytest_evalgate.manifest.load import evalgate_load_manifest, evalgate_manifest_path
    from pytest_evalgate.report.trend import evalgate_trend_png
    from pytest_evalgate.store import evalgate_open_store

    if not 0.5 < args.confidence < 1.0:
        raise EvalgateConfigError("evalgate trend", "--confidence", "must lie in (0.5, 1)")
    manifest = evalgate_load_manifest(evalgate_manifest_path(args.suite))
    trend = evalgate_trend(
        evalgate_open_store(args.store), manifest, args.candidates, args.confidence
    )
    for line in evalgate_trend_lines(trend):
        print(line)
    os.makedirs(os.path.dirname(args.png) or ".", exist_ok=True)
    if evalgate_trend_png(trend, args.png):
        print(f"wrote {args.png}")
    else:
        print("no checkpoint has rates: no figure written")
    return trend.complete
