"""``evalgate import lm-eval|inspect FILE... --suite SUITE --candidate NAME``: results another
harness produced, committed as the suite's records (docs/imports.md); nothing is requested.

A bad file (name, malformed line, unknown case, another task version or config than the first
import) or a bad option exits 4 before anything is committed; an unreadable file too. An import
that committed a second, different value for an identity exits 1 naming the file and line:
the store now holds both and ``evalgate gate`` is ``invalid`` until one is removed.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from pytest_evalgate.cli.command import EvalgateCommand

if TYPE_CHECKING:
    from pytest_evalgate.imports import HarnessFile


def evalgate_import_commands() -> tuple[EvalgateCommand, ...]:
    """The ``import`` subcommand (with its own ``lm-eval`` and ``inspect``); an unreadable file
    is a usage error (exit 4)."""
    text = "import lm-evaluation-harness samples or Inspect logs as store records"
    return (EvalgateCommand("import", text, _arguments, _run, usage_errors=(OSError,)),)


def _arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="import_command", required=True)
    lm_eval = sub.add_parser("lm-eval", help="samples_<task>_<time>.jsonl files (--log_samples)")
    lm_eval.add_argument("files", nargs="+", metavar="FILE", help="lm-eval samples files")
    inspect = sub.add_parser("inspect", help="Inspect .eval logs")
    inspect.add_argument("files", nargs="+", metavar="LOG", help="Inspect .eval logs")
    for command in (lm_eval, inspect):
        command.add_argument("--suite", required=True, help="suite folder or its evalgate.yaml")
        command.add_argument("--candidate", required=True, help="the manifest's candidate name")
        command.add_argument(
            "--store", default=".evalgate", help="result store root (a folder or s3://...)"
        )
    lm_eval.add_argument("--metric", default="exact_match", help="the metric field to score by")
    lm_eval.add_argument(
        "--id-field", default="id", help="doc field holding the case id (else doc_id is the row)"
    )
    lm_eval.add_argument("--repetition", type=int, default=0, help="the repetition (default 0)")
    inspect.add_argument("--scorer", help="the scorer to score by (default: the log's only one)")


def _run(args: argparse.Namespace) -> bool:
    from pytest_evalgate.imports import import_files
    from pytest_evalgate.manifest.load import evalgate_load_manifest, evalgate_manifest_path
    from pytest_evalgate.store import evalgate_open_store

    manifest = evalgate_load_manifest(evalgate_manifest_path(args.suite))
    files = [_read(args, path) for path in args.files]
    backend = evalgate_open_store(args.store)
    report = import_files(backend, manifest, args.candidate, files)
    for item in files:
        source = item.source
        print(
            f"read {item.path}: {source['harness']} {source['version']}, task "
            f"{source['task']!r} version {source['task_version']}, {len(item.samples)} samples"
        )
    for conflict in report.conflicts:
        print(f"conflict: {conflict}")
    skipped = f", {report.skipped} skipped (harness errors)" if report.skipped else ""
    print(
        f"evalgate import: {args.candidate} of {manifest.suite}: {report.committed} committed, "
        f"{report.unchanged} already stored alike{skipped}"
    )
    return not report.conflicts


def _read(args: argparse.Namespace, path: str) -> HarnessFile:
    from pytest_evalgate.imports import read_inspect_log, read_lm_eval_samples

    if args.import_command == "inspect":
        return read_inspect_log(path, scorer=args.scorer)
    return read_lm_eval_samples(
        path, metric=args.metric, id_field=args.id_field, repetition=args.repetition
    )
