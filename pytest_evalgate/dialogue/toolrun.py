"""Running one tool call of a model's answer against the fixture (in the runner's child).

``EvalgateToolBox`` is built from ``fixture.evalgate_fixture_wire`` builtins. ``evalgate_run``
takes one ``{"id", "name", "arguments"}`` call of identity ``identity`` at (step, call) and
returns an ``EvalgateToolAnswer``:

- **invalid** (the model's failure, ``tool_call_invalid``, never an endpoint error): a name the
  fixture does not declare, arguments that are not a JSON object, or arguments the tool's
  JSON Schema refuses; nothing runs, and the model sees ``{"error": reason}``;
- a canned tool answers the ``result`` of the row whose ``when`` equals the arguments, else its
  ``default`` (``{"error": "no canned result"}`` without one);
- a ``python:`` tool is called as ``fn(arguments, context)`` in a thread, ``context`` holding
  ``identity``, ``idempotency_key`` and the identity's mutable ``state``; an exception is the
  tool's answer ``{"error": ...}`` (a suite defect shown in the transcript);
- a service tool is POSTed ``{"arguments", "identity", "idempotency_key"}`` at
  ``<url>/call/<name>`` and answers the JSON body's ``result``; a service that cannot be reached
  after 3 tries raises ``EvalgateToolServiceError`` (the identity is an error, retried later).

A ``side_effects: true`` tool gets the idempotency key ``sha256(identity/step/call)[:32]``: the
same on a retry and on a resumed run, so a mock that remembers keys applies each effect once.
Its effects are counted in the identity's ``state`` (``state[name]``: effects applied), once
per key, which a case's ``expect.state`` checks.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_evalgate.dialogue.pyimport import evalgate_import_tool
from pytest_evalgate.errors import EvalgateToolServiceError

_SERVICE_TRIES = 3
_SERVICE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class EvalgateToolAnswer:
    """What one call produced: the tool message's content, and why it was invalid (or None)."""

    content: str
    invalid: str | None = None


@dataclass
class EvalgateToolState:
    """One identity's mock state during its loop: the state dict and the applied keys."""

    state: dict[str, Any] = field(default_factory=dict)
    applied: dict[str, str] = field(default_factory=dict)  # idempotency key -> answer content


def evalgate_idempotency_key(identity: str, step: int, call: int) -> str:
    """The key of call ``call`` of step ``step`` of ``identity``: stable across retries and runs."""
    return hashlib.sha256(f"{identity}/{step}/{call}".encode()).hexdigest()[:32]


class EvalgateToolBox:
    """The fixture's tools, ready to run calls (see the module docstring)."""

    def __init__(self, wire: Mapping[str, Any]) -> None:
        self.revision = str(wire["revision"])
        self._tools = {tool["name"]: tool for tool in wire["tools"]}
        # imported here, where a suite declares tools: jsonschema costs every runner child
        # ~0.1 s of CPU at start, and most suites have no tools
        import jsonschema

        self._validators = {
            name: jsonschema.Draft202012Validator(tool["parameters"])
            for name, tool in self._tools.items()
        }
        self._functions: dict[str, Any] = {}
        self._suite_dir = str(wire.get("suite_dir", "."))
        self._http: Any = None

    async def evalgate_run(
        self, call: Mapping[str, str], identity: str, step: int, index: int, mock: EvalgateToolState
    ) -> EvalgateToolAnswer:
        """Run one call (see the module docstring)."""
        name = call.get("name", "")
        tool = self._tools.get(name)
        if tool is None:
            return _invalid(f"unknown tool {name!r} (declared: {', '.join(sorted(self._tools))})")
        arguments, problem = self._arguments(name, call.get("arguments", ""))
        if problem is not None:
            return _invalid(problem)
        key = evalgate_idempotency_key(identity, step, index)
        if tool["side_effects"] and key in mock.applied:
            return EvalgateToolAnswer(mock.applied[key])
        content = _content(await self._answer(tool, arguments, identity, key, mock))
        if tool["side_effects"]:
            mock.applied[key] = content
            mock.state[name] = int(mock.state.get(name, 0)) + 1
        return EvalgateToolAnswer(content)

    def _arguments(self, name: str, text: str) -> tuple[dict[str, Any], str | None]:
        try:
            arguments = json.loads(text or "{}")
        except ValueError as exc:
            return {}, f"arguments of {name!r} are not JSON: {exc}"
        if not isinstance(arguments, dict):
            return {}, f"arguments of {name!r} are not a JSON object"
        error = next(iter(self._validators[name].iter_errors(arguments)), None)
        if error is not None:
            return {}, f"arguments of {name!r} do not match its schema: {error.message}"
        return arguments, None

    async def _answer(
        self,
        tool: Mapping[str, Any],
        arguments: dict[str, Any],
        identity: str,
        key: str,
        mock: EvalgateToolState,
    ) -> Any:
        if tool["kind"] == "python":
            return await self._python(tool, arguments, identity, key, mock)
        if tool["kind"] == "service":
            return await self._service(tool, arguments, identity, key)
        for when, result in tool["results"]:
            if when == arguments:
                return result
        default = tool["default"]
        return {"error": "no canned result for these arguments"} if default is None else default

    async def _python(
        self,
        tool: Mapping[str, Any],
        arguments: dict[str, Any],
        identity: str,
        key: str,
        mock: EvalgateToolState,
    ) -> Any:
        function = self._functions.get(tool["name"])
        if function is None:
            function = self._functions[tool["name"]] = evalgate_import_tool(
                tool["call"], self._suite_dir
            )
        context = {"identity": identity, "idempotency_key": key, "state": mock.state}
        try:
            return await asyncio.to_thread(function, arguments, context)
        except Exception as exc:  # the tool's own failure: the model sees it, the suite owns it
            return {"error": f"tool raised {type(exc).__name__}: {exc}"}

    async def _service(
        self, tool: Mapping[str, Any], arguments: dict[str, Any], identity: str, key: str
    ) -> Any:
        import httpx

        if self._http is None:
            self._http = httpx.AsyncClient(timeout=_SERVICE_TIMEOUT_S, trust_env=False)
        url = f"{tool['url']}/call/{tool['name']}"
        payload = {"arguments": arguments, "identity": identity, "idempotency_key": key}
        problem = ""
        for attempt in range(_SERVICE_TRIES):
            try:
                response = await self._http.post(url, json=payload)
                if response.status_code == 200:
                    return response.json()["result"]
                problem = f"HTTP {response.status_code}"
            except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
                problem = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(0.05 * (attempt + 1))
        raise EvalgateToolServiceError(f"tool {tool['name']!r}: its mock service failed: {problem}")

    async def evalgate_close(self) -> None:
        """Close the services' HTTP client."""
        if self._http is not None:
            await self._http.aclose()


def _invalid(reason: str) -> EvalgateToolAnswer:
    return EvalgateToolAnswer(json.dumps({"error": reason}), invalid=reason)


def _content(result: Any) -> str:
    return result if isinstance(result, str) else json.dumps(result, sort_keys=True)
