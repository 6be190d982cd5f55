"""session: the composition root inside pytest: the plugin object and its steps, the gate at the
end, the judging stage, early start, preload, progress line, collector pause, usage errors.

Imports (docs/architecture.md, checked by tests/test_layering.py): pytest, aggregate, client,
decision, endpoints, errors, items, manifest, perf, policy, report, runner, scoring, shard,
store.
"""
