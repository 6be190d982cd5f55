"""``evalgate serve``: the simulated model (not a real model) on 127.0.0.1, until SIGTERM/SIGINT.

Knobs come from ``--url simulated://?knob=value&...``, then ``--<knob> X`` flags, then
``--knob K=V`` items (``accuracy.<category>=0.5`` included); later ones override earlier ones.
Once listening it prints ``EVALGATE_SIM_READY BASE_URL`` on stdout, flushed, so a parent can read
the port. A bad knob, answer key or URL exits 4 before anything listens; a clean stop exits 0.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from pytest_evalgate.cli.command import EvalgateCommand

if TYPE_CHECKING:
    from pytest_evalgate.simulated import EvalgateSimConfig

_SOURCE = "evalgate serve"


def evalgate_serve_commands() -> tuple[EvalgateCommand, ...]:
    """The ``serve`` subcommand; an unreadable ``--answers`` or ``--request-log`` file, or a
    port that cannot be bound, is a usage error (exit 4)."""
    text = "run the simulated model (not a real model)"
    return (EvalgateCommand("serve", text, _arguments, _run, usage_errors=(OSError,)),)


def _arguments(parser: argparse.ArgumentParser) -> None:
    from pytest_evalgate.simulated import evalgate_sim_knob_names

    parser.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (0: any free)")
    parser.add_argument("--answers", default=None, help="answer key (JSON Lines)")
    parser.add_argument("--request-log", default=None, help="append one JSON line per request")
    parser.add_argument(
        "--parent-pid", type=int, default=None, help="stop when this process is gone (spawned use)"
    )
    parser.add_argument("--url", default=None, help="knobs as simulated://?knob=value&...")
    for name in evalgate_sim_knob_names():
        flag = "--" + name.replace("_", "-")
        parser.add_argument(
            flag, dest=f"knob_{name}", default=None, metavar="X", help=f"the {name} knob"
        )
    parser.add_argument(
        "--knob", action="append", default=[], metavar="K=V", help="any knob, e.g. accuracy.x=0.5"
    )


def _run(args: argparse.Namespace) -> bool:
    from pytest_evalgate.simulated.server import evalgate_sim_serve

    config = evalgate_serve_config(args)
    evalgate_sim_serve(config, args.answers, args.request_log, args.port, args.parent_pid, _ready)
    return True


def _ready(base_url: str) -> None:
    from pytest_evalgate.simulated import EVALGATE_SIM_READY

    print(f"{EVALGATE_SIM_READY} {base_url}", flush=True)


def evalgate_serve_config(args: argparse.Namespace) -> EvalgateSimConfig:
    """The simulator config of ``evalgate serve``'s parsed options; a bad URL, knob or
    ``--knob`` item raises ``EvalgateConfigError`` naming it."""
    from pytest_evalgate.simulated import evalgate_sim_config_from_knobs

    merged = _url_knobs(args.url)
    merged.update(_flag_knobs(args))  # options override the URL's knobs
    merged.update(_item_knobs(args.knob))
    return evalgate_sim_config_from_knobs(merged.items(), _SOURCE)


def _url_knobs(url: str | None) -> dict[str, str]:
    from urllib.parse import parse_qsl, urlsplit

    from pytest_evalgate.simulated import evalgate_parse_simulated_url

    if not url:
        return {}
    evalgate_parse_simulated_url(url)  # report URL errors against the URL first
    return dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))


def _flag_knobs(args: argparse.Namespace) -> dict[str, str]:
    from pytest_evalgate.simulated import evalgate_sim_knob_names

    flags = {name: getattr(args, f"knob_{name}") for name in evalgate_sim_knob_names()}
    return {name: value for name, value in flags.items() if value is not None}


def _item_knobs(items: list[str]) -> dict[str, str]:
    from pytest_evalgate.errors import EvalgateConfigError

    knobs: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise EvalgateConfigError(_SOURCE, item, "expected --knob NAME=VALUE")
        knobs[name] = value
    return knobs
