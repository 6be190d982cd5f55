"""capacity: `evalgate plan` arithmetic (`plan`, `store`) and `evalgate probe` (`probe`,
`probe_load`, `server_metrics`).

Imports (docs/architecture.md, checked by tests/test_layering.py): client, errors, manifest,
perf, store.
"""
