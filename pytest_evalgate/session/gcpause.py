"""Python's cyclic garbage collector held off on the way to a session's first request.

A requesting ``pytest --evalgate`` session imports most of this package, pydantic and the
manifest's models, then loads the dataset and builds a work per identity before its first
request leaves; the automatic collector ran a full (generation 2) pass over all of that on the
way, 13-23 ms at 10,000 identities on this machine, plus younger passes while the cases were
built (``bench/README.md``, issue 18 sixth pass). ``evalgate_pause_gc`` turns automatic
collection off at the start of the plugin's ``pytest_configure`` in a session that will request
(before the package's own imports); ``evalgate_resume_gc`` turns it back on once the runner
started and what exists was frozen (``gc.freeze``), at the item loop at the latest, or at
unconfigure, which pytest runs for every configure that began (even one that raised), so an
in-process ``pytest.main`` never leaves its caller without a collector. Pausing any earlier
(at ``load_initial_conftests``) would not be safe: a usage error while pytest parses the rest
of the command line ends the run with no unconfigure. Nothing is collected less: garbage made
meanwhile is collected by the first pass after the resume.

Only a collector this module turned off is turned back on (a caller that disabled it keeps it
off).
"""

from __future__ import annotations

import gc

_PAUSED: list[bool] = []  # [True] while this module holds the collector off


def evalgate_pause_gc() -> None:
    """Turn automatic collection off, if it is on and not paused already."""
    if not _PAUSED and gc.isenabled():
        gc.disable()
        _PAUSED.append(True)


def evalgate_resume_gc() -> None:
    """Turn automatic collection back on, if ``evalgate_pause_gc`` turned it off."""
    if _PAUSED:
        _PAUSED.clear()
        gc.enable()
