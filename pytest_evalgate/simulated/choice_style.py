"""The echo style (SPEC 18): ``/v1/completions`` with ``echo: true`` and ``logprobs`` answered
with the prompt's tokens and a log-probability for each, as vLLM answers lm-evaluation-harness.

Contracts
---------
- Tokens: ``evalgate_sim_tokenize`` cuts text into runs of whitespace followed by a run of
  non-whitespace (``" Paris"``), a trailing run of whitespace being its own token; each
  token's ``text_offset`` is its first character. ``prompt`` may be a string or a list of
  strings (one choice per string, with its ``index``, as a batched lm-eval request sends).
- Log-probabilities are deterministic draws (``draws``): the first token's is null; every
  other token of the context ``-(0.5 + 4u)``. A prompt the answer key names as choice ``i``
  of a case (``choice``: its ``group``, ``index``, ``right``, ``count``, ``context_chars``):
  the case's *favoured* choice is ``right`` when ``u(seed, model, group) < accuracy`` (the
  category's), else another choice drawn the same way; the favoured choice's tokens share a
  total of ``-(0.4 + 0.04u)``, every other choice's ``-(0.45 + 3u)``: the favoured one has the
  highest sum, so ``acc`` is right with probability ``accuracy``; per character a longer
  choice close behind it may win, so ``acc_norm`` sometimes picks another choice. Prompts
  outside the key get context log-probabilities throughout.
- ``max_tokens`` n >= 1 appends n generated tokens ``" the"`` (at most 16) after the echo;
  ``max_tokens: 0`` returns the echo alone. Knobs: ``refuse_max_tokens_0`` answers
  ``max_tokens: 0`` with a 400 (as some servers do), ``no_logprobs`` answers ``logprobs: null``.
- Token ids (``EvalgateSimVocab``): each distinct token text gets the next id the first time
  the server sees it, so ids are stable for the server's life. ``POST /tokenize`` (``{"prompt"}``
  -> ``{"tokens", "count", "max_model_len"}``), ``POST /detokenize`` (``{"tokens"}`` ->
  ``{"prompt"}``) and ``GET /tokenizer_info`` answer as vLLM's do, so lm-evaluation-harness's
  ``tokenizer_backend=remote`` counts context tokens with the simulator's own tokenizer; a
  completion's ``prompt`` may be token ids (a list of ints, or a list of such lists).
- ``top_logprobs`` holds one entry per token (null first): the token itself, except for a
  non-favoured choice's tokens, whose top entry is ``" the"`` at a higher log-probability.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from typing import Any

from pytest_evalgate.simulated.answers import evalgate_prompt_digest
from pytest_evalgate.simulated.draws import evalgate_sim_uniform
from pytest_evalgate.simulated.knobs import EvalgateSimConfig

EvalgateSimChoicePlans = Mapping[str, Mapping[str, Any]]
"""Prompt digest -> the answer key's ``choice`` member of that prompt."""

_TOKEN = re.compile(r"\s*\S+|\s+")
_GENERATED = " the"
_MAX_GENERATED = 16


def evalgate_sim_tokenize(text: str) -> list[tuple[str, int]]:
    """``(token, text_offset)`` of every token of ``text`` (module contract)."""
    return [(m.group(), m.start()) for m in _TOKEN.finditer(text)]


EVALGATE_SIM_TOKENIZER_PATHS = frozenset({"/tokenize", "/detokenize", "/tokenizer_info"})
_MAX_MODEL_LEN = 1 << 20


class EvalgateSimVocab:
    """Token text <-> id, ids given in order of first sight (module contract)."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._texts: list[str] = []

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``'s tokens."""
        return [self._id(token) for token, _ in evalgate_sim_tokenize(text)]

    def decode(self, ids: list[object]) -> str:
        """The text of token ids (an unknown id is a ``ValueError``: a 400)."""
        if not all(isinstance(i, int) and 0 <= i < len(self._texts) for i in ids):
            raise ValueError("unknown token id")
        return "".join(self._texts[int(str(i))] for i in ids)

    def _id(self, token: str) -> int:
        found = self._ids.get(token)
        if found is None:
            found = self._ids[token] = len(self._texts)
            self._texts.append(token)
        return found

    def texts(self, prompt: object) -> list[str]:
        """A completion's ``prompt`` as texts: a string, strings, token ids, lists of ids."""
        items = prompt if isinstance(prompt, list) else [prompt]
        if items and all(isinstance(i, int) for i in items):
            return [self.decode(list(items))]
        return [item if isinstance(item, str) else self.decode(_ids(item)) for item in items]


def _ids(item: object) -> list[object]:
    if not isinstance(item, list):
        raise ValueError("'prompt' items must be strings or lists of token ids")
    return list(item)


def evalgate_sim_echo(
    config: EvalgateSimConfig,
    body: Mapping[str, Any],
    index: int,
    plans: EvalgateSimChoicePlans,
    vocab: EvalgateSimVocab,
) -> tuple[int, bytes, float]:
    """``(status, body, service seconds)`` of an echo request: a 400 for a refused
    ``max_tokens: 0`` (``refuse_max_tokens_0``), else the echo after ``latency_ms``."""
    refusal = evalgate_sim_echo_refusal(config, body)
    if refusal is not None:
        error = {"message": refusal + " (evalgate simulator)", "type": "invalid_request_error"}
        return 400, json.dumps({"error": {**error, "param": None, "code": None}}).encode(), 0.0
    model = str(body.get("model", ""))
    served, rid = config.served_model or model, f"cmpl-evalgate-sim-{index}"
    reply = evalgate_sim_echo_body(config, body, rid, served, plans, vocab)
    return 200, reply, config.latency_ms / 1000.0


def evalgate_sim_tokenizer_reply(
    path: str, body: Mapping[str, Any] | None, vocab: EvalgateSimVocab
) -> tuple[int, bytes]:
    """The status and body of a tokenizer endpoint's answer (module contract)."""
    if path == "/tokenizer_info":
        info = {"eos_token": None, "bos_token": None, "pad_token": None, "chat_template": None}
        return 200, json.dumps({**info, "model_max_length": _MAX_MODEL_LEN}).encode()
    try:
        if path == "/tokenize" and body is not None and isinstance(body.get("prompt"), str):
            tokens = vocab.encode(body["prompt"])
            reply = {"tokens": tokens, "count": len(tokens), "max_model_len": _MAX_MODEL_LEN}
            return 200, json.dumps(reply).encode()
        if path == "/detokenize" and body is not None and isinstance(body.get("tokens"), list):
            return 200, json.dumps({"prompt": vocab.decode(body["tokens"])}).encode()
    except ValueError as exc:
        return 400, json.dumps({"error": {"message": str(exc), "type": "BadRequestError"}}).encode()
    return 400, json.dumps(
        {"error": {"message": "bad request", "type": "BadRequestError"}}
    ).encode()


def evalgate_sim_wants_echo(body: Mapping[str, Any]) -> bool:
    """Whether a ``/v1/completions`` body asks for its prompt's log-probabilities."""
    return body.get("echo") is True and body.get("logprobs") not in (None, False)


def evalgate_sim_echo_refusal(config: EvalgateSimConfig, body: Mapping[str, Any]) -> str | None:
    """Why the simulator refuses this echo request (a 400), or None."""
    if config.refuse_max_tokens_0 and body.get("max_tokens") == 0:
        return "max_tokens must be at least 1, got 0"
    return None


def evalgate_sim_echo_body(
    config: EvalgateSimConfig,
    body: Mapping[str, Any],
    rid: str,
    served: str,
    plans: EvalgateSimChoicePlans,
    vocab: EvalgateSimVocab,
) -> bytes:
    """The whole echo answer (module contract); a bad token id is a ``ValueError``."""
    model = str(body.get("model", ""))
    prompts = vocab.texts(body["prompt"])
    limit = body.get("max_tokens")
    generated = min(int(limit), _MAX_GENERATED) if isinstance(limit, int) and limit > 0 else 0
    choices, prompt_tokens = [], 0
    for index, prompt in enumerate(prompts):
        text = str(prompt)
        plan = plans.get(evalgate_prompt_digest(text))
        logprobs = _logprobs(config, model, text, plan, generated)
        prompt_tokens += len(logprobs["tokens"]) - generated
        choice: dict[str, Any] = {"index": index, "text": text + _GENERATED * generated}
        choice["logprobs"] = None if config.no_logprobs else logprobs
        choice["finish_reason"] = "length"
        choices.append(choice)
    completion = generated * len(prompts)
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion}
    usage["total_tokens"] = prompt_tokens + completion
    out = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": served}
    out |= {"system_fingerprint": "evalgate-simulator", "choices": choices, "usage": usage}
    return json.dumps(out).encode()


def _logprobs(
    config: EvalgateSimConfig,
    model: str,
    text: str,
    plan: Mapping[str, Any] | None,
    generated: int,
) -> dict[str, Any]:
    pieces = evalgate_sim_tokenize(text)
    boundary = len(text) if plan is None else int(plan["context_chars"])
    choice = [p for p in pieces if p[1] >= boundary]
    favoured = plan is not None and _favoured(config, model, plan) == int(plan["index"])
    total = _choice_total(config, model, plan, favoured) if plan is not None else 0.0
    tokens: list[str] = []
    values: list[float | None] = []
    offsets: list[int] = []
    tops: list[dict[str, float] | None] = []
    for number, (token, offset) in enumerate(pieces):
        value: float | None = None
        top: dict[str, float] | None = None
        if offset >= boundary:
            share = total / len(choice)
            value, top = share, ({token: share} if favoured else {_GENERATED: share / 4})
        elif number > 0:
            share = -(0.5 + 4 * evalgate_sim_uniform(model, token, offset))
            value, top = share, {token: share}
        tokens.append(token)
        values.append(value)
        offsets.append(offset)
        tops.append(top)
    for n in range(generated):
        tokens.append(_GENERATED)
        values.append(-0.25)
        offsets.append(len(text) + n * len(_GENERATED))
        tops.append({_GENERATED: -0.25})
    return {
        "tokens": tokens,
        "token_logprobs": values,
        "text_offset": offsets,
        "top_logprobs": tops,
    }


def _favoured(config: EvalgateSimConfig, model: str, plan: Mapping[str, Any]) -> int:
    group, right, count = str(plan["group"]), int(plan["right"]), int(plan["count"])
    u = evalgate_sim_uniform(config.seed, model, "choice", group)
    if u < config.accuracy_for(plan.get("category")):
        return right
    step = 1 + int(evalgate_sim_uniform(config.seed, model, "choice-wrong", group) * (count - 1))
    return (right + step) % count


def _choice_total(
    config: EvalgateSimConfig, model: str, plan: Mapping[str, Any], favoured: bool
) -> float:
    u = evalgate_sim_uniform(config.seed, model, "choice-ll", plan["group"], plan["index"])
    return -(0.4 + 0.04 * u) if favoured else -(0.45 + 3.0 * u)
