"""The result store: sealed records in atomic, append-only segment files.

Layout (SPEC section 5; docs/store.md)::

    <root>/<suite>/<definition_digest[:16]>/<candidate_key>/gen-<g>/GENERATION.json
    <root>/<suite>/<definition_digest[:16]>/<candidate_key>/gen-<g>/shard-<i>-of-<N>/seg-<writer>-<seq>.jsonl

One job per module:

- ``records``: the record of SPEC section 5 (``EvalgateRecord`` and its parts), the identity
  (``EvalgateIdentity``), the stand-ins of records that do not exist;
- ``seal``: the record builder (``evalgate_record``), the seal and the checksum check;
- ``backend``: the ``EvalgateStoreBackend`` seam and the local folder backend;
- ``s3``: the S3 backend (``s3://bucket/prefix``, conditional puts; boto3 loaded only when used);
- ``location``: a ``--evalgate-store`` value -> its backend (``evalgate_open_store``);
- ``writer``: the segment writer (one per process, atomic segments, nothing replaced);
- ``reader``: verified reading, problems, the incremental follower;
- ``generations``: the folder layout and store generations (``--evalgate-fresh``);
- ``served``: which models and system fingerprints a candidate's records report (SPEC 20).

Import public names from here; the modules are the store's own structure.
"""

from __future__ import annotations

from pytest_evalgate.store.backend import (
    EVALGATE_FAULT_COMMIT_PAUSE_ENV,
    EvalgateLocalStore,
    EvalgateStoreBackend,
    evalgate_check_store_folder,
)
from pytest_evalgate.store.generations import (
    EVALGATE_GENERATION_MARKER,
    evalgate_candidate_prefix,
    evalgate_generation_prefix,
    evalgate_generations,
    evalgate_use_generation,
)
from pytest_evalgate.store.location import evalgate_open_store
from pytest_evalgate.store.reader import (
    EvalgateExpectation,
    EvalgateStoreFollower,
    EvalgateStoreProblem,
    EvalgateStoreView,
    evalgate_read_candidate,
    evalgate_read_generation,
)
from pytest_evalgate.store.records import (
    EVALGATE_OPTIONAL_FIELDS,
    EVALGATE_OUTCOME_FIELDS,
    EVALGATE_RECORD_FIELDS,
    EVALGATE_SERVED_FIELDS,
    EVALGATE_SOURCE_FIELDS,
    EvalgateGrade,
    EvalgateIdentity,
    EvalgateIdentityFields,
    EvalgateOutcome,
    EvalgateRecord,
    EvalgateRecordError,
    EvalgateSandboxFacts,
    EvalgateSource,
    EvalgateStandIn,
    EvalgateTiming,
    EvalgateUsage,
    evalgate_not_requested,
    evalgate_store_failed,
)
from pytest_evalgate.store.s3 import EvalgateS3Store, evalgate_is_s3
from pytest_evalgate.store.seal import (
    evalgate_checksum_ok,
    evalgate_record,
    evalgate_record_line,
    evalgate_seal,
)
from pytest_evalgate.store.served import EvalgateServedBy, evalgate_served_by
from pytest_evalgate.store.writer import (
    EvalgateSegment,
    EvalgateSegmentWriter,
    evalgate_writer_id,
)

__all__ = [
    "EVALGATE_FAULT_COMMIT_PAUSE_ENV",
    "EVALGATE_GENERATION_MARKER",
    "EVALGATE_OPTIONAL_FIELDS",
    "EVALGATE_OUTCOME_FIELDS",
    "EVALGATE_RECORD_FIELDS",
    "EVALGATE_SERVED_FIELDS",
    "EVALGATE_SOURCE_FIELDS",
    "EvalgateExpectation",
    "EvalgateGrade",
    "EvalgateIdentity",
    "EvalgateIdentityFields",
    "EvalgateLocalStore",
    "EvalgateOutcome",
    "EvalgateRecord",
    "EvalgateRecordError",
    "EvalgateS3Store",
    "EvalgateSandboxFacts",
    "EvalgateSegment",
    "EvalgateSegmentWriter",
    "EvalgateServedBy",
    "EvalgateSource",
    "EvalgateStandIn",
    "EvalgateStoreBackend",
    "EvalgateStoreFollower",
    "EvalgateStoreProblem",
    "EvalgateStoreView",
    "EvalgateTiming",
    "EvalgateUsage",
    "evalgate_candidate_prefix",
    "evalgate_check_store_folder",
    "evalgate_checksum_ok",
    "evalgate_generation_prefix",
    "evalgate_generations",
    "evalgate_is_s3",
    "evalgate_not_requested",
    "evalgate_open_store",
    "evalgate_read_candidate",
    "evalgate_read_generation",
    "evalgate_record",
    "evalgate_record_line",
    "evalgate_seal",
    "evalgate_served_by",
    "evalgate_store_failed",
    "evalgate_use_generation",
    "evalgate_writer_id",
]
