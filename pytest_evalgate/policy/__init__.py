"""policy: `gate.yaml` as data: schema, frozen values, checks against a suite (`load`); online
rules (`online`); shadow rules (`shadow`).

Imports (docs/architecture.md, checked by tests/test_layering.py): errors, formats, manifest,
perf.
"""
