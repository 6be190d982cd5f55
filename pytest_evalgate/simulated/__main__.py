"""``python -m pytest_evalgate.simulated SPEC``: a spawned simulator process.

``SPEC`` is the one JSON argument of ``spec.py`` (not a command line for people: that is
``evalgate serve``). Writes the ready line to standard output once listening; exits 0 on
SIGTERM/SIGINT or when its parent is gone, 4 (after one line on standard error) when the spec,
the answer key or the request log is refused.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.simulated.server import evalgate_sim_serve
from pytest_evalgate.simulated.spec import (
    EVALGATE_SIM_SPEC_SOURCE,
    evalgate_sim_ready_line,
    evalgate_sim_spec_decode,
)


def _sim_write_ready(base_url: str) -> None:
    sys.stdout.write(evalgate_sim_ready_line(base_url) + "\n")
    sys.stdout.flush()  # the parent blocks on this line


def evalgate_sim_child(argv: Sequence[str]) -> None:
    """Serve the spec in ``argv`` (exactly one item) until stopped; refusals raise
    ``EvalgateConfigError``."""
    if len(argv) != 1:
        reason = f"expected one JSON argument, got {len(argv)}"
        raise EvalgateConfigError(EVALGATE_SIM_SPEC_SOURCE, "argv", reason)
    spec = evalgate_sim_spec_decode(argv[0])
    evalgate_sim_serve(
        spec.config, spec.answers, spec.request_log, spec.port, spec.parent_pid, _sim_write_ready
    )


def _sim_entry() -> None:
    try:
        evalgate_sim_child(sys.argv[1:])
    except EvalgateConfigError as exc:
        sys.stderr.write(f"evalgate simulator: {exc}\n")
        raise SystemExit(4) from None
    raise SystemExit(0)


if __name__ == "__main__":
    _sim_entry()
