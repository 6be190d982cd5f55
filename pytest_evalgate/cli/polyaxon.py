"""``evalgate polyaxon render SUITE --image IMAGE [--shards N] [--store s3://...] [--out DIR]``:
write a suite's Polyaxon worker and aggregation components and its pipeline; ``evalgate
polyaxon check DIR|FILE...``: our own check of polyaxonfiles (undefined ``{{ name }}``, params
that name no input).

``render`` checks what it wrote before it says so and prints one line per file. A bad manifest,
a plan for another N, an S3 location or credentials choice that is wrong, a suite Polyaxon
cannot run (serving sidecar, code sandbox), or a check that fails exits 4; nothing is written
unless every file passes the check.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from pytest_evalgate.cli.command import EvalgateCommand
from pytest_evalgate.cli.k8s import evalgate_s3_arguments, evalgate_s3_render_options


def evalgate_polyaxon_commands() -> tuple[EvalgateCommand, ...]:
    """The ``polyaxon`` subcommand (with its own ``render`` and ``check``)."""
    return (
        EvalgateCommand(
            "polyaxon",
            "write or check a suite's Polyaxon components and pipeline",
            _arguments,
            _run,
            usage_errors=(OSError,),
        ),
    )


def _arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="polyaxon_command", required=True)
    render = sub.add_parser("render", help="write worker, aggregate and pipeline polyaxonfiles")
    render.add_argument("suite", help="suite folder or its evalgate.yaml")
    render.add_argument("--shards", type=int, help="N (default: the manifest's shards)")
    render.add_argument("--image", required=True, help="harness image (suite inside)")
    render.add_argument("--out", default="polyaxon", help="folder to write (default: polyaxon)")
    render.add_argument("--store-claim", default="evalgate-store", help="store PVC name")
    render.add_argument("--max-retries", type=int, default=3, help="retries of one shard")
    evalgate_s3_arguments(render)
    check = sub.add_parser("check", help="check polyaxonfiles: undefined {{ names }}, params")
    check.add_argument("paths", nargs="+", help="polyaxonfiles, or folders of *.yaml")


def _run(args: argparse.Namespace) -> bool:
    from pytest_evalgate.k8s.polyaxon_check import evalgate_check_polyaxonfiles

    if args.polyaxon_command == "check":
        files, paths = _read(args.paths)
        evalgate_check_polyaxonfiles(files, paths)
        print(f"polyaxonfiles valid: {', '.join(paths[name] for name in files)}")
        return True
    rendered = _render(args)
    # checked under the paths they will have, before anything is written
    evalgate_check_polyaxonfiles(rendered, {name: _path(args.out, name) for name in rendered})
    for path in _write(args.out, rendered):
        print(f"wrote {path}")
    return True


def _render(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    from pytest_evalgate.k8s.polyaxon import EvalgatePolyaxonOptions, evalgate_polyaxon_render
    from pytest_evalgate.manifest.load import evalgate_load_manifest, evalgate_manifest_path
    from pytest_evalgate.shard.plan import evalgate_manifest_plan

    manifest = evalgate_load_manifest(evalgate_manifest_path(args.suite))
    shards = manifest.shards if args.shards is None else args.shards
    evalgate_manifest_plan(manifest, shards)  # a plan for another N would fail every worker
    s3 = evalgate_s3_render_options(args) if args.store else None
    options = EvalgatePolyaxonOptions(
        suite_path=args.suite.rstrip("/"),
        s3=s3,
        store_claim=args.store_claim,
        max_retries=args.max_retries,
    )
    return evalgate_polyaxon_render(manifest, shards, args.image, options)


def _path(folder: str, name: str) -> str:
    return os.path.join(folder, name)


def _write(folder: str, files: dict[str, dict[str, Any]]) -> list[str]:
    import yaml

    os.makedirs(folder, exist_ok=True)
    written = []
    for name, body in files.items():
        path = _path(folder, name)
        with open(path, "w", encoding="utf-8") as handle:
            yaml.safe_dump(body, handle, sort_keys=False, default_flow_style=False)
        written.append(path)
    return written


def _read(paths: list[str]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """(file name -> parsed YAML, file name -> its path). A ``pathRef`` is relative to the file
    that holds it, so files are keyed by their base name (one folder of files)."""
    found: dict[str, dict[str, Any]] = {}
    where: dict[str, str] = {}
    for path in paths:
        if os.path.isdir(path):
            folder = path
            names = [n for n in sorted(os.listdir(path)) if n.endswith((".yaml", ".yml"))]
        else:
            folder, names = os.path.dirname(path), [os.path.basename(path)]
        for name in names:
            where[name] = os.path.join(folder, name)
            found[name] = _load(where[name])
    return found, where


def _load(path: str) -> dict[str, Any]:
    from pytest_evalgate.errors import EvalgateConfigError, EvalgateYamlError
    from pytest_evalgate.formats.yamlread import evalgate_load_yaml

    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    try:
        body = evalgate_load_yaml(text)
    except EvalgateYamlError as exc:
        raise EvalgateConfigError(path, "(top)", exc.reason) from None
    if not isinstance(body, dict):
        raise EvalgateConfigError(path, "(top)", "a polyaxonfile is a YAML mapping")
    return body
