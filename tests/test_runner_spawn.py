"""The prespawned runner child: taken by the next spawn, or reaped when nobody needs it."""

from __future__ import annotations

import os

from pytest_evalgate.runner import spawn
from pytest_evalgate.runner.spawn import evalgate_read_lines


def test_the_next_spawn_takes_the_prespawned_child() -> None:
    spawn.evalgate_prespawn_child()
    spawn.evalgate_prespawn_child()  # at most one waits
    [(waiting, _)] = spawn._PRESPAWNED
    process, stderr = spawn.evalgate_spawn_child()
    try:
        assert process is waiting and not spawn._PRESPAWNED
    finally:
        spawn.evalgate_close_quietly(process.stdin)
        process.wait(timeout=30)
        spawn.evalgate_close_quietly(process.stdout)
        spawn.evalgate_close_quietly(stderr)
    # Its stdin closed before any setup: it left by the orphan path, not by a crash.
    assert process.returncode == 3


def test_a_prespawned_child_nobody_took_is_reaped() -> None:
    spawn.evalgate_prespawn_child()
    [(process, stderr)] = spawn._PRESPAWNED
    spawn.evalgate_discard_prespawned()
    assert not spawn._PRESPAWNED
    assert process.returncode is not None and stderr.closed
    spawn.evalgate_discard_prespawned()  # nothing left: a no-op


def test_read_lines_returns_whole_lines_keeps_the_rest_and_sees_the_end() -> None:
    read, write = os.pipe()
    os.set_blocking(read, False)
    try:
        assert evalgate_read_lines(read, b"") == ([], b"", False)  # nothing there yet
        os.write(write, b'{"a": 1}\n{"b"')
        assert evalgate_read_lines(read, b"") == ([b'{"a": 1}'], b'{"b"', False)
        os.write(write, b": 2}\n\n")
        lines, rest, eof = evalgate_read_lines(read, b'{"b"')
        assert (lines, rest, eof) == ([b'{"b": 2}', b""], b"", False)
        os.write(write, b"tail without newline")
        os.close(write)
        write = -1
        assert evalgate_read_lines(read, b"") == ([], b"tail without newline", True)
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)
