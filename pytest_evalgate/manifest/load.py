"""Load and validate a suite's manifest (``evalgate.yaml``) and its dataset.

Everything is refused before any request: unknown or missing keys, wrong types (the schema,
``manifest_schema``), a dataset whose sha256 differs from the pin, duplicate case ids and
unreadable rows (``manifest_dataset``), ``shards < 1``, and the judge refusals of SPEC section 10
(``manifest_judge``). Each refusal is an ``EvalgateConfigError`` naming the file, the key (or
line) and the reason.

The **definition digest** covers what changes what a result means (dataset digest and revision,
prompt, evaluator, generation, repetitions, API kind; for a judged suite not the judge, whose key
is the suite's second digest) and nothing about transport
(endpoints, budget, shards, timeouts). The **candidate key** is the candidate's name plus a digest
of its model id and pins.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from pytest_evalgate.dialogue.fixture import EvalgateToolFixture
from pytest_evalgate.errors import EvalgateConfigError, EvalgateYamlError
from pytest_evalgate.formats.canonical import evalgate_file_sha256, evalgate_sha256_hex
from pytest_evalgate.formats.strictmodel import EvalgateBudgetSchema
from pytest_evalgate.formats.yamlread import evalgate_load_yaml
from pytest_evalgate.judge.spec import EvalgateJudgeConfig
from pytest_evalgate.manifest.choice import (
    evalgate_check_choice_keys,
    evalgate_choice_delimiter,
    evalgate_choice_method,
)
from pytest_evalgate.manifest.code import (
    EvalgateSandboxBlock,
    evalgate_check_code_keys,
    evalgate_evaluator_definition,
    evalgate_sandbox_block,
    evalgate_sandbox_definition,
    evalgate_sandbox_settings,
)
from pytest_evalgate.manifest.context import evalgate_check_context
from pytest_evalgate.manifest.dataset import EvalgateCase, evalgate_read_cases
from pytest_evalgate.manifest.exclude import EvalgateExclusion, evalgate_exclude
from pytest_evalgate.manifest.judge import (
    EvalgateJudged,
    evalgate_definition_evaluator,
    evalgate_judged,
)
from pytest_evalgate.manifest.pins import evalgate_check_weights_pins
from pytest_evalgate.manifest.private import evalgate_private_categories
from pytest_evalgate.manifest.schema import (
    EvalgateCandidateSchema,
    EvalgateEvaluatorSchema,
    EvalgateGenerationSchema,
    EvalgateManifestSchema,
    EvalgatePerfSchema,
    EvalgateTierSchema,
    EvalgateToolsSchema,
)
from pytest_evalgate.manifest.tools import evalgate_manifest_tools, evalgate_tools_definition
from pytest_evalgate.manifest.url import evalgate_check_base_url

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


@dataclass(frozen=True)
class EvalgateCandidate:
    """A model under test: its endpoint(s), key env var name, pins and candidate key;
    ``model_rewrite``: its answers' reported model is not compared with ``model``."""

    name: str
    model: str
    base_urls: tuple[str, ...]
    api_key_env: str | None
    pins: Mapping[str, Any]
    key: str
    model_rewrite: bool = False


@dataclass(frozen=True)
class EvalgateManifest:
    """A validated manifest with its dataset loaded and its digests computed.

    Its blocks are the schema's validated (frozen) models, defaults filled in: callers read
    typed attributes (``manifest.budget.max_concurrency``), never re-cast a mapping. The
    digests were computed from the blocks' dumps (``definition``) and do not depend on them.
    """

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
    generation: EvalgateGenerationSchema
    evaluator: EvalgateEvaluatorSchema
    candidates: Mapping[str, EvalgateCandidate]
    budget: EvalgateBudgetSchema
    judge: EvalgateJudgeConfig | None
    perf: EvalgatePerfSchema | None
    canary: str | None
    definition: Mapping[str, Any]
    definition_digest: str
    cases: tuple[EvalgateCase, ...] = field(repr=False)
    tiers: Mapping[str, EvalgateTierSchema] = field(default_factory=dict)  # selection, not meaning
    sandbox: EvalgateSandboxBlock | None = None  # scorer: code only, defaults filled in
    judged: EvalgateJudged | None = field(default=None, repr=False)
    private: tuple[str, ...] = ()  # held-out categories; outside the digest, like tiers
    tools: EvalgateToolsSchema | None = None  # SPEC 17: the loop's limits
    fixture: EvalgateToolFixture | None = field(default=None, repr=False)  # its tools
    # dataset.exclude: left out of ``cases``, recorded in the decision; their stored records
    # still pass the suite check (aggregate.suitecheck)
    exclusions: tuple[EvalgateExclusion, ...] = ()
    excluded_cases: tuple[EvalgateCase, ...] = field(default=(), repr=False)

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
    excluded = evalgate_exclude(
        path, tuple(evalgate_read_cases(path, dataset_path, model)), model.dataset.exclude
    )
    cases = excluded.kept
    fixture = evalgate_manifest_tools(path, suite_dir, model, cases)
    definition = {**_definition(model, actual), **evalgate_tools_definition(model, fixture)}
    candidates = _candidates(model)
    for name, candidate in candidates.items():
        evalgate_check_weights_pins(path, name, candidate.pins)  # weights image = digest
    _check_context(path, dataset_path, model, cases, candidates)
    judged = evalgate_judged(path, suite_dir, model.evaluator, model.judge, candidates)
    if judged is not None:
        _check_golden(judged, cases)
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
        generation=model.generation,
        evaluator=model.evaluator,
        candidates=candidates,
        budget=model.budget,
        judge=model.judge,
        perf=model.perf,
        canary=model.canary,
        definition=definition,
        definition_digest=evalgate_sha256_hex(definition),
        cases=cases,
        tiers=dict(model.tiers),
        sandbox=evalgate_sandbox_block(model.evaluator.scorer, model.sandbox),
        judged=judged,
        private=evalgate_private_categories(path, model.private, cases),
        tools=model.tools,
        fixture=fixture,
        exclusions=excluded.exclusions,
        excluded_cases=excluded.left_out,
    )


def _check_context(
    path: str,
    dataset_path: str,
    model: EvalgateManifestSchema,
    cases: tuple[EvalgateCase, ...],
    candidates: Mapping[str, EvalgateCandidate],
) -> None:
    # A case longer than a candidate's pinned max_model_len is refused here (SPEC 18), naming
    # the case: the server would refuse it after the run had started.
    loglik = evalgate_choice_method(model) == "loglikelihood"
    delimiter = evalgate_choice_delimiter(model.evaluator.options) if loglik else None
    output = 1 if loglik else model.generation.max_tokens
    pins = {name: c.pins for name, c in candidates.items()}
    evalgate_check_context(path, dataset_path, cases, pins, delimiter, output)


def _check_golden(judged: EvalgateJudged, cases: tuple[EvalgateCase, ...]) -> None:
    # A golden set is read whole at load, like the dataset: a bad row is a configuration error
    # naming its file and line before any request (it was an INTERNALERROR when the judge's
    # simulator or the calibration first read it). Imported only for judged suites (numpy).
    path = judged.judge.golden_path
    if path is None:
        return
    from pytest_evalgate.judge.golden import evalgate_load_golden

    evalgate_load_golden(path, judged.evaluator, {case.case_id for case in cases})


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


def _validate(path: str, raw: object) -> EvalgateManifestSchema:
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


def _check_semantics(path: str, model: EvalgateManifestSchema) -> None:
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


def _dataset_digest(path: str, dataset_path: str) -> str:
    try:
        return evalgate_file_sha256(dataset_path)
    except OSError as exc:
        raise EvalgateConfigError(
            path, "dataset.path", f"cannot read {dataset_path}: {exc.strerror}"
        ) from None


def _check_pin(path: str, model: EvalgateManifestSchema, actual: str) -> None:
    pinned = model.dataset.sha256
    if pinned is None:
        reason = "not pinned: run `evalgate pin` on the suite to record the dataset's sha256"
        raise EvalgateConfigError(path, "dataset.sha256", reason)
    if pinned.lower() != actual:
        reason = f"dataset digest {actual} differs from the pin {pinned}: the dataset changed"
        raise EvalgateConfigError(path, "dataset.sha256", reason)


def _definition(model: EvalgateManifestSchema, dataset_sha256: str) -> dict[str, Any]:
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


def _candidates(model: EvalgateManifestSchema) -> dict[str, EvalgateCandidate]:
    return {name: _candidate(name, spec) for name, spec in model.candidates.items()}


def _candidate(name: str, spec: EvalgateCandidateSchema) -> EvalgateCandidate:
    urls = (spec.base_url,) if isinstance(spec.base_url, str) else tuple(spec.base_url)
    return EvalgateCandidate(
        name=name,
        model=spec.model,
        base_urls=urls,
        api_key_env=spec.api_key_env,
        pins=dict(spec.pins),
        key=evalgate_candidate_key(name, spec.model, spec.pins),
        model_rewrite=spec.model_rewrite,
    )


def evalgate_candidate_key(name: str, model: str, pins: Mapping[str, object]) -> str:
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


def _replace_pin(path: str, text: str, old: object, digest: str) -> str:
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
