"""formats: the bottom readers and writers every stage shares: `canonical` (canonical JSON, sha256
digests), `yamlread` (YAML with duplicate keys and aliases refused), `jsonlread` (the one JSON
Lines reader), `strictmodel` (the one pydantic config of every schema).

Imports (docs/architecture.md, checked by tests/test_layering.py): errors.
"""
