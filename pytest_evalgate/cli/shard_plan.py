"""``evalgate shard-plan SUITE --shards N [--output FILE]``: plan the suite's cases onto N
shards by their ``cost``, write the plan (default ``SUITE/shard-plan-N.json``), and print the
balance of the plan next to plain hashing's. An unwritable output is a usage error (exit 4).
"""

from __future__ import annotations

import argparse

from pytest_evalgate.cli.command import EvalgateCommand


def evalgate_shard_plan_commands() -> tuple[EvalgateCommand, ...]:
    """The ``shard-plan`` subcommand."""
    text = "write a cost-balanced shard plan"
    return (EvalgateCommand("shard-plan", text, _arguments, _run, usage_errors=(OSError,)),)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("suite", help="suite folder or its evalgate.yaml")
    parser.add_argument("--shards", type=int, required=True, help="number of shards N")
    parser.add_argument("--output", help="plan file (default: SUITE/shard-plan-N.json)")


def _run(args: argparse.Namespace) -> bool:
    import os

    from pytest_evalgate.manifest.load import evalgate_load_manifest, evalgate_manifest_path
    from pytest_evalgate.shard.plan import evalgate_write_plan

    manifest = evalgate_load_manifest(evalgate_manifest_path(args.suite))
    cases = [(case.case_id, case.cost) for case in manifest.cases]
    target = args.output or os.path.join(manifest.suite_dir, f"shard-plan-{args.shards}.json")
    document, plan_balance, hash_balance = evalgate_write_plan(cases, args.shards, target)
    print(f"wrote {target} ({document['version']}, {len(cases)} cases, {args.shards} shards)")
    print("balance (max/mean shard cost, 1.000 is perfect):")
    print(f"  plan    {plan_balance:.3f}\n  hashing {hash_balance:.3f}")
    return True
