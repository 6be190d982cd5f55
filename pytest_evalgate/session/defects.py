"""Suite defects: cases whose error is permanent, named with what to change (issue 37).

A case whose request the endpoint refuses as such (``bad_request``, a 400 or 422 whose message
names the request: longer than the context, a parameter of that case) fails the same way on
every run, and kept the verdict ``incomplete`` forever with nothing said. ``EvalgateDefects``
notes each item's record as the item takes it and gives the terminal one line per such case:
the candidates it failed for, the error and the change, down to the ``dataset.exclude`` entry
that leaves it out (``manifest.exclude``). So is a case the judge answered out of format
(``judge_unparseable``) on two runs in a row at temperature 0: the judging stage compares the
stored judgment's error with the new one. Builtins only cross xdist's ``workeroutput``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_evalgate.client.checks import evalgate_names_request

_PERMANENT_STATUS = (400, 422)
EvalgateDefectsJSON = dict[str, dict[str, Any]]  # case id -> {candidates, status, message}


class EvalgateDefects:
    """The permanent per-case errors this process saw (see the module docstring)."""

    def __init__(self) -> None:
        self._cases: EvalgateDefectsJSON = {}

    def evalgate_note(self, case_id: str, candidate: str, record: Mapping[str, Any]) -> None:
        """Note the record an item of ``case_id`` took: kept when its error is permanent."""
        error = record.get("error")
        if not isinstance(error, Mapping) or error.get("category") != "bad_request":
            return
        message = str(error.get("message") or "")
        if error.get("status") not in _PERMANENT_STATUS or not evalgate_names_request(message):
            return
        entry = self._cases.setdefault(
            case_id, {"candidates": [], "status": error.get("status"), "message": message}
        )
        if candidate not in entry["candidates"]:
            entry["candidates"].append(candidate)

    def evalgate_note_judge(self, repeated: Mapping[str, list[str]]) -> None:
        """Note the judging stage's repeats: case id -> candidates whose judgment was
        ``judge_unparseable`` again, at temperature 0 (``runner.judging``)."""
        for case_id, candidates in repeated.items():
            entry = {"kind": "judge", "candidates": list(candidates)}
            self.evalgate_merge({case_id: entry})

    def evalgate_json(self) -> EvalgateDefectsJSON:
        """As builtins, for ``workeroutput``."""
        return {case_id: dict(entry) for case_id, entry in self._cases.items()}

    def evalgate_merge(self, other: Mapping[str, Mapping[str, Any]]) -> None:
        """Add what a worker reported."""
        for case_id, entry in other.items():
            mine = self._cases.setdefault(case_id, {**entry, "candidates": []})
            for candidate in entry["candidates"]:
                if candidate not in mine["candidates"]:
                    mine["candidates"].append(candidate)

    def evalgate_lines(self) -> list[str]:
        """One terminal line per defective case, by case id."""
        return [_line(case_id, self._cases[case_id]) for case_id in sorted(self._cases)]


def _line(case_id: str, entry: Mapping[str, Any]) -> str:
    candidates = ", ".join(sorted(entry["candidates"]))
    exclude = f"dataset.exclude: [{{case: {case_id}, reason: ...}}]"
    if entry.get("kind") == "judge":
        return (
            f"suite defect: case {case_id} ({candidates}): the judge answered it out of format on"
            " two runs in a row at temperature 0 (judge_unparseable); change the rubric or the"
            f" judge's max_tokens, or leave it out with {exclude}"
        )
    message = " ".join(str(entry["message"]).split())
    if len(message) > 200:
        message = message[:200] + "..."
    return (
        f"suite defect: case {case_id} ({candidates}): the endpoint refuses its request on every"
        f" run (bad_request, {message}); shorten or split the case, or"
        f" leave it out with {exclude}"
    )
