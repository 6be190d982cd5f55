"""Where the online judge's answers come from: a JSON Lines feed, or the shadow store's pairs.

A **feed line** is one JSON object::

    {"version": "canary", "messages": [{"role": "user", "content": "..."}], "answer": "..."}

``version`` is the label the score is exported under (``canary`` or ``stable`` for
``canary check``; any 1..64 of ``[A-Za-z0-9_.-]``), ``messages`` the request's chat messages
(string contents; a ``prompt`` string instead is a completion request) and ``answer`` the text
the version answered. Other keys are ignored. The judge sees the request as offline judging
does (``judge.prompt.evalgate_judge_input_text``: the system prompt stays out).

A **shadow pair** (``shadow.pairs``) gives two answers, ``stable`` and ``candidate`` (exported
as ``canary``, the version the candidate becomes), when it carries the request's ``question``
(``evalgate shadow serve --keep-question``); a side that failed is no answer.

A line that is not one of these is skipped with a short reason, never raised: a live feed with
one bad line must not stop the judging of the rest.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_evalgate.errors import EvalgateIntegrityError
from pytest_evalgate.judge.prompt import evalgate_judge_input_text
from pytest_evalgate.shadow.pairs import evalgate_checked_pair, evalgate_pairs_prefix
from pytest_evalgate.store.backend import EvalgateStoreBackend

EVALGATE_PAIR_VERSIONS = (("stable", "stable"), ("candidate", "canary"))
_VERSION = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_LINE_MAX = 8 << 20


@dataclass(frozen=True)
class EvalgateOnlineAnswer:
    """One production answer to judge: its version label, the question, the answer text."""

    version: str
    question: str
    answer: str


def evalgate_feed_answer(line: bytes) -> EvalgateOnlineAnswer | str:
    """One feed line as an answer, or the reason it is none (see the module)."""
    if len(line) > _LINE_MAX:
        return "the line is longer than 8 MiB"
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return "not JSON"
    if not isinstance(obj, dict):
        return "not a JSON object"
    version, answer = obj.get("version"), obj.get("answer")
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        return "version is not 1..64 of [A-Za-z0-9_.-]"
    if not isinstance(answer, str):
        return "answer is not a string"
    question = _question(obj)
    if question is None:
        return "messages is not a list of {role, content: string} (nor prompt a string)"
    return EvalgateOnlineAnswer(version, question, answer)


def _question(obj: Mapping[str, Any]) -> str | None:
    prompt, messages = obj.get("prompt"), obj.get("messages")
    if isinstance(prompt, str) and messages is None:
        return prompt
    if not isinstance(messages, list) or not messages:
        return None
    for message in messages:
        if not (
            isinstance(message, dict)
            and isinstance(message.get("role"), str)
            and isinstance(message.get("content"), str)
        ):
            return None
    turns = [{"role": m["role"], "content": m["content"]} for m in messages]
    return evalgate_judge_input_text(turns)


def evalgate_pair_answers(pair: Mapping[str, Any]) -> list[EvalgateOnlineAnswer] | str:
    """A shadow pair's answered sides (stable, then the candidate as ``canary``), or why none."""
    question = pair.get("question")
    if not isinstance(question, str):
        return "the pair keeps no question (shadow serve --keep-question)"
    answers = []
    for side, version in EVALGATE_PAIR_VERSIONS:
        answer = pair.get(side)
        if (
            isinstance(answer, dict)
            and answer.get("error") is None
            and answer.get("status") == 200
            and isinstance(answer.get("text"), str)
        ):
            answers.append(EvalgateOnlineAnswer(version, question, answer["text"]))
    return answers


class EvalgateFeedReader:
    """The complete lines appended to a feed file since the last ``poll`` (a growing file is
    followed from where it was; a line still being written waits for its newline). One poll
    reads at most ``read_max`` bytes, so a large feed is taken in pieces, never whole; a line
    that grows past ``_LINE_MAX`` without a newline is handed on cut (and refused as too long)."""

    def __init__(self, path: str, read_max: int = 4 << 20) -> None:
        self._path = path
        self._read_max = read_max
        self._offset = 0
        self._tail = b""

    def poll(self) -> list[bytes]:
        """New complete, non-blank lines; a file that does not exist yet has none."""
        try:
            with open(self._path, "rb") as handle:
                if os.fstat(handle.fileno()).st_size < self._offset:
                    self._offset, self._tail = 0, b""  # truncated or replaced: from the start
                handle.seek(self._offset)
                data = handle.read(self._read_max)
        except FileNotFoundError:
            return []
        self._offset += len(data)
        *lines, self._tail = (self._tail + data).split(b"\n")
        if len(self._tail) > _LINE_MAX:
            lines.append(self._tail)
            self._tail = b""
        return [line for line in lines if line.strip()]


class EvalgatePairReader:
    """The shadow pairs of ``suite`` in segments not read before (segments are written once,
    atomically, never replaced, so a segment is read whole exactly once)."""

    def __init__(self, backend: EvalgateStoreBackend, suite: str) -> None:
        self._backend = backend
        self._prefix = evalgate_pairs_prefix(suite)
        self._seen: set[str] = set()

    def poll(self) -> tuple[list[dict[str, Any]], list[str]]:
        """(new pairs, reasons of lines that are no pair)."""
        pairs: list[dict[str, Any]] = []
        bad: list[str] = []
        for relpath in self._backend.evalgate_list(self._prefix):
            if relpath in self._seen:
                continue
            self._seen.add(relpath)
            lines = self._backend.evalgate_read(relpath).splitlines()
            for number, line in enumerate(lines, 1):
                try:
                    pairs.append(evalgate_checked_pair(relpath, number, line))
                except EvalgateIntegrityError as exc:
                    bad.append(str(exc))
        return pairs, bad
