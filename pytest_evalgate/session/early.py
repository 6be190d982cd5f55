"""When a session may send its first requests while pytest is still collecting.

pytest builds every item before the first one runs (10,000 items: ~0.3 s of collection, then
its own ordering pass), and the runner used to start only at the item loop. A session that will
request exactly the suite's identities (all of its cases for the selected candidates, in the
manifest's order, narrowed only by ``--evalgate-tier`` and ``--evalgate-shard``, which the
plugin computes from the manifest alone) can start the runner as soon as the suite is loaded:
the works it sends are the items pytest is about to build. At the item loop the plugin
confirms them against the collected items (``EvalgateRunner.evalgate_confirm``): the same
identities in any order run as usual; an identity the collection left out is never sent after
that, and one already answered is committed like any answer (a later run reuses it). Only a
session that names no other selection starts early, so that costs at most the runner's window
of requests, and only when a plugin or conftest deselects items on its own.

``evalgate_may_start_early`` is the whole condition; it reads the pytest configuration only.
"""

from __future__ import annotations

import os

import pytest

from pytest_evalgate.manifest.load import EVALGATE_MANIFEST_NAME

_SELECTING_OPTIONS = ("keyword", "markexpr", "deselect", "lf", "stepwise", "stepwise_skip")
_WALK_LIMIT = 2_000  # folders looked at for a second manifest before giving up (no early start)


def evalgate_may_start_early(config: pytest.Config) -> bool:
    """Whether this session requests every identity of the one suite it collects."""
    option = config.option
    if getattr(option, "collectonly", False) or getattr(option, "evalgate_aggregate", False):
        return False
    if hasattr(config, "workerinput") or getattr(option, "numprocesses", None):
        return False  # xdist: each worker runs what the controller hands it
    if any(getattr(option, name, None) for name in _SELECTING_OPTIONS):
        return False
    args = [str(arg) for arg in config.args]
    return len(args) == 1 and "::" not in args[0] and _one_manifest(args[0])


def _one_manifest(path: str) -> bool:
    """``path`` is a manifest, or a folder holding exactly one manifest (hidden folders and
    folders past ``_WALK_LIMIT`` make it "not known", so no early start)."""
    if os.path.isfile(path):
        return os.path.basename(path) == EVALGATE_MANIFEST_NAME
    found = 0
    for seen, (_folder, dirs, files) in enumerate(os.walk(path)):
        if seen >= _WALK_LIMIT:
            return False
        dirs[:] = [name for name in dirs if not name.startswith(".")]
        found += EVALGATE_MANIFEST_NAME in files
        if found > 1:
            return False
    return found == 1
