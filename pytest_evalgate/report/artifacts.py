"""Report folders kept in the store: ``<store>/<suite>/reports/<stem>/``.

Beside the copy of each reported decision (``<suite>/decisions/<stem>.json``, ``history``), the
report step publishes the files of the report folder it wrote (``decision.json``, ``report.md``,
``report.html``, ``forest.png``, ``decision.dsse.json`` when signed) under the same stem, so a
pod without a volume (an S3 store: the aggregation writes to its own ``/tmp``) leaves its report
in the bucket, and any store keeps every report next to the decision it shows. Each file is
published like a segment: atomically, never replacing an object (the stem is unique: UTC time
to the microsecond and the decision's digest). Aggregation never reads these (it lists
``*.jsonl`` under definition folders only).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from pytest_evalgate.report.history import EVALGATE_DECISIONS_FOLDER
from pytest_evalgate.store import EvalgateStoreBackend

EVALGATE_REPORTS_FOLDER = "reports"


def evalgate_report_prefix(kept_decision: str) -> str:
    """The store folder of the report shown by the kept decision ``kept_decision``
    (``<suite>/decisions/<stem>.json`` -> ``<suite>/reports/<stem>``)."""
    suite, folder, name = kept_decision.rsplit("/", 2)
    if folder != EVALGATE_DECISIONS_FOLDER or not name.endswith(".json"):
        raise ValueError(f"{kept_decision}: not a kept decision's path")
    return f"{suite}/{EVALGATE_REPORTS_FOLDER}/{name.removesuffix('.json')}"


def evalgate_keep_report(
    backend: EvalgateStoreBackend, kept_decision: str, paths: Sequence[str]
) -> list[str]:
    """Publish each file of ``paths`` (a written report folder) under the report prefix of
    ``kept_decision``, by its base name; returns the store paths. A taken name raises
    ``FileExistsError`` (nothing is replaced)."""
    prefix = evalgate_report_prefix(kept_decision)
    published = []
    for path in paths:
        with open(path, "rb") as handle:
            data = handle.read()
        relpath = f"{prefix}/{os.path.basename(path)}"
        backend.evalgate_write_atomic(relpath, data)
        published.append(relpath)
    return published
