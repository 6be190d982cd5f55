"""gate: the policy's rules evaluated and the verdict (`rules`), single-model, private-set and
judge rules, capacity at the SLO (`slo`).

Imports (docs/architecture.md, checked by tests/test_layering.py): errors, judge, perf, policy,
stats.
"""
