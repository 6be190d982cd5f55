"""perf: the open-loop load phase (`phase`), its prompts (`prompts`), one measured window folded
and judged (`window`), its plan (`plan`) and results (`result`), the capacity sweep's steps
(`sweep`), the one list of perf metrics (`metrics`).

Imports (docs/architecture.md, checked by tests/test_layering.py): aggregate, client, errors,
formats, manifest, stats, store.
"""
