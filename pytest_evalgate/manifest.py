"""Load and validate a suite's manifest (``evalgate.yaml``) and its dataset.

Everything is refused before any request: unknown or missing keys, wrong types, a dataset whose
sha256 differs from the pin, duplicate case ids, unreadable rows, ``shards < 1``, and the judge
refusals of SPEC section 10 (``manifest_judge``). Each refusal is an ``EvalgateConfigError``
naming the file, the key (or line) and the reason.

The **definition digest** covers what changes what a result means (dataset digest and revision,
prompt, evaluator, generation, repetitions, API kind; for a judged suite not the judge, whose key
is the suite's second digest) and nothing about transport
(endpoints, budget, shards, timeouts). The **candidate key** is the candidate's name plus a digest
of its model id and pins.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator

from pytest_evalgate.canonical import evalgate_file_sha256, evalgate_sha256_hex
from pytest_evalgate.endpoint_url import evalgate_check_base_url
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.jsonlread import evalgate_jsonl_rows
from pytest_evalgate.judge.spec import EvalgateJudgeConfig
from pytest_evalgate.manifest_code import (
    EvalgateSandboxBlock,
    evalgate_check_code_keys,
    evalgate_evaluator_definition,
    evalgate_sandbox_definition,
    evalgate_sandbox_settings,
)
from pytest_evalgate.manifest_judge import (
    EvalgateJudged,
    evalgate_definition_evaluator,
    evalgate_judged,
)
from pytest_evalgate.manifest_pins import evalgate_check_weights_pins
from pytest_evalgate.manifest_private import evalgate_private_categories
from pytest_evalgate.strictmodel import EVALGATE_STRICT_MODEL
from pytest_evalgate.yamlread import EvalgateYamlError, evalgate_load_yaml

EVALGATE_MANIFEST_NAME = "evalgate.yaml"
EVALGATE_BASE_URL_ENV_PREFIX = "PYTEST_EVALGATE_BASE_URL_"


def evalgate_base_url_env(name: str) -> str:
    """``PYTEST_EVALGATE_BASE_URL_<NAME>``: the env var that overrides a candidate's base URL
    (a pod's serving sidecar sets it to localhost).

    Transport only: the definition digest and candidate key do not change.
    """
    return EVALGATE_BASE_URL_ENV_PREFIX + re.sub(r"[^A-Z0-9]", "_", name.upper())


def evalgate_base_url_override(name: str) -> str | None:
    """The base URL that the environment sets for candidate ``name``, if any (empty: none)."""
    return os.environ.get(evalgate_base_url_env(name)) or None


def evalgate_render_template(template: str, text: str) -> str:
    """The one prompt renderer: ``template`` with ``{input}`` replaced by ``text``.

    ``str.format`` rules, for eval items and the load phase alike: ``{{`` and ``}}`` are literal
    braces. Raises ``KeyError``/``IndexError``/``ValueError`` for a template that does not render
    (the manifest loader refuses such a template with its file and key).
    """
    return template.format(input=text)


EVALGATE_SCHEMA_VERSION = 1


def evalgate_manifest_path(suite: str) -> str:
    """A suite folder's manifest (``SUITE/evalgate.yaml``), or ``suite`` itself when it is not a
    folder (a manifest file, or a path the loader then reports as unreadable)."""
    return os.path.join(suite, EVALGATE_MANIFEST_NAME) if os.path.isdir(suite) else suite


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


class _Strict(BaseModel):
    model_config = EVALGATE_STRICT_MODEL


class _Dataset(_Strict):
    path: str
    revision: str
    sha256: str | None = None


class _Prompt(_Strict):
    revision: str
    system: str | None = None
    template: str = "{input}"


class _Evaluator(_Strict):
    revision: str
    scorer: str
    options: dict[str, Any] = Field(default_factory=dict)
    language: str | None = None  # scorer: code only (manifest_code.py), like the two below
    extract: str | None = None
    pass_at_k: int | None = None
    # scorer: judge only (validated by manifest_judge); absent keys stay out of every dump
    mode: Any = None
    rubric: Any = None
    scale: Any = None


class _Generation(_Strict):
    temperature: float = 0.0
    max_tokens: int = Field(default=256, ge=1)
    seed: int | None = None
    top_p: float | None = None
    stop: list[str] | None = None


class _Candidate(_Strict):
    model: str
    base_url: str | list[str]
    api_key_env: str | None = None
    pins: dict[str, str | int | float | bool] = Field(default_factory=dict)

    @field_validator("base_url")
    @classmethod
    def _non_empty(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and not value:
            raise ValueError("needs at least one URL")
        return value


class _Budget(_Strict):
    max_concurrency: int = Field(default=16, ge=1)
    requests_per_second: float | None = Field(default=None, gt=0)
    tokens_per_minute: float | None = Field(default=None, gt=0)
    max_attempts: int = Field(default=4, ge=1, le=20)
    timeout_s: float = Field(default=120.0, gt=0)


class _Perf(_Strict):
    prompts: str
    rate: float = Field(gt=0)
    duration_s: float = Field(gt=0)
    profile: Literal["constant", "poisson"] = "constant"
    warmup_s: float = Field(default=0.0, ge=0)
    seed: int = 0
    max_tokens: int | None = Field(default=None, ge=1)


class _Tier(_Strict):
    fraction: float = Field(gt=0, le=1)
    seed: int = Field(default=0, ge=0)
    policy: str | None = None


class _Manifest(_Strict):
    evalgate: Literal[1]
    suite: str  # a safe name (evalgate_check_name): it is the store's first path component
    dataset: _Dataset
    prompt: _Prompt
    evaluator: _Evaluator
    repetitions: int = Field(default=1, ge=1)
    shards: int = 1
    shard_plan: str | None = None
    api: Literal["chat", "completions"] = "chat"
    stream: bool = True
    generation: _Generation = Field(default_factory=_Generation)
    candidates: dict[str, _Candidate]
    budget: _Budget = Field(default_factory=_Budget)
    judge: EvalgateJudgeConfig | None = None
    perf: _Perf | None = None
    canary: str | None = None
    tiers: dict[str, _Tier] = Field(default_factory=dict)
    private: list[str] = Field(default_factory=list)  # held-out categories (manifest_private)
    sandbox: EvalgateSandboxBlock | None = None


@dataclass(frozen=True)
class EvalgateCase:
    """One dataset row. ``prompt`` is the rendered chat messages list or completion text."""

    case_id: str
    category: str
    cluster: str
    target: str
    cost: float
    prompt: tuple[Mapping[str, str], ...] | str
    line: int

    def evalgate_prompt_json(self) -> list[dict[str, str]] | str:
        """The prompt as builtins, ready for a request body."""
        if isinstance(self.prompt, str):
            return self.prompt
        return [dict(message) for message in self.prompt]


@dataclass(frozen=True)
class EvalgateCandidate:
    """A model under test: its endpoint(s), key env var name, pins and candidate key."""

    name: str
    model: str
    base_urls: tuple[str, ...]
    api_key_env: str | None
    pins: Mapping[str, Any]
    key: str


@dataclass(frozen=True)
class EvalgateManifest:
    """A validated manifest with its dataset loaded and its digests computed."""

    path: str
    suite_dir: str
    suite: str
    dataset_path: str
    dataset_revision: str
    dataset_sha256: str
    repetitions: int
    shards: int
    shard_plan: str | None
    api: str
    stream: bool
    generation: Mapping[str, Any]
    evaluator: Mapping[str, Any]
    candidates: Mapping[str, EvalgateCandidate]
    budget: Mapping[str, Any]
    judge: Mapping[str, Any] | None
    perf: Mapping[str, Any] | None
    canary: str | None
    definition: Mapping[str, Any]
    definition_digest: str
    cases: tuple[EvalgateCase, ...] = field(repr=False)
    tiers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # selection, not meaning
    sandbox: Mapping[str, Any] | None = None  # scorer: code only, defaults filled in
    judged: EvalgateJudged | None = field(default=None, repr=False)
    private: tuple[str, ...] = ()  # held-out categories; outside the digest, like tiers

    def evalgate_case(self, case_id: str) -> EvalgateCase:
        """The case with this id (KeyError if unknown)."""
        return self.evalgate_case_index()[case_id]

    def evalgate_case_index(self) -> dict[str, EvalgateCase]:
        """Case id -> case."""
        return {case.case_id: case for case in self.cases}

    @property
    def categories(self) -> tuple[str, ...]:
        """The suite's categories, sorted."""
        return tuple(sorted({case.category for case in self.cases}))


def evalgate_load_manifest(path: str) -> EvalgateManifest:
    """Load, validate and digest the manifest at ``path`` and its dataset."""
    raw = _read_yaml(path)
    model = _validate(path, raw)
    _check_semantics(path, model)
    suite_dir = os.path.dirname(os.path.abspath(path))
    dataset_path = os.path.join(suite_dir, model.dataset.path)
    actual = _dataset_digest(path, dataset_path)
    _check_pin(path, model, actual)
    cases = tuple(_read_cases(path, dataset_path, model))
    definition = _definition(model, actual)
    candidates = _candidates(model)
    for name, candidate in candidates.items():
        evalgate_check_weights_pins(path, name, candidate.pins)  # weights image = digest
    judged = evalgate_judged(path, suite_dir, model.evaluator, model.judge, candidates)
    return EvalgateManifest(
        path=path,
        suite_dir=suite_dir,
        suite=model.suite,
        dataset_path=dataset_path,
        dataset_revision=model.dataset.revision,
        dataset_sha256=actual,
        repetitions=model.repetitions,
        shards=model.shards,
        shard_plan=os.path.join(suite_dir, model.shard_plan) if model.shard_plan else None,
        api=model.api,
        stream=model.stream,
        generation=model.generation.model_dump(exclude_none=True),
        evaluator=model.evaluator.model_dump(exclude_none=True),
        candidates=candidates,
        budget=model.budget.model_dump(),
        judge=model.judge.model_dump() if model.judge else None,
        perf=model.perf.model_dump() if model.perf else None,
        canary=model.canary,
        definition=definition,
        definition_digest=evalgate_sha256_hex(definition),
        cases=cases,
        tiers={name: tier.model_dump() for name, tier in model.tiers.items()},
        sandbox=evalgate_sandbox_settings(model.evaluator.scorer, model.sandbox),
        judged=judged,
        private=evalgate_private_categories(path, model.private, cases),
    )


def _read_yaml(path: str) -> Any:
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


def _validate(path: str, raw: Any) -> _Manifest:
    if not isinstance(raw, dict):
        raise EvalgateConfigError(path, "-", "the manifest must be a YAML mapping")
    try:
        return _Manifest.model_validate(raw)
    except ValidationError as exc:
        problems = [_describe(error) for error in exc.errors()]
        first_key, first_reason = problems[0]
        rest = "".join(f"; {key}: {reason}" for key, reason in problems[1:])
        raise EvalgateConfigError(path, first_key, first_reason + rest) from None


def _describe(error: Mapping[str, Any]) -> tuple[str, str]:
    key = ".".join(str(part) for part in error["loc"]) or "-"
    kind = error["type"]
    if kind == "extra_forbidden":
        return key, "unknown key"
    if kind == "missing":
        return key, "missing required key"
    return key, str(error["msg"])


def _check_semantics(path: str, model: _Manifest) -> None:
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


def _check_urls(path: str, key: str, value: str | list[str]) -> None:
    urls = [value] if isinstance(value, str) else value
    for index, url in enumerate(urls):
        evalgate_check_base_url(path, key if isinstance(value, str) else f"{key}[{index}]", url)


def _dataset_digest(path: str, dataset_path: str) -> str:
    try:
        return evalgate_file_sha256(dataset_path)
    except OSError as exc:
        raise EvalgateConfigError(
            path, "dataset.path", f"cannot read {dataset_path}: {exc.strerror}"
        ) from None


def _check_pin(path: str, model: _Manifest, actual: str) -> None:
    pinned = model.dataset.sha256
    if pinned is None:
        reason = "not pinned: run `evalgate pin` on the suite to record the dataset's sha256"
        raise EvalgateConfigError(path, "dataset.sha256", reason)
    if pinned.lower() != actual:
        reason = f"dataset digest {actual} differs from the pin {pinned}: the dataset changed"
        raise EvalgateConfigError(path, "dataset.sha256", reason)


def _read_cases(path: str, dataset_path: str, model: _Manifest) -> Iterator[EvalgateCase]:
    seen: dict[str, int] = {}
    for number, row in evalgate_jsonl_rows(path, "dataset.path", dataset_path):
        case = _parse_row(dataset_path, number, row, model)
        if case.case_id in seen:
            where = f"line {number}: id {case.case_id!r}"
            raise EvalgateConfigError(
                dataset_path, where, f"duplicate case id (first on line {seen[case.case_id]})"
            )
        seen[case.case_id] = number
        yield case
    if not seen:
        raise EvalgateConfigError(dataset_path, "-", "the dataset has no cases")


_ROW_KEYS = {"id", "input", "messages", "target", "category", "cluster", "cost", "metadata"}


def _parse_row(dataset_path: str, number: int, row: Any, model: _Manifest) -> EvalgateCase:
    where = f"line {number}"
    if not isinstance(row, dict):
        raise EvalgateConfigError(dataset_path, where, "a row must be a JSON object")
    unknown = sorted(set(row) - _ROW_KEYS)
    if unknown:
        raise EvalgateConfigError(dataset_path, f"{where}: {unknown[0]}", "unknown key")
    case_id = _row_str(dataset_path, where, row, "id")
    where = f"{where}: id {case_id!r}"
    return EvalgateCase(
        case_id=case_id,
        category=_row_str(dataset_path, where, row, "category"),
        cluster=_row_cluster(dataset_path, where, row, case_id),
        target=_row_target(dataset_path, where, row),
        cost=_row_cost(dataset_path, where, row),
        prompt=_render_prompt(dataset_path, where, row, model),
        line=number,
    )


def _row_str(source: str, where: str, row: Mapping[str, Any], key: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value:
        raise EvalgateConfigError(source, f"{where}: {key}", "missing or not a non-empty string")
    return value


def _row_cluster(source: str, where: str, row: Mapping[str, Any], case_id: str) -> str:
    if row.get("cluster") is None:
        return case_id
    return _row_str(source, where, row, "cluster")


def _row_target(source: str, where: str, row: Mapping[str, Any]) -> str:
    value = row.get("target")
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise EvalgateConfigError(source, f"{where}: target", "missing or not a string or number")
    return str(value)


def _row_cost(source: str, where: str, row: Mapping[str, Any]) -> float:
    value = row.get("cost", 1.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise EvalgateConfigError(source, f"{where}: cost", "must be a positive number")
    return float(value)


def _render_prompt(
    source: str, where: str, row: Mapping[str, Any], model: _Manifest
) -> tuple[Mapping[str, str], ...] | str:
    has_input, has_messages = "input" in row, "messages" in row
    if has_input == has_messages:
        raise EvalgateConfigError(source, where, "a row needs exactly one of input or messages")
    if has_messages:
        return _render_messages(source, where, row["messages"], model)
    text = _render_template(source, where, _row_str(source, where, row, "input"), model)
    if model.api == "completions":
        return text
    system = (
        () if model.prompt.system is None else ({"role": "system", "content": model.prompt.system},)
    )
    return (*system, {"role": "user", "content": text})


def _render_template(source: str, where: str, text: str, model: _Manifest) -> str:
    try:
        return evalgate_render_template(model.prompt.template, text)
    except (KeyError, IndexError, ValueError) as exc:
        raise EvalgateConfigError(
            source, f"{where}: prompt.template", f"cannot render: {exc}"
        ) from None


def _render_messages(
    source: str, where: str, messages: Any, model: _Manifest
) -> tuple[Mapping[str, str], ...]:
    if model.api == "completions":
        raise EvalgateConfigError(source, f"{where}: messages", "api: completions needs input rows")
    ok = isinstance(messages, list) and messages and all(_is_message(m) for m in messages)
    if not ok:
        reason = "must be a non-empty list of {role, content} string objects"
        raise EvalgateConfigError(source, f"{where}: messages", reason)
    has_system = messages[0]["role"] == "system"
    system = (
        ()
        if has_system or model.prompt.system is None
        else ({"role": "system", "content": model.prompt.system},)
    )
    return (*system, *({"role": m["role"], "content": m["content"]} for m in messages))


def _is_message(message: Any) -> bool:
    return (
        isinstance(message, dict)
        and set(message) == {"role", "content"}
        and all(isinstance(value, str) for value in message.values())
    )


def _definition(model: _Manifest, dataset_sha256: str) -> dict[str, Any]:
    # The judge is not in the generation's definition: a judged suite's second digest is the
    # judge key (manifest_judge), so a new judge re-judges stored answers, never regenerates.
    return {
        "dataset": {"sha256": dataset_sha256, "revision": model.dataset.revision},
        "prompt": model.prompt.model_dump(),
        "evaluator": evalgate_definition_evaluator(
            evalgate_evaluator_definition(model.evaluator.model_dump(exclude_none=True))
        ),
        "judge": None,
        "generation": model.generation.model_dump(exclude_none=True),
        "repetitions": model.repetitions,
        "api": model.api,
        **evalgate_sandbox_definition(
            evalgate_sandbox_settings(model.evaluator.scorer, model.sandbox)
        ),
    }


def _candidates(model: _Manifest) -> dict[str, EvalgateCandidate]:
    return {name: _candidate(name, spec) for name, spec in model.candidates.items()}


def _candidate(name: str, spec: _Candidate) -> EvalgateCandidate:
    urls = (spec.base_url,) if isinstance(spec.base_url, str) else tuple(spec.base_url)
    return EvalgateCandidate(
        name=name,
        model=spec.model,
        base_urls=urls,
        api_key_env=spec.api_key_env,
        pins=dict(spec.pins),
        key=evalgate_candidate_key(name, spec.model, spec.pins),
    )


def evalgate_candidate_key(name: str, model: str, pins: Mapping[str, Any]) -> str:
    """``<name>-<12 hex>``: the name plus a digest of the model id and its pins."""
    return f"{name}-{evalgate_sha256_hex({'model': model, 'pins': dict(pins)})[:12]}"


def evalgate_pin(path: str) -> str:
    """Write the dataset's sha256 into the manifest's ``dataset.sha256``; returns the digest.

    Only that one value is changed in the file's text, so comments and layout survive.
    """
    raw = _read_yaml(path)
    if not isinstance(raw, dict) or not isinstance(raw.get("dataset"), dict):
        raise EvalgateConfigError(path, "dataset", "missing dataset block")
    dataset_rel = raw["dataset"].get("path")
    if not isinstance(dataset_rel, str):
        raise EvalgateConfigError(path, "dataset.path", "missing or not a string")
    digest = _dataset_digest(
        path, os.path.join(os.path.dirname(os.path.abspath(path)), dataset_rel)
    )
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    new_text = _replace_pin(path, text, raw["dataset"].get("sha256"), digest)
    _atomic_write_text(path, new_text)
    return digest


def _replace_pin(path: str, text: str, old: Any, digest: str) -> str:
    if isinstance(old, str) and old and text.count(old) == 1:
        return text.replace(old, digest)
    if old is None and "dataset: {" in text:
        return text.replace("dataset: {", f'dataset: {{sha256: "{digest}", ', 1)
    raw = yaml.safe_load(text)
    raw["dataset"]["sha256"] = digest
    return str(yaml.safe_dump(raw, sort_keys=False))


def _atomic_write_text(path: str, text: str) -> None:
    temp = f"{path}.tmp-{os.getpid()}"
    with open(temp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)
