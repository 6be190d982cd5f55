"""onlinejudge: the online judge (SPEC section 21): production answers of both versions read
from a JSON Lines feed or the shadow store (``feed``), sampled at a seeded rate and counted
(``sample``), scored by the suite's pinned judge as offline judging asks it (``judging``), and
exported for Prometheus on ``/metrics`` (``serve``) as ``evalgate_online_judge_score{version}``,
the series ``canary check``'s ``judge_score_delta`` reads; and the shadow gate's pairs judged
for its ``judge_preference_delta`` rule (``preference``).

Imports (docs/architecture.md, checked by tests/test_layering.py): client, endpoints, errors,
judge, manifest, shadow, store.
"""

from __future__ import annotations
