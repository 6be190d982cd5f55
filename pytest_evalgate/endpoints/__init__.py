"""endpoints: a candidate's base URL resolved into an endpoint this process calls (`resolve`), the
judge's endpoint (`judge`), simulated endpoints started for a run (`simulators`).

Imports (docs/architecture.md, checked by tests/test_layering.py): client, errors, judge,
manifest, simulated.
"""
