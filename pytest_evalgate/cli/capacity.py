"""``evalgate plan`` and ``evalgate probe``: what a suite costs, and how much concurrency an
endpoint takes (SPEC section 12; ``docs/capacity.md``).

``evalgate plan [SUITE] [--replicas N | --target-hours H]`` prints, per candidate, its output
tokens, GPU-hours and wall time on N replicas (or the replicas a target wall time needs), from
the store's measured tokens and busy time or from stated figures (``--items``,
``--assume-output-tokens``, ``--tokens-per-s``); without a SUITE all three are required.
``--json`` prints the same as one JSON document. A figure that is neither stored nor stated is a
usage error (exit 4).

``evalgate probe BASE_URL --model M`` sweeps concurrency 1, 2, 4, ... up to
``--max-concurrency``, prints one row per level, the knee, and ends with
``recommended budget.max_concurrency: N``; exit 1 when no level answered cleanly.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from typing import TYPE_CHECKING, Any

from pytest_evalgate.cli.command import EvalgateCommand

if TYPE_CHECKING:
    from pytest_evalgate.capacity import EvalgateCapacityPlan, EvalgateMeasured
    from pytest_evalgate.manifest import EvalgateManifest
    from pytest_evalgate.probe import EvalgateKnee, EvalgateProbeLevel

_NO_SUITE_NAME = "run"  # the one pseudo-candidate of a plan without a suite


def evalgate_capacity_commands() -> tuple[EvalgateCommand, ...]:
    """The ``plan`` and ``probe`` subcommands."""
    plan_help = "output tokens, GPU-hours and wall time of a suite on N replicas"
    probe_help = "sweep an endpoint's concurrency and recommend budget.max_concurrency"
    return (
        EvalgateCommand("plan", plan_help, _plan_arguments, _plan),
        EvalgateCommand("probe", probe_help, _probe_arguments, _probe),
    )


# --------------------------------------------------------------------------- plan


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


def _plan(args: argparse.Namespace) -> bool:
    from pytest_evalgate.capacity import evalgate_capacity_plan, evalgate_replicas_for

    measured, inputs = _plan_inputs(args)
    plans = []
    for given in inputs:
        replicas = args.replicas or 1
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


def _plan_inputs(
    args: argparse.Namespace,
) -> tuple[dict[str, EvalgateMeasured], list[Any]]:
    from pytest_evalgate.capacity_store import EvalgateAssumptions

    assume = EvalgateAssumptions(
        args.items, args.assume_output_tokens, args.tokens_per_s, args.gpus_per_replica
    )
    if args.suite is None:
        return {}, [_stated_input(assume)]
    from pytest_evalgate.capacity_store import evalgate_capacity_input
    from pytest_evalgate.manifest import evalgate_load_manifest, evalgate_manifest_path

    manifest = evalgate_load_manifest(evalgate_manifest_path(args.suite))
    names = _candidates(manifest, args.candidate)
    measured = _measure(args.store, manifest, names, assume)
    inputs = [evalgate_capacity_input(manifest, n, measured.get(n), assume) for n in names]
    return measured, inputs


def _stated_input(assume: Any) -> Any:
    from pytest_evalgate.capacity import EvalgateCapacityInput
    from pytest_evalgate.errors import EvalgateConfigError

    for option, value in (
        ("--items", assume.requests),
        ("--assume-output-tokens", assume.tokens_per_request),
        ("--tokens-per-s", assume.tokens_per_s),
    ):
        if value is None:
            reason = "required without a SUITE (nothing to measure from)"
            raise EvalgateConfigError("command line", option, reason)
    gpus = assume.gpus_per_replica or 1
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
    store: str, manifest: EvalgateManifest, names: list[str], assume: Any
) -> dict[str, EvalgateMeasured]:
    if assume.tokens_per_request is not None and assume.tokens_per_s is not None:
        return {}  # everything stated: the store is not read
    from pytest_evalgate.capacity_store import evalgate_measure_candidate
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
    lines.append(
        f"total: {_count(tokens)} output tokens, {gpu_hours:.4g} GPU-hours; "
        f"wall time {_duration(wall)}{side}"
    )
    return lines


def _candidate_lines(
    plan: EvalgateCapacityPlan, measured: EvalgateMeasured | None, target_hours: float | None
) -> list[str]:
    given = plan.given
    lines = [
        f"{given.name}: {given.requests:,} requests x {_count(given.tokens_per_request)} output "
        f"tokens ({given.tokens_source}) = {_count(plan.output_tokens)} output tokens",
        f"  rate: {_count(given.tokens_per_s)} output tokens/s per replica ({given.rate_source}), "
        f"{given.gpus_per_replica} GPU(s) per replica",
    ]
    if measured is not None and measured.records:
        lines.append(f"  per request: {measured.e2e_mean_s:.3f} s end to end (stored mean)")
    lines.append(f"  one replica: {_duration(plan.replica_s)}; {plan.gpu_hours:.4g} GPU-hours")
    if target_hours is not None:
        lines.append(f"  replicas for {target_hours:g} h: {plan.replicas}")
    lines.append(f"  wall time on {plan.replicas} replica(s): {_duration(plan.wall_s)}")
    return lines


def _plan_document(
    plans: list[EvalgateCapacityPlan], measured: dict[str, EvalgateMeasured]
) -> dict[str, Any]:
    rows = [_plan_row(plan, measured.get(plan.given.name)) for plan in plans]
    total = {
        "output_tokens": sum(plan.output_tokens for plan in plans),
        "gpu_hours": sum(plan.gpu_hours for plan in plans),
        "wall_s": max(plan.wall_s for plan in plans),
    }
    return {"candidates": rows, "total": total}


def _plan_row(plan: EvalgateCapacityPlan, seen: EvalgateMeasured | None) -> dict[str, Any]:
    given = plan.given
    return {
        "name": given.name, "requests": given.requests,
        "tokens_per_request": given.tokens_per_request, "tokens_source": given.tokens_source,
        "output_tokens": plan.output_tokens, "tokens_per_s": given.tokens_per_s,
        "rate_source": given.rate_source, "gpus_per_replica": given.gpus_per_replica,
        "replica_s": plan.replica_s, "gpu_hours": plan.gpu_hours, "replicas": plan.replicas,
        "wall_s": plan.wall_s, "measured": None if seen is None else _measured_document(seen),
    }  # fmt: skip


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


# --------------------------------------------------------------------------- probe


def _probe_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base_url", help="the endpoint's OpenAI-compatible base URL (…/v1)")
    parser.add_argument("--model", required=True, help="the model name to request")
    parser.add_argument("--suite", help="send this suite's prompts (perf prompts, else cases)")
    parser.add_argument("--max-concurrency", type=int, default=64, help="highest level (64)")
    parser.add_argument("--levels", help="explicit ascending levels, e.g. 1,2,4,8,12,16,24,32")
    parser.add_argument(
        "--rounds", type=int, default=8, help="requests per level = ROUNDS x concurrency (8)"
    )
    parser.add_argument("--level-seconds", type=float, default=30.0, help="time cap a level (30)")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="per request (60)")
    parser.add_argument("--api", choices=("chat", "completions"), help="default: chat or suite's")
    parser.add_argument("--max-tokens", type=int, help="override the prompts' max_tokens")
    parser.add_argument("--api-key-env", help="NAME of the env var holding the API key")
    parser.add_argument("--no-stream", action="store_true", help="non-streamed requests")


def _probe(args: argparse.Namespace) -> bool:
    from pytest_evalgate.probe import evalgate_find_knee
    from pytest_evalgate.probe_load import evalgate_run_probe

    settings, bodies, source = _probe_setup(args)
    print(
        f"evalgate probe {args.base_url} (model {args.model}): levels "
        f"{', '.join(map(str, settings.levels))}; {len(bodies)} prompt(s) from {source}; "
        f"{settings.rounds} x concurrency requests or {settings.level_s:g} s a level; "
        "one attempt a request",
        flush=True,
    )
    print(_ROW.format("concurrency", "requests", "errors", "req/s", "out tok/s", "p50 s", "p95 s"))
    levels = evalgate_run_probe(settings, bodies, _print_level)
    knee = evalgate_find_knee(levels, settings.rule)
    for line in _knee_lines(knee, levels):
        print(line)
    return True


_ROW = "{:>11}  {:>8}  {:>6}  {:>9}  {:>10}  {:>7}  {:>7}"


def _print_level(level: EvalgateProbeLevel) -> None:
    numbers = (
        f"{level.requests_per_s:.2f}", f"{level.tokens_per_s:.1f}",
        _seconds(level.p50_s), _seconds(level.p95_s),
    )  # fmt: skip
    print(_ROW.format(level.concurrency, level.requests, level.errors, *numbers), flush=True)
    if level.errors:
        kinds = ", ".join(f"{name} {count}" for name, count in level.error_categories)
        print(f"  errors at {level.concurrency}: {kinds}; first: {level.first_error}", flush=True)


def _seconds(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3f}"


def _knee_lines(knee: EvalgateKnee, levels: list[EvalgateProbeLevel]) -> list[str]:
    from pytest_evalgate.errors import EvalgateError

    if knee.recommended is None:
        raise EvalgateError(f"probe: {knee.reason}")
    chosen = next(level for level in levels if level.concurrency == knee.recommended)
    head = f"knee: {knee.knee} ({knee.reason})" if knee.knee is not None else f"{knee.reason}"
    return [
        head,
        f"at {chosen.concurrency} in flight: {chosen.requests_per_s:.2f} req/s, "
        f"{chosen.tokens_per_s:.1f} output tokens/s, p95 {chosen.p95_s:.3f} s "
        f"(evalgate plan --tokens-per-s {chosen.tokens_per_s:.0f})",
        f"recommended budget.max_concurrency: {knee.recommended}",
    ]


def _probe_setup(args: argparse.Namespace) -> tuple[Any, list[dict[str, Any]], str]:
    from pytest_evalgate.client import EvalgateEndpoint
    from pytest_evalgate.probe_load import EvalgateProbeSettings

    _check_probe_args(args)
    api, bodies, source = _probe_bodies(args)
    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    endpoint = EvalgateEndpoint(
        args.base_url.rstrip("/"), args.model, api, key, args.timeout_s, 1, not args.no_stream
    )
    levels = _levels(args)
    return EvalgateProbeSettings(endpoint, levels, args.rounds, args.level_seconds), bodies, source


def _probe_bodies(args: argparse.Namespace) -> tuple[str, list[dict[str, Any]], str]:
    from pytest_evalgate.probe_load import evalgate_default_bodies, evalgate_suite_bodies

    if args.suite is None:
        api = args.api or "chat"
        return api, evalgate_default_bodies(api, args.max_tokens), "the default prompts"
    from pytest_evalgate.manifest import evalgate_load_manifest, evalgate_manifest_path

    manifest = evalgate_load_manifest(evalgate_manifest_path(args.suite))
    what = "perf prompts" if manifest.perf is not None else "cases"
    source = f"suite {manifest.suite} ({what})"
    return args.api or manifest.api, evalgate_suite_bodies(manifest, args.max_tokens), source


def _check_probe_args(args: argparse.Namespace) -> None:
    from pytest_evalgate.errors import EvalgateConfigError

    def refuse(option: str, reason: str) -> None:
        raise EvalgateConfigError("command line", option, reason)

    if not args.base_url.startswith(("http://", "https://")):
        refuse("BASE_URL", f"must be an http:// or https:// URL, got {args.base_url!r}")
    for option, value in (
        ("--max-concurrency", args.max_concurrency), ("--rounds", args.rounds),
        ("--level-seconds", args.level_seconds), ("--timeout-s", args.timeout_s),
    ):  # fmt: skip
        if not value > 0:
            refuse(option, f"must be > 0, got {value}")
    if args.max_tokens is not None and args.max_tokens < 1:
        refuse("--max-tokens", f"must be >= 1, got {args.max_tokens}")
    if args.api_key_env and args.api_key_env not in os.environ:
        refuse("--api-key-env", f"the environment has no variable {args.api_key_env}")


def _levels(args: argparse.Namespace) -> tuple[int, ...]:
    from pytest_evalgate.errors import EvalgateConfigError
    from pytest_evalgate.probe import evalgate_probe_levels

    if args.levels is None:
        return evalgate_probe_levels(args.max_concurrency)
    try:
        levels = tuple(int(part) for part in args.levels.split(","))
    except ValueError:
        levels = ()
    if not levels or levels[0] < 1 or list(levels) != sorted(set(levels)):
        reason = f"want ascending positive integers such as 1,2,4,8, got {args.levels!r}"
        raise EvalgateConfigError("command line", "--levels", reason)
    return levels
