"""``evalgate canary template|rollout|check|plan``: the online canary of a suite (SPEC section 15).

- ``template SUITE``: the AnalysisTemplate of ``gate.yaml``'s ``online:`` rules, YAML on stdout.
- ``rollout SUITE --stable POOL --canary POOL``: the two InferencePools, the HTTPRoute and the
  Rollout, YAML on stdout, ending with the one-line rollback as a YAML comment. With
  ``--cells cells.yaml`` instead: those objects per cell (``canary/cells.py``), then the wave
  plan and each cell's rollback as comments.
- ``check SUITE --prometheus URL``: the template's queries now; passes (0), fails (1) or has
  too little traffic to judge (2, undecided); ``--cells F --cell C`` judges one cell.
- ``plan --rate R --weight W --metric M --effect E``: the bake time, its formula and variance.

A suite without online rules, bad names, durations or selectors exit 4; an unreachable
Prometheus, or one that refuses a query, exits 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from pytest_evalgate.cli.command import EvalgateCommand

if TYPE_CHECKING:
    from pytest_evalgate.canary import EvalgateRolloutOptions
    from pytest_evalgate.manifest.load import EvalgateManifest
    from pytest_evalgate.policy.values import EvalgatePolicy

EVALGATE_DEFAULT_PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"


def evalgate_canary_commands() -> tuple[EvalgateCommand, ...]:
    """The ``canary`` subcommand (with ``template``, ``rollout``, ``check`` and ``plan``)."""
    return (
        EvalgateCommand(
            "canary", "online canary: analysis, rollout, check, plan", _arguments, _run
        ),
    )


def _arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="canary_command", required=True)
    _template_arguments(_sub(sub, "template", "print the AnalysisTemplate of the online rules"))
    _rollout_arguments(_sub(sub, "rollout", "print the InferencePools, HTTPRoute and Rollout"))
    _check_arguments(_sub(sub, "check", "evaluate the online rules now against Prometheus"))
    _plan_arguments(_sub(sub, "plan", "bake time to detect an effect at a traffic"))


def _sub(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, text: str
) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=text, description=text)


def _suite_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("suite", help="suite folder or its evalgate.yaml")
    parser.add_argument("--policy", help="gate policy (default: the suite's gate.yaml)")


def _query_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--window", help="one window for every rule (e.g. 30m; default: each rule's)"
    )
    parser.add_argument(
        "--selector", default="", help='extra label matchers, e.g. namespace="serve-a"'
    )


def _template_arguments(parser: argparse.ArgumentParser) -> None:
    _suite_arguments(parser)
    _query_arguments(parser)
    parser.add_argument(
        "--prometheus", default=EVALGATE_DEFAULT_PROMETHEUS, help="address Argo queries"
    )
    parser.add_argument("--name", help="AnalysisTemplate name (default: <suite>-online)")
    parser.add_argument("--namespace", help="namespace of the object (default: none set)")


def _rollout_arguments(parser: argparse.ArgumentParser) -> None:
    _suite_arguments(parser)
    parser.add_argument("--stable", help="InferencePool of the stable version (without --cells)")
    parser.add_argument("--canary", help="InferencePool of the canary version (without --cells)")
    parser.add_argument("--cells", help="cells.yaml: one Rollout and HTTPRoute per cell, in waves")
    parser.add_argument(
        "--prometheus", default=EVALGATE_DEFAULT_PROMETHEUS, help="address Argo queries (--cells)"
    )
    parser.add_argument("--name", help="Rollout name (default: the suite's name)")
    parser.add_argument(
        "--deployment", help="serving Deployment the Rollout takes over (default: --name)"
    )
    parser.add_argument("--app", help="pods' app label the pools select (default: --deployment)")
    parser.add_argument("--route", help="HTTPRoute name (default: --name)")
    parser.add_argument(
        "--gateway", default="inference-gateway", help="Gateway the route attaches to"
    )
    parser.add_argument("--template", help="AnalysisTemplate name (default: <suite>-online)")
    parser.add_argument("--namespace", help="namespace of the objects (default: none set)")
    parser.add_argument(
        "--bake",
        action="append",
        help="bake after each weight: one value, or four (1, 5, 25, 50 %%)",
    )
    parser.add_argument("--port", type=int, default=8000, help="serving port of the pods")
    parser.add_argument("--epp-port", type=int, default=9002, help="endpoint picker port")
    parser.add_argument(
        "--opt-out-header", default="x-evalgate-canary=opt-out", help="NAME=VALUE kept on stable"
    )
    parser.add_argument(
        "--sticky-header",
        help="keep a conversation on one version: sessionPersistence on this header "
        "(Gateway API experimental channel), e.g. x-conversation-id",
    )


def _check_arguments(parser: argparse.ArgumentParser) -> None:
    _suite_arguments(parser)
    _query_arguments(parser)
    parser.add_argument("--prometheus", required=True, help="Prometheus base URL")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per query")
    parser.add_argument("--cells", help="cells.yaml (with --cell)")
    parser.add_argument("--cell", help="judge this cell only (its selector, from --cells)")


def _plan_arguments(parser: argparse.ArgumentParser) -> None:
    from pytest_evalgate.policy.online import EVALGATE_ONLINE_METRICS

    parser.add_argument("--rate", type=float, required=True, help="total requests per second")
    parser.add_argument("--weight", type=_fraction, required=True, help="canary share: 0.01 or 1%%")
    parser.add_argument("--metric", required=True, choices=list(EVALGATE_ONLINE_METRICS))
    parser.add_argument(
        "--effect", type=float, required=True, help="ratio (1.05) or change (0.002, 0.01) to detect"
    )
    parser.add_argument("--sample", type=_fraction, default=1.0, help="sampled share: 0.02 or 2%%")
    parser.add_argument("--alpha", type=float, default=0.05, help="one-sided false-alarm rate")
    parser.add_argument("--power", type=float, default=0.8, help="chance to detect the effect")
    parser.add_argument("--sd", type=float, help="spread per request (default: per metric)")
    parser.add_argument("--baseline-rate", type=float, default=0.001, help="stable error rate")


def _fraction(text: str) -> float:
    """``0.01`` or ``1%`` -> 0.01 (ranges are the plan's to check)."""
    try:
        return float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a fraction like 0.01 or 1% (got {text!r})") from None


def _run(args: argparse.Namespace) -> bool | None:
    runs = {"template": _template, "rollout": _rollout, "check": _check, "plan": _plan}
    return runs[args.canary_command](args)


def _load(args: argparse.Namespace) -> tuple[EvalgateManifest, EvalgatePolicy]:
    from pytest_evalgate.canary import evalgate_online_rules_of
    from pytest_evalgate.manifest.load import evalgate_load_manifest, evalgate_manifest_path
    from pytest_evalgate.policy.load import evalgate_load_suite_policy

    manifest = evalgate_load_manifest(evalgate_manifest_path(args.suite))
    policy = evalgate_load_suite_policy(manifest, args.policy)
    evalgate_online_rules_of(policy)  # refuse a policy without online rules before any output
    return manifest, policy


def _slug(manifest: EvalgateManifest) -> str:
    from pytest_evalgate.k8s.render import evalgate_suite_slug

    return evalgate_suite_slug(manifest.suite)


def _template(args: argparse.Namespace) -> bool:
    from pytest_evalgate.canary import evalgate_analysis_template, evalgate_selector
    from pytest_evalgate.k8s.render import evalgate_to_yaml

    manifest, policy = _load(args)
    name = args.name or f"{_slug(manifest)}-online"
    rendered = evalgate_analysis_template(
        policy, name, args.prometheus, selector=evalgate_selector(args.selector),
        window=_window(args.window), namespace=args.namespace,
    )  # fmt: skip
    sys.stdout.write(evalgate_to_yaml([rendered]))
    return True


def _window(text: str | None) -> str | None:
    from pytest_evalgate.policy.online import evalgate_duration

    return None if text is None else evalgate_duration(text, "--window", "window")


def _rollout(args: argparse.Namespace) -> bool:
    from pytest_evalgate.canary import evalgate_rollback_command, evalgate_rollout_objects
    from pytest_evalgate.k8s.render import evalgate_to_yaml

    manifest, policy = _load(args)
    if args.cells:
        return _cell_rollout(args, manifest, policy)
    if not (args.stable and args.canary):
        from pytest_evalgate.errors import EvalgateConfigError

        raise EvalgateConfigError("canary rollout", "stable", "--stable and --canary, or --cells")
    options = _rollout_options(args, manifest, policy)
    sys.stdout.write(evalgate_to_yaml(evalgate_rollout_objects(options)))
    print(f"# rollback (all weight back to stable): {evalgate_rollback_command(options)}")
    return True


def _cell_rollout(
    args: argparse.Namespace, manifest: EvalgateManifest, policy: EvalgatePolicy
) -> bool:
    from pytest_evalgate.canary import evalgate_rollback_command
    from pytest_evalgate.canary.cells import (
        evalgate_cell_objects,
        evalgate_cell_options,
        evalgate_load_cells,
        evalgate_wave_plan,
    )
    from pytest_evalgate.k8s.render import evalgate_to_yaml

    cells = evalgate_load_cells(args.cells)
    args.stable, args.canary = cells.cells[0].stable_pool, cells.cells[0].canary_pool
    base = _rollout_options(args, manifest, policy)
    objects = evalgate_cell_objects(base, cells, policy, args.prometheus)
    sys.stdout.write(evalgate_to_yaml(objects))
    for line in evalgate_wave_plan(base, cells):
        print(f"# {line}")
    for cell in cells.cells:
        rollback = evalgate_rollback_command(evalgate_cell_options(base, cell))
        print(f"# rollback of cell {cell.name}: {rollback}")
    return True


def _rollout_options(
    args: argparse.Namespace, manifest: EvalgateManifest, policy: EvalgatePolicy
) -> EvalgateRolloutOptions:
    from pytest_evalgate.canary import EvalgateRolloutOptions

    slug = _slug(manifest)
    name = args.name or slug
    deployment = args.deployment or name
    header, _, value = args.opt_out_header.partition("=")
    return EvalgateRolloutOptions(
        stable_pool=args.stable, canary_pool=args.canary, rollout=name, deployment=deployment,
        route=args.route or name, gateway=args.gateway,
        analysis_template=args.template or f"{slug}-online", app=args.app or deployment,
        namespace=args.namespace, bakes=_bakes(args.bake, policy), target_port=args.port,
        epp_port=args.epp_port, opt_out_header=header, opt_out_value=value,
        sticky_header=args.sticky_header,
    )  # fmt: skip


def _bakes(given: list[str] | None, policy: EvalgatePolicy) -> tuple[str, ...]:
    """Four bakes: as given (one value repeats), else one full window plus one interval of the
    slowest rule, so every weight gets a measurement over a window of its own traffic."""
    from pytest_evalgate.canary.rollout import EVALGATE_CANARY_WEIGHTS
    from pytest_evalgate.policy.online import evalgate_duration_seconds

    count = len(EVALGATE_CANARY_WEIGHTS)
    if given:
        values = [part for item in given for part in item.split(",")]
        return tuple(values * count if len(values) == 1 else values)
    longest = max(
        evalgate_duration_seconds(rule.window) + evalgate_duration_seconds(rule.interval)
        for rule in policy.online
    )
    bake = f"{longest // 60}m" if longest % 60 == 0 else f"{longest}s"
    return (bake,) * count


def _check(args: argparse.Namespace) -> bool | None:
    from pytest_evalgate.canary import (
        EvalgatePrometheus,
        evalgate_canary_check,
        evalgate_check_lines,
        evalgate_selector,
    )

    _, policy = _load(args)
    selector, window = evalgate_selector(args.selector), _window(args.window)
    if args.cell or args.cells:
        selector = _cell_selector(args, selector)
    with EvalgatePrometheus(args.prometheus, timeout_s=args.timeout) as prometheus:
        check = evalgate_canary_check(policy, prometheus, window=window, selector=selector)
    for line in evalgate_check_lines(check):
        print(line)
    return {"pass": True, "fail": False}.get(check.result)


def _cell_selector(args: argparse.Namespace, selector: str) -> str:
    from pytest_evalgate.canary.cells import evalgate_cell_selector, evalgate_load_cells
    from pytest_evalgate.errors import EvalgateConfigError

    if not (args.cell and args.cells):
        raise EvalgateConfigError("canary check", "cell", "--cell NAME needs --cells FILE")
    cell = evalgate_load_cells(args.cells).cell(args.cell)
    print(f"cell {cell.name}: {cell.selector}")
    return evalgate_cell_selector(cell, selector)


def _plan(args: argparse.Namespace) -> bool:
    from pytest_evalgate.canary import EvalgatePlanAssumptions, evalgate_plan
    from pytest_evalgate.canary.plan import evalgate_plan_lines

    assumed = EvalgatePlanAssumptions(
        alpha=args.alpha, power=args.power, sd=args.sd, baseline_rate=args.baseline_rate
    )
    plan = evalgate_plan(args.metric, args.rate, args.weight, args.effect, args.sample, assumed)
    for line in evalgate_plan_lines(plan):
        print(line)
    return True
