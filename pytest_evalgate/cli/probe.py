"""``evalgate probe BASE_URL --model M``: sweep concurrency 1, 2, 4, ... up to
``--max-concurrency``, print one row per level as it ends, the knee, and end with
``recommended budget.max_concurrency: N``; exit 1 when no level answered cleanly, 4 for a bad
option (before any request). When the server exports vLLM's Prometheus figures (``/metrics`` at
the base URL's origin, or ``--metrics-url``), each level also prints the peak KV-cache use and
queue length the server reported during it; when it does not, one line says so. See
``docs/capacity.md``.
"""

from __future__ import annotations

import argparse
import math
import os
from typing import TYPE_CHECKING, Any

from pytest_evalgate.cli.command import EvalgateCommand

if TYPE_CHECKING:
    from pytest_evalgate.capacity.probe import EvalgateKnee, EvalgateProbeLevel
    from pytest_evalgate.capacity.server_metrics import Figures, Poller


def evalgate_probe_command() -> EvalgateCommand:
    """The ``probe`` subcommand."""
    text = "sweep an endpoint's concurrency and recommend budget.max_concurrency"
    return EvalgateCommand("probe", text, _probe_arguments, _probe)


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
    parser.add_argument(
        "--api", choices=("chat", "completions"), help="default: the suite's, else chat"
    )
    parser.add_argument("--max-tokens", type=int, help="override the prompts' max_tokens")
    parser.add_argument("--api-key-env", help="NAME of the env var holding the API key")
    parser.add_argument("--no-stream", action="store_true", help="non-streamed requests")
    parser.add_argument(
        "--metrics-url",
        help="the server's Prometheus page (default: /metrics at BASE_URL's origin, as vLLM)",
    )


def _probe(args: argparse.Namespace) -> bool:
    from pytest_evalgate.capacity.probe import evalgate_find_knee
    from pytest_evalgate.capacity.probe_load import evalgate_run_probe

    settings, bodies, source = _probe_setup(args)
    print(
        f"evalgate probe {args.base_url} (model {args.model}): levels "
        f"{', '.join(map(str, settings.levels))} until a plateau, then up to "
        f"{settings.refinements} midpoints; {len(bodies)} prompt(s) from {source}; "
        f"{settings.rounds} x concurrency requests or {settings.level_s:g} s a level; "
        "one attempt a request",
        flush=True,
    )
    poller = _server_metrics(args)
    print(_ROW.format("concurrency", "requests", "errors", "req/s", "out tok/s", "p50 s", "p95 s"))
    try:
        levels = evalgate_run_probe(settings, bodies, lambda level: _on_level(level, poller))
    finally:
        if poller is not None:
            poller.stop()
    knee = evalgate_find_knee(levels, settings.rule)
    for line in _knee_lines(knee, levels):
        print(line)
    return True


_ROW = "{:>11}  {:>8}  {:>6}  {:>9}  {:>10}  {:>7}  {:>7}"


def _server_metrics(args: argparse.Namespace) -> Poller | None:
    """Say whether the server's /metrics is readable; a poller for the levels when it is."""
    from pytest_evalgate.capacity.server_metrics import (
        KV_CACHE,
        WAITING,
        Poller,
        metrics_url,
        read_figures,
    )

    url = args.metrics_url or metrics_url(args.base_url)
    first = read_figures(url)
    if not (first.reachable and first.values):
        print(
            f"server metrics: {url} {'' if first.reachable else 'not reachable: '}"
            f"{first.reason}; KV-cache and queue figures not reported",
            flush=True,
        )
        return None
    print(f"server metrics: {url} ({KV_CACHE}, {WAITING}): {_figures(first)}", flush=True)
    return Poller(url).start()


def _on_level(level: EvalgateProbeLevel, poller: Poller | None) -> None:
    _print_level(level)
    if poller is not None:
        print(f"  server at {level.concurrency}: peak {_figures(poller.take_peak())}", flush=True)


def _figures(figures: Figures) -> str:
    if not figures.values:
        return f"no figures ({figures.reason})"
    kv, waiting, running = figures.kv_cache, figures.waiting, figures.running
    return ", ".join(
        part
        for part in (
            None if kv is None else f"KV cache {kv * 100:.1f} %",
            None if waiting is None else f"{waiting:g} waiting",
            None if running is None else f"{running:g} running",
        )
        if part is not None
    )


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
    from pytest_evalgate.capacity.probe_load import EvalgateProbeSettings
    from pytest_evalgate.client import EvalgateEndpoint

    _check_probe_args(args)
    api, bodies, source = _probe_bodies(args)
    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    endpoint = EvalgateEndpoint(
        args.base_url.rstrip("/"), args.model, api, key, args.timeout_s, 1, not args.no_stream
    )
    levels = _levels(args)
    return EvalgateProbeSettings(endpoint, levels, args.rounds, args.level_seconds), bodies, source


def _probe_bodies(args: argparse.Namespace) -> tuple[str, list[dict[str, Any]], str]:
    from pytest_evalgate.capacity.probe_load import evalgate_default_bodies, evalgate_suite_bodies

    if args.suite is None:
        api = args.api or "chat"
        return api, evalgate_default_bodies(api, args.max_tokens), "the default prompts"
    from pytest_evalgate.manifest.load import evalgate_load_manifest, evalgate_manifest_path

    manifest = evalgate_load_manifest(evalgate_manifest_path(args.suite))
    if args.api is not None and args.api != manifest.api:
        from pytest_evalgate.errors import EvalgateConfigError

        reason = f"the suite's prompts are for api: {manifest.api}, not {args.api}"
        raise EvalgateConfigError("command line", "--api", reason)
    what = "perf prompts" if manifest.perf is not None else "cases"
    source = f"suite {manifest.suite} ({what})"
    return manifest.api, evalgate_suite_bodies(manifest, args.max_tokens), source


def _check_probe_args(args: argparse.Namespace) -> None:
    from pytest_evalgate.errors import EvalgateConfigError

    def refuse(option: str, reason: str) -> None:
        raise EvalgateConfigError("command line", option, reason)

    if not args.base_url.startswith(("http://", "https://")):
        refuse("BASE_URL", f"must be an http:// or https:// URL, got {args.base_url!r}")
    if args.metrics_url is not None and not args.metrics_url.startswith(("http://", "https://")):
        refuse("--metrics-url", f"must be an http:// or https:// URL, got {args.metrics_url!r}")
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
    from pytest_evalgate.capacity.probe import evalgate_probe_levels
    from pytest_evalgate.errors import EvalgateConfigError

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
