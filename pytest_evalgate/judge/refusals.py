"""The judge's refusals (SPEC section 10): checks that raise before any request.

Each is a pure function that raises ``EvalgateConfigError`` naming the file and the key
(``judge.model``, ``judge.base_url``, ``judge.pins.family``, ``judge.pins.training_run``,
``judge.pins.weights_digest``, ``judge.temperature``, ``evaluator.rubric``, ``judge.golden``).
A judge served at a candidate's base URL (``evalgate_endpoint_key``: scheme and host case,
default port and trailing slashes do not count) is the model under test under another name.
``evalgate_check_judge`` runs them all, in that order, before any request.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.judge.spec import EvalgateJudge, EvalgateJudgedEvaluator, evalgate_read_rubric


class EvalgateJudgeCandidate(Protocol):
    """What a refusal needs of a candidate (``manifest.EvalgateCandidate`` has it)."""

    @property
    def model(self) -> str:
        """The candidate's model id."""
        ...  # pragma: no cover

    @property
    def pins(self) -> Mapping[str, Any]:
        """The candidate's pins (``family``, ``training_run``, ...)."""
        ...  # pragma: no cover

    @property
    def base_urls(self) -> tuple[str, ...]:
        """The candidate's endpoint base URLs."""
        ...  # pragma: no cover


def evalgate_refuse_sampling(source: str, judge: EvalgateJudge) -> None:
    """A judge above temperature 0 is refused unless ``allow_sampling: true`` is written."""
    if judge.temperature > 0 and not judge.allow_sampling:
        reason = (
            f"a judge samples at temperature {judge.temperature:g}: its verdicts would not "
            "repeat; use 0 or write allow_sampling: true"
        )
        raise EvalgateConfigError(source, "judge.temperature", reason)


_DEFAULT_PORTS = {"http": 80, "https": 443}
_SHARED_PIN_WHY = {"weights_digest": "the same weights would grade themselves"}


def evalgate_refuse_judge_candidates(
    source: str, judge: EvalgateJudge, candidates: Mapping[str, EvalgateJudgeCandidate]
) -> None:
    """Refuse a judge that is a candidate's model, is served at one of its base URLs, or
    shares its ``family`` / ``training_run`` / ``weights_digest``.

    Model ids compare after stripping and case folding (``Judge-70B`` is ``judge-70b``); HTTP
    base URLs after normalising (``evalgate_endpoint_key``); pins compare exactly, and only
    when both sides have the pin.
    """
    for name, candidate in sorted(candidates.items()):
        if _same_model(judge.model, candidate.model):
            reason = f"the judge is the model under test of candidate {name!r}"
            raise EvalgateConfigError(source, "judge.model", reason)
        _refuse_shared_url(source, judge, name, candidate)
        for pin in ("family", "training_run", "weights_digest"):
            _refuse_shared_pin(source, judge, name, candidate, pin)


def _same_model(left: str, right: str) -> bool:
    return left.strip().casefold() == right.strip().casefold()


def evalgate_endpoint_key(url: str) -> str | None:
    """An HTTP(S) base URL as compared for sameness: scheme and host case-folded, the default
    port dropped, trailing slashes stripped; None for a ``simulated://`` URL (each one starts
    its own simulator) or what is no HTTP URL."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    host = parts.hostname.lower()
    shown_port = "" if port in (None, _DEFAULT_PORTS[scheme]) else f":{port}"
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}{shown_port}{parts.path.rstrip('/')}"


def _refuse_shared_url(
    source: str, judge: EvalgateJudge, name: str, candidate: EvalgateJudgeCandidate
) -> None:
    mine = evalgate_endpoint_key(judge.base_url)
    if mine is None:
        return
    for url in candidate.base_urls:
        if evalgate_endpoint_key(url) == mine:
            reason = (
                f"the judge is served at {mine}, a base URL of candidate {name!r}: the model "
                "under test would grade itself"
            )
            raise EvalgateConfigError(source, "judge.base_url", reason)


def _refuse_shared_pin(
    source: str, judge: EvalgateJudge, name: str, candidate: EvalgateJudgeCandidate, pin: str
) -> None:
    mine, theirs = judge.pins.get(pin), candidate.pins.get(pin)
    if mine is not None and theirs is not None and mine == theirs:
        why = _SHARED_PIN_WHY.get(pin, "a judge never grades its own family")
        reason = f"the judge shares {pin} {mine!r} with candidate {name!r}: {why}"
        raise EvalgateConfigError(source, f"judge.pins.{pin}", reason)


def evalgate_refuse_missing_golden(source: str, judge: EvalgateJudge) -> None:
    """A golden set that is named must be a readable file (``judge.golden``)."""
    path = judge.golden_path
    if path is not None and not os.path.isfile(path):
        raise EvalgateConfigError(source, "judge.golden", f"the golden set {path} does not exist")


def evalgate_check_judge(
    source: str,
    judge: EvalgateJudge,
    evaluator: EvalgateJudgedEvaluator,
    candidates: Mapping[str, EvalgateJudgeCandidate],
) -> None:
    """Every refusal of SPEC section 10, before any request; the first problem raises."""
    evalgate_refuse_sampling(source, judge)
    evalgate_refuse_judge_candidates(source, judge, candidates)
    evalgate_read_rubric(source, evaluator.rubric_path)
    evalgate_refuse_missing_golden(source, judge)
