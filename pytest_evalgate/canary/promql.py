"""PromQL for the online rules, over vLLM's metric names (SPEC section 15).

Every query compares the canary with the stable pool over the same range, in one expression, so
Prometheus evaluates both sides at the same instant: ``version="canary"`` against
``version="stable"`` (the label the pools' pods carry, see ``docs/canary.md``). One string per
rule serves both the AnalysisTemplate (``analysis.py``) and ``evalgate canary check``
(``check.py``), which is how they stay character for character the same.

A side with no samples yields NaN, never an empty result: every ``sum`` falls back to
``vector(0)`` (0/0 is NaN) and every quantile to ``vector(NaN)``. Argo Rollouts errors on an
empty result but counts NaN as inconclusive (neither its success nor its failure condition
holds), which pauses the rollout instead of aborting it; ``check`` reports "too little traffic".

The traffic queries (``evalgate_traffic_query``) count the independent samples each side had in
the window, for ``check``'s "is there enough traffic to judge" (``plan.py``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.policy.online import EvalgateOnlineRule

EVALGATE_TTFT = "vllm:time_to_first_token_seconds"  # histogram, per request
EVALGATE_TPOT = "vllm:time_per_output_token_seconds"  # histogram
EVALGATE_GENERATION_TOKENS = "vllm:generation_tokens_total"  # counter, tokens
EVALGATE_REQUEST_SUCCESS = "vllm:request_success_total"  # counter, finished requests
# vLLM's HTTP server counts requests per status class (prometheus-fastapi-instrumentator:
# status="2xx", "4xx", "5xx"); the regex also matches ungrouped codes such as "503".
EVALGATE_HTTP_REQUESTS = "http_requests_total"
EVALGATE_ERROR_MATCHER = 'status=~"5.."'
# Mean online judge score (0..1) of the sampled requests: a summary the online judging sampler
# exports (vLLM has no such metric); its _sum and _count series are used.
EVALGATE_JUDGE_SCORE = "evalgate_online_judge_score"
# vLLM labels each finished request with why it stopped: finished_reason="stop", "length", ...
EVALGATE_LENGTH_MATCHER = 'finished_reason="length"'
# Refusals among sampled answers: counters the online judge sampler exports beside its score
# (``evalgate online-judge``), one per judged answer and one per refusing answer.
EVALGATE_ONLINE_ANSWERS = "evalgate_online_answers_total"
EVALGATE_ONLINE_REFUSALS = "evalgate_online_refusals_total"
# Tool calls by outcome ("ok", "error"): a counter the tool-executing application (the agent
# runtime in front of the model) exports; vLLM cannot see whether a tool call worked.
EVALGATE_TOOL_CALLS = "evalgate_tool_calls_total"
EVALGATE_TOOL_FAILED_MATCHER = 'outcome="error"'
EVALGATE_VERSIONS = ("canary", "stable")

# What counts one independent sample of each rule (TPOT's histogram counts tokens, which are not
# independent within a request, so TPOT and output length count finished requests).
_SAMPLE_COUNTERS: Mapping[str, str] = {
    "error_rate_delta": EVALGATE_HTTP_REQUESTS,
    "ttft_p95_ratio": f"{EVALGATE_TTFT}_count",
    "tpot_p95_ratio": EVALGATE_REQUEST_SUCCESS,
    "output_length_ratio": EVALGATE_REQUEST_SUCCESS,
    "judge_score_delta": f"{EVALGATE_JUDGE_SCORE}_count",
    "refusal_rate_delta": EVALGATE_ONLINE_ANSWERS,
    "length_stop_share_delta": EVALGATE_REQUEST_SUCCESS,
    "tool_call_failure_delta": EVALGATE_TOOL_CALLS,
}
_MATCHER = re.compile(r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*')


def evalgate_selector(text: str | None) -> str:
    """Validate extra label matchers (``namespace="serve-a",model_name="m"``); return them
    normalised (no spaces around commas) or ``""``. ``version`` is the queries' own label.

    Raises ``EvalgateConfigError`` (source ``selector``, key the offending matcher) for anything
    that is not a comma-separated list of ``label OP "value"`` with OP one of ``= != =~ !~``.
    """
    if not text or not text.strip():
        return ""
    parts = [part.strip() for part in _split_matchers(text)]
    for part in parts:
        if not _MATCHER.fullmatch(part):
            reason = 'not a label matcher like namespace="serve-a"'
            raise EvalgateConfigError("selector", part, reason)
        if re.match(r"\s*version\s*[=!]", part):
            reason = "version is set by each query (canary or stable)"
            raise EvalgateConfigError("selector", part, reason)
    return ",".join(parts)


def _split_matchers(text: str) -> list[str]:
    """Split on commas outside double quotes."""
    return re.findall(r'(?:[^,"]|"(?:[^"\\]|\\.)*")+', text)


def evalgate_rule_query(
    rule: EvalgateOnlineRule, window: str | None = None, selector: str = ""
) -> str:
    """The PromQL of ``rule`` over ``window`` (default: the rule's), canary against stable.

    ``window`` and ``selector`` are pasted into the query: pass them through
    ``online.evalgate_duration`` and ``evalgate_selector`` first (the commands do).
    """
    return _BUILDERS[rule.metric](window or rule.window, selector)


def evalgate_traffic_query(
    rule: EvalgateOnlineRule, version: str, window: str | None = None, selector: str = ""
) -> str:
    """Samples ``version`` had in the window for ``rule`` (requests, or judged requests)."""
    counter = _SAMPLE_COUNTERS[rule.metric]
    span = window or rule.window
    return f"sum(increase({counter}{_labels(version, selector)}[{span}])) or vector(0)"


def _labels(version: str, selector: str, extra: str = "") -> str:
    matchers = [
        f'version="{version}"',
        *([extra] if extra else []),
        *([selector] if selector else []),
    ]
    return "{" + ",".join(matchers) + "}"


def _rate(metric: str, version: str, span: str, selector: str, extra: str = "") -> str:
    return f"(sum(rate({metric}{_labels(version, selector, extra)}[{span}])) or vector(0))"


def _p95(histogram: str, version: str, span: str, selector: str) -> str:
    buckets = f"{histogram}_bucket{_labels(version, selector)}[{span}]"
    return f"(histogram_quantile(0.95, sum by (le) (rate({buckets}))) or vector(NaN))"


def _error_rate(version: str, span: str, selector: str) -> str:
    errors = _rate(EVALGATE_HTTP_REQUESTS, version, span, selector, EVALGATE_ERROR_MATCHER)
    return f"({errors} / {_rate(EVALGATE_HTTP_REQUESTS, version, span, selector)})"


def _mean(numerator: str, denominator: str, version: str, span: str, selector: str) -> str:
    top = _rate(numerator, version, span, selector)
    return f"({top} / {_rate(denominator, version, span, selector)})"


def _share_delta(part: str, part_matcher: str, whole: str, span: str, selector: str) -> str:
    """Share of ``whole``'s events that are ``part`` (with ``part_matcher``), canary - stable."""
    sides = [
        f"({_rate(part, version, span, selector, part_matcher)}"
        f" / {_rate(whole, version, span, selector)})"
        for version in EVALGATE_VERSIONS
    ]
    return f"{sides[0]} - {sides[1]}"


def _error_rate_delta(span: str, selector: str) -> str:
    canary, stable = (_error_rate(version, span, selector) for version in EVALGATE_VERSIONS)
    return f"{canary} - {stable}"


def _p95_ratio(histogram: str, span: str, selector: str) -> str:
    canary, stable = (_p95(histogram, version, span, selector) for version in EVALGATE_VERSIONS)
    return f"{canary} / {stable}"


def _output_length_ratio(span: str, selector: str) -> str:
    sides = [
        _mean(EVALGATE_GENERATION_TOKENS, EVALGATE_REQUEST_SUCCESS, version, span, selector)
        for version in EVALGATE_VERSIONS
    ]
    return f"{sides[0]} / {sides[1]}"


def _judge_score_delta(span: str, selector: str) -> str:
    total, count = f"{EVALGATE_JUDGE_SCORE}_sum", f"{EVALGATE_JUDGE_SCORE}_count"
    sides = [_mean(total, count, version, span, selector) for version in EVALGATE_VERSIONS]
    return f"{sides[0]} - {sides[1]}"


_BUILDERS: Mapping[str, Callable[[str, str], str]] = {
    "error_rate_delta": _error_rate_delta,
    "ttft_p95_ratio": functools.partial(_p95_ratio, EVALGATE_TTFT),
    "tpot_p95_ratio": functools.partial(_p95_ratio, EVALGATE_TPOT),
    "output_length_ratio": _output_length_ratio,
    "judge_score_delta": _judge_score_delta,
    "refusal_rate_delta": functools.partial(
        _share_delta, EVALGATE_ONLINE_REFUSALS, "", EVALGATE_ONLINE_ANSWERS
    ),
    "length_stop_share_delta": functools.partial(
        _share_delta, EVALGATE_REQUEST_SUCCESS, EVALGATE_LENGTH_MATCHER, EVALGATE_REQUEST_SUCCESS
    ),
    "tool_call_failure_delta": functools.partial(
        _share_delta, EVALGATE_TOOL_CALLS, EVALGATE_TOOL_FAILED_MATCHER, EVALGATE_TOOL_CALLS
    ),
}
