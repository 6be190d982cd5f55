"""Secrets out of text: the one redaction function of every text an endpoint can influence.

Contracts
---------
- A secret is the value of a configured key variable (a candidate's or the judge's
  ``api_key_env``). Whoever reads one from the environment registers it here
  (``evalgate_add_secret``): the endpoint pools in the pytest process, the client in the
  runner's child (every endpoint it is handed). The registry is per process and only grows.
- ``evalgate_redact(text)`` replaces every registered value with ``[REDACTED]`` and every
  ``Bearer <token>`` (any case, any token) with ``Bearer [REDACTED]``. Longer secrets are
  replaced first, so a key that contains another is not half left behind. Values shorter than
  ``EVALGATE_SECRET_MIN_LENGTH`` are not registered: replacing ``"a"`` everywhere would wreck
  every message while hiding nothing.
- A part of a secret is redacted too: any prefix and any suffix of at least
  ``EVALGATE_SECRET_PART_LENGTH`` (8) characters of a registered value longer than that (an
  endpoint that echoes ``sk-proj-abcd`` of the key, or a key's tail after a mask), the longest
  such part at each place. A part from the middle of a key only is not recognised.
- Text that holds neither a secret (nor a secret's first or last 8 characters) nor ``bearer``
  comes back as the same object, cheaply (substring tests per secret): the client redacts
  every answer's text.
"""

from __future__ import annotations

import re

EVALGATE_REDACTED = "[REDACTED]"
EVALGATE_SECRET_MIN_LENGTH = 4
EVALGATE_SECRET_PART_LENGTH = 8

_BEARER = re.compile(r"(bearer)(\s+)[^\s\"',;]+", re.IGNORECASE)
_secrets: list[str] = []
_parts: list[tuple[str, str, re.Pattern[str]]] = []  # (first 8, last 8, prefix-or-suffix)


def evalgate_add_secret(value: str | None) -> None:
    """Register ``value`` (a key variable's value) for redaction; None and short values are
    ignored (see the module contract)."""
    if value is None or len(value) < EVALGATE_SECRET_MIN_LENGTH or value in _secrets:
        return
    _secrets.append(value)
    _secrets.sort(key=len, reverse=True)
    if len(value) > EVALGATE_SECRET_PART_LENGTH:
        head, tail = value[:EVALGATE_SECRET_PART_LENGTH], value[-EVALGATE_SECRET_PART_LENGTH:]
        _parts.append((head, tail, re.compile(f"{_prefixes(value)}|{_suffixes(value)}")))


def evalgate_redact(text: str) -> str:
    """``text`` with every registered secret and every ``Bearer <token>`` redacted."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, EVALGATE_REDACTED)
    for head, tail, pattern in _parts:
        if head in text or tail in text:
            text = pattern.sub(EVALGATE_REDACTED, text)
    if "earer" in text or "EARER" in text:
        text = _BEARER.sub(_bearer_redacted, text)
    return text


def evalgate_redact_optional(text: str | None) -> str | None:
    """``evalgate_redact`` for a text that may be absent."""
    return None if text is None else evalgate_redact(text)


def _bearer_redacted(match: re.Match[str]) -> str:
    return f"{match.group(1)}{match.group(2)}{EVALGATE_REDACTED}"


def _prefixes(value: str) -> str:
    """A pattern of ``value``'s prefixes of at least the part length, longest first."""
    rest = ""
    for char in reversed(value[EVALGATE_SECRET_PART_LENGTH:]):
        rest = f"(?:{re.escape(char)}{rest})?"
    return re.escape(value[:EVALGATE_SECRET_PART_LENGTH]) + rest


def _suffixes(value: str) -> str:
    """A pattern of ``value``'s suffixes of at least the part length, longest first."""
    rest = ""
    for char in value[:-EVALGATE_SECRET_PART_LENGTH]:
        rest = f"(?:{rest}{re.escape(char)})?"
    return rest + re.escape(value[-EVALGATE_SECRET_PART_LENGTH:])
