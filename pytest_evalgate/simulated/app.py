"""The simulator's application: routing, counters, control endpoints, faults and completions.

Routes: ``POST /v1/chat/completions`` and ``POST /v1/completions`` (answers, streamed when the
body asks ``stream: true``), ``GET /v1/models``, ``GET /v1/models/{id}`` (models.retrieve:
any name, as the simulator answers as any model), ``GET /evalgate/stats``, ``POST
/evalgate/reset`` (zero the counters; answers the stats). A known path with another method is
405, any other path 404. Completion bodies that are not a JSON object, lack ``messages`` (a list)
or ``prompt`` (a string or list), carry a non-number ``temperature``, NaN or Infinity, ask
what the simulator cannot do (``n`` > 1; a ``response_format`` other than ``text`` or
``json_object``), or have odd shapes further in are 400 and keep the connection usable.

The answer text comes from the :data:`~pytest_evalgate.simulated.styles.EvalgateSimAnswerer`
given at construction; this module never looks at an answer key.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from typing import Any, TextIO
from urllib.parse import unquote

from pytest_evalgate.simulated.choice_style import (
    EVALGATE_SIM_TOKENIZER_PATHS,
    EvalgateSimChoicePlans,
    EvalgateSimVocab,
    evalgate_sim_echo,
    evalgate_sim_tokenizer_reply,
    evalgate_sim_wants_echo,
)
from pytest_evalgate.simulated.faults import evalgate_sim_fault, evalgate_sim_fault_headers
from pytest_evalgate.simulated.knobs import EVALGATE_SIM_HANG_LIMIT_S, EvalgateSimConfig
from pytest_evalgate.simulated.misbehave import (
    EvalgateSimAnswerContext,
    evalgate_sim_misbehave,
)
from pytest_evalgate.simulated.plan import EvalgateSimPlan, evalgate_sim_plan
from pytest_evalgate.simulated.protocol import EvalgateSimProtocol, EvalgateSimRequest
from pytest_evalgate.simulated.responses import (
    EVALGATE_SIM_OWNER,
    EvalgateSimStream,
    evalgate_sim_error_body,
    evalgate_sim_full_body,
)
from pytest_evalgate.simulated.slots import EvalgateSimSlots, evalgate_sim_after
from pytest_evalgate.simulated.styles import EvalgateSimAnswerer, evalgate_sim_ask
from pytest_evalgate.simulated.tool_style import EvalgateSimToolAnswerer

_COMPLETIONS = {"/v1/chat/completions": "chat", "/v1/completions": "text"}
_CONTROL = ("/evalgate/stats", "/evalgate/reset")


def _sim_reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # canonical digests refuse NaN and Infinity


_DECODER = json.JSONDecoder(parse_constant=_sim_reject_constant)  # json.loads builds one per call


def evalgate_sim_json(body: bytes) -> dict[str, Any] | None:
    """The request body as a JSON object, or None (not UTF-8, not JSON, NaN, not an object)."""
    try:
        value = _DECODER.decode(body.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError is a ValueError too
        return None
    return value if isinstance(value, dict) else None


def evalgate_sim_validate(body: Mapping[str, object] | None, kind: str) -> str | None:
    """Why a completion body of ``kind`` (``chat``/``text``) is refused, or None."""
    if body is None:
        return "the body must be a JSON object"
    if kind == "chat" and not isinstance(body.get("messages"), list):
        return "'messages' must be a list"
    if kind == "text" and not isinstance(body.get("prompt"), str | list):
        return "'prompt' must be a string or a list"
    temperature = body.get("temperature")
    if temperature is not None and not isinstance(temperature, int | float):
        return "'temperature' must be a number"
    return _sim_unsupported(body)


def _sim_unsupported(body: Mapping[str, object]) -> str | None:
    """What the simulator would otherwise ignore in silence: more than one choice, or an
    answer format it cannot keep (its judge styles answer JSON, so ``json_object`` is kept)."""
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        return "'n' must be a positive integer"
    if n is not None and n > 1:
        return f"'n': {n} is not supported by the simulator (one choice per request)"
    form = body.get("response_format")
    kind = form.get("type") if isinstance(form, dict) else form
    if form is not None and kind not in ("text", "json_object"):
        return f"'response_format' {json.dumps(form)[:80]} is not supported by the simulator"
    return None


def _sim_bad_request(message: str) -> bytes:
    return evalgate_sim_error_body(message, "invalid_request_error", None)


class EvalgateSimApp:
    """Routing, counters and answers of one server; lives on the server's event loop only."""

    def __init__(
        self,
        config: EvalgateSimConfig,
        answerer: EvalgateSimAnswerer,
        log: TextIO | None,
        tooler: EvalgateSimToolAnswerer | None = None,
    ) -> None:
        self.config = config
        self.answerer = answerer
        self.tooler = tooler  # requests that carry tools (tool_style.py)
        self.log = log
        self.connections: set[EvalgateSimProtocol] = set()
        self.arrivals = 0
        self.models: dict[str, None] = {}
        self.hangs_dropped = 0
        self.in_flight = 0
        self.slots = EvalgateSimSlots(config.service_slots)
        self.choice_plans: EvalgateSimChoicePlans = {}  # echo requests (choice_style.py)
        self.vocab = EvalgateSimVocab()
        self.reset()

    def reset(self) -> None:
        """Zero the counters; requests still in flight stay counted in ``in_flight``."""
        self.total = 0
        self.by_status: dict[str, int] = {}
        self.disconnects = 0
        self.peak = self.in_flight
        self.accepted = 0  # connections accepted since the reset (server.py counts them)

    def stats(self) -> dict[str, Any]:
        """The counters as builtins (``GET /evalgate/stats``)."""
        return {
            "simulator": True, "requests_total": self.total, "by_status": dict(self.by_status),
            "in_flight": self.in_flight, "peak_in_flight": self.peak,
            "client_disconnects": self.disconnects, "hangs_dropped": self.hangs_dropped,
            "completion_arrivals": self.arrivals, "connections_open": len(self.connections),
            "connections_accepted": self.accepted,
        }  # fmt: skip

    def begin(self, proto: EvalgateSimProtocol) -> None:
        """Count a request as arrived and in progress."""
        proto.begin_counted()
        self.total += 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)

    def end(self, status: int | None, dropped: bool = False) -> None:
        """Count a request as finished (``None``: the client went away first, or ``dropped``:
        the server gave up on a hung request)."""
        self.in_flight -= 1
        if dropped:
            self.hangs_dropped += 1
        elif status is None:
            self.disconnects += 1
        else:
            self.by_status[str(status)] = self.by_status.get(str(status), 0) + 1

    def dispatch(self, request: EvalgateSimRequest, proto: EvalgateSimProtocol) -> None:
        """Route one parsed request to its handler."""
        kind = _COMPLETIONS.get(request.path)
        if kind is not None and request.method == "POST":
            self._completion(request, proto, kind)
        elif request.path == "/v1/models" and request.method == "GET":
            self._log(request, None, None)
            self.begin(proto)
            proto.reply(200, self._models_body())
        elif request.path.startswith("/v1/models/") and request.method == "GET":
            self._log(request, None, None)
            self.begin(proto)  # models.retrieve: the simulator serves any model name
            proto.reply(200, json.dumps(self._model(request.path[len("/v1/models/") :])).encode())
        elif request.path in EVALGATE_SIM_TOKENIZER_PATHS:  # lm-eval's tokenizer_backend=remote
            self.begin(proto)
            proto.reply(
                *evalgate_sim_tokenizer_reply(
                    request.path, evalgate_sim_json(request.body), self.vocab
                )
            )
        elif request.path in _CONTROL:
            self._control(request, proto)
        else:
            known = kind is not None or request.path == "/v1/models"
            status, why = (405, "method not allowed") if known else (404, "no such path")
            proto.reply(status, _sim_bad_request(why))

    def _control(self, request: EvalgateSimRequest, proto: EvalgateSimProtocol) -> None:
        if request.path == "/evalgate/reset" and request.method == "POST":
            self.reset()
        elif request.path == "/evalgate/reset" or request.method != "GET":
            proto.reply(405, _sim_bad_request("method not allowed"))
            return
        proto.reply(200, json.dumps(self.stats()).encode())

    def _models_body(self) -> bytes:
        data = [self._model(n) for n in ["evalgate-simulator", *self.models]]
        return json.dumps({"object": "list", "data": data}).encode()

    @staticmethod
    def _model(name: str) -> dict[str, object]:
        return {
            "id": unquote(name),
            "object": "model",
            "created": 0,
            "owned_by": EVALGATE_SIM_OWNER,
        }

    def _log(self, request: EvalgateSimRequest, model: object, index: int | None) -> None:
        if self.log is None:
            return
        line = {"t": time.time(), "path": request.path, "model": model, "n": index}
        line["identity"] = request.headers.get("x-evalgate-identity")
        line["attempt"] = request.headers.get("x-evalgate-attempt")
        self.log.write(json.dumps(line) + "\n")  # line-buffered file: flushed per line

    def _completion(
        self, request: EvalgateSimRequest, proto: EvalgateSimProtocol, kind: str
    ) -> None:
        index = self.arrivals
        self.arrivals += 1
        body = evalgate_sim_json(request.body)
        model = body.get("model") if body is not None else None
        self._log(request, model, index)
        self.begin(proto)
        if self._fault(index, proto):
            return
        try:
            self._answer(request, body, proto, kind, index)
        except (AttributeError, TypeError, ValueError) as exc:  # odd but valid JSON shapes
            proto.reply(400, _sim_bad_request(f"bad request: {exc}"))

    def _fault(self, index: int, proto: EvalgateSimProtocol) -> bool:
        fault = evalgate_sim_fault(self.config, index)
        if fault is None:
            return False
        if fault.hangs:
            proto.hang(min(self.config.hang_s, EVALGATE_SIM_HANG_LIMIT_S))
        else:
            body = evalgate_sim_error_body(fault.message, fault.kind, fault.code)
            proto.reply(fault.status, body, evalgate_sim_fault_headers(self.config, fault))
        return True

    def _answer(
        self,
        request: EvalgateSimRequest,
        body: dict[str, Any] | None,
        proto: EvalgateSimProtocol,
        kind: str,
        index: int,
    ) -> None:
        problem = evalgate_sim_validate(body, kind)
        if problem is not None or body is None:
            proto.reply(400, _sim_bad_request(problem or "bad body"))
            return
        model = str(body.get("model", ""))
        self.models.setdefault(model, None)
        if kind == "text" and evalgate_sim_wants_echo(body):  # choice_style.py
            status, reply, service_s = evalgate_sim_echo(
                self.config, body, index, self.choice_plans, self.vocab
            )
            wait = self.slots.evalgate_wait(time.monotonic(), service_s) if status == 200 else 0.0
            proto.reply(status, reply, delay=wait + service_s if status == 200 else 0.0)
            return
        plan = self._plan(body, kind, model)
        rid = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-evalgate-sim-{index}"
        wait = self.slots.evalgate_wait(time.monotonic(), plan.total_s)
        served = self.config.served_model or model  # the name the answer reports
        if self.config.fault is not None:
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            stream = bool(body.get("stream"))
            context = EvalgateSimAnswerContext(kind, rid, served, plan, body, stream, usage)
            evalgate_sim_misbehave(self.config.fault, request, proto, context)
            return
        if body.get("stream"):
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            run = EvalgateSimStream(kind, rid, served, plan, usage).run
            proto.stream(200, run if wait <= 0 else evalgate_sim_after(wait, run))
        else:
            body_bytes = evalgate_sim_full_body(kind, rid, served, plan)
            proto.reply(200, body_bytes, delay=wait + plan.total_s)

    def _plan(self, body: Mapping[str, Any], kind: str, model: str) -> EvalgateSimPlan:
        prompt = body["messages"] if kind == "chat" else body["prompt"]
        temperature = body.get("temperature")
        temperature = 1.0 if temperature is None else float(temperature)
        ask = evalgate_sim_ask(self.config, model, prompt, temperature, body.get("seed"))
        tools = body.get("tools")
        if kind != "chat" or not tools or not isinstance(tools, list) or self.tooler is None:
            return evalgate_sim_plan(self.config, self.answerer(ask), ask.salt, body)
        names = [str((tool.get("function") or {}).get("name")) for tool in tools]
        reply = self.tooler(ask, names)
        if isinstance(reply, str):
            return evalgate_sim_plan(self.config, reply, ask.salt, body)
        plan = evalgate_sim_plan(self.config, reply.evalgate_text(), ask.salt, body)
        return dataclasses.replace(plan, finish="tool_calls", tool_calls=reply.calls)
