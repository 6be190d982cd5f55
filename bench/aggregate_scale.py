"""Gating a store of 1,000,000 identities written by 16 shards: time and peak RSS, one run.

The generator writes a suite of ``--cases`` cases (default 250,000, clusters of 4, 8
categories) x 2 candidates x 2 repetitions = 1,000,000 identities, and their sealed records
directly through the store's own writer (``EvalgateSegmentWriter``, one writer per shard
``shard-<i>-of-16``, segments of 512 records, each case in its shard by ``shard_for``), as 16
shard pods of an Indexed Job would leave them. Then ``evalgate gate`` runs as a child process on
the store: every record read and verified (checksum, expectations), exactly-once checked, the gate
input built and the policy (non-inferiority over all and per category, error-rate delta, 1,000
bootstrap resamples) evaluated. Its wall time, CPU and peak RSS (the process tree, sampled every
20 ms) are printed.

Run: ``python bench/aggregate_scale.py [--cases 250000] [--keep DIR]``. Prints numbers, asserts
nothing. Writing the store takes a while (about 1 GB of segments); ``--keep DIR`` writes it once
into DIR and reuses it on the next run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _tree import run_tree

from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.shard.plan import shard_for
from pytest_evalgate.store import (
    EvalgateIdentity,
    EvalgateLocalStore,
    EvalgateSegmentWriter,
    evalgate_candidate_prefix,
    evalgate_record,
    evalgate_use_generation,
)

SHARDS = 16
REPETITIONS = 2
CANDIDATES = ("candidate", "baseline")


def write_suite(folder: Path, cases: int) -> Path:
    rows = [{"id": f"c{i:07d}", "input": f"q {i}?", "target": f"a {i}", "category": f"k{i % 8}",
             "cluster": f"g{i // 4}"} for i in range(cases)]  # fmt: skip
    data = "".join(json.dumps(row) + "\n" for row in rows).encode()
    (folder / "cases.jsonl").write_bytes(data)
    url = "http://127.0.0.1:1/v1"
    manifest = {
        "evalgate": 1, "suite": "scale",
        "dataset": {"path": "cases.jsonl", "revision": "s1",
                    "sha256": hashlib.sha256(data).hexdigest()},
        "prompt": {"revision": "p1", "template": "{input}"},
        "evaluator": {"revision": "r1", "scorer": "exact"},
        "repetitions": REPETITIONS,
        "candidates": {name: {"model": f"m-{name}", "base_url": url} for name in CANDIDATES},
    }  # fmt: skip
    (folder / "evalgate.yaml").write_text(json.dumps(manifest), encoding="utf-8")
    gate = ["version: scale", "candidate: candidate", "baseline: baseline",
            "bootstrap: {resamples: 1000, seed: 0}", "rules:",
            "  - {slice: all, rule: non_inferior, margin: 0.02}",
            *(f"  - {{slice: k{k}, rule: non_inferior, margin: 0.05}}" for k in range(8)),
            "  - {metric: error_rate, rule: max_delta, max_delta: 0.01}"]  # fmt: skip
    (folder / "gate.yaml").write_text("\n".join(gate) + "\n", encoding="utf-8")
    return folder / "evalgate.yaml"


def outcome(i: int, rep: int, passed: bool) -> dict[str, object]:
    return {
        "output": f"a {i}" if passed else f"wrong {i}", "finish_reason": "stop", "attempts": 1,
        "error": None,
        "timing": {"queued_s": 0.001, "ttft_s": None, "tpot_s": None, "e2e_s": 0.05 + rep / 1e3,
                   "itl_p95_s": None},
        "usage": {"prompt_tokens": 12, "completion_tokens": 4},
        "started_at": "2026-12-01T12:00:00+00:00", "finished_at": "2026-12-01T12:00:00.05+00:00",
    }  # fmt: skip


def write_store(folder: Path, store: Path) -> int:
    manifest = evalgate_load_manifest(str(folder / "evalgate.yaml"))
    backend = EvalgateLocalStore(str(store))
    writers = [EvalgateSegmentWriter(backend, f"shard-{s}-of-{SHARDS}", writer=f"w{s}")
               for s in range(SHARDS)]  # fmt: skip
    written = 0
    for name in CANDIDATES:
        key = manifest.candidates[name].key
        prefix = evalgate_candidate_prefix(manifest.suite, manifest.definition_digest, key)
        generation = evalgate_use_generation(backend, prefix)
        for i, case in enumerate(manifest.cases):
            writer = writers[shard_for(case.case_id, SHARDS)]
            for rep in range(REPETITIONS):
                # candidate passes 90 %, baseline 91 %: a real, small difference.
                passed = (i * 7 + rep + (name == "baseline")) % 100 >= 10 - (name == "baseline")
                record = evalgate_record(
                    EvalgateIdentity(manifest.dataset_revision, case.case_id, name, rep),
                    outcome(i, rep, passed),  # type: ignore[arg-type]
                    lambda output, target=case.target: (float(output == target), output == target),
                    definition_digest=manifest.definition_digest, candidate_key=key,
                    category=case.category, cluster=case.cluster,
                    shard=shard_for(case.case_id, SHARDS), writer=writer.writer,
                )  # fmt: skip
                writer.evalgate_add(generation, record)
                writer.evalgate_maybe_commit()
                written += 1
    for writer in writers:
        writer.evalgate_commit()
    return written


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=250_000)
    parser.add_argument("--keep", help="write the suite and store here once, reuse afterwards")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="evalgate-aggscale-") as scratch:
        folder = Path(options.keep or scratch)
        folder.mkdir(parents=True, exist_ok=True)
        store = folder / "store"
        done = folder / "WRITTEN"
        if not done.exists() or done.read_text() != str(options.cases):
            start = time.perf_counter()
            write_suite(folder, options.cases)
            written = write_store(folder, store)
            done.write_text(str(options.cases))
            print(f"wrote {written} records in {time.perf_counter() - start:.1f} s")
        identities = options.cases * len(CANDIDATES) * REPETITIONS
        size = sum(p.stat().st_size for p in store.rglob("*.jsonl")) / 2**20
        segments = sum(1 for _ in store.rglob("*.jsonl"))
        print(f"store: {identities} identities ({options.cases} cases x 2 candidates x 2 "
              f"repetitions), {SHARDS} shards, {segments} segments, {size:.0f} MB; "
              f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}")  # fmt: skip
        argv = [sys.executable, "-m", "pytest_evalgate.cli", "gate", str(folder),
                "--store", str(store)]  # fmt: skip
        row = run_tree(argv, folder)
        print(
            f"evalgate gate: wall {row['wall']:.2f} s, CPU {row['cpu']:.2f} s, "
            f"peak RSS {row['rss']:.0f} MB, exit {row['status']}"
        )
        print("\n".join(str(row["output"]).strip().splitlines()[-12:]))


if __name__ == "__main__":
    main()
