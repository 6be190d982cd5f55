"""What the gate needs, imported while the requests are out instead of before or after them.

A gating ``pytest --evalgate`` session evaluates its policy only after the last answer, but the
modules that do it (``decide`` and what it pulls in: the aggregation, the gate, numpy, the
attestation's cryptography, the reports) and scipy.special cost about 0.3 s and 0.2 s to
import on this machine (``stats`` takes the distributions' functions from scipy.special; scipy.stats
would cost ~1 s more). ``session`` imports none of them at start-up, so the first request is
not held for them (``bench/throughput.py``), and ``evalgate_preload_gate`` imports them in a
daemon thread when the requests start: the import runs while the item loop mostly waits on the
network. Join the thread before the first gate call (never two threads importing at once).

This module imports nothing of the package at import time: it is the one place that may name
``decide`` lazily, by its dotted name.
"""

from __future__ import annotations

import importlib
import threading

EVALGATE_GATE_MODULES = ("pytest_evalgate.decision.decide", "scipy.special")


def evalgate_preload_gate() -> threading.Thread:
    """Start and return the daemon thread importing ``EVALGATE_GATE_MODULES``."""
    thread = threading.Thread(target=_import_all, name="evalgate-preload-gate", daemon=True)
    thread.start()
    return thread


def _import_all() -> None:
    for name in EVALGATE_GATE_MODULES:
        importlib.import_module(name)
