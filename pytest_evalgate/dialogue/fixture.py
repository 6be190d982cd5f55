"""A suite's tool fixture (SPEC 17): the tools a model may call and how each one answers.

``evalgate_load_fixture(path, revision)`` reads the YAML file named by the manifest's
``tools.fixture`` and returns an ``EvalgateToolFixture``, or raises ``EvalgateConfigError``
naming the file, the tool (``tools[i] NAME``) and the reason, before any request:

- ``revision`` must equal the manifest's ``tools.revision`` (a fixture edited without a new
  revision is refused, like a dataset that differs from its pin);
- each tool has a safe ``name`` (declared once), an optional ``description``, ``parameters``
  (a JSON Schema object: ``type: object``, checked with jsonschema's metaschema), and exactly
  one way to answer: canned ``results`` (``{when, result}`` rows matched on the exact
  arguments, each ``when`` valid for the schema) with an optional ``default``; a Python
  callable ``call: python:pkg.mod:fn`` (imported here, with the suite's folder on the path);
  or a mock HTTP ``service: {command, ready_path, timeout_s}`` the harness starts per run;
- ``side_effects: true`` marks a tool whose calls change state (an idempotency key per call).

The fixture's ``digest`` (sha256 of the file) and revision enter the definition digest.
``evalgate_fixture_wire`` is its builtins form for the runner's child, which runs the calls.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_evalgate.dialogue.pyimport import EVALGATE_PYTHON_PREFIX, evalgate_import_tool
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.formats.canonical import evalgate_file_sha256
from pytest_evalgate.formats.yamlread import EvalgateYamlError, evalgate_load_yaml

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")  # OpenAI's function-name rule
_TOOL_KEYS = frozenset(
    {"name", "description", "parameters", "results", "default", "side_effects", "call", "service"}
)
_SERVICE_KEYS = frozenset({"command", "ready_path", "timeout_s"})


@dataclass(frozen=True)
class EvalgateToolService:
    """A mock HTTP service the harness starts on loopback for the run."""

    command: tuple[str, ...]
    ready_path: str
    timeout_s: float


@dataclass(frozen=True)
class EvalgateTool:
    """One tool: its OpenAI function schema and how it answers (exactly one of the three)."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    side_effects: bool
    results: tuple[tuple[Mapping[str, Any], Any], ...] = ()
    default: Any = None
    call: str | None = None
    service: EvalgateToolService | None = None

    @property
    def kind(self) -> str:
        """``canned``, ``python`` or ``service``."""
        if self.call is not None:
            return "python"
        return "service" if self.service is not None else "canned"

    def evalgate_openai(self) -> dict[str, Any]:
        """The request's ``tools`` entry of this tool."""
        function = {"name": self.name, "description": self.description}
        return {"type": "function", "function": {**function, "parameters": dict(self.parameters)}}


@dataclass(frozen=True)
class EvalgateToolFixture:
    """A loaded fixture: where it is, its revision and digest, and its tools in file order."""

    path: str
    revision: str
    digest: str
    tools: tuple[EvalgateTool, ...]

    def evalgate_tool(self, name: str) -> EvalgateTool | None:
        """The tool called ``name``, or None."""
        return next((tool for tool in self.tools if tool.name == name), None)


def evalgate_load_fixture(
    path: str, revision: str, *, key: str = "tools.fixture"
) -> EvalgateToolFixture:
    """Read and check the fixture at ``path`` (see the module docstring)."""
    raw = _read(path, key)
    if not isinstance(raw, dict) or set(raw) - {"revision", "tools"}:
        extra = sorted(set(raw) - {"revision", "tools"}) if isinstance(raw, dict) else []
        reason = f"unknown key {extra[0]!r}" if extra else "must be a mapping of revision, tools"
        raise EvalgateConfigError(path, "-", reason)
    if raw.get("revision") != revision:
        reason = (
            f"the fixture's revision {raw.get('revision')!r} is not the manifest's {revision!r}"
        )
        raise EvalgateConfigError(path, "revision", reason)
    items = raw.get("tools")
    if not isinstance(items, list) or not items:
        raise EvalgateConfigError(path, "tools", "must be a non-empty list of tools")
    suite_dir = os.path.dirname(os.path.abspath(path))
    tools: list[EvalgateTool] = []
    for index, item in enumerate(items):
        tool = _tool(path, index, item, suite_dir)
        if any(other.name == tool.name for other in tools):
            raise EvalgateConfigError(path, f"tools[{index}] {tool.name}", "tool declared twice")
        tools.append(tool)
    return EvalgateToolFixture(path, revision, evalgate_file_sha256(path), tuple(tools))


def _read(path: str, key: str) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return evalgate_load_yaml(handle.read())
    except OSError as exc:
        raise EvalgateConfigError(
            path, key, f"cannot read the tool fixture: {exc.strerror}"
        ) from None
    except UnicodeDecodeError as exc:
        raise EvalgateConfigError(path, "-", f"not UTF-8 text ({exc.reason})") from None
    except EvalgateYamlError as exc:
        raise EvalgateConfigError(path, "-", exc.reason) from None


def _tool(path: str, index: int, item: object, suite_dir: str) -> EvalgateTool:
    if not isinstance(item, dict):
        raise EvalgateConfigError(path, f"tools[{index}]", "a tool must be a mapping")
    name = item.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        reason = "name must match [A-Za-z_][A-Za-z0-9_-]{0,63}"
        raise EvalgateConfigError(path, f"tools[{index}]", reason)
    where = f"tools[{index}] {name}"
    unknown = sorted(set(item) - _TOOL_KEYS)
    if unknown:
        raise EvalgateConfigError(path, f"{where}: {unknown[0]}", "unknown key")
    parameters = _parameters(path, where, item.get("parameters"))
    ways = [way for way in ("results", "call", "service") if way in item]
    if "default" in item and "results" not in ways:
        ways.append("results")
    if len(ways) != 1:
        reason = f"needs exactly one of results (canned), call (python:) or service, got {ways}"
        raise EvalgateConfigError(path, where, reason)
    description = item.get("description", "")
    side_effects = item.get("side_effects", False)
    if not isinstance(description, str) or not isinstance(side_effects, bool):
        raise EvalgateConfigError(path, where, "description is text and side_effects a boolean")
    base = EvalgateTool(name, description, parameters, side_effects)
    if ways == ["call"]:
        return _with_call(path, where, base, item["call"], suite_dir)
    if ways == ["service"]:
        return _with_service(path, where, base, item["service"])
    return _with_results(path, where, base, item.get("results", []), item.get("default"))


def _parameters(path: str, where: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, dict) or value.get("type") != "object":
        raise EvalgateConfigError(
            path, f"{where}: parameters", "must be a JSON Schema of type object"
        )
    import jsonschema  # here: a suite without tools never pays its ~80 ms import

    try:
        jsonschema.Draft202012Validator.check_schema(value)
    except jsonschema.SchemaError as exc:
        raise EvalgateConfigError(
            path, f"{where}: parameters", f"not a JSON Schema: {exc.message}"
        ) from None
    return value


def _with_results(
    path: str, where: str, base: EvalgateTool, results: object, default: Any
) -> EvalgateTool:
    if not isinstance(results, list):
        raise EvalgateConfigError(path, f"{where}: results", "must be a list of {when, result}")
    import jsonschema  # see _parameters

    validator = jsonschema.Draft202012Validator(base.parameters)
    rows: list[tuple[Mapping[str, Any], Any]] = []
    for number, row in enumerate(results):
        key = f"{where}: results[{number}]"
        if not isinstance(row, dict) or set(row) != {"when", "result"}:
            raise EvalgateConfigError(path, key, "a row is exactly {when: {...}, result: ...}")
        error = next(iter(validator.iter_errors(row["when"])), None)
        if error is not None:
            reason = f"'when' does not match the tool's parameters: {error.message}"
            raise EvalgateConfigError(path, key, reason)
        rows.append((row["when"], row["result"]))
    return EvalgateTool(**{**base.__dict__, "results": tuple(rows), "default": default})


def _with_call(
    path: str, where: str, base: EvalgateTool, call: object, suite_dir: str
) -> EvalgateTool:
    if not isinstance(call, str) or not call.startswith(EVALGATE_PYTHON_PREFIX):
        raise EvalgateConfigError(path, f"{where}: call", "must be 'python:pkg.module:function'")
    try:
        evalgate_import_tool(call, suite_dir)
    except (ImportError, AttributeError, ValueError) as exc:
        reason = f"cannot import {call!r}: {type(exc).__name__}: {exc}"
        raise EvalgateConfigError(path, f"{where}: call", reason) from None
    return EvalgateTool(**{**base.__dict__, "call": call})


def _with_service(path: str, where: str, base: EvalgateTool, service: object) -> EvalgateTool:
    key = f"{where}: service"
    if not isinstance(service, dict) or set(service) - _SERVICE_KEYS:
        raise EvalgateConfigError(path, key, f"a mapping of {sorted(_SERVICE_KEYS)}")
    command = service.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
        raise EvalgateConfigError(path, f"{key}.command", "must be a non-empty list of strings")
    ready = service.get("ready_path", "/health")
    timeout = service.get("timeout_s", 10.0)
    if not isinstance(ready, str) or not ready.startswith("/"):
        raise EvalgateConfigError(path, f"{key}.ready_path", "must be a path starting with /")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 300:
        raise EvalgateConfigError(path, f"{key}.timeout_s", "must be a number in (0, 300]")
    spec = EvalgateToolService(tuple(command), ready, float(timeout))
    return EvalgateTool(**{**base.__dict__, "service": spec})


def evalgate_fixture_wire(
    fixture: EvalgateToolFixture, services: Mapping[str, str]
) -> dict[str, Any]:
    """The fixture as builtins for the runner's child: each tool's kind, schema, canned rows,
    callable and (from ``services``: tool name -> base URL of its running mock) service URL."""
    return {
        "revision": fixture.revision,
        "digest": fixture.digest,
        "suite_dir": os.path.dirname(os.path.abspath(fixture.path)),
        "tools": [
            {
                "name": tool.name,
                "kind": tool.kind,
                "parameters": dict(tool.parameters),
                "side_effects": tool.side_effects,
                "results": [[dict(when), result] for when, result in tool.results],
                "default": tool.default,
                "call": tool.call,
                "url": services.get(tool.name),
            }
            for tool in fixture.tools
        ],
    }
