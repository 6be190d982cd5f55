"""The simulated model's knobs: :class:`EvalgateSimConfig` and its ``simulated://`` URL form.

Contracts
---------
- A knob is a field of :class:`EvalgateSimConfig` (``evalgate_sim_knob_names()``, field order)
  or ``accuracy.<category>`` (a per-category accuracy). ``lift=d`` adds ``d`` to the accuracy
  of every category except those named in ``lift_except`` (comma-separated), capped at 1: drawn
  on the same draw, so under the same ``seed`` and model id a lifted model is right wherever the
  unlifted one is. ``lift`` alone is an honest improvement; with ``lift_except`` naming the
  suite's private categories it is a memoriser (issue 16), better only on what it has seen.
  Values are text: booleans ``0/1``, ``true/false``, ``yes/no``, ``on/off``; numbers finite
  and ``>= 0``; ``int`` knobs refuse fractions. ``accuracy``, ``accuracy.<category>``,
  ``fail_rate``, ``jitter``, ``output_jitter`` and ``lift`` lie in ``[0, 1]``;
  ``hang_s <= EVALGATE_SIM_HANG_LIMIT_S``; times, token counts, slots and seeds have upper
  bounds (``_KNOB_MAX``), so no knob overflows a timer.
- ``simulated://?knob=value&...`` carries knobs in its query, nothing in host or path.
  ``evalgate_sim_config_url(config)`` renders the non-default knobs; it parses back equal.
- Every refusal is ``EvalgateConfigError(source, knob, reason)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from pytest_evalgate.errors import EvalgateConfigError

EVALGATE_SIM_HANG_LIMIT_S = 300.0
EVALGATE_SIM_ANSWER_FAULTS = (
    "truncate_stream", "content_length_lie", "redirect", "error_in_200", "huge_answer",
    "bogus_usage", "echo_key",
)  # fmt: skip
"""The values of the ``fault`` knob (simulated/misbehave.py)."""
_UNIT_KNOBS = frozenset(
    {"accuracy", "fail_rate", "jitter", "output_jitter", "canary_rate", "lift"}
    | {"position_bias", "verbosity_bias", "unparseable_rate"}  # the simulated judge's
)
_CODE_RATES = ("code_loop", "code_memory", "code_fork", "code_escape")  # code_style.py
_UNIT_KNOBS |= frozenset(_CODE_RATES)
_UNIT_KNOBS |= frozenset({"tool_accuracy", "tool_invalid", "tool_loop"})  # tool_style.py
_CATEGORY_PREFIX = "accuracy."
# Upper bounds of the unbounded knobs: a simulator told to wait 1e300 ms or to write 1e12 tokens
# would overflow a timer or exhaust memory instead of refusing the URL.
_KNOB_MAX: dict[str, float] = {
    "latency_ms": 600_000.0,
    "ttft_ms": 600_000.0,
    "tpot_ms": 60_000.0,
    "output_tokens": 1_000_000,
    "retry_after": 3600.0,
    "service_slots": 100_000,
    "seed": 2**63 - 1,
    "fail_429_first": 10**9,
    "fail_500_first": 10**9,
    "hang_first": 10**9,
}


@dataclass(frozen=True)
class EvalgateSimConfig:
    """Every knob of the simulated model; times in milliseconds, rates in [0, 1]."""

    accuracy: float = 0.9
    accuracy_by_category: tuple[tuple[str, float], ...] = ()
    seed: int = 0
    latency_ms: float = 0.0
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    jitter: float = 0.0
    output_tokens: int | None = None
    output_jitter: float = 0.0
    fail_401: bool = False
    fail_400: bool = False
    quota: bool = False
    fail_429_first: int = 0
    retry_after: float | None = None
    fail_500_first: int = 0
    fail_rate: float = 0.0
    hang_first: int = 0
    hang_s: float = EVALGATE_SIM_HANG_LIMIT_S
    canary: str | None = None  # text appended to an answer with probability canary_rate
    canary_rate: float = 0.0
    service_slots: int = 0  # server-side concurrency limit (0: none); the rest queue
    lift: float = 0.0  # added to the accuracy of every category but those in lift_except
    lift_except: str | None = None  # comma-separated categories the lift does not reach
    code: bool = False  # the code style (code_style.py) and its misbehaviour rates
    code_loop: float = 0.0
    code_memory: float = 0.0
    code_fork: float = 0.0
    code_escape: float = 0.0
    code_echo: bool = False
    # judge=1 makes the endpoint a simulated judge (simulated/judge_style.py): accuracy is then
    # its accuracy against the hidden truth, and these are its biases.
    judge: bool = False
    position_bias: float = 0.0
    verbosity_bias: float = 0.0
    unparseable_rate: float = 0.0
    # issue 19: an answer that goes wrong on purpose (simulated/misbehave.py), on every answer
    fault: str | None = None  # one of EVALGATE_SIM_ANSWER_FAULTS
    # issue 30: the model name answers report (a renaming gateway, or other weights behind the
    # endpoint); None: the requested model, as servers do. Draws stay on the requested one.
    served_model: str | None = None
    # issue 31: the tool-using style (simulated/tool_style.py), for requests that carry tools
    tool_accuracy: float = 1.0
    tool_invalid: float = 0.0
    tool_loop: float = 0.0
    # issue 32: echo/logprobs requests (simulated/choice_style.py): a server that refuses
    # max_tokens 0, and one that returns no log probabilities
    refuse_max_tokens_0: bool = False
    no_logprobs: bool = False

    def accuracy_for(self, category: str | None) -> float:
        """The accuracy that applies to ``category`` (its override, else ``accuracy``), plus
        ``lift`` (capped at 1) unless ``lift_except`` names the category."""
        base = next((v for name, v in self.accuracy_by_category if name == category), None)
        accuracy = self.accuracy if base is None else base
        if self.lift <= 0.0 or category in self.evalgate_unlifted():
            return accuracy
        return min(1.0, accuracy + self.lift)

    def evalgate_unlifted(self) -> frozenset[str]:
        """The categories ``lift_except`` names (the lift does not reach them)."""
        return frozenset(name.strip() for name in (self.lift_except or "").split(",") if name)


def _sim_knob_types() -> dict[str, str]:
    """Knob name -> its annotation text (``"float"``, ``"int | None"``, ``"bool"``...)."""
    return {
        f.name: str(f.type) for f in fields(EvalgateSimConfig) if f.name != "accuracy_by_category"
    }


def evalgate_sim_knob_names() -> tuple[str, ...]:
    """The scalar knob names in field order (one ``--<knob>`` flag each); the per-category
    ``accuracy.<category>`` knobs are not listed."""
    return tuple(_sim_knob_types())


def _sim_parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected 0 or 1, got {text!r}")


def _sim_parse_value(kind: str, text: str) -> bool | int | float | str:
    if kind == "bool":
        return _sim_parse_bool(text)
    if kind.startswith("str"):
        return text
    number: float = int(text) if kind.startswith("int") else float(text)
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"expected a finite number >= 0, got {text!r}")
    return number


def _sim_check_range(source: str, name: str, value: bool | int | float | str) -> None:
    unit = name in _UNIT_KNOBS or name.startswith(_CATEGORY_PREFIX)
    if unit and not 0.0 <= float(value) <= 1.0:
        raise EvalgateConfigError(source, name, f"must be within [0, 1], got {value}")
    if name == "hang_s" and float(value) > EVALGATE_SIM_HANG_LIMIT_S:
        raise EvalgateConfigError(source, name, f"must be <= {EVALGATE_SIM_HANG_LIMIT_S:g}")
    if name == "fault" and value not in EVALGATE_SIM_ANSWER_FAULTS:
        known = ", ".join(EVALGATE_SIM_ANSWER_FAULTS)
        raise EvalgateConfigError(source, name, f"unknown fault {value!r} (known: {known})")
    if name in _KNOB_MAX and isinstance(value, (int, float)) and value > _KNOB_MAX[name]:
        raise EvalgateConfigError(source, name, f"must be <= {_KNOB_MAX[name]:g}, got {value}")


def _sim_knob(source: str, name: str, text: str, types: Mapping[str, str]) -> Any:
    kind = "float" if name.startswith(_CATEGORY_PREFIX) else types.get(name)
    if kind is None:
        known = ", ".join(sorted([*types, "accuracy.<category>"]))
        raise EvalgateConfigError(source, name, f"unknown knob (known: {known})")
    try:
        value = _sim_parse_value(kind, text)
    except ValueError as exc:
        raise EvalgateConfigError(source, name, str(exc)) from None
    _sim_check_range(source, name, value)
    return value


def evalgate_sim_config_from_knobs(
    items: Iterable[tuple[str, str]], source: str = "simulated://"
) -> EvalgateSimConfig:
    """Build a config from ``(knob, text)`` pairs; unknown, repeated or bad knobs raise
    ``EvalgateConfigError(source, knob, reason)``."""
    types = _sim_knob_types()
    values: dict[str, Any] = {}
    by_category: dict[str, float] = {}
    for name, text in items:
        if name in values or name.removeprefix(_CATEGORY_PREFIX) in by_category:
            raise EvalgateConfigError(source, name, "given twice")
        value = _sim_knob(source, name, text, types)
        if name.startswith(_CATEGORY_PREFIX):
            by_category[name.removeprefix(_CATEGORY_PREFIX)] = float(value)
        else:
            values[name] = value
    if sum(float(values.get(name, 0.0)) for name in _CODE_RATES) > 1.0:
        raise EvalgateConfigError(source, "code_loop", f"{' + '.join(_CODE_RATES)} must be <= 1")
    return EvalgateSimConfig(**values, accuracy_by_category=tuple(sorted(by_category.items())))


def evalgate_parse_simulated_url(url: str) -> EvalgateSimConfig:
    """Parse ``simulated://?knob=value&...`` into a config; errors name the URL and the knob."""
    parts = urlsplit(url)
    if parts.scheme != "simulated":
        raise EvalgateConfigError(url, "scheme", "a simulated model URL starts with simulated://")
    if parts.netloc or parts.path.strip("/"):
        raise EvalgateConfigError(url, "path", "knobs go in the query: simulated://?accuracy=0.9")
    try:
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise EvalgateConfigError(url, "query", str(exc)) from None
    return evalgate_sim_config_from_knobs(pairs, source=url)


def evalgate_sim_config_url(config: EvalgateSimConfig) -> str:
    """The ``simulated://?...`` URL of ``config`` (non-default knobs only); parses back equal."""
    default = EvalgateSimConfig()
    pairs: list[tuple[str, str]] = []
    for name in _sim_knob_types():
        value = getattr(config, name)
        if value != getattr(default, name):
            pairs.append((name, _sim_knob_text(value)))
    pairs += [(f"accuracy.{name}", repr(value)) for name, value in config.accuracy_by_category]
    return "simulated://?" + urlencode(pairs)


def _sim_knob_text(value: object) -> str:
    if isinstance(value, bool):
        return str(int(value))
    return value if isinstance(value, str) else repr(value)


def evalgate_sim_base_url(port: int) -> str:
    """``http://127.0.0.1:PORT/v1``: where a simulator on ``port`` serves."""
    return f"http://127.0.0.1:{port}/v1"
