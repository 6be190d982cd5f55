"""What a parent hands a spawned simulator, and the line the simulator answers with.

Contracts
---------
- The spec is one JSON object of builtins, the child's only argument::

      {"url": "simulated://?...", "port": 0, "answers": "key.jsonl" | null,
       "request_log": "log.jsonl" | null, "parent_pid": 1234 | null}

  ``url`` carries every knob (``evalgate_sim_config_url``); ``port`` is 0..65535 (0: any free);
  ``parent_pid`` > 0 makes the child stop once that process is no longer its parent. Every key
  is required and no other is allowed.
- Once listening the child writes one line to standard output and flushes it:
  ``EVALGATE_SIM_READY + " http://127.0.0.1:PORT/v1"``.
- A spec that is not exactly this is an ``EvalgateConfigError(source, key, reason)``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.simulated.knobs import (
    EvalgateSimConfig,
    evalgate_parse_simulated_url,
    evalgate_sim_config_url,
)

EVALGATE_SIM_READY = "evalgate simulator (not a real model) listening on"
EVALGATE_SIM_SPEC_SOURCE = "simulator spec"
_READY_LINE = re.compile(re.escape(EVALGATE_SIM_READY) + r" http://127\.0\.0\.1:(\d+)/v1")
_KEYS = ("url", "port", "answers", "request_log", "parent_pid")
_PID_MAX = 2**31 - 1


@dataclass(frozen=True)
class EvalgateSimSpec:
    """Everything a spawned simulator needs to serve."""

    config: EvalgateSimConfig
    answers: str | None
    request_log: str | None
    port: int
    parent_pid: int | None


def evalgate_sim_spec_json(spec: EvalgateSimSpec) -> str:
    """The spec as the child's JSON argument (module contract)."""
    document = {
        "url": evalgate_sim_config_url(spec.config), "port": spec.port, "answers": spec.answers,
        "request_log": spec.request_log, "parent_pid": spec.parent_pid,
    }  # fmt: skip
    return json.dumps(document, sort_keys=True)


def _sim_spec_refuse(key: str, reason: str) -> EvalgateConfigError:
    return EvalgateConfigError(EVALGATE_SIM_SPEC_SOURCE, key, reason)


def _sim_spec_object(text: str) -> dict[str, Any]:
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise _sim_spec_refuse("json", f"not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise _sim_spec_refuse("json", f"must be a JSON object, got {type(document).__name__}")
    missing, unknown = sorted(set(_KEYS) - set(document)), sorted(set(document) - set(_KEYS))
    if missing:
        raise _sim_spec_refuse(missing[0], "missing")
    if unknown:
        raise _sim_spec_refuse(unknown[0], f"unknown key (known: {', '.join(_KEYS)})")
    return document


def _sim_spec_int(value: object, key: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _sim_spec_refuse(key, f"must be an integer in [{low}, {high}], got {value!r}")
    return value


def _sim_spec_path(value: object, key: str) -> str | None:
    if value is not None and not (isinstance(value, str) and value):
        raise _sim_spec_refuse(key, f"must be a path or null, got {value!r}")
    return value


def evalgate_sim_spec_decode(text: str) -> EvalgateSimSpec:
    """Decode and check the child's JSON argument; knob errors name the URL and the knob."""
    document = _sim_spec_object(text)
    if not isinstance(document["url"], str):
        raise _sim_spec_refuse("url", f"must be a simulated:// URL, got {document['url']!r}")
    parent = document["parent_pid"]
    return EvalgateSimSpec(
        config=evalgate_parse_simulated_url(document["url"]),
        answers=_sim_spec_path(document["answers"], "answers"),
        request_log=_sim_spec_path(document["request_log"], "request_log"),
        port=_sim_spec_int(document["port"], "port", 0, 65535),
        parent_pid=None if parent is None else _sim_spec_int(parent, "parent_pid", 1, _PID_MAX),
    )


def evalgate_sim_ready_line(base_url: str) -> str:
    """The ready line (without its newline) a simulator process writes once listening."""
    return f"{EVALGATE_SIM_READY} {base_url}"


def evalgate_sim_ready_port(text: str) -> int | None:
    """The port of the first ready line in ``text``, or None."""
    match = _READY_LINE.search(text)
    return None if match is None else int(match.group(1))
