"""decision: one suite decided from the store: aggregate, gate, record, signature, report
(`decide`); the decision record's type (`record`).

Imports (docs/architecture.md, checked by tests/test_layering.py): aggregate, attest, errors,
gate, manifest, perf, policy, report, store.
"""
