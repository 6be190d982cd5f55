"""``evalgate canary-scan SUITE PATH...``: is the suite's canary in this training data?

Prints ``PATH:LINE: contains the canary of SUITE`` per hit line and a closing count; fails (exit 1)
on any hit. A suite without a ``canary`` or an unreadable path is a usage error (exit 4).
"""

from __future__ import annotations

import argparse

from pytest_evalgate.cli.command import EvalgateCommand


def evalgate_contamination_commands() -> tuple[EvalgateCommand, ...]:
    """The contamination subcommands."""
    scan_help = "scan files (training data, any size) for the suite's canary string"
    return (EvalgateCommand("canary-scan", scan_help, _arguments, _scan, usage_errors=(OSError,)),)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("suite", help="suite folder or its evalgate.yaml")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files to scan")


def _scan(args: argparse.Namespace) -> bool:
    from pytest_evalgate.aggregate.contamination import evalgate_scan_paths
    from pytest_evalgate.errors import EvalgateConfigError
    from pytest_evalgate.manifest.load import evalgate_load_manifest, evalgate_manifest_path

    manifest = evalgate_load_manifest(evalgate_manifest_path(args.suite))
    if not manifest.canary:
        raise EvalgateConfigError(manifest.path, "canary", "the suite has no canary to scan for")
    hits = 0
    for hit in evalgate_scan_paths(args.paths, manifest.canary):
        hits += 1
        print(f"{hit.path}:{hit.line}: contains the canary of {manifest.suite}", flush=True)
    files = len(args.paths)
    print(f"canary-scan: {hits} line(s) with the canary in {files} file(s)")
    return hits == 0
