"""manifest: `evalgate.yaml` loaded and validated (`load`), its schema (`schema`), dataset rows and
the prompt renderer (`dataset`), code, judge, pins and private-set blocks, base-URL checks
(`url`), tiers (`tiers`), the rendered definition check (`revision`).

Imports (docs/architecture.md, checked by tests/test_layering.py): errors, formats, judge.
"""
