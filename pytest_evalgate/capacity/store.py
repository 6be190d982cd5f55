"""What the store measured of a suite's candidates, and the plan inputs built from it
(``evalgate plan``; the arithmetic is ``capacity.py``'s).

Per candidate, the newest generation of its folder is read and verified as aggregation reads it;
every answered record with a ``usage.completion_tokens`` counts (errored identities have no
answer and do not). Assumed figures (``--assume-output-tokens``, ``--tokens-per-s``) replace the
measured ones; a figure that is neither measured nor assumed is refused with the candidate and
the option that would supply it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_evalgate.capacity.plan import EvalgateCapacityInput, EvalgateMeasured, evalgate_measure
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.manifest.choice import evalgate_by_loglikelihood, evalgate_choice_delimiter
from pytest_evalgate.manifest.context import EVALGATE_ESTIMATE_NOTE, evalgate_prefill_tokens
from pytest_evalgate.manifest.load import EvalgateCandidate, EvalgateManifest
from pytest_evalgate.store import (
    EvalgateExpectation,
    EvalgateRecord,
    EvalgateStoreBackend,
    evalgate_candidate_prefix,
    evalgate_read_candidate,
)


@dataclass(frozen=True)
class EvalgateAssumptions:
    """What the user stated instead of measuring (None: take the store's figure)."""

    requests: int | None = None
    tokens_per_request: float | None = None
    tokens_per_s: float | None = None
    gpus_per_replica: int | None = None


def evalgate_measure_candidate(
    backend: EvalgateStoreBackend, manifest: EvalgateManifest, name: str
) -> EvalgateMeasured:
    """Measure candidate ``name`` of ``manifest`` from the store (its answered records)."""
    candidate = manifest.candidates[name]
    prefix = evalgate_candidate_prefix(manifest.suite, manifest.definition_digest, candidate.key)
    expect = EvalgateExpectation(
        manifest.definition_digest, manifest.dataset_revision, candidate.key
    )
    view = evalgate_read_candidate(backend, prefix, expect)
    rows = [_row(record) for record in view.results.values()]
    return evalgate_measure(rows, len(candidate.base_urls))


def evalgate_capacity_input(
    manifest: EvalgateManifest,
    name: str,
    measured: EvalgateMeasured | None,
    assume: EvalgateAssumptions,
) -> EvalgateCapacityInput:
    """The plan input of candidate ``name``: assumed figures first, else measured ones."""
    candidate = manifest.candidates[name]
    requests = assume.requests
    if requests is None:
        requests = len(manifest.cases) * manifest.repetitions
    tokens, tokens_source = _tokens(manifest, name, measured, assume)
    rate, rate_source = _rate(manifest, name, measured, assume)
    gpus = assume.gpus_per_replica
    if gpus is None:
        gpus = evalgate_pinned_gpus(candidate)
    loglik = evalgate_by_loglikelihood(manifest.evaluator)
    delimiter = evalgate_choice_delimiter(manifest.evaluator.options) if loglik else None
    prefill = evalgate_prefill_tokens(manifest.cases, delimiter) * manifest.repetitions
    return EvalgateCapacityInput(
        name, requests, tokens, tokens_source, rate, rate_source, gpus,
        prefill_tokens=float(prefill) if assume.requests is None else None,
        prefill_source=f"the suite's prompts, {EVALGATE_ESTIMATE_NOTE}",
    )  # fmt: skip


def evalgate_pinned_gpus(candidate: EvalgateCandidate) -> int:
    """GPUs of one replica from the pins: ``tensor_parallel`` x ``pipeline_parallel`` (each 1
    when absent or not a positive integer)."""
    gpus = 1
    for key in ("tensor_parallel", "pipeline_parallel"):
        value = candidate.pins.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            gpus *= value
    return gpus


def _tokens(
    manifest: EvalgateManifest,
    name: str,
    measured: EvalgateMeasured | None,
    assume: EvalgateAssumptions,
) -> tuple[float, str]:
    if assume.tokens_per_request is not None:
        return assume.tokens_per_request, "assumed"
    if measured is None or measured.records == 0:
        reason = "no stored answer with a token count: run the suite, or --assume-output-tokens"
        raise EvalgateConfigError(manifest.path, f"candidate {name}", reason)
    return measured.tokens_per_request, f"measured over {measured.records} stored answers"


def _rate(
    manifest: EvalgateManifest,
    name: str,
    measured: EvalgateMeasured | None,
    assume: EvalgateAssumptions,
) -> tuple[float, str]:
    if assume.tokens_per_s is not None:
        return assume.tokens_per_s, "assumed"
    rate = None if measured is None or measured.records == 0 else measured.tokens_per_s
    if rate is None or rate <= 0.0:
        reason = "no stored run to measure output tokens/s from: run the suite, or --tokens-per-s"
        raise EvalgateConfigError(manifest.path, f"candidate {name}", reason)
    assert measured is not None
    busy = f"{measured.output_tokens} tokens over {measured.busy_s:.3f} s busy"
    return rate, f"measured: {busy} on {measured.replicas} replica(s)"


def _row(record: EvalgateRecord) -> tuple[int | None, float, str, str]:
    tokens = record["usage"]["completion_tokens"]
    return tokens, float(record["timing"]["e2e_s"]), record["started_at"], record["finished_at"]
