"""decision: one suite decided from the store: aggregate, gate, record (`decide`), then signed,
reported and kept in the store (`publish`); the decision record's type (`record`).

Imports (docs/architecture.md, checked by tests/test_layering.py): aggregate, attest, errors,
gate, manifest, perf, policy, report, store.
"""
