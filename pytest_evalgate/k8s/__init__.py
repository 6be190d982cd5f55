"""k8s: renderers at the edge: the Indexed Job and aggregation Job (`render`), `k8s run` (`run`),
sandbox and store pieces of a pod, Polyaxon components (`polyaxon`, `polyaxon_check`).

Imports (docs/architecture.md, checked by tests/test_layering.py): errors, manifest, store.
"""
