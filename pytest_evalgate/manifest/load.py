"""Load and validate a suite's manifest (``evalgate.yaml``) and its dataset.

Everything is refused before any request: unknown or missing keys, wrong types (the schema,
``manifest_schema``), a dataset whose sha256 differs from the pin, duplicate case ids and
unreadable rows (``manifest_dataset``), ``shards < 1``, and the judge refusals of SPEC section 10
(``manifest_judge``). Each refusal is an ``EvalgateConfigError`` naming the file, the key (or
line) and the reason.

The file is read and checked by ``manifest.validate``; the dataset's pin is checked (and
written, ``evalgate pin``) by ``manifest.datasetpin``.

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

from pytest_evalgate.dialogue.fixture import EvalgateToolFixture
from pytest_evalgate.formats.canonical import evalgate_sha256_hex
from pytest_evalgate.formats.strictmodel import EvalgateBudgetSchema
from pytest_evalgate.judge.golden import evalgate_load_golden
from pytest_evalgate.judge.spec import EvalgateJudgeConfig
from pytest_evalgate.manifest.choice import evalgate_choice_delimiter, evalgate_choice_method
from pytest_evalgate.manifest.code import (
    EvalgateSandboxBlock,
    evalgate_evaluator_definition,
    evalgate_sandbox_block,
    evalgate_sandbox_definition,
    evalgate_sandbox_settings,
)
from pytest_evalgate.manifest.context import evalgate_check_context
from pytest_evalgate.manifest.dataset import EvalgateCase, evalgate_read_cases
from pytest_evalgate.manifest.datasetpin import check_pin, dataset_digest
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
from pytest_evalgate.manifest.validate import check_semantics, read_yaml, validate

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
    raw = read_yaml(path)
    model = validate(path, raw)
    check_semantics(path, model)
    suite_dir = os.path.dirname(os.path.abspath(path))
    dataset_path = os.path.join(suite_dir, model.dataset.path)
    actual = dataset_digest(path, dataset_path)
    check_pin(path, model, actual)
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
    # simulator or the calibration first read it).
    path = judged.judge.golden_path
    if path is None:
        return
    evalgate_load_golden(path, judged.evaluator, {case.case_id for case in cases})


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
