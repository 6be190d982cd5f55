"""gate: the policy's rules evaluated and the verdict (`rules`), single-model, private-set and
judge rules.

Imports (docs/architecture.md, checked by tests/test_layering.py): errors, judge, policy, stats.
"""
