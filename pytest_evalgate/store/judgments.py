"""Judgment records (SPEC section 10): a judge's verdict on stored answers, keyed by the
generation identity and the judge key.

Layout: ``<suite>/<definition_digest[:16]>/judge-<judge_key[:16]>/<shard_dir>/seg-....jsonl``,
written by the same ``EvalgateSegmentWriter`` as generation records (atomic segments, nothing
replaced), so a SIGKILL loses only what was not committed and a rerun resumes.

A judgment record is builtins only::

    {"judgment": {"dataset_revision", "case_id", "candidate", "repetition", "order"},
     "judge_key", "definition_digest", "answers": [generation checksums judged],
     "baseline": str | None, "category", "cluster", "output": the judge's raw text | None,
     "verdict": {...} | None, "error": None | {"category", "status", "message"},
     "attempts", "e2e_s", "writer", "started_at", "finished_at", "checksum"}

``order`` is None for a pointwise judgment, ``candidate_first`` or ``baseline_first`` for the
two orders of a pairwise pair, ``golden`` for a judged golden row (``case_id`` then names the
golden line: ``golden:<line>``). ``answers`` ties a judgment to the exact answers it judged: a
judgment whose answers are no longer the stored ones is stale and is judged again.

An errored judgment keeps a bounded excerpt of the judge's text: ``output`` holds at most its
first ``EVALGATE_JUDGE_EXCERPT_CHARS`` characters and the error's message says how many
characters the answer read had and their sha256 (issue 37: a judge answering 8 MB, or a flood of
braces, was stored at up to the client's cap each time, and errored judgments are asked again
by every run). A result keeps its text whole: it is the judge's reasoning behind a verdict.

``evalgate_read_judgments`` verifies every line (fields, checksum, judge key, definition); a
result (``error`` None) supersedes errors; two results for one key and the same answers with
different verdicts are a problem (``EvalgateIntegrityError`` material for the gate).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

from pytest_evalgate.errors import EvalgateStorePathError
from pytest_evalgate.store.backend import EvalgateStoreBackend
from pytest_evalgate.store.reader import EvalgateStoreProblem, evalgate_path_problem
from pytest_evalgate.store.recordcheck import evalgate_judgment_problem
from pytest_evalgate.store.seal import evalgate_checksum_ok, evalgate_seal

EVALGATE_JUDGMENT_FIELDS = frozenset(
    {
        "judgment", "judge_key", "definition_digest", "answers", "baseline", "category",
        "cluster", "output", "verdict", "error", "attempts", "e2e_s", "writer", "started_at",
        "finished_at", "checksum",
    }
)  # fmt: skip
EVALGATE_GOLDEN_ORDER = "golden"
EVALGATE_JUDGE_EXCERPT_CHARS = 4096


class EvalgateJudgmentKey(NamedTuple):
    """What one judgment is of: a generation identity plus the pairwise order (or None)."""

    dataset_revision: str
    case_id: str
    candidate: str
    repetition: int
    order: str | None

    def evalgate_label(self) -> str:
        """``revision/candidate/case[rN]`` plus ``/order`` when there is one."""
        base = f"{self.dataset_revision}/{self.candidate}/{self.case_id}[r{self.repetition}]"
        return base if self.order is None else f"{base}/{self.order}"


def evalgate_judgment_prefix(suite: str, definition_digest: str, judge_key: str) -> str:
    """The judgment folder of one judge key under one generation definition."""
    return f"{suite}/{definition_digest[:16]}/judge-{judge_key[:16]}"


@dataclass(frozen=True)
class EvalgateJudgmentContext:
    """What every judgment of one suite run shares."""

    judge_key: str
    definition_digest: str
    writer: str


def evalgate_judgment_record(
    context: EvalgateJudgmentContext,
    key: EvalgateJudgmentKey,
    answers: list[str],
    facts: Mapping[str, Any],
    verdict: Mapping[str, Any],
) -> dict[str, Any]:
    """The sealed judgment of ``key``. ``facts`` holds ``baseline``, ``category``, ``cluster``,
    ``output``, ``attempts``, ``e2e_s``, ``started_at``, ``finished_at``; ``verdict`` is
    ``parse.evalgate_verdict_json``'s ``{"verdict", "error"}`` (or a judge endpoint error).
    An errored judgment's output is cut to its excerpt (module docstring)."""
    output, error = evalgate_errored_excerpt(facts.get("output"), verdict["error"])
    return dict(
        evalgate_seal(
            {
                "judgment": {**key._asdict()},
                "judge_key": context.judge_key,
                "definition_digest": context.definition_digest,
                "answers": list(answers),
                "baseline": facts.get("baseline"),
                "category": facts["category"],
                "cluster": facts["cluster"],
                "output": output,
                "verdict": verdict["verdict"],
                "error": error,
                "attempts": int(facts.get("attempts", 0)),
                "e2e_s": float(facts.get("e2e_s", 0.0)),
                "writer": context.writer,
                "started_at": facts["started_at"],
                "finished_at": facts["finished_at"],
            }
        )
    )


def evalgate_errored_excerpt(
    output: str | None, error: Mapping[str, Any] | None
) -> tuple[str | None, Mapping[str, Any] | None]:
    """``(output, error)`` as an errored judgment stores them: the output cut to
    ``EVALGATE_JUDGE_EXCERPT_CHARS`` characters, the error's message saying what was cut."""
    if error is None or output is None or len(output) <= EVALGATE_JUDGE_EXCERPT_CHARS:
        return output, error
    digest = hashlib.sha256(output.encode("utf-8", "surrogatepass")).hexdigest()
    cut = (
        f"{error['message']} [the judge's answer read had {len(output)} characters, sha256 "
        f"{digest}; its first {EVALGATE_JUDGE_EXCERPT_CHARS} are kept]"
    )
    return output[:EVALGATE_JUDGE_EXCERPT_CHARS], {**error, "message": cut}


@dataclass
class EvalgateJudgmentView:
    """The verified judgments of one folder: results and errors by key, and problems."""

    results: dict[EvalgateJudgmentKey, dict[str, Any]] = field(default_factory=dict)
    errors: dict[EvalgateJudgmentKey, dict[str, Any]] = field(default_factory=dict)
    duplicates: int = 0
    problems: list[EvalgateStoreProblem] = field(default_factory=list)

    def evalgate_current(
        self, key: EvalgateJudgmentKey, answers: list[str]
    ) -> dict[str, Any] | None:
        """The judgment of ``key`` on exactly ``answers`` (a result first, else an error)."""
        for table in (self.results, self.errors):
            found = table.get(key)
            if found is not None and found["answers"] == answers:
                return found
        return None

    def evalgate_take(self, record: Mapping[str, object], where: str) -> None:
        """Merge one verified judgment (see the module contract)."""
        key = evalgate_judgment_key_of(record)
        if record["error"] is not None:
            current = self.results.get(key)
            if current is None or current["answers"] != record["answers"]:
                self.errors[key] = dict(record)
            return
        self._merge(key, dict(record), where)

    def _merge(self, key: EvalgateJudgmentKey, record: dict[str, Any], where: str) -> None:
        existing = self.results.get(key)
        if existing is None or existing["answers"] != record["answers"]:
            self.results[key] = record
            self.errors.pop(key, None)
        elif existing["verdict"] == record["verdict"]:
            self.duplicates += 1
        else:
            reason = "conflicting judgment: same answers, a different verdict"
            self.problems.append(EvalgateStoreProblem(where, 0, key.evalgate_label(), reason))


def evalgate_judgment_key_of(record: Mapping[str, Any]) -> EvalgateJudgmentKey:
    """The key of a judgment record's ``judgment`` member."""
    part = record["judgment"]
    return EvalgateJudgmentKey(
        str(part["dataset_revision"]),
        str(part["case_id"]),
        str(part["candidate"]),
        int(part["repetition"]),
        None if part["order"] is None else str(part["order"]),
    )


def evalgate_read_judgments(
    backend: EvalgateStoreBackend, prefix: str, context: EvalgateJudgmentContext
) -> EvalgateJudgmentView:
    """Read and verify every committed judgment under ``prefix``."""
    view = EvalgateJudgmentView()
    try:
        listed = backend.evalgate_list(prefix)
    except EvalgateStorePathError as exc:
        evalgate_path_problem(view.problems, prefix, exc)
        return view
    for relpath in listed:
        try:
            data = backend.evalgate_read(relpath)
        except EvalgateStorePathError as exc:
            evalgate_path_problem(view.problems, relpath, exc)
            continue
        for number, line in enumerate(data.split(b"\n"), start=1):
            if line.strip():
                _take_line(view, relpath, number, line, context)
    return view


def _take_line(
    view: EvalgateJudgmentView,
    relpath: str,
    number: int,
    line: bytes,
    context: EvalgateJudgmentContext,
) -> None:
    record, reason = _parse(line, context)
    if record is None:
        view.problems.append(EvalgateStoreProblem(relpath, number, "<judgment>", reason))
        return
    view.evalgate_take(record, f"{relpath}:{number}")


def _parse(line: bytes, context: EvalgateJudgmentContext) -> tuple[dict[str, Any] | None, str]:
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None, "malformed line (not JSON): a truncated or corrupted judgment"
    if not isinstance(record, dict) or set(record) != EVALGATE_JUDGMENT_FIELDS:
        return None, "malformed judgment: fields differ from the judgment schema"
    problem = evalgate_judgment_problem(record)  # types and NaN, before the checksum
    if problem is not None:
        return None, problem
    if not evalgate_checksum_ok(line, record):
        return None, "checksum mismatch: the judgment was altered or corrupted"
    if record["judge_key"] != context.judge_key:
        return None, f"foreign judge key {str(record['judge_key'])[:16]}"
    if record["definition_digest"] != context.definition_digest:
        return None, f"foreign definition digest {str(record['definition_digest'])[:16]}"
    return cast(dict[str, Any], record), ""
