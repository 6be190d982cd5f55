"""aggregate: exactly-once aggregation and denominators (`combine`), its column arithmetic
(`table`), the paired gate input and the flipped cases (`paired`), code and judged overlays,
each record checked against the suite (`suitecheck`), aggregate mode's items, contamination,
trends across checkpoints.

Imports (docs/architecture.md, checked by tests/test_layering.py): errors, judge, manifest,
sandbox, stats, store.
"""
