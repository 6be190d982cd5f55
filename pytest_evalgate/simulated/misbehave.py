"""Answers that go wrong on purpose: the ``fault=<name>`` knob (issue 19's hostile endpoints).

Contracts
---------
- ``fault`` hits every completion request that no HTTP fault (``simulated/faults.py``) took;
  the request is otherwise answered as usual (same plan, same timings). The names
  (``EVALGATE_SIM_ANSWER_FAULTS``):

  - ``truncate_stream``: a stream that stops after half its tokens, with no finish event and no
    ``[DONE]`` (the HTTP framing itself ends cleanly); a non-streamed request gets
    ``content_length_lie``;
  - ``content_length_lie``: a ``Content-Length`` larger than what is sent, then the connection
    closed: a whole JSON body under twice its length, or the first half of a stream's bytes
    (no ``[DONE]``) under the length of all of them;
  - ``redirect``: ``307`` to ``http://127.0.0.1:9/...`` (nothing listens there);
  - ``error_in_200``: a 200 whose body (or, streamed, whose first event) is an OpenAI error;
  - ``huge_answer``: far more text than ``max_tokens`` allows (64 characters a token, at least
    16 KiB; 2 MiB without a limit), in 1 KiB tokens;
  - ``bogus_usage``: the answer as usual with ``usage`` of ``prompt_tokens: -3`` and
    ``completion_tokens: 10**9``;
  - ``echo_key``: a 500 whose message quotes the request's ``Authorization`` header and the key
    in it, as careless proxies do.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from pytest_evalgate.simulated.plan import EvalgateSimPlan
from pytest_evalgate.simulated.protocol import EvalgateSimProtocol, EvalgateSimRequest
from pytest_evalgate.simulated.responses import (
    EvalgateSimEventSink,
    EvalgateSimStream,
    evalgate_sim_error_body,
    evalgate_sim_full_body,
)

EVALGATE_SIM_BOGUS_USAGE = {"prompt_tokens": -3, "completion_tokens": 10**9, "total_tokens": 1}
_REDIRECT_TO = "http://127.0.0.1:9/v1/elsewhere"
_HUGE_PIECE = "lorem ipsum " * 85 + "dolo"  # 1,024 characters


@dataclasses.dataclass(frozen=True)
class EvalgateSimAnswerContext:
    """What a misbehaving answer needs of its request: kind, id, model, plan, body, stream."""

    kind: str
    rid: str
    model: str
    plan: EvalgateSimPlan
    body: Mapping[str, Any]
    stream: bool
    usage: bool


def evalgate_sim_misbehave(
    fault: str,
    request: EvalgateSimRequest,
    proto: EvalgateSimProtocol,
    ctx: EvalgateSimAnswerContext,
) -> None:
    """Answer ``request`` with answer fault ``fault`` (module contract)."""
    if fault == "truncate_stream" and ctx.stream:
        proto.stream(200, _TruncatedStream(ctx.kind, ctx.rid, ctx.model, ctx.plan, ctx.usage).run)
    elif fault in ("truncate_stream", "content_length_lie"):
        _lie(proto, ctx)
    elif fault == "redirect":
        message = evalgate_sim_error_body("moved", "redirect", None)
        proto.reply(307, message, f"Location: {_REDIRECT_TO}\r\n")
    elif fault == "error_in_200":
        _error_in_200(proto, ctx)
    elif fault == "huge_answer":
        _usual(proto, dataclasses.replace(ctx, plan=_huge(ctx.plan, ctx.body)))
    elif fault == "bogus_usage":
        _bogus_usage(proto, ctx)
    else:  # echo_key
        auth = request.headers.get("authorization", "")
        key = auth.partition(" ")[2]
        text = f"upstream refused the credentials: Authorization: {auth}; key {key} is unknown"
        proto.reply(500, evalgate_sim_error_body(text, "server_error", None))


def _usual(proto: EvalgateSimProtocol, ctx: EvalgateSimAnswerContext) -> None:
    if ctx.stream:
        proto.stream(200, EvalgateSimStream(ctx.kind, ctx.rid, ctx.model, ctx.plan, ctx.usage).run)
    else:
        proto.reply(200, evalgate_sim_full_body(ctx.kind, ctx.rid, ctx.model, ctx.plan))


def _huge(plan: EvalgateSimPlan, body: Mapping[str, object]) -> EvalgateSimPlan:
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    chars = max(16 * 1024, 64 * limit) if isinstance(limit, int) else 2 * 1024 * 1024
    tokens = (_HUGE_PIECE,) * (chars // len(_HUGE_PIECE) + 1)
    return dataclasses.replace(plan, tokens=tokens, finish="stop", tpot_s=0.0)


def _lie(proto: EvalgateSimProtocol, ctx: EvalgateSimAnswerContext) -> None:
    if ctx.stream:  # the connection dies half-way through a Content-Length-framed stream
        stream = EvalgateSimStream(ctx.kind, ctx.rid, ctx.model, ctx.plan, ctx.usage)
        tokens = ctx.plan.tokens or ("",)
        data = b"".join(stream.token(i, t, None) for i, t in enumerate(tokens)) + stream.tail()
        proto.send_short(200, "text/event-stream", data[: len(data) // 2], len(data))
    else:
        data = evalgate_sim_full_body(ctx.kind, ctx.rid, ctx.model, ctx.plan)
        proto.send_short(200, "application/json", data, 2 * len(data))


def _error_in_200(proto: EvalgateSimProtocol, ctx: EvalgateSimAnswerContext) -> None:
    text = "the engine failed while generating (evalgate simulator)"
    error = {"error": {"message": text, "type": "server_error", "code": 500}}
    if ctx.stream:

        async def run(sink: EvalgateSimEventSink) -> None:
            sink.write_events(b"data: " + json.dumps(error).encode() + b"\n\ndata: [DONE]\n\n")

        proto.stream(200, run)
    else:
        proto.reply(200, json.dumps(error).encode())


def _bogus_usage(proto: EvalgateSimProtocol, ctx: EvalgateSimAnswerContext) -> None:
    if ctx.stream:
        stream = _BogusUsageStream(ctx.kind, ctx.rid, ctx.model, ctx.plan, True)
        proto.stream(200, stream.run)
        return
    body = json.loads(evalgate_sim_full_body(ctx.kind, ctx.rid, ctx.model, ctx.plan))
    body["usage"] = EVALGATE_SIM_BOGUS_USAGE
    proto.reply(200, json.dumps(body).encode())


class _TruncatedStream(EvalgateSimStream):
    """Half the token events, then nothing: no finish event, no usage, no ``[DONE]``."""

    async def run(self, sink: EvalgateSimEventSink) -> None:
        tokens = self.plan.tokens or ("",)
        half = tokens[: max(1, len(tokens) // 2)]
        sink.write_events(b"".join(self.token(i, t, None) for i, t in enumerate(half)))


class _BogusUsageStream(EvalgateSimStream):
    """The usual stream whose usage event carries impossible numbers."""

    def tail(self) -> bytes:
        out = self.token(max(len(self.plan.tokens), 1), None, self.plan.finish)
        out += self.event([], usage=EVALGATE_SIM_BOGUS_USAGE)
        return out + b"data: [DONE]\n\n"
