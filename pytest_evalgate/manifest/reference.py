"""The manifest's part of the reference (docs/reference.md), generated so it cannot drift.

``evalgate_manifest_reference()`` walks ``EvalgateManifestSchema`` (and every block model under
it) and writes one table row per key: its dotted name (``candidates.<name>.model`` for keys of
a named block), type, whether it is required, its default, its bounds, and the one-line meaning
from ``EVALGATE_KEY_MEANINGS``. ``evalgate_rows_reference()`` does the same for the dataset
row fields the loader accepts (``dataset.EVALGATE_ROW_KEYS``, meanings in
``EVALGATE_ROW_MEANINGS``). A key without a meaning, or a meaning for a key the code does not
have, raises ``KeyError`` (tests/test_reference.py), so a new key cannot land undocumented.
``evalgate_model_rows`` and ``evalgate_table`` are the table writer the policy's part
(``policy.reference``) uses too; ``cli.reference`` puts the parts together.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from pytest_evalgate.manifest.dataset import EVALGATE_ROW_KEYS
from pytest_evalgate.manifest.schema import EvalgateManifestSchema

EVALGATE_KEY_MEANINGS: dict[str, str] = {
    "evalgate": "the manifest format version; only 1",
    "suite": "the suite's name: a safe name, the store's first path component",
    "dataset": "the frozen dataset",
    "dataset.path": "the JSON Lines file of cases, relative to the manifest",
    "dataset.revision": "the dataset's revision; part of every identity",
    "dataset.sha256": "the file's sha256 (`evalgate pin` writes it); a run refuses a mismatch",
    "dataset.exclude": "cases left out on purpose, each `{case, reason}`; the decision lists them",
    "dataset.exclude.case": "the id of a case of the dataset",
    "dataset.exclude.reason": "why it is left out (e.g. longer than the context); not blank",
    "prompt": "how a case becomes a request",
    "prompt.revision": "the prompt's revision; part of the definition digest",
    "prompt.system": "an optional system message",
    "prompt.template": "the user message: `{input}` and other row fields in braces",
    "evaluator": "how an answer is scored",
    "evaluator.revision": "the evaluator's revision; part of the definition digest",
    "evaluator.scorer": "exact, normalized, contains, regex, numeric, code, judge, tools, python:",
    "evaluator.turns": "`turns` rows: a case scores the share of passing turns, or 1/0 with all",
    "evaluator.options": "the scorer's options (e.g. a regex pattern, a numeric tolerance;"
    " for scorer: choice target_delimiter and metric: acc or acc_norm)",
    "evaluator.method": "scorer: choice: loglikelihood (one echoed request per choice, needs"
    " api: completions and stream: false) or generate (the model answers a letter)",
    "evaluator.language": "`scorer: code` only: the language of the answer's code",
    "evaluator.extract": "`scorer: code` only: how the code is taken from the answer",
    "evaluator.pass_at_k": "`scorer: code` only: pass@k over the repetitions",
    "evaluator.mode": "`scorer: judge` only: pointwise or pairwise",
    "evaluator.rubric": "`scorer: judge` only: the rubric file",
    "evaluator.scale": "`scorer: judge` pointwise only: {min, max, pass}",
    "repetitions": "answers per (case, candidate); each is its own identity",
    "shards": "how many shards the cases are split into (one pod each)",
    "shard_plan": "an optional file that assigns cases to shards",
    "api": "chat (`/v1/chat/completions`) or completions (`/v1/completions`)",
    "stream": "stream answers (SSE); TTFT and TPOT are measured only when streamed",
    "generation": "sampling settings sent with every request",
    "generation.temperature": "the sampling temperature",
    "generation.max_tokens": "the answer's token bound",
    "generation.seed": "the request seed (a signed 64-bit integer), offset per repetition",
    "generation.top_p": "nucleus sampling",
    "generation.stop": "stop sequences",
    "candidates": "the models under test, by name (the policy names candidate and baseline)",
    "candidates.<name>.model": "the model id sent in requests",
    "candidates.<name>.base_url": "an OpenAI-compatible base URL (or a list: replicas)",
    "candidates.<name>.api_key_env": "the environment variable holding the API key",
    "candidates.<name>.pins": "what the weights are: weights_digest, family, training_run, ...",
    "candidates.<name>.model_rewrite": (
        "true: a gateway answers under another model name; recorded, not compared (otherwise"
        " an answer reported as another model stops the candidate: `model_mismatch`)"
    ),
    "budget": "the run-wide load budget of the candidates' requests",
    "budget.max_concurrency": "requests in flight across every process of the run",
    "budget.requests_per_second": "a run-wide request rate bound",
    "budget.tokens_per_minute": "a run-wide token rate bound",
    "budget.max_attempts": "attempts per request (only transient errors are retried)",
    "budget.timeout_s": "what one attempt may take; a longer server-asked wait is not waited",
    "judge": "the pinned judge of `scorer: judge` (docs/judges.md)",
    "judge.model": "the judge's model id",
    "judge.base_url": "the judge's OpenAI-compatible base URL",
    "judge.api_key_env": "the environment variable holding the judge's key",
    "judge.revision": "the judge prompt's revision; part of the judge key",
    "judge.temperature": "the judge's temperature (above 0 needs allow_sampling)",
    "judge.seed": "the judge's request seed",
    "judge.max_tokens": "the judge's answer bound (sent as 1024 when not written)",
    "judge.top_p": "the judge's nucleus sampling",
    "judge.pins": "what the judge's weights are",
    "judge.budget": "the judge's own run-wide load budget",
    "judge.budget.max_concurrency": "judge requests in flight across the run",
    "judge.budget.requests_per_second": "a run-wide judge request rate bound",
    "judge.budget.tokens_per_minute": "a run-wide judge token rate bound",
    "judge.budget.max_attempts": "attempts per judge request",
    "judge.budget.timeout_s": "what one judge attempt may take",
    "judge.golden": "people's labels the judge is calibrated against (JSON Lines)",
    "judge.allow_sampling": "allow a judge temperature above 0",
    "perf": "the open-loop load phase behind the perf rules",
    "perf.prompts": "the load phase's prompts (JSON Lines), relative to the manifest",
    "perf.rate": "arrivals per second, sent to candidate and baseline alike",
    "perf.duration_s": "how long arrivals are sent",
    "perf.profile": "constant or poisson arrivals",
    "perf.warmup_s": "the first seconds left out of the measurement",
    "perf.seed": "the arrival and prompt draw seed",
    "perf.max_tokens": "the load phase's answer bound",
    "perf.sweep": "arrival rates of the capacity sweep (increasing): one more window per rate, "
    "for `max_rate_at_slo`",
    "canary": "a canary string: answers holding it count as contamination hits",
    "tiers": "stable subsets of the cases, by name (`--evalgate-tier`)",
    "tiers.<name>.fraction": "the tier's share of the cases",
    "tiers.<name>.seed": "the tier's draw seed",
    "tiers.<name>.policy": "the tier's own policy file",
    "private": "held-out categories; `public_private_gap` rules compare them with the public",
    "sandbox": "`scorer: code` only: the sandbox the answer's code runs in (docs/sandbox.md)",
    "sandbox.isolation": "auto, bwrap, unshare or none (none is never signed)",
    "sandbox.max_concurrency": "sandboxed runs at once across the run",
    "sandbox.timeout_s": "wall time of one run",
    "sandbox.memory_mb": "memory bound of one run",
    "sandbox.cpu_s": "CPU time bound of one run",
    "sandbox.processes": "process bound of one run",
    "sandbox.open_files": "open file bound of one run",
    "sandbox.file_size_mb": "largest file one run may write",
    "sandbox.work_mb": "the run's scratch space",
    "sandbox.runtime_class": "the Kubernetes RuntimeClass of rendered sandbox pods (e.g. gvisor)",
    "tools": "tool calling (docs/dialogue.md): the fixture and the loop's limits",
    "tools.fixture": "the tool fixture file, beside the manifest (tools, schemas, answers)",
    "tools.revision": "must equal the fixture's `revision`; in the definition digest",
    "tools.max_steps": "model calls one identity's loop may make (then `max_steps`)",
    "tools.max_tool_calls": "tool calls one identity's loop may make (then `max_tool_calls`)",
    "tools.timeout_s": "wall time of one identity's loop (then `timeout`)",
}

EVALGATE_ROW_MEANINGS: dict[str, str] = {
    "id": "the case id (a non-empty string, unique in the file); part of every identity",
    "category": "the case's slice: policy rules name categories",
    "target": "the expected answer (a string or number) the scorer compares with; may be left "
    "out of `turns` and `expect` rows",
    "input": "the case's text, rendered through `prompt.template` (one of input, messages, turns)",
    "messages": "a chat history `[{role, content}, ...]` answered once (`api: chat` only)",
    "turns": "a scripted conversation `[{user, target?, check?}, ...]`, each turn after the "
    "model's previous answer (`api: chat` only; docs/dialogue.md)",
    "expect": "a tool case's trajectory checks: required and forbidden calls, call bounds, "
    "final state (`scorer: tools`; docs/dialogue.md)",
    "cluster": "cases that share a source (one document, one template): the gate's bootstrap "
    "resamples clusters, not cases; default: the case id",
    "cost": "the case's relative expected cost (a positive number, default 1): "
    "`evalgate shard-plan` balances shards by it",
    "choices": "`scorer: choice` only: the answer options (at least 2, distinct); `target` is "
    "the right one's index or text (docs/multiple-choice.md)",
    "metadata": "anything else about the case; kept in the dataset, never sent or scored",
}

_TABLE_HEAD = "| key | type | required | default | bounds | meaning |\n|---|---|---|---|---|---|\n"

_MANIFEST_HEAD = """## The manifest (`evalgate.yaml`)

Every key is refused when unknown, and every refusal names the file, the key and the reason
(exit 4, before any request). Judges: docs/judges.md; conversations, tool fixtures and
`expect`: docs/dialogue.md.

"""

_ROWS_HEAD = """## Dataset rows (`dataset.path`, JSON Lines)

One JSON object per line. `id` and `category` are required; `target` too, except in `turns`
and `expect` rows; exactly one of `input`, `messages` or `turns` (`choices` goes with `input`).
Any other key is refused, naming the file, the line and the key.

| field | meaning |
|---|---|
"""


def evalgate_manifest_reference() -> str:
    """The manifest section of docs/reference.md; raises ``KeyError`` naming a key without its
    meaning or a meaning without its key."""
    return _MANIFEST_HEAD + evalgate_table(
        evalgate_model_rows(EvalgateManifestSchema, ""), EVALGATE_KEY_MEANINGS,
        "EVALGATE_KEY_MEANINGS",
    )  # fmt: skip


def evalgate_rows_reference() -> str:
    """The dataset rows section of docs/reference.md, one row per field the loader accepts;
    ``KeyError`` when a field has no meaning or a meaning has no field."""
    evalgate_check_meanings(set(EVALGATE_ROW_KEYS), EVALGATE_ROW_MEANINGS, "EVALGATE_ROW_MEANINGS")
    lines = [f"| `{key}` | {EVALGATE_ROW_MEANINGS[key]} |" for key in EVALGATE_ROW_MEANINGS]
    return _ROWS_HEAD + "\n".join(lines) + "\n"


def evalgate_table(rows: list[tuple[str, str]], meanings: dict[str, str], name: str) -> str:
    """A key table (type, required, default, bounds, meaning) from ``evalgate_model_rows``;
    ``KeyError`` when a key has no entry in ``meanings`` (called ``name`` in the message) or an
    entry has no key."""
    evalgate_check_meanings({key for key, _ in rows}, meanings, name)
    lines = [f"| `{key}` | {cells} | {meanings[key]} |" for key, cells in rows]
    return _TABLE_HEAD + "\n".join(lines) + "\n"


def evalgate_check_meanings(keys: set[str], meanings: dict[str, str], name: str) -> None:
    """``KeyError`` for a meaning whose key is gone, then for a key without its meaning (in the
    table called ``name``)."""
    for stale in sorted(set(meanings) - keys):
        raise KeyError(f"a meaning for {stale}, which the schema does not have")
    for missing in sorted(keys - set(meanings)):
        raise KeyError(f"{missing} has no meaning in {name}")


def evalgate_model_rows(
    model: type[BaseModel], prefix: str, skip: frozenset[str] = frozenset()
) -> list[tuple[str, str]]:
    """``(dotted key, table cells)`` for every field of ``model`` and of the block models under
    it, in declaration order; fields named in ``skip`` are left out (their owner documents
    them)."""
    return [row for row in _rows(model, prefix) if row[0] not in skip]


def _rows(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, str]]:
    for name, field in model.model_fields.items():
        key = prefix + (field.alias or name)
        yield key, _cells(field)
        inner, named = _block(field.annotation)
        if inner is not None:
            yield from _rows(inner, key + (".<name>." if named else "."))


def _block(annotation: object) -> tuple[type[BaseModel] | None, bool]:
    """The block model under a field (and whether its keys are names), or None."""
    origin = typing.get_origin(annotation)
    if origin is dict:
        value = typing.get_args(annotation)[1]
        return (value, True) if _is_model(value) else (None, False)
    for arg in typing.get_args(annotation) or (annotation,):
        if _is_model(arg):
            return arg, False
    return None, False


def _is_model(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel)


def _cells(field: FieldInfo) -> str:
    required = "yes" if field.is_required() else ""
    default = "" if field.is_required() else _default(field)
    return f"{_type(field.annotation)} | {required} | {default} | {_bounds(field)}"


def _default(field: FieldInfo) -> str:
    if field.default is PydanticUndefined:
        return "(empty)" if field.default_factory is not None else ""
    if isinstance(field.default, BaseModel):
        return "(below)"
    return "" if field.default is None else f"`{field.default}`"


def _bounds(field: FieldInfo) -> str:
    parts = []
    for item in [*field.metadata, *_annotated_metadata(field.annotation)]:
        for name, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            value = getattr(item, name, None)
            if value is not None:
                parts.append(f"{sign} {value}")
        if getattr(item, "min_length", None):
            parts.append("not empty")
        if getattr(item, "pattern", None):
            parts.append(f"matches `{item.pattern}`")
    return ", ".join(parts)


def _annotated_metadata(annotation: object) -> list[Any]:
    found: list[Any] = []
    for arg in typing.get_args(annotation):
        if typing.get_origin(arg) is typing.Annotated:
            for extra in typing.get_args(arg)[1:]:
                found += list(getattr(extra, "metadata", [extra]))
    return found


def _type(annotation: object) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin in (typing.Union, types.UnionType):
        if all(_is_model(a) for a in args):
            return "block"  # one of several block kinds (a policy's rules), told apart by a key
        return " \\| ".join(_type(a) for a in args if a is not type(None))
    if origin is list:
        return f"list of {_type(args[0])}"
    if origin is dict:
        return "mapping" if not _is_model(args[1]) else "mapping of blocks"
    if _is_model(annotation):
        return "block"
    if annotation is Any:
        return "any"
    return getattr(annotation, "__name__", str(annotation))
