"""``evalgate online-judge serve``: production answers judged by the suite's pinned judge, the
scores exported for Prometheus (SPEC section 21, ``docs/canary.md``).

    evalgate online-judge serve SUITE (--feed FILE | --store STORE [--shadow-suite NAME])
        --rate R [--seed 0] [--host 127.0.0.1 --port 0] [--versions canary,stable]
        [--once] [--max-answers N] [--exit-when-done] [--poll 0.5]

Prints one ready line with the metrics address once the judge endpoint and ``/metrics`` are up;
on SIGTERM or SIGINT (or when done, with ``--exit-when-done``) it stops reading, waits for the
judge calls in flight and prints the counts as one JSON line. A suite that is not judged, a
pairwise judge, a rate outside [0, 1] or a bad version list exit 4.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from pytest_evalgate.cli.command import EvalgateCommand

if TYPE_CHECKING:
    from pytest_evalgate.onlinejudge.serve import EvalgateOnlineSource

EVALGATE_ONLINE_READY = "evalgate online judge: metrics on http://"


def evalgate_online_judge_commands() -> tuple[EvalgateCommand, ...]:
    """The ``online-judge`` subcommand (with ``serve``)."""
    text = "judge production answers online, export scores for Prometheus"
    return (EvalgateCommand("online-judge", text, _arguments, _run, usage_errors=(OSError,)),)


def _arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="online_command", required=True)
    serve = sub.add_parser("serve", help="sample, judge and serve /metrics")
    serve.add_argument("suite", help="suite folder or its evalgate.yaml (its pinned judge)")
    source = serve.add_mutually_exclusive_group(required=True)
    source.add_argument("--feed", help="JSON Lines feed: {version, messages, answer} a line")
    source.add_argument("--store", help="store folder (or s3://) holding shadow pairs")
    serve.add_argument("--shadow-suite", help="suite name of the pairs (default: the suite's)")
    serve.add_argument("--rate", type=float, required=True, help="sampled share, 0..1")
    serve.add_argument("--seed", type=int, default=0, help="seed of the sample")
    serve.add_argument("--host", default="127.0.0.1", help="address /metrics listens on")
    serve.add_argument("--port", type=int, default=0, help="port (0: any free one)")
    serve.add_argument("--versions", default="canary,stable", help="labels exported from 0")
    serve.add_argument("--once", action="store_true", help="read the source once, not follow")
    serve.add_argument("--max-answers", type=int, help="stop reading after N sampled answers")
    serve.add_argument("--exit-when-done", action="store_true", help="exit when reading stops")
    serve.add_argument("--poll", type=float, default=0.5, help="seconds between reads")


def _run(args: argparse.Namespace) -> bool:
    import asyncio
    import signal

    from pytest_evalgate.errors import EvalgateConfigError
    from pytest_evalgate.manifest.load import evalgate_load_manifest, evalgate_manifest_path
    from pytest_evalgate.onlinejudge.judging import (
        EvalgateOnlineScorer,
        evalgate_online_judge_endpoint,
        evalgate_online_judged,
    )
    from pytest_evalgate.onlinejudge.sample import EvalgateOnlineCounts
    from pytest_evalgate.onlinejudge.serve import (
        EvalgateOnlineConfig,
        EvalgateOnlineJudge,
        evalgate_metrics_server,
    )
    from pytest_evalgate.runner.child_process import evalgate_loop_factory

    source_name = "online-judge serve"
    if not 0.0 <= args.rate <= 1.0:
        raise EvalgateConfigError(source_name, "rate", f"a share in 0..1 (got {args.rate!r})")
    if args.max_answers is not None and args.max_answers < 1:
        raise EvalgateConfigError(source_name, "max_answers", "a count of at least 1")
    if not 0.01 <= args.poll <= 60.0:
        raise EvalgateConfigError(source_name, "poll", "seconds in [0.01, 60]")
    versions = _versions(source_name, args.versions)
    manifest = evalgate_load_manifest(evalgate_manifest_path(args.suite))
    judged = evalgate_online_judged(manifest)
    source = _source(args, manifest.suite)
    config = EvalgateOnlineConfig(
        rate=args.rate, seed=args.seed, follow=not args.once, max_answers=args.max_answers,
        poll_s=args.poll,
    )  # fmt: skip
    info = {"suite": manifest.suite, "judge_key": judged.key, "judge_model": judged.judge.model}
    counts = EvalgateOnlineCounts(versions, info)
    with evalgate_online_judge_endpoint(manifest) as endpoint:
        server = evalgate_metrics_server(counts, args.host, args.port)
        try:
            print(f"{EVALGATE_ONLINE_READY}{args.host}:{server.server_port}/metrics", flush=True)

            async def main() -> None:
                stop = asyncio.Event()
                loop = asyncio.get_running_loop()
                for signum in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(signum, stop.set)
                judge = EvalgateOnlineJudge(
                    config, source, EvalgateOnlineScorer(judged, endpoint), counts
                )
                await judge.run(stop)
                if not args.exit_when_done:
                    await stop.wait()

            with asyncio.Runner(loop_factory=evalgate_loop_factory()) as runner:
                runner.run(main())
        finally:
            server.shutdown()
            server.server_close()
    final = {"suite": manifest.suite, "judge_key": judged.key, **counts.snapshot()}
    print(json.dumps(final, sort_keys=True), flush=True)
    return True


def _versions(source_name: str, text: str) -> tuple[str, ...]:
    import re

    from pytest_evalgate.errors import EvalgateConfigError

    versions = tuple(part.strip() for part in text.split(",") if part.strip())
    for version in versions:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", version):
            reason = f"not a label value of 1..64 of [A-Za-z0-9_.-] ({version!r})"
            raise EvalgateConfigError(source_name, "versions", reason)
    return versions


def _source(args: argparse.Namespace, suite: str) -> EvalgateOnlineSource:
    from pytest_evalgate.errors import EvalgateConfigError
    from pytest_evalgate.manifest.validate import evalgate_check_name
    from pytest_evalgate.onlinejudge.feed import EvalgatePairReader
    from pytest_evalgate.onlinejudge.serve import evalgate_feed_source, evalgate_pairs_source
    from pytest_evalgate.store.location import evalgate_open_store

    if args.feed is not None:
        if args.shadow_suite:
            reason = "--shadow-suite names the pairs of a --store, not of a --feed"
            raise EvalgateConfigError("online-judge serve", "shadow_suite", reason)
        return evalgate_feed_source(args.feed)
    name = args.shadow_suite or suite
    evalgate_check_name("online-judge serve", "shadow_suite", name)
    return evalgate_pairs_source(EvalgatePairReader(evalgate_open_store(args.store), name))
