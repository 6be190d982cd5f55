"""The answer-key style: right or wrong answers to the prompts of an answer key.

Contracts
---------
- The answer key is JSON Lines ``{"prompt_sha256", "target", "category"}`` where
  ``prompt_sha256 = evalgate_prompt_digest(messages_or_prompt)`` (canonical sha256 of the chat
  ``messages`` list exactly as sent, or of the completion ``prompt``).
- Correctness is deterministic: ``u = evalgate_sim_uniform(*salt)`` over the request's draws key
  (``draws.evalgate_sim_salt``); correct iff ``u < accuracy`` (``accuracy.<category>``
  overrides). A correct answer is exactly the target; a wrong one never equals or contains the
  target, also after lowercasing, punctuation, article and whitespace normalisation. Unknown
  prompts are wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.formats.canonical import evalgate_sha256_hex
from pytest_evalgate.simulated.draws import evalgate_sim_salt, evalgate_sim_uniform
from pytest_evalgate.simulated.knobs import EvalgateSimConfig

EvalgateSimKey = Mapping[str, tuple[str, str]]
"""An answer key in memory: prompt digest -> (target, category)."""

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = re.compile(r"[^\w\s]")
_NUMBER = re.compile(r"\s*-?\d+(\.\d+)?\s*")
_WRONG_WORDS = (
    "refund", "invoice", "password", "shipping", "warranty", "account", "billing", "upgrade",
    "cancel", "reset", "order", "payment", "ticket", "blue", "seven", "paris", "tuesday", "twelve",
    "london", "maybe", "unknown", "router", "printer", "monthly", "weekly", "green", "north",
    "forty", "copper", "summer", "morning", "eleven",
)  # fmt: skip
_WRONG_FALLBACKS = ("unknown", "42", "no", "xyz", "7", "qj")

# --------------------------------------------------------------------------- the answer key


def evalgate_prompt_digest(messages_or_prompt: object) -> str:
    """The answer-key digest: canonical sha256 of the chat ``messages`` list or of the prompt."""
    return evalgate_sha256_hex(messages_or_prompt)


def evalgate_write_answer_key(
    path: str | os.PathLike[str], rows: Iterable[tuple[object, ...]]
) -> int:
    """Write ``(messages_or_prompt, target, category)`` rows as an answer key, or
    ``(messages_or_prompt, target, category, calls)`` for a tool case (``calls``: its expected
    ``{"name", "arguments"}``, the tool style's plan), or ``(prompt, target, category, choice)``
    for one choice of a multiple-choice case (``choice``: a mapping, the echo style's plan:
    ``simulated.choice_style``); returns the count."""
    count = 0
    with open(path, "w", encoding="utf-8") as handle:
        for prompt, target, category, *calls in rows:
            row: dict[str, object] = {"prompt_sha256": evalgate_prompt_digest(prompt)}
            row |= {"target": target, "category": category}
            if calls and isinstance(calls[0], dict):  # a choice of a multiple-choice case
                row["choice"] = calls[0]
            elif calls:
                row["calls"] = calls[0]
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count


def _sim_key_row(source: str, number: int, line: str) -> tuple[str, str, str]:
    try:
        row = json.loads(line)
        digest, target, category = row["prompt_sha256"], row["target"], row.get("category", "")
    except (ValueError, KeyError, TypeError) as exc:
        raise EvalgateConfigError(source, f"line {number}", f"not an answer row: {exc}") from None
    if not (isinstance(digest, str) and isinstance(target, str) and isinstance(category, str)):
        raise EvalgateConfigError(source, f"line {number}", "fields must be strings")
    return digest, target, category


def evalgate_load_answer_key(path: str | os.PathLike[str]) -> dict[str, tuple[str, str]]:
    """Read an answer key into ``digest -> (target, category)``; a digest given twice with a
    different answer is an ``EvalgateConfigError`` (an unreadable file raises ``OSError``)."""
    source = os.fspath(path)
    key: dict[str, tuple[str, str]] = {}
    with open(source, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            digest, target, category = _sim_key_row(source, number, line)
            if key.setdefault(digest, (target, category)) != (target, category):
                raise EvalgateConfigError(source, f"line {number}", f"conflicting row for {digest}")
    return key


def evalgate_load_tool_plans(path: str | os.PathLike[str]) -> dict[str, tuple[Any, ...]]:
    """The tool plans of an answer key: digest -> the row's ``calls`` (rows with them only;
    the rows themselves were checked by ``evalgate_load_answer_key``)."""
    plans: dict[str, tuple[Any, ...]] = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line) if line.strip() else {}
            if isinstance(row.get("calls"), list):
                plans[str(row["prompt_sha256"])] = tuple(row["calls"])
    return plans


def evalgate_load_choice_plans(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """The choice plans of an answer key: digest -> the row's ``choice`` with its
    ``category`` (rows with one only; the rows were checked by ``evalgate_load_answer_key``)."""
    plans: dict[str, dict[str, Any]] = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line) if line.strip() else {}
            if isinstance(row.get("choice"), dict):
                plan = {**row["choice"], "category": row.get("category", "")}
                plans[str(row["prompt_sha256"])] = plan
    return plans


# --------------------------------------------------------------------------- wrong answers


def evalgate_sim_normalise(text: str) -> str:
    """Lowercase, drop punctuation and English articles, collapse whitespace."""
    return " ".join(_ARTICLES.sub(" ", _PUNCT.sub(" ", text.lower())).split())


def _sim_clashes(wrong: str, target: str) -> bool:
    for norm in (evalgate_sim_normalise, lambda s: " ".join(s.lower().split())):
        good, bad = norm(target), norm(wrong)
        if not bad or bad == good or (good and good in bad):
            return True
    return False


def _sim_wrong_candidates(target: str | None, noise: bytes) -> list[str]:
    words = len(_WRONG_WORDS)
    out: list[str] = []
    if target is not None and _NUMBER.fullmatch(target):
        value, places = float(target), len(target.strip().partition(".")[2])
        out += [f"{value + (b % 9 + 1) * (1 if b & 16 else -1):.{places}f}" for b in noise[:8]]
    pairs = zip(noise[::2], noise[1::2], strict=True)
    out += [f"{_WRONG_WORDS[a % words]} {_WRONG_WORDS[b % words]}" for a, b in pairs]
    return out + [_WRONG_WORDS[b % words] for b in noise] + list(_WRONG_FALLBACKS)


def evalgate_sim_wrong_answer(target: str | None, salt: str) -> str:
    """A deterministic plausible wrong answer: never equal to ``target`` nor containing it,
    under plain and strong normalisation (``target=None``: any plausible answer)."""
    noise = hashlib.sha256(salt.encode()).digest()
    for candidate in _sim_wrong_candidates(target, noise):
        if target is None or not _sim_clashes(candidate, target):
            return candidate
    unused = [c for c in "0123456789xyzqj" if c not in (target or "").lower()]
    return "".join(unused[:3]) or "no answer"


# --------------------------------------------------------------------------- answers


@dataclass(frozen=True)
class EvalgateSimAnswer:
    """One simulated answer: its text, whether it is the key's target, and the key lookup."""

    text: str
    correct: bool
    known: bool
    category: str | None
    digest: str


def evalgate_sim_keyed_answer(
    config: EvalgateSimConfig, key: EvalgateSimKey, digest: str, salt: tuple[object, ...]
) -> EvalgateSimAnswer:
    """The answer to the prompt with ``digest`` under draws key ``salt`` (module contract)."""
    row = key.get(digest)
    if row is None:
        return EvalgateSimAnswer(
            evalgate_sim_wrong_answer(None, repr(salt)), False, False, None, digest
        )
    target, category = row
    correct = evalgate_sim_uniform(*salt) < config.accuracy_for(category)
    text = target if correct else evalgate_sim_wrong_answer(target, repr(salt))
    return EvalgateSimAnswer(text, correct, True, category, digest)


def evalgate_sim_answer(
    config: EvalgateSimConfig,
    key: EvalgateSimKey,
    model: str,
    messages_or_prompt: object,
    temperature: float = 0.0,
    request_seed: object = None,
) -> EvalgateSimAnswer:
    """The deterministic answer the server gives to ``messages_or_prompt`` sent to ``model``."""
    digest = evalgate_prompt_digest(messages_or_prompt)
    salt = evalgate_sim_salt(config, model, digest, temperature, request_seed)
    return evalgate_sim_keyed_answer(config, key, digest, salt)
