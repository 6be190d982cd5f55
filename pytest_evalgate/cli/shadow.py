"""``evalgate shadow render|serve|gate``: the shadow stage of a suite (SPEC section 21).

- ``render SUITE --stable POOL --candidate POOL --percent P``: the HTTPRoute with a
  ``RequestMirror`` filter, YAML on stdout.
- ``serve --stable URL --candidate URL --percent P --store DIR --suite NAME``: the shadow proxy
  on ``--host:--port`` until SIGTERM or SIGINT; prints one ready line with its address.
- ``gate SUITE --store DIR``: the ``shadow:`` rules of ``gate.yaml`` on the kept pairs; writes
  ``shadow-decision.json`` (``--out``) and exits 0 pass, 1 fail, 2 undecided.

Bad names, shares, URLs or a policy without ``shadow:`` rules exit 4.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_evalgate.cli.command import EvalgateCommand

if TYPE_CHECKING:
    from pytest_evalgate.manifest.load import EvalgateManifest
    from pytest_evalgate.onlinejudge.preference import EvalgatePreferences
    from pytest_evalgate.shadow.pairs import EvalgatePairWriter

EVALGATE_SHADOW_READY = "evalgate shadow proxy listening on http://"


def evalgate_shadow_commands() -> tuple[EvalgateCommand, ...]:
    """The ``shadow`` subcommand (with ``render``, ``serve`` and ``gate``)."""
    return (EvalgateCommand("shadow", "shadow stage: mirror route, proxy, gate", _arguments, _run),)


def _arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="shadow_command", required=True)
    render = sub.add_parser("render", help="print the HTTPRoute with a RequestMirror filter")
    render.add_argument("suite", help="suite folder or its evalgate.yaml")
    render.add_argument("--stable", required=True, help="InferencePool of the stable version")
    render.add_argument("--candidate", required=True, help="InferencePool of the candidate")
    render.add_argument("--percent", type=float, required=True, help="mirrored share, 0..100")
    render.add_argument("--route", help="HTTPRoute name (default: <suite>-shadow)")
    render.add_argument("--gateway", default="inference-gateway", help="Gateway to attach to")
    render.add_argument("--app", help="part-of label (default: the suite's name)")
    render.add_argument("--namespace", help="namespace of the object (default: none set)")
    _serve_arguments(sub.add_parser("serve", help="run the shadow proxy"))
    gate = sub.add_parser("gate", help="judge the kept pairs with the shadow: rules")
    gate.add_argument("suite", help="suite folder or its evalgate.yaml")
    gate.add_argument("--store", required=True, help="store folder (or s3://) holding the pairs")
    gate.add_argument("--policy", help="gate policy (default: the suite's gate.yaml)")
    gate.add_argument("--out", default="shadow-decision.json", help="decision file to write")


def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stable", required=True, help="stable's origin, http://host:port")
    parser.add_argument("--candidate", required=True, help="the candidate's origin")
    parser.add_argument("--percent", type=float, required=True, help="shadowed share, 0..100")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample")
    parser.add_argument("--store", help="store folder (or s3://) for the pairs (default: none)")
    parser.add_argument("--suite", help="suite name the pairs are kept under (with --store)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=0, help="port (0: any free one)")
    parser.add_argument("--candidate-timeout", type=float, default=60.0, help="seconds")
    parser.add_argument("--max-in-flight", type=int, default=64, help="candidate calls out")
    parser.add_argument(
        "--keep-question", action="store_true",
        help="keep each pair's question, redacted (for evalgate online-judge)",
    )  # fmt: skip


def _run(args: argparse.Namespace) -> bool | None:
    runs = {"render": _render, "serve": _serve, "gate": _gate}
    return runs[args.shadow_command](args)


def _render(args: argparse.Namespace) -> bool:
    from pytest_evalgate.k8s.render import evalgate_suite_slug, evalgate_to_yaml
    from pytest_evalgate.manifest.load import evalgate_load_manifest, evalgate_manifest_path
    from pytest_evalgate.shadow import EvalgateShadowRouteOptions, evalgate_shadow_route

    manifest = evalgate_load_manifest(evalgate_manifest_path(args.suite))
    slug = evalgate_suite_slug(manifest.suite)
    options = EvalgateShadowRouteOptions(
        stable_pool=args.stable, candidate_pool=args.candidate,
        route=args.route or f"{slug}-shadow", gateway=args.gateway, percent=args.percent,
        app=args.app or slug, namespace=args.namespace,
    )  # fmt: skip
    sys.stdout.write(evalgate_to_yaml([evalgate_shadow_route(options)]))
    return True


def _serve(args: argparse.Namespace) -> bool:
    import asyncio
    import os
    import signal

    from pytest_evalgate.errors import EvalgateConfigError
    from pytest_evalgate.runner.child_process import evalgate_loop_factory
    from pytest_evalgate.shadow.proxy import EvalgateShadowConfig, EvalgateShadowProxy
    from pytest_evalgate.shadow.server import evalgate_shadow_listen

    if not 0.0 <= args.percent <= 100.0:
        raise EvalgateConfigError("shadow serve", "percent", f"in 0..100 (got {args.percent!r})")
    config = EvalgateShadowConfig(
        stable_url=args.stable, candidate_url=args.candidate, fraction=args.percent / 100,
        seed=args.seed, candidate_timeout_s=args.candidate_timeout,
        max_in_flight=args.max_in_flight, keep_question=args.keep_question,
    )  # fmt: skip
    proxy = EvalgateShadowProxy(config, _writer(args, os.getpid()))

    def ready(port: int) -> None:
        print(f"{EVALGATE_SHADOW_READY}{args.host}:{port}", flush=True)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await evalgate_shadow_listen(proxy, args.host, args.port, ready, stop)

    with asyncio.Runner(loop_factory=evalgate_loop_factory()) as runner:
        runner.run(main())
    print(json.dumps(proxy.stats(), sort_keys=True), flush=True)
    return True


def _writer(args: argparse.Namespace, pid: int) -> EvalgatePairWriter | None:
    from pytest_evalgate.errors import EvalgateConfigError
    from pytest_evalgate.manifest.validate import evalgate_check_name
    from pytest_evalgate.store.location import evalgate_open_store

    if args.store is None:
        return None
    if not args.suite:
        raise EvalgateConfigError("shadow serve", "suite", "--store needs --suite NAME")
    evalgate_check_name("shadow serve", "suite", args.suite)
    from pytest_evalgate.shadow.pairs import EvalgatePairWriter

    return EvalgatePairWriter(evalgate_open_store(args.store), args.suite, f"proxy-{pid}")


def _gate(args: argparse.Namespace) -> bool | None:
    from pytest_evalgate import __version__
    from pytest_evalgate.errors import EvalgatePolicyError
    from pytest_evalgate.manifest.load import evalgate_load_manifest, evalgate_manifest_path
    from pytest_evalgate.policy.load import evalgate_load_suite_policy
    from pytest_evalgate.shadow import evalgate_read_pairs
    from pytest_evalgate.shadow.verdict import evalgate_shadow_decision
    from pytest_evalgate.store.location import evalgate_open_store

    manifest = evalgate_load_manifest(evalgate_manifest_path(args.suite))
    policy = evalgate_load_suite_policy(manifest, args.policy)
    if not policy.shadow:
        raise EvalgatePolicyError(policy.source, "shadow", "no shadow: rules to judge pairs by")
    pairs = evalgate_read_pairs(evalgate_open_store(args.store), manifest.suite)
    judge = None
    if any(rule.metric == "judge_preference_delta" for rule in policy.shadow):
        pairs, judge = _preferences(manifest, pairs)
    decision = evalgate_shadow_decision(manifest.suite, policy, pairs, __version__, judge)
    Path(args.out).write_text(json.dumps(decision, indent=2, sort_keys=True) + "\n", "utf-8")
    for rule in decision["rules"]:
        print(
            f"{rule['outcome']:9} {rule['metric']}: {rule['estimate']} "
            f"(upper {rule['upper_bound']}, max {rule['max']}, {rule['pairs']} pairs)"
        )
    print(f"shadow verdict: {decision['verdict']} ({len(pairs)} pairs) -> {args.out}")
    return {"pass": True, "fail": False}.get(decision["verdict"])


def _preferences(
    manifest: EvalgateManifest, pairs: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The pairs with the pinned judge's preference set, and what the decision says of it."""
    import asyncio

    from pytest_evalgate.onlinejudge.judging import (
        EvalgateOnlineScorer,
        evalgate_online_judge_endpoint,
        evalgate_online_judged,
    )
    from pytest_evalgate.onlinejudge.preference import evalgate_shadow_preferences
    from pytest_evalgate.runner.child_process import evalgate_loop_factory

    judged = evalgate_online_judged(manifest, pairwise=True)
    with evalgate_online_judge_endpoint(manifest) as endpoint:

        async def judge_all() -> EvalgatePreferences:
            scorer = EvalgateOnlineScorer(judged, endpoint)
            return await evalgate_shadow_preferences(scorer, pairs)

        with asyncio.Runner(loop_factory=evalgate_loop_factory()) as runner:
            found = runner.run(judge_all())
    not_judged = dict(sorted(found.not_judged.items()))
    print(f"preference: {found.judged} of {len(pairs)} pairs judged by {judged.judge.model}")
    for reason, count in not_judged.items():
        print(f"  not judged: {count} ({reason})")
    facts = {"key": judged.key, "model": judged.judge.model, "mode": judged.mode,
             "judged": found.judged, "not_judged": not_judged}  # fmt: skip
    return found.pairs, facts
