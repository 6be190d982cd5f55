"""Results other harnesses produced, turned into store records (SPEC section 19, docs/imports.md).

One job per module:

- ``sample``: what every harness file gives (``HarnessFile``, ``Sample``) and the shared
  helpers (file digest, config digest, score coercion);
- ``lmeval``: lm-evaluation-harness ``samples_<task>_<time>.jsonl`` and the ``results_*.json``
  beside it;
- ``inspect_log``: Inspect ``.eval`` logs (a zip archive whose members are zstd-compressed);
- ``commit``: samples mapped to the suite's identities and committed exactly once through the
  store's segment writer.

Nothing here sends a request: the results are the harness's.
"""

from __future__ import annotations

from pytest_evalgate.imports.commit import ImportReport, import_files
from pytest_evalgate.imports.inspect_log import read_inspect_log
from pytest_evalgate.imports.lmeval import read_lm_eval_samples
from pytest_evalgate.imports.sample import HarnessFile, Sample

__all__ = [
    "HarnessFile",
    "ImportReport",
    "Sample",
    "import_files",
    "read_inspect_log",
    "read_lm_eval_samples",
]
