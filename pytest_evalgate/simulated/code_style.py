"""The code style: a simulated model that writes Python for ``scorer: code`` suites.

Selected by the knob ``code=1``; the answer key's ``target`` is then the case's hidden tests.
It is a simulator and knows the key, so its "right" code is a table of the tests' expected
values, not an algorithm; what it exercises is the sandbox, not code generation.

Contracts
---------
- Deterministic: one draw ``u = evalgate_sim_uniform(*salt, "code")`` picks the kind of answer:
  ``loop`` when ``u < code_loop``, then ``memory`` (``code_memory``), ``fork`` (``code_fork``),
  ``escape`` (``code_escape``), in that order of cumulative rates; otherwise a second draw
  gives ``right`` with probability ``accuracy`` (``accuracy.<category>``), else ``wrong``.
- ``right``: one function per name the tests call in ``assert NAME(literal, ...) == literal``,
  returning the tests' expected value for those arguments; it passes exactly such tests.
- ``wrong``: the same functions returning a value equal to nothing the tests expect.
- ``loop`` never ends, ``memory`` allocates 10 GB, ``fork`` forks without end, ``escape``
  tries the harness's loopback, environment, home and root folders, then raises.
- Every answer is one fenced ``python`` block after a line of prose. An unknown prompt (not
  in the key) or tests of another form get ``wrong`` code.
- ``code_echo=1`` replaces all of the above: the answer is the text of the prompt's last
  message, verbatim, so a test chooses exactly the code a "model" writes (escape attempts).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any, Protocol

from pytest_evalgate.simulated.answers import EvalgateSimKey
from pytest_evalgate.simulated.draws import evalgate_sim_uniform
from pytest_evalgate.simulated.knobs import EvalgateSimConfig


class EvalgateSimCodeAsk(Protocol):
    """What the code style reads of a request (``styles.EvalgateSimAsk`` fits; the seam
    imports this module, so this module does not import the seam)."""

    @property
    def prompt(self) -> Any: ...
    @property
    def digest(self) -> str: ...
    @property
    def salt(self) -> tuple[Any, ...]: ...


EVALGATE_SIM_CODE_KINDS = ("right", "wrong", "loop", "memory", "fork", "escape")
"""Every kind of answer the code style gives."""

_Table = dict[str, dict[str, str]]  # function name -> repr(args) -> repr(expected)

_LOOP = "def solve(*args):\n    return None\n\nwhile True:\n    pass\n"
_MEMORY = "BLOCK = bytearray(10 * 1024**3)\n"
_FORK = "import os\n\nwhile True:\n    os.fork()\n"
_ESCAPE = """import os, socket
SEEN = []
for where in ("/root", os.path.expanduser("~"), "/home", "/proc/1/root"):
    try:
        SEEN.append((where, sorted(os.listdir(where))[:5]))
    except OSError as error:
        SEEN.append((where, type(error).__name__))
SEEN.append(("env", sorted(os.environ)))
try:
    socket.create_connection(("127.0.0.1", 22), timeout=1).close()
    SEEN.append(("loopback", "connected"))
except OSError as error:
    SEEN.append(("loopback", type(error).__name__))
raise RuntimeError(f"escape attempt: {SEEN}")
"""


def evalgate_sim_code_answerer(
    config: EvalgateSimConfig, key: EvalgateSimKey
) -> Callable[[EvalgateSimCodeAsk], str]:
    """The code style's answer logic over ``key`` (module contract)."""

    def answer(ask: EvalgateSimCodeAsk) -> str:
        if config.code_echo:
            return evalgate_sim_last_message(ask.prompt)
        row = key.get(ask.digest)
        tests, category = row if row is not None else ("", None)
        kind = evalgate_sim_code_kind(config, category, ask.salt)
        return f"Here is the solution.\n\n```python\n{evalgate_sim_code(kind, tests)}```\n"

    return answer


def evalgate_sim_last_message(prompt: object) -> str:
    """The text of a chat prompt's last message, or a completion prompt itself."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        return str(prompt[-1].get("content", ""))
    return str(prompt)


def evalgate_sim_code_kind(
    config: EvalgateSimConfig, category: str | None, salt: tuple[object, ...]
) -> str:
    """Which kind of answer the draws of ``salt`` give (module contract)."""
    u = evalgate_sim_uniform(*salt, "code")
    edge = 0.0
    for kind, rate in (
        ("loop", config.code_loop),
        ("memory", config.code_memory),
        ("fork", config.code_fork),
        ("escape", config.code_escape),
    ):
        edge += rate
        if u < edge:
            return kind
    right = evalgate_sim_uniform(*salt, "code-right") < config.accuracy_for(category)
    return "right" if right else "wrong"


def evalgate_sim_code(kind: str, tests: str) -> str:
    """The code of one ``kind`` of answer to ``tests`` (ends with a newline)."""
    fixed = {"loop": _LOOP, "memory": _MEMORY, "fork": _FORK, "escape": _ESCAPE}
    if kind in fixed:
        return fixed[kind]
    table = evalgate_sim_test_table(tests)
    if kind == "right" and table:
        return _functions(table, right=True)
    return _functions(table or {"solve": {}}, right=False)


def evalgate_sim_test_table(tests: str) -> _Table:
    """Expected values by function and arguments, from ``assert NAME(args) == value`` lines;
    empty when the tests hold anything else (or do not parse)."""
    try:
        statements = ast.parse(tests).body
    except SyntaxError:
        return {}
    table: _Table = {}
    for statement in statements:
        found = _expectation(statement)
        if found is None:
            return {}
        name, args, expected = found
        table.setdefault(name, {})[args] = expected
    return table


def _expectation(statement: ast.stmt) -> tuple[str, str, str] | None:
    if not isinstance(statement, ast.Assert):
        return None
    test = statement.test
    if not (
        isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
    ):
        return None
    call, expected = test.left, test.comparators[0]
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)) or call.keywords:
        return None
    try:
        args = tuple(ast.literal_eval(arg) for arg in call.args)
        value = ast.literal_eval(expected)
    except ValueError:
        return None
    return call.func.id, repr(args), repr(value)


def _functions(table: _Table, *, right: bool) -> str:
    return "\n\n".join(_function(name, cases, right) for name, cases in sorted(table.items()))


def _function(name: str, cases: dict[str, str], right: bool) -> str:
    if not right:
        return f"def {name}(*args):\n    return ['evalgate-simulated-wrong', args]\n"
    rows = "".join(f"    {args!r}: {value},\n" for args, value in sorted(cases.items()))
    table = f"_{name.upper()}"
    return f"{table} = {{\n{rows}}}\n\n\ndef {name}(*args):\n    return {table}[repr(args)]\n"
