"""attest: signed decision records (`dsse`: statements, DSSE envelopes), signing keys (`keys`),
overrides (`override`).

Imports (docs/architecture.md, checked by tests/test_layering.py): errors, formats.
"""
