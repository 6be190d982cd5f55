"""The one list of performance metrics: the sample kinds a record's timing yields, and the
percentile names that ``perf_ratio`` rules compare (``<kind>_p50``, ``<kind>_p95``).

Its own module because the aggregation (which builds samples), the load phase (which measures
them) and the gate (which judges them) must agree, and the gate imports neither of the others.
"""

from __future__ import annotations

EVALGATE_PERF_METRICS = ("ttft", "tpot", "itl", "e2e", "output_tokens")
EVALGATE_PERF_PERCENTILES = ("p50", "p95")
EVALGATE_PERF_RULE_METRICS = tuple(
    f"{kind}_{level}" for kind in EVALGATE_PERF_METRICS for level in EVALGATE_PERF_PERCENTILES
)
# The capacity sweep's per-step figures in a gate input's ``perf`` mapping (``perf/sweep.py``
# writes them, the ``max_rate_at_slo`` rule reads them): not samples, and not reported as such.
SWEEP_KEYS = ("sweep.rate", "sweep.ttft_p95_s", "sweep.tpot_p95_s", "sweep.counts")
MAX_RATE_AT_SLO = "max_rate_at_slo"
