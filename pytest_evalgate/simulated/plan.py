"""The plan of one answer: its tokens, finish reason, usage and timings, whatever the style.

Contracts
---------
- Tokens are the whitespace-separated words of the answer, each carrying its leading
  whitespace, so the tokens join back to the exact answer; ``output_tokens`` pads with ``" "``
  tokens (``output_jitter`` spreads the target length by up to that fraction, never below the
  answer's own length); ``max_completion_tokens`` (else ``max_tokens``) truncates with
  ``finish_reason: "length"``.
- Timings: with ``ttft_ms`` or ``tpot_ms`` set, the first token comes after ``ttft_ms``
  (``latency_ms`` when unset) and each next one ``tpot_ms`` later; a non-streamed answer waits
  for the last. Otherwise the whole answer takes ``latency_ms``. ``jitter`` scales all of them by
  one seeded factor in ``[1 - jitter, 1 + jitter]``.
- Prompt tokens are the whitespace-separated words of the prompt (message ``content``, or the
  ``text`` of content parts).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from pytest_evalgate.simulated.draws import evalgate_sim_uniform
from pytest_evalgate.simulated.knobs import EvalgateSimConfig

_TOKEN = re.compile(r"\s*\S+")


def evalgate_sim_tokens(text: str) -> list[str]:
    """Split ``text`` into word tokens, each with its leading whitespace; they join to ``text``."""
    tokens = _TOKEN.findall(text)
    rest = text[sum(map(len, tokens)) :]
    if rest and tokens:
        tokens[-1] += rest
    elif rest:
        tokens = [rest]
    return tokens


@dataclass(frozen=True)
class EvalgateSimPlan:
    """What one answer sends and when: times in seconds from the request's arrival."""

    tokens: tuple[str, ...]
    finish: str
    prompt_tokens: int
    ttft_s: float
    tpot_s: float
    total_s: float
    tool_calls: tuple[Mapping[str, str], ...] = ()  # the tool style's calls ({id, name, arguments})

    def usage(self) -> dict[str, int]:
        """The OpenAI ``usage`` object of this answer."""
        completion = len(self.tokens)
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        }


def _sim_prompt_words(value: object) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(_sim_prompt_words(item) for item in value)
    if isinstance(value, dict):
        return _sim_prompt_words(value.get("content", value.get("text")))
    return 0


def _sim_token_target(config: EvalgateSimConfig, salt: tuple[object, ...], count: int) -> int:
    if config.output_tokens is None:
        return count
    spread = config.output_jitter * (2.0 * evalgate_sim_uniform("length", *salt) - 1.0)
    return max(count, round(config.output_tokens * (1.0 + spread)))


def _sim_cut(tokens: list[str], body: Mapping[str, object]) -> tuple[list[str], str]:
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if isinstance(limit, int) and 0 <= limit < len(tokens):
        return tokens[:limit], "length"
    return tokens, "stop"


def evalgate_sim_plan(
    config: EvalgateSimConfig, text: str, salt: tuple[object, ...], body: Mapping[str, object]
) -> EvalgateSimPlan:
    """The plan of answer ``text`` to request ``body`` under draws key ``salt``."""
    tokens = evalgate_sim_tokens(text)
    tokens += [" "] * (_sim_token_target(config, salt, len(tokens)) - len(tokens))
    tokens, finish = _sim_cut(tokens, body)
    scale = 1.0  # the jitter hash costs ~10 us: skip it when it cannot matter
    if config.jitter:
        scale += config.jitter * (2.0 * evalgate_sim_uniform("jitter", *salt) - 1.0)
    timed = config.ttft_ms is not None or config.tpot_ms is not None
    ttft = (config.ttft_ms if config.ttft_ms is not None else config.latency_ms) * scale / 1e3
    tpot = (config.tpot_ms or 0.0) * scale / 1e3
    total = ttft + tpot * max(len(tokens) - 1, 0) if timed else config.latency_ms * scale / 1e3
    prompt = body.get("messages", body.get("prompt"))
    return EvalgateSimPlan(tuple(tokens), finish, _sim_prompt_words(prompt), ttft, tpot, total)
