"""manifest: `evalgate.yaml` loaded into its values (`load`), the file read and checked
(`validate`), its schema (`schema`), the dataset's pin and `evalgate pin` (`datasetpin`), dataset
rows and the prompt renderer (`dataset`), code, judge, pins and private-set blocks, base-URL checks
(`url`), tiers (`tiers`), the rendered definition check (`revision`).

Imports (docs/architecture.md, checked by tests/test_layering.py): errors, formats, judge.
"""
