"""JSON Lines that cannot hurt: the one reader of datasets, golden sets and prompt files.

``json.loads`` accepts ``NaN``, ``Infinity`` and ``-Infinity`` (not JSON, but Python writes
them), and ``open(..., encoding="utf-8")`` raises ``UnicodeDecodeError`` from the middle of a
loop. Both used to end a run in a traceback. Here every failure is an ``EvalgateConfigError``
naming the file, the line (or key) and the reason, before any request.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pytest_evalgate.errors import EvalgateConfigError


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (only finite numbers are)")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is too large for a finite number")
    return value


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def evalgate_json_value(source: str, where: str, text: str | bytes) -> Any:
    """``text`` parsed as JSON; ``NaN``/``Infinity`` and invalid JSON raise
    ``EvalgateConfigError(source, where, reason)``."""
    try:
        if isinstance(text, str) and not text.startswith("\ufeff"):
            return _DECODER.decode(text)  # json.loads would build a decoder per line
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise EvalgateConfigError(source, where, f"not valid JSON: {exc.msg}") from None
    except UnicodeDecodeError as exc:
        raise EvalgateConfigError(source, where, f"not UTF-8 ({exc.reason})") from None
    except (ValueError, RecursionError) as exc:
        raise EvalgateConfigError(source, where, str(exc) or "not valid JSON") from None


def evalgate_text_lines(source: str, key: str, path: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of every non-blank line of ``path`` (UTF-8).

    An unreadable file raises ``EvalgateConfigError(source, key, reason)``; bytes that are not
    UTF-8 raise ``EvalgateConfigError(path, "line N", reason)``.
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise EvalgateConfigError(source, key, f"cannot read {path}: {exc.strerror}") from None
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            reason = f"not UTF-8 text (byte {exc.start} of the line: {exc.reason})"
            raise EvalgateConfigError(path, f"line {number}", reason) from None
        if line.strip():
            yield number, line


def evalgate_jsonl_rows(source: str, key: str, path: str) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` of every non-blank line of the JSON Lines file ``path``;
    errors as ``evalgate_text_lines`` and ``evalgate_json_value`` (with ``line N``)."""
    for number, line in evalgate_text_lines(source, key, path):
        yield number, evalgate_json_value(path, f"line {number}", line)
