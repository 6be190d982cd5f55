"""The manifest's file read and checked before anything is built from it.

The YAML is read (unreadable, non-UTF-8 and malformed files are refused), validated against the
schema (``manifest.schema``; pydantic's errors become ``EvalgateConfigError`` naming the dotted
key: ``unknown key``, ``missing required key`` or the validator's reason, every problem after
the first appended), then the checks the schema cannot make: ``shards >= 1``, at least one
candidate, safe names (``evalgate_check_name``), base URLs, a judge block for ``scorer: judge``,
and the code and multiple-choice keys.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from pytest_evalgate.errors import EvalgateConfigError, EvalgateYamlError
from pytest_evalgate.formats.yamlread import evalgate_load_yaml
from pytest_evalgate.manifest.choice import evalgate_check_choice_keys
from pytest_evalgate.manifest.code import evalgate_check_code_keys
from pytest_evalgate.manifest.schema import EvalgateManifestSchema
from pytest_evalgate.manifest.url import evalgate_check_base_url

EVALGATE_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def evalgate_check_name(source: str, key: str, name: str) -> None:
    """Refuse a name (candidate, suite, tier) that could become a path outside the store: only
    letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit, at most 64."""
    if not EVALGATE_NAME_PATTERN.fullmatch(name):
        reason = (
            f"{name!r} is not a safe name: use letters, digits, '.', '_' and '-' "
            "(starting with a letter or digit, at most 64 characters); names become store paths"
        )
        raise EvalgateConfigError(source, key, reason)


def read_yaml(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return evalgate_load_yaml(handle.read())
    except OSError as exc:
        raise EvalgateConfigError(path, "-", f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        reason = f"not UTF-8 text (byte {exc.start}: {exc.reason})"
        raise EvalgateConfigError(path, "-", reason) from None
    except EvalgateYamlError as exc:
        raise EvalgateConfigError(path, "-", exc.reason) from None


def validate(path: str, raw: object) -> EvalgateManifestSchema:
    if not isinstance(raw, dict):
        raise EvalgateConfigError(path, "-", "the manifest must be a YAML mapping")
    try:
        return EvalgateManifestSchema.model_validate(raw)
    except ValidationError as exc:
        problems = [_describe(error) for error in exc.errors()]
        first_key, first_reason = problems[0]
        rest = "".join(f"; {key}: {reason}" for key, reason in problems[1:])
        raise EvalgateConfigError(path, first_key, first_reason + rest) from None


def _describe(error: ErrorDetails) -> tuple[str, str]:
    key = ".".join(str(part) for part in error["loc"]) or "-"
    kind = error["type"]
    if kind == "extra_forbidden":
        return key, "unknown key"
    if kind == "missing":
        return key, "missing required key"
    return key, str(error["msg"])


def check_semantics(path: str, model: EvalgateManifestSchema) -> None:
    if model.shards < 1:
        raise EvalgateConfigError(path, "shards", f"must be >= 1, got {model.shards}")
    if not model.candidates:
        raise EvalgateConfigError(path, "candidates", "at least one candidate is needed")
    evalgate_check_name(path, "suite", model.suite)
    for name, candidate in model.candidates.items():
        evalgate_check_name(path, f"candidates.{name}", name)
        _check_urls(path, f"candidates.{name}.base_url", candidate.base_url)
    for name in model.tiers:
        evalgate_check_name(path, f"tiers.{name}", name)
    if model.judge is not None:
        evalgate_check_base_url(path, "judge.base_url", model.judge.base_url)
    if model.evaluator.scorer == "judge" and model.judge is None:
        raise EvalgateConfigError(path, "judge", "scorer 'judge' needs a judge block")
    evaluator = model.evaluator.model_dump()
    evalgate_check_code_keys(path, evaluator, model.sandbox, model.repetitions)
    evalgate_check_choice_keys(path, model)


def _check_urls(path: str, key: str, value: str | list[str]) -> None:
    urls = [value] if isinstance(value, str) else value
    for index, url in enumerate(urls):
        evalgate_check_base_url(path, key if isinstance(value, str) else f"{key}[{index}]", url)
