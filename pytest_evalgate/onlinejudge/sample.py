"""The online judge's counts per version and their Prometheus text exposition.

Per version label: ``seen`` answers read, ``answers`` sampled (``evalgate_online_answers_total``),
``refusals`` among them (``evalgate_online_refusals_total``, by
``shadow.verdict.evalgate_is_refusal``), the judge's scores (``evalgate_online_judge_score``, a
summary on 0..1: ``_sum`` and ``_count``) and the judge's errors by category
(``evalgate_online_judge_errors_total``; an error is never a score). These are the series
``canary.promql`` queries for ``judge_score_delta`` and ``refusal_rate_delta``.

Every version named up front is exported from the start at 0, so Prometheus sees each counter
rise from 0: ``rate()`` over a series whose first sample already holds every answer is 0.

``EvalgateOnlineSampler`` draws each read answer with probability ``rate`` from a
``random.Random(seed)``: the same feed in the same order samples the same answers.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

EVALGATE_SCORE_METRIC = "evalgate_online_judge_score"
EVALGATE_ANSWERS_METRIC = "evalgate_online_answers_total"
EVALGATE_REFUSALS_METRIC = "evalgate_online_refusals_total"
EVALGATE_ERRORS_METRIC = "evalgate_online_judge_errors_total"
EVALGATE_SEEN_METRIC = "evalgate_online_seen_total"
EVALGATE_INFO_METRIC = "evalgate_online_judge_info"
EVALGATE_EXPOSITION_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class EvalgateOnlineSampler:
    """Draws answers with probability ``rate`` in [0, 1], seeded."""

    def __init__(self, rate: float, seed: int) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"a sampling rate is in [0, 1] (got {rate!r})")
        self.rate = rate
        self._random = random.Random(seed)

    def draw(self) -> bool:
        """Whether the next answer is sampled (one draw per answer, also at rate 1)."""
        return self._random.random() < self.rate


@dataclass
class _Version:
    seen: int = 0
    answers: int = 0
    refusals: int = 0
    judged: int = 0
    score_sum: float = 0.0
    errors: Counter[str] = field(default_factory=Counter)


class EvalgateOnlineCounts:
    """The counts per version, thread-safe (the metrics server reads them from its thread)."""

    def __init__(self, versions: Iterable[str] = (), info: dict[str, str] | None = None) -> None:
        self._lock = threading.Lock()
        self._versions: dict[str, _Version] = {version: _Version() for version in versions}
        self._info = dict(info or {})
        self.skipped: Counter[str] = Counter()

    def _of(self, version: str) -> _Version:
        return self._versions.setdefault(version, _Version())

    def seen(self, version: str, sampled: bool, refusal: bool) -> None:
        """One answer read; when ``sampled``, one answer in the sample (refusing or not)."""
        with self._lock:
            counts = self._of(version)
            counts.seen += 1
            counts.answers += sampled
            counts.refusals += sampled and refusal

    def scored(self, version: str, value: float) -> None:
        """One judged answer's 0..1 score."""
        with self._lock:
            counts = self._of(version)
            counts.judged += 1
            counts.score_sum += value

    def failed(self, version: str, category: str) -> None:
        """One sampled answer the judge gave no score for (``judge_<category>``)."""
        with self._lock:
            self._of(version).errors[category] += 1

    def skip(self, reason: str) -> None:
        """One line of the source that is no answer."""
        with self._lock:
            self.skipped[reason] += 1

    def snapshot(self) -> dict[str, Any]:
        """The counts as builtins: ``{"versions": {v: {...}}, "skipped": n, "skipped_reasons"}``."""
        with self._lock:
            versions = {name: _snapshot(v) for name, v in sorted(self._versions.items())}
            skipped = dict(sorted(self.skipped.items()))
            return {
                "versions": versions,
                "skipped": sum(skipped.values()),
                "skipped_reasons": skipped,
            }

    def exposition(self) -> str:
        """The Prometheus text exposition (format 0.0.4) of every count."""
        with self._lock:
            versions = sorted(self._versions.items())
            lines = _family(EVALGATE_INFO_METRIC, "gauge", "the suite and judge key scored with")
            if self._info:
                lines.append(f"{EVALGATE_INFO_METRIC}{_labels(sorted(self._info.items()))} 1")
            text = "judge score of sampled answers, 0..1"
            lines += _family(EVALGATE_SCORE_METRIC, "summary", text)
            for name, v in versions:
                lines.append(f"{EVALGATE_SCORE_METRIC}_sum{_version(name)} {_num(v.score_sum)}")
                lines.append(f"{EVALGATE_SCORE_METRIC}_count{_version(name)} {v.judged}")
            for metric, attribute, text in (
                (EVALGATE_ANSWERS_METRIC, "answers", "sampled answers"),
                (EVALGATE_REFUSALS_METRIC, "refusals", "sampled answers that refuse"),
                (EVALGATE_SEEN_METRIC, "seen", "answers read, sampled or not"),
            ):
                lines += _family(metric, "counter", text)
                lines += [f"{metric}{_version(n)} {getattr(v, attribute)}" for n, v in versions]
            lines += _family(EVALGATE_ERRORS_METRIC, "counter", "sampled answers without a score")
            for name, v in versions:
                for category, count in sorted(v.errors.items()):
                    labels = _labels([("version", name), ("category", category)])
                    lines.append(f"{EVALGATE_ERRORS_METRIC}{labels} {count}")
        return "\n".join(lines) + "\n"


def _snapshot(v: _Version) -> dict[str, Any]:
    mean = None if not v.judged else round(v.score_sum / v.judged, 6)
    return {
        "seen": v.seen, "answers": v.answers, "refusals": v.refusals, "judged": v.judged,
        "score_sum": round(v.score_sum, 9), "mean_score": mean,
        "errors": dict(sorted(v.errors.items())),
    }  # fmt: skip


def _family(name: str, kind: str, text: str) -> list[str]:
    return [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]


def _version(name: str) -> str:
    return _labels([("version", name)])


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{key}="{_escape(value)}"' for key, value in pairs) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(value: float) -> str:
    return repr(float(value))
