"""The runner: identities requested ahead of pytest's item loop, in a child process.

pytest runs one item at a time; an evaluation needs many requests in flight. The runner is split
at the process boundary, the way pytest-xdist keeps its worker side apart:

- ``parent``: ``EvalgateRunner`` in the pytest process: sends works, scores, seals and hands
  records to the segment writer; ``committer``: the thread that writes and fsyncs segments;
- ``child``: the child process's asyncio loop (``python -m pytest_evalgate.runner``, entry point
  ``__main__``): requests under the budget, reports outcomes, never scores, seals or writes;
- ``wire``: the messages between the two, the only module both import.

This package module imports nothing, so the child, started as ``-m pytest_evalgate.runner``,
does not load the parent side (manifest, scoring, pydantic); import from the modules.
"""
