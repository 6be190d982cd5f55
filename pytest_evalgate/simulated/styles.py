"""The answer seam: what the app asks, and which answer logic ("style") replies.

The HTTP side (``app.py``) turns a completion request into an :class:`EvalgateSimAsk` and calls
an :data:`EvalgateSimAnswerer` for the answer text; it knows nothing about answer keys.
A new style (a simulated judge, a code-writing model) is a new module with a function
``(config, key) -> EvalgateSimAnswerer``, chosen in :func:`evalgate_sim_answerer` by its knob;
neither the HTTP layer nor the other styles change.

Contracts
---------
- An answerer is deterministic: the same ask under the same config gives the same text.
- It returns the whole answer text; token splitting, padding, truncation and timing are the
  plan's (``plan.py``), the same for every style.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_evalgate.simulated.answers import (
    EvalgateSimKey,
    evalgate_prompt_digest,
    evalgate_sim_keyed_answer,
)
from pytest_evalgate.simulated.canary import evalgate_sim_canary_answerer
from pytest_evalgate.simulated.code_style import evalgate_sim_code_answerer
from pytest_evalgate.simulated.draws import evalgate_sim_salt
from pytest_evalgate.simulated.knobs import EvalgateSimConfig
from pytest_evalgate.simulated.tool_style import evalgate_sim_turn_digest


@dataclass(frozen=True)
class EvalgateSimAsk:
    """One completion request as answer logic sees it (builtins taken from the JSON body).

    ``prompt`` is the chat ``messages`` list or the completion ``prompt`` exactly as sent;
    ``temperature`` is 1.0 when the request gave none (OpenAI's default); ``seed`` is the
    request's ``seed`` (None when absent); ``digest`` is ``evalgate_prompt_digest(prompt)``;
    ``salt`` is the request's draws key (``draws.evalgate_sim_salt``).
    """

    model: str
    prompt: Any
    temperature: float
    seed: Any
    digest: str
    salt: tuple[Any, ...]


EvalgateSimAnswerer = Callable[[EvalgateSimAsk], str]
"""Answer logic: the answer text for one ask."""


def evalgate_sim_ask(
    config: EvalgateSimConfig, model: str, prompt: object, temperature: float, seed: object
) -> EvalgateSimAsk:
    """The ask of one request, with its digest and draws key computed once."""
    digest = evalgate_prompt_digest(prompt)
    salt = evalgate_sim_salt(config, model, digest, temperature, seed)
    return EvalgateSimAsk(model, prompt, temperature, seed, digest, salt)


def evalgate_sim_key_answerer(
    config: EvalgateSimConfig, key: EvalgateSimKey
) -> EvalgateSimAnswerer:
    """The answer-key style (``answers.py``): the target with probability ``accuracy``."""

    def answer(ask: EvalgateSimAsk) -> str:
        digest = ask.digest
        if digest not in key and isinstance(ask.prompt, list):
            digest = evalgate_sim_turn_digest(ask.prompt) or digest  # a conversation's turn
        return evalgate_sim_keyed_answer(config, key, digest, ask.salt).text

    return answer


def evalgate_sim_answerer(config: EvalgateSimConfig, key: EvalgateSimKey) -> EvalgateSimAnswerer:
    """The answer logic ``config`` selects: the simulated judge (``judge=1``), the code style
    (``code_style.py``) under ``code=1``, else the answer-key style, with the canary knobs'
    leak (``canary.py``) around it when they ask for one."""
    if config.judge:
        # imported here: the judge style brings numpy and the judge's pydantic models, 0.4 s
        # of CPU at the start of every simulator process that never judges (most of them)
        from pytest_evalgate.simulated.judge_style import evalgate_sim_judge_answerer

        return evalgate_sim_judge_answerer(config, key)
    if config.code:
        return evalgate_sim_code_answerer(config, key)
    return evalgate_sim_canary_answerer(config, evalgate_sim_key_answerer(config, key))
