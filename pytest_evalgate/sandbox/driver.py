"""The program that runs inside the sandbox: the answer's code, then the case's tests.

Not imported by the harness: ``execute.py`` passes this file's source to the sandbox's
interpreter (``python3 -I -B -c SOURCE REPORT_FD``), which sees neither this package nor the
project, so it uses the standard library only and runs on any Python 3.8+.

Protocol (``outcome.py`` reads it):

1. it writes ``started`` and a newline to file descriptor REPORT_FD at once: the end of the
   sandbox's start (namespaces, mounts, interpreter start-up);
2. it reads one JSON job from standard input (``nonce``, ``code``, ``tests``, ``limits`` as
   ``[name, soft, hard]`` triples, ``workdir``), then standard input is ``/dev/null``;
3. it empties the environment (bwrap sets ``PWD``, Python's locale coercion ``LC_CTYPE``), sets
   the rlimits, enters ``workdir``, runs the code (as module ``solution``, so an
   ``if __name__ == "__main__":`` block does not run), then the tests in the same namespace;
4. it writes one JSON line ``{"nonce", "outcome", "message"}`` to REPORT_FD and exits at once
   (status 0 when passed, else 1), without waiting for threads the code left running.

Only the process that started as the driver reports: a child forked by the code that returns
into this program exits silently. A report without the job's nonce is ignored by the harness, so
code that exits early or prints a fake report is ``crashed``, not ``passed``. This does not
defend against code written to find the nonce in this process's memory (see docs/sandbox.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import sys
from types import TracebackType
from typing import Any

_MESSAGE_CHARS = 500
_CODE_FILE = "<solution>"
_TESTS_FILE = "<tests>"


def _send(fd: int, text: str) -> None:
    data = text.encode("utf-8", "replace")
    while data:
        data = data[os.write(fd, data) :]


def _read_job() -> dict[str, Any]:
    job: dict[str, Any] = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return job


def _apply_limits(limits: list[list[Any]]) -> None:
    for name, soft, hard in limits:
        resource.setrlimit(getattr(resource, name), (int(soft), int(hard)))


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 3] + "..."


def _describe(error: BaseException) -> str:
    detail = str(error)
    return type(error).__name__ + (f": {detail}" if detail else "")


def _tests_line(tb: TracebackType | None) -> int | None:
    """The line of the innermost tests frame: where the tests met the failure."""
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == _TESTS_FILE:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _tests_failed(error: BaseException, tests: str) -> tuple[str, str]:
    line = _tests_line(error.__traceback__)
    if line is None:
        return "tests_failed", _short(f"tests: {_describe(error)}")
    lines = tests.splitlines()
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return "tests_failed", _short(f"tests line {line}: {text} ({_describe(error)})")


def _code_failed(error: BaseException) -> tuple[str, str]:
    if isinstance(error, SyntaxError):
        return "crashed", _short(f"the code does not compile: {_describe(error)}")
    if isinstance(error, SystemExit):
        return "crashed", _short(f"the code exited before the tests ran ({error.code!r})")
    return "crashed", _short(f"the code raised {_describe(error)}")


def _run(code: str, tests: str) -> tuple[str, str]:
    """(outcome, message) of running ``code`` then ``tests`` in one namespace."""
    namespace: dict[str, Any] = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(compile(code, _CODE_FILE, "exec"), namespace)
    except MemoryError:
        return "memory", "the code ran out of memory (MemoryError)"
    except BaseException as error:
        return _code_failed(error)
    try:
        exec(compile(tests, _TESTS_FILE, "exec"), namespace)
    except MemoryError:
        return "memory", "the tests ran out of memory (MemoryError)"
    except (SystemExit, KeyboardInterrupt) as error:
        return "crashed", _short(f"the code exited while the tests ran ({_describe(error)})")
    except BaseException as error:
        return _tests_failed(error, tests)
    return "passed", ""


def _flush_output() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):  # the code may have replaced or closed them
            stream.flush()


def main(report_fd: int) -> None:
    """Run the job from standard input and report on ``report_fd``; never returns."""
    me, exit_now = os.getpid(), os._exit
    _send(report_fd, "started\n")
    job = _read_job()
    os.environ.clear()
    _apply_limits(job["limits"])
    os.chdir(job["workdir"])
    sys.argv = ["solution.py"]
    outcome, message = _run(job["code"], job["tests"])
    _flush_output()
    if os.getpid() != me:
        exit_now(1)
    report = {"nonce": job["nonce"], "outcome": outcome, "message": message}
    _send(report_fd, json.dumps(report) + "\n")
    exit_now(0 if outcome == "passed" else 1)


if __name__ == "__main__":
    main(int(sys.argv[1]))
