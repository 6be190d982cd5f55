"""``evalgate plan [SUITE] [--replicas N | --target-hours H]``: per candidate its output tokens,
GPU-hours and wall time on N replicas (or the replicas a target wall time needs), from the store's
measured tokens and busy time or from stated figures (``--items``, ``--assume-output-tokens``,
``--tokens-per-s``); without a SUITE all three are required. ``--json`` prints the same as one
JSON document. A figure that is neither stored nor stated is a usage error (exit 4).
See ``docs/capacity.md``.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING, Any

from pytest_evalgate.cli.command import EvalgateCommand

if TYPE_CHECKING:
    from pytest_evalgate.capacity.plan import (
        EvalgateCapacityInput,
        EvalgateCapacityPlan,
        EvalgateMeasured,
    )
    from pytest_evalgate.capacity.store import EvalgateAssumptions
    from pytest_evalgate.manifest.load import EvalgateManifest

_NO_SUITE_NAME = "run"  # the one pseudo-candidate of a plan without a suite


def evalgate_plan_command() -> EvalgateCommand:
    """The ``plan`` subcommand."""
    text = "output tokens, GPU-hours and wall time of a suite on N replicas"
    return EvalgateCommand("plan", text, _plan_arguments, _plan)


def _plan_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("suite", nargs="?", help="suite folder or its evalgate.yaml (optional)")
    parser.add_argument("--store", default=".evalgate", help="result store root (measured figures)")
    parser.add_argument("--candidate", action="append", default=[], help="only this candidate")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--replicas", type=int, default=None, help="replicas per candidate (1)")
    size.add_argument("--target-hours", type=float, default=None, help="wall time to plan for")
    parser.add_argument("--items", type=int, help="requests per candidate (default: cases x reps)")
    parser.add_argument(
        "--assume-output-tokens", type=float, help="mean output tokens of one request"
    )
    parser.add_argument(
        "--tokens-per-s",
        "--assume-tokens-per-s",
        dest="tokens_per_s",
        type=float,
        help="output tokens per second one replica sustains (e.g. probe's figure at the knee)",
    )
    parser.add_argument(
        "--gpus-per-replica", type=int, help="GPUs of one replica (default: the pins' parallelism)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--decision",
        help="decision.json of a gate with a max_rate_at_slo rule: replicas per --target-rate",
    )
    parser.add_argument("--target-rate", type=float, help="requests/s to serve (with --decision)")


def _plan(args: argparse.Namespace) -> bool:
    from pytest_evalgate.capacity.plan import evalgate_capacity_plan, evalgate_replicas_for

    if args.decision is not None or args.target_rate is not None:
        return _rate_plan(args)

    measured, inputs = _plan_inputs(args)
    plans = []
    for given in inputs:
        replicas = 1 if args.replicas is None else args.replicas
        if args.target_hours is not None:
            whole = evalgate_capacity_plan(given, 1)
            replicas = evalgate_replicas_for(whole.replica_s, args.target_hours * 3600.0)
        plans.append(evalgate_capacity_plan(given, replicas))
    if args.json:
        print(json.dumps(_plan_document(plans, measured), indent=2, sort_keys=True))
    else:
        for line in _plan_lines(plans, measured, args.target_hours):
            print(line)
    return True


def _rate_plan(args: argparse.Namespace) -> bool:
    """Replicas per target load from the decision's measured max rate at the SLO."""
    from pytest_evalgate.capacity.plan import rates_at_slo, replicas_for_rate
    from pytest_evalgate.errors import EvalgateConfigError

    if args.decision is None or args.target_rate is None:
        reason = "--decision and --target-rate go together"
        raise EvalgateConfigError("command line", "--decision", reason)
    try:
        with open(args.decision, encoding="utf-8") as handle:
            decision = json.load(handle)
    except (OSError, ValueError) as error:
        raise EvalgateConfigError(args.decision, "<file>", f"cannot read: {error}") from None
    if not isinstance(decision, dict):
        raise EvalgateConfigError(args.decision, "<root>", "not a decision record")
    rows = []
    for entry in rates_at_slo(decision, args.decision):
        candidate = entry.candidate
        rate = entry.rates.get(candidate)
        key = f"perf_phase.max_rate_at_slo ({entry.rule}).rates.{candidate}"
        if rate is None or rate <= 0:
            reason = f"the candidate met the SLO at no swept rate ({rate}); no replica count"
            raise EvalgateConfigError(args.decision, key, reason)
        replicas = replicas_for_rate(args.target_rate, rate)
        rows.append({"rule": entry.rule, "slo": {"ttft_p95_s": entry.ttft_p95_s,
                     "tpot_p95_s": entry.tpot_p95_s}, "candidate": candidate,
                     "rates": dict(entry.rates), "per_replica_rate": rate,
                     "target_rate": args.target_rate, "replicas": replicas})  # fmt: skip
    if args.json:
        print(json.dumps({"replicas_at_slo": rows}, indent=2, sort_keys=True))
        return True
    for row in rows:
        slo, rates = row["slo"], row["rates"]
        others = ", ".join(f"{n} {r:g}/s" for n, r in rates.items() if r is not None)
        print(
            f"{row['rule']}: at the SLO (ttft p95 <= {slo['ttft_p95_s']:g} s, tpot p95 <= "
            f"{slo['tpot_p95_s']:g} s) one replica sustains {row['per_replica_rate']:g} "
            f"requests/s ({row['candidate']}; measured: {others})"
        )
        print(f"  replicas for {args.target_rate:g} requests/s: {row['replicas']}")
    return True


def _plan_inputs(
    args: argparse.Namespace,
) -> tuple[dict[str, EvalgateMeasured], list[EvalgateCapacityInput]]:
    from pytest_evalgate.capacity.store import EvalgateAssumptions

    assume = EvalgateAssumptions(
        args.items, args.assume_output_tokens, args.tokens_per_s, args.gpus_per_replica
    )
    if args.suite is None:
        return {}, [_stated_input(assume)]
    from pytest_evalgate.capacity.store import evalgate_capacity_input
    from pytest_evalgate.manifest.load import evalgate_load_manifest, evalgate_manifest_path

    manifest = evalgate_load_manifest(evalgate_manifest_path(args.suite))
    names = _candidates(manifest, args.candidate)
    measured = _measure(args.store, manifest, names, assume)
    inputs = [evalgate_capacity_input(manifest, n, measured.get(n), assume) for n in names]
    return measured, inputs


def _stated_input(assume: EvalgateAssumptions) -> EvalgateCapacityInput:
    from pytest_evalgate.capacity.plan import EvalgateCapacityInput
    from pytest_evalgate.errors import EvalgateConfigError

    for option, value in (
        ("--items", assume.requests),
        ("--assume-output-tokens", assume.tokens_per_request),
        ("--tokens-per-s", assume.tokens_per_s),
    ):
        if value is None:
            reason = "required without a SUITE (nothing to measure from)"
            raise EvalgateConfigError("command line", option, reason)
    assert assume.requests is not None and assume.tokens_per_request is not None
    assert assume.tokens_per_s is not None  # (checked just above; for the type checker)
    gpus = 1 if assume.gpus_per_replica is None else assume.gpus_per_replica
    return EvalgateCapacityInput(
        _NO_SUITE_NAME, assume.requests, assume.tokens_per_request, "assumed",
        assume.tokens_per_s, "assumed", gpus,
    )  # fmt: skip


def _candidates(manifest: EvalgateManifest, chosen: list[str]) -> list[str]:
    from pytest_evalgate.errors import EvalgateConfigError

    for name in chosen:
        if name not in manifest.candidates:
            known = ", ".join(manifest.candidates)
            reason = f"no candidate {name!r} in the suite (known: {known})"
            raise EvalgateConfigError(manifest.path, "--candidate", reason)
    return list(chosen) or list(manifest.candidates)


def _measure(
    store: str, manifest: EvalgateManifest, names: list[str], assume: EvalgateAssumptions
) -> dict[str, EvalgateMeasured]:
    if assume.tokens_per_request is not None and assume.tokens_per_s is not None:
        return {}  # everything stated: the store is not read
    from pytest_evalgate.capacity.store import evalgate_measure_candidate
    from pytest_evalgate.store import evalgate_open_store

    if "://" not in store and not os.path.isdir(store):
        return {}  # no store yet: each figure must then be stated (refused per candidate)
    backend = evalgate_open_store(store)
    return {name: evalgate_measure_candidate(backend, manifest, name) for name in names}


def _plan_lines(
    plans: list[EvalgateCapacityPlan],
    measured: dict[str, EvalgateMeasured],
    target_hours: float | None,
) -> list[str]:
    lines: list[str] = []
    for plan in plans:
        lines += _candidate_lines(plan, measured.get(plan.given.name), target_hours)
    tokens = sum(plan.output_tokens for plan in plans)
    gpu_hours = sum(plan.gpu_hours for plan in plans)
    wall = max(plan.wall_s for plan in plans)
    side = " (candidates side by side, each on its own replicas)" if len(plans) > 1 else ""
    prefill = _prefill_sum(plans)
    prompt = "" if prefill is None else f", {_count(prefill)} prefill tokens"
    lines.append(
        f"total: {_count(tokens)} output tokens{prompt}, {gpu_hours:.4g} GPU-hours; "
        f"wall time {_duration(wall)}{side}"
    )
    return lines


def _candidate_lines(
    plan: EvalgateCapacityPlan, measured: EvalgateMeasured | None, target_hours: float | None
) -> list[str]:
    from pytest_evalgate.capacity.plan import evalgate_still_to_run

    given = plan.given
    lines = [
        f"{given.name}: {given.requests:,} requests x {_count(given.tokens_per_request)} output "
        f"tokens ({given.tokens_source}) = {_count(plan.output_tokens)} output tokens",
        f"  rate: {_count(given.tokens_per_s)} output tokens/s per replica ({given.rate_source}), "
        f"{given.gpus_per_replica} GPU(s) per replica",
    ]
    if given.prefill_tokens is not None:  # long context: what the prompts prefill (SPEC 18)
        lines.insert(1, f"  prefill: {_prefill(given)} prompt tokens ({given.prefill_source})")
    if measured is not None and measured.records:
        lines.append(f"  per request: {measured.e2e_mean_s:.3f} s end to end (stored mean)")
    if measured is not None:
        requests, tokens, seconds = evalgate_still_to_run(plan, measured.records)
        lines.append(
            f"  stored: {measured.records:,} answered; the next run sends {requests:,} "
            f"({_count(tokens)} output tokens, {_duration(seconds)} on one replica)"
        )
    lines.append(f"  one replica: {_duration(plan.replica_s)}; {plan.gpu_hours:.4g} GPU-hours")
    if target_hours is not None:
        lines.append(f"  replicas for {target_hours:g} h: {plan.replicas}")
    lines.append(f"  wall time on {plan.replicas} replica(s): {_duration(plan.wall_s)}")
    return lines


def _prefill_sum(plans: list[EvalgateCapacityPlan]) -> float | None:
    values = [plan.given.prefill_tokens for plan in plans]
    return None if any(v is None for v in values) else sum(v or 0.0 for v in values)


def _prefill(given: EvalgateCapacityInput) -> str:
    return "-" if given.prefill_tokens is None else _count(given.prefill_tokens)


def _plan_document(
    plans: list[EvalgateCapacityPlan], measured: dict[str, EvalgateMeasured]
) -> dict[str, Any]:
    rows = [_plan_row(plan, measured.get(plan.given.name)) for plan in plans]
    total = {
        "output_tokens": sum(plan.output_tokens for plan in plans),
        "gpu_hours": sum(plan.gpu_hours for plan in plans),
        "wall_s": max(plan.wall_s for plan in plans),
    }
    prefill = _prefill_sum(plans)
    if prefill is not None:  # a suite's prompts were counted (SPEC 18)
        total["prefill_tokens"] = prefill
    return {"candidates": rows, "total": total}


def _plan_row(plan: EvalgateCapacityPlan, seen: EvalgateMeasured | None) -> dict[str, Any]:
    given = plan.given
    return {
        "next_run": None if seen is None else _next_run_document(plan, seen),
        "name": given.name, "requests": given.requests,
        "tokens_per_request": given.tokens_per_request, "tokens_source": given.tokens_source,
        "output_tokens": plan.output_tokens, "tokens_per_s": given.tokens_per_s,
        "prefill_tokens": given.prefill_tokens, "prefill_source": given.prefill_source,
        "rate_source": given.rate_source, "gpus_per_replica": given.gpus_per_replica,
        "replica_s": plan.replica_s, "gpu_hours": plan.gpu_hours, "replicas": plan.replicas,
        "wall_s": plan.wall_s, "measured": None if seen is None else _measured_document(seen),
    }  # fmt: skip


def _next_run_document(plan: EvalgateCapacityPlan, seen: EvalgateMeasured) -> dict[str, Any]:
    from pytest_evalgate.capacity.plan import evalgate_still_to_run

    requests, tokens, seconds = evalgate_still_to_run(plan, seen.records)
    return {"requests": requests, "output_tokens": tokens, "replica_s": seconds}


def _measured_document(seen: EvalgateMeasured) -> dict[str, Any]:
    return {
        "records": seen.records, "output_tokens": seen.output_tokens, "busy_s": seen.busy_s,
        "e2e_total_s": seen.e2e_total_s, "replicas": seen.replicas,
    }  # fmt: skip


def _count(value: float) -> str:
    """A count with thousands separators: whole numbers exactly, others to one decimal."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def _duration(seconds: float) -> str:
    """``8000 s (2.22 h)``, ``1000 s (16.7 min)``, ``0.405 s``."""
    text = f"{seconds:,.0f} s" if seconds >= 10 else f"{seconds:.3g} s"
    if seconds >= 3600:
        return f"{text} ({seconds / 3600:.3g} h)"
    if seconds >= 60:
        return f"{text} ({seconds / 60:.3g} min)"
    return text
