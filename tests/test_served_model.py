"""Which weights answered (issue 30, SPEC 20), from inside: the client keeps the ``model`` and
``system_fingerprint`` a response reports and refuses an answer reported as another model
(``model_mismatch``); records keep both fields, older records without them still verify and
aggregate; ``store.evalgate_served_by`` folds records into what the decision records.

The endpoints are real loopback servers: the simulator (its ``served_model`` knob answers as
another model) and the scripted fault server (answers with no ``model`` at all).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from aggregatekit import aggregation_path  # noqa: F401 (autouse: both aggregation paths)
from faultserver import FaultServer, FaultStep
from suitekit import make_cases, write_suite

from pytest_evalgate.aggregate.combine import EvalgateSelection, evalgate_aggregate
from pytest_evalgate.client import (
    EVALGATE_ERROR_CATEGORIES,
    EvalgateCallResult,
    EvalgateClient,
    EvalgateEndpoint,
)
from pytest_evalgate.client.budget import EvalgateLimiter
from pytest_evalgate.client.redact import EVALGATE_REDACTED, evalgate_add_secret
from pytest_evalgate.manifest.load import EvalgateManifest, evalgate_load_manifest
from pytest_evalgate.simulated import EvalgateSimConfig, evalgate_parse_simulated_url
from pytest_evalgate.simulated.server import EvalgateSimServer
from pytest_evalgate.store import (
    EVALGATE_SERVED_FIELDS,
    EvalgateExpectation,
    EvalgateIdentity,
    EvalgateLocalStore,
    EvalgateSegmentWriter,
    evalgate_candidate_prefix,
    evalgate_read_candidate,
    evalgate_record,
    evalgate_seal,
    evalgate_served_by,
)
from pytest_evalgate.store.journal import (
    evalgate_journal_folder,
    evalgate_journal_line,
    evalgate_journal_name,
    evalgate_read_journal,
)

CHAT = {"messages": [{"role": "user", "content": "say hello"}], "max_tokens": 16}
FINGERPRINT = "evalgate-simulator"  # what the simulator reports as its system_fingerprint


def _endpoint(base_url: str, stream: bool, **changes: Any) -> EvalgateEndpoint:
    fields: dict[str, Any] = {
        "base_url": base_url, "model": "m-cand", "api": "chat", "api_key": None,
        "timeout_s": 10.0, "max_attempts": 3, "stream": stream, "model_check": "cand",
    }  # fmt: skip
    fields.update(changes)
    return EvalgateEndpoint(**fields)


def _call(base_url: str, stream: bool, **changes: Any) -> EvalgateCallResult:
    async def main() -> EvalgateCallResult:
        client = EvalgateClient(EvalgateLimiter(2, None, None), rng_seed=1)
        try:
            return await client.call(_endpoint(base_url, stream, **changes), CHAT, "id-1", 40)
        finally:
            await client.aclose()

    return asyncio.run(main())


def _simulated(stream: bool, served_model: str | None, **changes: Any) -> tuple[Any, int]:
    """One call to a simulator answering as ``served_model``; the result and the requests."""
    with EvalgateSimServer(EvalgateSimConfig(served_model=served_model)) as server:
        result = _call(server.base_url, stream, **changes)
        return result, int(server.stats()["completion_arrivals"])


def _fault_call(step: FaultStep, stream: bool, **changes: Any) -> tuple[EvalgateCallResult, int]:
    async def main() -> tuple[EvalgateCallResult, int]:
        async with FaultServer(step) as server:
            client = EvalgateClient(EvalgateLimiter(2, None, None), rng_seed=1)
            try:
                ep = _endpoint(server.base_url, stream, **changes)
                return await client.call(ep, CHAT, "id-1", 40), len(server.arrivals)
            finally:
                await client.aclose()

    return asyncio.run(main())


def _whole(model: object, fingerprint: object = None) -> FaultStep:
    body: dict[str, Any] = {
        "id": "x", "object": "chat.completion", "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "hi"}}],
    }  # fmt: skip
    if fingerprint is not None:
        body["system_fingerprint"] = fingerprint
    return FaultStep(body=body)


# --- the client: what answered ------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_an_answer_keeps_the_reported_model_and_system_fingerprint(stream: bool) -> None:
    result, arrivals = _simulated(stream, None)
    assert result.error is None and result.output
    assert (result.model, result.system_fingerprint) == ("m-cand", FINGERPRINT)
    assert arrivals == 1


@pytest.mark.parametrize("stream", [True, False])
def test_an_answer_without_a_model_is_no_mismatch_and_keeps_null(stream: bool) -> None:
    result, arrivals = _fault_call(FaultStep(), stream)  # the fault server reports no model
    assert result.error is None and result.output == "Hello, world"
    assert (result.model, result.system_fingerprint) == (None, None)
    assert arrivals == 1


@pytest.mark.parametrize("stream", [True, False])
def test_an_answer_reported_as_another_model_is_a_fatal_model_mismatch(stream: bool) -> None:
    result, arrivals = _simulated(stream, "m-other")
    error = result.error
    assert error is not None
    assert (error.category, error.status, error.fatal) == ("model_mismatch", 200, True)
    assert arrivals == 1 and result.attempts == 1  # never retried: it would answer the same
    assert error.message == (
        "candidate 'cand': the endpoint answered as model 'm-other', the manifest says 'm-cand';"
        " the candidate is stopped (set candidates.cand.model_rewrite: true if a gateway"
        " rewrites model names)"
    )
    assert result.model == "m-other"  # what answered is kept for the record


def test_the_comparison_is_exact() -> None:
    for reported in ("M-CAND", "m-cand ", "m-cand-2024-08-06", "openai/m-cand"):
        result, _ = _fault_call(_whole(reported), stream=False)
        assert result.error is not None and result.error.category == "model_mismatch", reported
    result, _ = _fault_call(_whole("m-cand"), stream=False)
    assert result.error is None


@pytest.mark.parametrize("reported", ["", 7, None, ["m-other"]])
def test_a_model_that_is_no_name_is_not_reported(reported: object) -> None:
    result, _ = _fault_call(_whole(reported, fingerprint=3), stream=False)
    assert result.error is None
    assert (result.model, result.system_fingerprint) == (None, None)


@pytest.mark.parametrize("stream", [True, False])
def test_without_a_model_check_another_model_is_recorded_not_compared(stream: bool) -> None:
    result, _ = _simulated(stream, "gateway/m-cand", model_check=None)
    assert result.error is None and result.output
    assert (result.model, result.system_fingerprint) == ("gateway/m-cand", FINGERPRINT)


def test_a_reported_model_is_redacted_and_cut() -> None:
    secret = "sk-served-model-0123456789abcdef"
    evalgate_add_secret(secret)
    result, _ = _fault_call(_whole(f"m-{secret}", "f" * 5000), stream=False, model_check=None)
    assert result.model == f"m-{EVALGATE_REDACTED}"
    assert result.system_fingerprint == "f" * 256
    mismatched, _ = _fault_call(_whole("x" * 5000), stream=False)
    assert mismatched.error is not None and mismatched.model == "x" * 256
    assert "set candidates.cand.model_rewrite: true" in mismatched.error.message  # not cut off


def test_model_mismatch_is_an_error_category() -> None:
    assert "model_mismatch" in EVALGATE_ERROR_CATEGORIES


def test_the_simulator_knob_parses_from_a_url() -> None:
    config = evalgate_parse_simulated_url("simulated://?served_model=other-7b")
    assert config.served_model == "other-7b"


# --- records ----------------------------------------------------------------------------------


def _outcome(**served: Any) -> dict[str, Any]:
    return {
        "output": "4", "finish_reason": "stop", "attempts": 1, "error": None,
        "timing": {"queued_s": 0.0, "ttft_s": None, "tpot_s": None, "e2e_s": 0.1,
                   "itl_p95_s": None},
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
        "started_at": "t0", "finished_at": "t1", **served,
    }  # fmt: skip


def _seal(outcome: dict[str, Any]) -> dict[str, Any]:
    record = evalgate_record(
        EvalgateIdentity("r", "c", "cand", 0), outcome, lambda out: (1.0, True),  # type: ignore[arg-type]
        definition_digest="d" * 64, candidate_key="cand-x", category="k", cluster="c",
        shard=0, writer="w",
    )  # fmt: skip
    return dict(record)


def test_a_record_keeps_the_served_fields_of_its_outcome() -> None:
    record = _seal(_outcome(model="m-cand", system_fingerprint="fp_44709d6fcb"))
    assert (record["model"], record["system_fingerprint"]) == ("m-cand", "fp_44709d6fcb")
    nulls = _seal(_outcome(model=None, system_fingerprint=None))
    assert {key: nulls[key] for key in EVALGATE_SERVED_FIELDS} == dict.fromkeys(
        EVALGATE_SERVED_FIELDS
    )
    older = _seal(_outcome())  # an outcome an older child journaled
    assert not EVALGATE_SERVED_FIELDS & set(older)


def test_an_older_journal_line_and_a_new_one_are_both_replayed(tmp_path: Path) -> None:
    store = EvalgateLocalStore(str(tmp_path))
    folder = evalgate_journal_folder("s/d/k/gen-1", "shard-0-of-1")
    data = (
        evalgate_journal_line("rev/c/a/r0", _outcome())
        + evalgate_journal_line("rev/c/b/r0", _outcome(model="m", system_fingerprint="fp"))
        + evalgate_journal_line("rev/c/c/r0", _outcome(model="m", weights="w"))  # unknown key
    )
    store.evalgate_write_atomic(evalgate_journal_name(folder, "w", 1), data)
    found = evalgate_read_journal(store, "s/d/k/gen-1")
    assert sorted(found) == ["rev/c/a/r0", "rev/c/b/r0"]
    assert found["rev/c/b/r0"].get("system_fingerprint") == "fp"


# --- old and new records in one store: verified and aggregated --------------------------------


@pytest.fixture
def manifest(tmp_path: Path) -> EvalgateManifest:
    cases = make_cases(["alpha"], 4)
    url = "simulated://?accuracy=1.0"
    path = write_suite(tmp_path / "s", {"candidate": url, "baseline": url}, cases=cases)
    return evalgate_load_manifest(str(path))


def _store_record(
    manifest: EvalgateManifest, side: str, case_id: str, served: dict[str, Any]
) -> dict[str, Any]:
    case = manifest.evalgate_case(case_id)
    body: dict[str, Any] = {
        "identity": {"dataset_revision": manifest.dataset_revision, "case_id": case_id,
                     "candidate": side, "repetition": 0},
        "definition_digest": manifest.definition_digest,
        "candidate_key": manifest.candidates[side].key,
        "category": case.category, "cluster": case.cluster, "output": case.target,
        "score": 1.0, "passed": True, "attempts": 1, "error": None,
        "timing": {"queued_s": 0.0, "ttft_s": 0.1, "tpot_s": 0.01, "e2e_s": 0.2,
                   "itl_p95_s": None},
        "usage": {"prompt_tokens": 5, "completion_tokens": 3},
        "finish_reason": "stop", "shard": 0, "writer": "w", "started_at": "t0",
        "finished_at": "t1", **served,
    }  # fmt: skip
    return dict(evalgate_seal(body))


def _write_store(manifest: EvalgateManifest, root: Path, served: dict[str, dict[str, Any]]) -> Any:
    """Every case of both sides; ``served`` maps a case id to its served fields (the other
    cases' records are of the older shape, without them)."""
    store = EvalgateLocalStore(str(root))
    writer = EvalgateSegmentWriter(store, "shard-0-of-1")
    for side in ("candidate", "baseline"):
        key = manifest.candidates[side].key
        prefix = evalgate_candidate_prefix(manifest.suite, manifest.definition_digest, key)
        for case in manifest.cases:
            record = _store_record(manifest, side, case.case_id, served.get(case.case_id, {}))
            writer.evalgate_add(prefix, record)  # type: ignore[arg-type]
    writer.evalgate_commit()
    return store


def _aggregate(store: Any, manifest: EvalgateManifest) -> Any:
    sides = ("candidate", "baseline")
    selection = EvalgateSelection(sides, tuple(case.case_id for case in manifest.cases))
    return evalgate_aggregate(store, manifest, selection, sides)


def test_older_records_without_the_fields_aggregate_beside_new_ones(
    manifest: EvalgateManifest, tmp_path: Path
) -> None:
    served = {"alpha-000": {"model": "model-candidate", "system_fingerprint": "fp_1"},
              "alpha-001": {"model": None, "system_fingerprint": None}}  # fmt: skip
    store = _write_store(manifest, tmp_path / "store", served)
    aggregate = _aggregate(store, manifest)
    assert aggregate.problems == []
    assert (aggregate.status, aggregate.expected, aggregate.completed) == ("complete", 8, 8)
    assert aggregate.rates["candidate"]["all"].passed == 4


def test_a_served_field_of_the_wrong_type_makes_the_record_a_problem(
    manifest: EvalgateManifest, tmp_path: Path
) -> None:
    store = _write_store(manifest, tmp_path / "store", {"alpha-002": {"model": 7}})
    aggregate = _aggregate(store, manifest)
    assert aggregate.status == "invalid"
    reasons = {problem.reason for problem in aggregate.problems}
    assert reasons == {"malformed record: model must be a string or null, not int"}


# --- what the decision records ------------------------------------------------------------------


def test_served_by_folds_the_reported_models_and_fingerprints(
    manifest: EvalgateManifest, tmp_path: Path
) -> None:
    served = {"alpha-000": {"model": "m-a", "system_fingerprint": "fp_1"},
              "alpha-001": {"model": "m-a", "system_fingerprint": "fp_2"},
              "alpha-002": {"model": None, "system_fingerprint": None}}  # fmt: skip
    store = _write_store(manifest, tmp_path / "store", served)
    candidate = manifest.candidates["candidate"]
    prefix = evalgate_candidate_prefix(manifest.suite, manifest.definition_digest, candidate.key)
    expect = EvalgateExpectation(
        manifest.definition_digest, manifest.dataset_revision, candidate.key
    )
    view = evalgate_read_candidate(store, prefix, expect)
    seen = evalgate_served_by(view.results.values())
    assert (seen.models, seen.system_fingerprints) == ({"m-a"}, {"fp_1", "fp_2"})
    assert seen.unreported == 2  # the null one and the older record without the fields
    assert seen.evalgate_fields() == {
        "models": ["m-a"], "system_fingerprints": ["fp_1", "fp_2"], "unreported": 2,
    }  # fmt: skip
    assert json.loads(json.dumps(seen.evalgate_fields())) == seen.evalgate_fields()


def test_served_by_of_no_records_is_empty() -> None:
    seen = evalgate_served_by([])
    assert (seen.models, seen.system_fingerprints, seen.unreported) == (frozenset(), frozenset(), 0)
