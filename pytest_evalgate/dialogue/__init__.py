"""Conversations, tool calls and agent loops (SPEC 17).

- ``case``: a dataset row's ``turns`` and ``expect`` (pure shapes);
- ``fixture``: the tool fixture file (tools, schemas, canned results, callables, services);
- ``pyimport``: a ``python:`` tool callable imported by name;
- ``toolrun``: one tool call run against the fixture (the runner's child);
- ``loop``: one identity's model-call loop, turns or tools (the runner's child);
- ``grade``: the record's grade from its ``dialogue`` facts (the pytest side);
- ``service``: the fixture's mock HTTP services, started on loopback for the run.

Nothing here imports pytest, the manifest or the runner.
"""
