"""The load phase's result: its type, its JSON form, the gate input and the store.

``EvalgatePerfResult`` is what ``perf.evalgate_run_perf`` measured (the definitions of its
fields are in ``perf``'s module docstring and ``docs/timings.md``, section "Load phase");
``to_dict`` and ``evalgate_perf_from_dict`` are its JSON form. ``evalgate_merge_perf`` puts its
samples into a gate input for the ``perf_ratio`` rules: a result that is not judgeable gives
every perf metric empty arrays, so those rules are not evaluated. ``evalgate_save_perf`` commits
a result atomically under the pair's store folder; ``evalgate_load_perf`` reads the newest back.

Pure: no pytest, and no requests: the aggregation pod reads a stored result with it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pytest_evalgate.aggregate.paired import EvalgateGateInput
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.perf.metrics import EVALGATE_PERF_METRICS
from pytest_evalgate.perf.sweep import Step, gate_arrays, step_from_dict
from pytest_evalgate.stats import evalgate_percentile
from pytest_evalgate.store import EvalgateStoreBackend

FloatArray = npt.NDArray[np.float64]
EvalgatePerfSamples = Mapping[str, tuple[FloatArray, FloatArray]]


# --------------------------------------------------------------------------- the result


@dataclass(frozen=True)
class EvalgatePerfResult:
    """What the load phase measured (seconds and tokens; see the module docstring).

    ``samples`` maps each of ``metrics.EVALGATE_PERF_METRICS`` to (candidate, baseline) arrays
    over the measured window's successful requests; ``from_schedule`` the same for ``ttft`` and
    ``e2e`` counted from the scheduled time. Per-side mappings are keyed by candidate name.
    """

    pair: tuple[str, str]
    profile: str
    duration_s: float
    warmup_s: float
    requested_rate: float
    scheduled_rate: float
    achieved_rate: Mapping[str, float]
    scheduled: int
    completed: Mapping[str, int]
    errors: Mapping[str, Mapping[str, int]]
    delay_p50_s: float
    delay_p95_s: float
    delay_max_s: float
    samples: EvalgatePerfSamples
    from_schedule: EvalgatePerfSamples
    judgeable: bool
    reason: str
    sweep: tuple[Step, ...] = ()  # the capacity sweep (perf.sweep), one step per rate

    def to_dict(self, *, include_samples: bool = True) -> dict[str, Any]:
        """Builtins only (JSON-ready): every field, p50/p95 per metric and side under
        ``percentiles``, and the raw samples as lists unless ``include_samples`` is False."""
        out: dict[str, Any] = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("samples", "from_schedule", "sweep")
        }
        for name in ("delay_p50_s", "delay_p95_s", "delay_max_s"):
            out[name] = _finite(out[name])  # NaN (nothing measured) is not JSON
        out["pair"] = list(self.pair)
        out["achieved_rate"] = dict(self.achieved_rate)
        out["completed"] = dict(self.completed)
        out["errors"] = {name: dict(counts) for name, counts in self.errors.items()}
        out["percentiles"] = _percentiles(self.samples, self.pair)
        out["percentiles_from_schedule"] = _percentiles(self.from_schedule, self.pair)
        if self.sweep:  # only with perf.sweep, so older results keep their form
            out["sweep"] = [step.to_dict() for step in self.sweep]
        if include_samples:
            out["samples"] = _lists(self.samples)
            out["from_schedule"] = _lists(self.from_schedule)
        return out


def _percentiles(samples: EvalgatePerfSamples, pair: tuple[str, str]) -> dict[str, Any]:
    return {
        metric: {
            name: {f"p{q}": _finite(evalgate_percentile(values, q)) for q in (50, 95)}
            for name, values in zip(pair, both, strict=True)
        }
        for metric, both in samples.items()
    }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _lists(samples: EvalgatePerfSamples) -> dict[str, list[list[float]]]:
    return {metric: [cand.tolist(), base.tolist()] for metric, (cand, base) in samples.items()}


def evalgate_perf_from_dict(data: Mapping[str, Any]) -> EvalgatePerfResult:
    """The inverse of ``to_dict()`` (with samples): for a result stored as JSON and read back,
    e.g. by the aggregation pod, which sends no requests."""
    names = [f.name for f in dataclasses.fields(EvalgatePerfResult)]
    skip = ("samples", "from_schedule", "sweep")
    values = {name: data[name] for name in names if name not in skip}
    for name in ("delay_p50_s", "delay_p95_s", "delay_max_s"):
        values[name] = math.nan if values[name] is None else float(values[name])
    values["pair"] = tuple(data["pair"])
    values["samples"] = _arrays(data["samples"])
    values["from_schedule"] = _arrays(data["from_schedule"])
    values["sweep"] = tuple(step_from_dict(step) for step in data.get("sweep", ()))
    return EvalgatePerfResult(**values)


def _arrays(lists: Mapping[str, Sequence[Sequence[float]]]) -> dict[str, tuple[Any, Any]]:
    return {
        m: (np.array(c, dtype=np.float64), np.array(b, dtype=np.float64))
        for m, (c, b) in lists.items()
    }


# --------------------------------------------------------------------------- gate input


def evalgate_merge_perf(
    gate_input: EvalgateGateInput, perf_result: EvalgatePerfResult
) -> EvalgateGateInput:
    """A copy of ``gate_input`` with ``perf`` replaced by the load phase's samples.

    Judgeable: the load phase's samples (the eval phase's perf samples are set aside; their
    1-3 token answers and closed-loop timing say little about serving performance). Not
    judgeable: empty arrays for every metric, so every ``perf_ratio`` rule is "not evaluated"
    and fails; ``perf_result.reason`` says why and belongs in the decision record. The capacity
    sweep's steps are added either way (``sweep.gate_arrays``): each step says itself whether
    its window counts.
    """
    if perf_result.judgeable:
        perf: dict[str, tuple[FloatArray, FloatArray]] = dict(perf_result.samples)
    else:
        perf = {m: (np.zeros(0), np.zeros(0)) for m in EVALGATE_PERF_METRICS}
    if perf_result.sweep:
        perf.update(gate_arrays(perf_result.sweep, perf_result.pair))
    return dataclasses.replace(gate_input, perf=perf)


# --------------------------------------------------------------------------- persistence


def evalgate_perf_prefix(manifest: EvalgateManifest, pair: tuple[str, str]) -> str:
    """Store folder of the load-phase results of one (candidate, baseline) pair."""
    keys = "__".join(manifest.candidates[name].key for name in pair)
    return f"{manifest.suite}/{manifest.definition_digest[:16]}/perf/{keys}"


def evalgate_load_perf(
    backend: EvalgateStoreBackend, manifest: EvalgateManifest, pair: tuple[str, str]
) -> EvalgatePerfResult | None:
    """The newest stored load-phase result for ``pair``, or None."""
    prefix = evalgate_perf_prefix(manifest, pair)
    names = [name for name in backend.evalgate_list(prefix) if name.endswith(".jsonl")]
    if not names:
        return None
    text = backend.evalgate_read(max(names)).decode("utf-8")
    return evalgate_perf_from_dict(json.loads(text))


def evalgate_save_perf(
    backend: EvalgateStoreBackend,
    manifest: EvalgateManifest,
    pair: tuple[str, str],
    result: EvalgatePerfResult,
) -> str:
    """Commit ``result`` atomically under a new, time-ordered name; returns its path."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = f"{evalgate_perf_prefix(manifest, pair)}/perf-{stamp}-{os.getpid()}.jsonl"
    backend.evalgate_write_atomic(path, (json.dumps(result.to_dict()) + "\n").encode("utf-8"))
    return path
