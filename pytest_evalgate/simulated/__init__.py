"""The built-in simulated model: a real OpenAI-compatible HTTP server on 127.0.0.1.

It is a simulator and says so: every response carries ``x-evalgate-simulator: 1`` and
``GET /v1/models`` lists models ``owned_by: "evalgate-simulator"``. It is deterministic: the
same request under the same knobs gets the same answer, on every run.

One job per module, imports flowing down this list:

- ``knobs``: :class:`EvalgateSimConfig`, knob names, types, ranges; ``simulated://`` URLs.
- ``draws``: the seeded hashes every "random" choice comes from.
- ``answers``: the answer key (read, write, prompt digest), wrong answers, the answer-key style.
- ``code_style``: Python answers for ``scorer: code`` suites (``code=1``): right, wrong, looping,
  allocating, forking or escaping code at the knobs' rates; ``code_echo=1`` echoes the prompt.
- ``judge_style``: the simulated judge (``judge=1``): ``judge.simjudge``'s verdicts, truth from
  the answer key.
- ``tool_style``: the tool-using style (requests that carry ``tools``): the next planned call
  from the answer key's tool plans, then the keyed answer; ``tool_accuracy``, ``tool_invalid``
  and ``tool_loop`` knobs; a conversation's turn answered by its last user message.
- ``choice_style``: ``/v1/completions`` with ``echo`` and ``logprobs`` (SPEC 18): the prompt's
  tokens and log-probabilities, the answer key's right choice favoured at ``accuracy``.
- ``styles``: the answer seam: :class:`EvalgateSimAsk` in, answer text out; picks the style.
- ``plan``: tokens, padding, truncation, usage and timings of one answer.
- ``faults``: which completion request fails, and how.
- ``responses``: OpenAI-shaped error, whole and streamed (SSE) bodies.
- ``protocol``: HTTP/1.1 parsing and framing, the asyncio Protocol of one connection.
- ``app``: routing, counters, control endpoints, completions.
- ``server``: serving in a thread (:class:`EvalgateSimServer`) or in a process's main loop
  (:func:`evalgate_sim_serve`, signals, parent watch).
- ``spec``: the JSON a parent hands a spawned simulator, and its ready line.
- ``process``: the subprocess life cycle (:func:`evalgate_spawn_simulator`).
- ``__main__``: the spawned child's entry point.

The names below are the package's light surface: none of their modules imports the server,
its answer styles or numpy. The server (:class:`EvalgateSimServer`, :func:`evalgate_sim_serve`)
is imported from ``pytest_evalgate.simulated.server`` where it is used, so a pytest process that
only parses a ``simulated://`` URL or spawns a simulator does not pay for it (~0.14 s of
start-up before the first request, ``bench/throughput.py``).

This package never prints, never parses a command line and never exits the process (only
``__main__`` does, as a process entry point); ``evalgate serve`` is the console command.
"""

from __future__ import annotations

from pytest_evalgate.simulated.answers import (
    EvalgateSimAnswer,
    evalgate_load_answer_key,
    evalgate_prompt_digest,
    evalgate_sim_answer,
    evalgate_sim_normalise,
    evalgate_sim_wrong_answer,
    evalgate_write_answer_key,
)
from pytest_evalgate.simulated.knobs import (
    EvalgateSimConfig,
    evalgate_parse_simulated_url,
    evalgate_sim_config_from_knobs,
    evalgate_sim_config_url,
    evalgate_sim_knob_names,
)
from pytest_evalgate.simulated.plan import evalgate_sim_tokens
from pytest_evalgate.simulated.process import EvalgateSimProcess, evalgate_spawn_simulator
from pytest_evalgate.simulated.responses import EVALGATE_SIM_OWNER
from pytest_evalgate.simulated.spec import EVALGATE_SIM_READY

__all__ = [
    "EVALGATE_SIM_OWNER",
    "EVALGATE_SIM_READY",
    "EvalgateSimAnswer",
    "EvalgateSimConfig",
    "EvalgateSimProcess",
    "evalgate_load_answer_key",
    "evalgate_parse_simulated_url",
    "evalgate_prompt_digest",
    "evalgate_sim_answer",
    "evalgate_sim_config_from_knobs",
    "evalgate_sim_config_url",
    "evalgate_sim_knob_names",
    "evalgate_sim_normalise",
    "evalgate_sim_tokens",
    "evalgate_sim_wrong_answer",
    "evalgate_spawn_simulator",
    "evalgate_write_answer_key",
]
