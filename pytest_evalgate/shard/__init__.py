"""shard: `shard_for`, shard plans, sub-shards, the process topology (`plan`); the xdist scheduler
that sends worker k its sub-shard (`scheduler`).

Imports (docs/architecture.md, checked by tests/test_layering.py): errors, formats, manifest.
"""
