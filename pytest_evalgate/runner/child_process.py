"""The runner's child process around ``EvalgateChild``: its event loop, its pipes, its exit.

``python -m pytest_evalgate.runner`` calls ``evalgate_child_main``: the transport is imported at
once (while the parent may still be collecting), the loop is uvloop's where installed
(``evalgate_loop_factory``, which other long-running loops of the package use too), stdin and
stdout become the child's stream reader and writer, and the process leaves through
``os._exit`` (0 after a ``close``; ``runner.child`` says when it exits 3 or 1). Under
``PYTEST_EVALGATE_PROFILE_CHILD`` it runs under cProfile (a bench's hook).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from pytest_evalgate.client import evalgate_load_http
from pytest_evalgate.runner.child import EvalgateChild
from pytest_evalgate.runner.wire import evalgate_asyncio_loop_wanted

EVALGATE_PROFILE_CHILD_ENV = "PYTEST_EVALGATE_PROFILE_CHILD"
"""If set, the child runs under cProfile (CPU time) and writes its stats to ``<value>.<pid>`` at
a clean exit (a profiling hook for benches; never set in a normal run)."""
_MAX_LINE = 1 << 24


async def _evalgate_child_main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_MAX_LINE)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, sys.stdout.buffer
    )
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    child = EvalgateChild(writer)
    try:
        await child.evalgate_run(reader)
    except Exception as exc:
        await child.evalgate_die(exc)


def evalgate_child_main() -> NoReturn:
    """Run the child on this process's stdin and stdout until a ``close``, then leave through
    ``os._exit(0)``: every outcome was written and drained, the journal closed, the HTTP
    session closed, and the pytest process waits for this process's end of stdout (the
    interpreter's own clean-up took ~30 ms of that wait). An orphaned child and a failed one
    leave through ``os._exit`` as well: 3 and 1."""
    evalgate_load_http()  # while the parent may still be collecting (runner.spawn prespawns)
    profile_path = os.environ.get(EVALGATE_PROFILE_CHILD_ENV)
    profiler = None
    if profile_path:  # a bench's hook (bench/onecore.py --profile): cProfile this child
        import cProfile
        import time

        profiler = cProfile.Profile(time.process_time)  # CPU time: the core is shared
        profiler.enable()
    with asyncio.Runner(loop_factory=evalgate_loop_factory()) as runner:
        runner.run(_evalgate_child_main())
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(f"{profile_path}.{os.getpid()}")
    sys.stderr.flush()
    os._exit(0)


def evalgate_loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """The child's event loop: uvloop's where it is installed (a dependency on every platform
    but Windows), asyncio's own otherwise, or when ``PYTEST_EVALGATE_ASYNCIO_LOOP=1`` asks for it.

    Why: every answer's callbacks (socket reads, the next request's write, the pipe to the
    pytest process) run on this one loop, and the endpoint's answers arrive in bursts; the
    loop's own cost per callback delays every answer behind it. uvloop cut the child's CPU per
    request by ~12 % on this machine (0.39 -> 0.34 ms) and raised the request phase by about
    one point of the endpoint bound (docs/decisions.md, "The runner child runs on uvloop")."""
    if not evalgate_asyncio_loop_wanted(os.environ):
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop
    return asyncio.new_event_loop
