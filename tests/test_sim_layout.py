"""The simulator package keeps its shape: one job per module, imports flowing one way, the HTTP
layer blind to answer keys, no printing, argument parsing or exits outside ``__main__``."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_evalgate.simulated as simulated
import pytest_evalgate.simulated.server as simulated_server

PACKAGE = Path(simulated.__file__).parent
# The order of the package docstring: a module may import only modules before it.
ORDER = (
    "knobs", "draws", "canary", "answers", "code_style", "judge_style", "tool_style",
    "choice_style", "styles", "plan", "faults", "responses", "protocol", "misbehave", "slots",
    "app", "server", "spec", "process", "__main__",
)  # fmt: skip
HTTP_LAYER = ("responses", "protocol", "app")
# The simulated judge's decisions are the judge package's pure core (docs/judges.md); only the
# judge style may use it.
OUTSIDE = {"judge_style": {"pytest_evalgate.judge.simjudge"}}


def tree(module: str) -> ast.Module:
    return ast.parse((PACKAGE / f"{module}.py").read_text(encoding="utf-8"))


def imported(module: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree(module)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def siblings(module: str) -> set[str]:
    prefix = "pytest_evalgate.simulated."
    return {name.removeprefix(prefix) for name in imported(module) if name.startswith(prefix)}


def test_the_order_names_every_module_of_the_package() -> None:
    assert {p.stem for p in PACKAGE.glob("*.py")} == {*ORDER, "__init__"}


@pytest.mark.parametrize("module", ORDER)
def test_imports_flow_down_the_order(module: str) -> None:
    allowed = set(ORDER[: ORDER.index(module)])
    assert siblings(module) <= allowed, siblings(module) - allowed


@pytest.mark.parametrize("module", [*ORDER, "__init__"])
def test_outside_the_package_only_canonical_and_errors(module: str) -> None:
    ours = {n for n in imported(module) if n.startswith("pytest_evalgate.")}
    outside = {n for n in ours if not n.startswith("pytest_evalgate.simulated")}
    assert outside <= {
        "pytest_evalgate.formats.canonical",
        "pytest_evalgate.errors",
        *OUTSIDE.get(module, ()),
    }
    assert not {n.partition(".")[0] for n in imported(module)} & {"pytest", "argparse", "_pytest"}


@pytest.mark.parametrize("module", HTTP_LAYER)
def test_the_http_layer_never_sees_the_answer_key(module: str) -> None:
    assert "answers" not in siblings(module)


def _calls(module: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree(module)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            names.add(node.func.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            names.add(f"{node.value.id}.{node.attr}")
        elif isinstance(node, ast.Name) and node.id == "SystemExit":
            names.add("SystemExit")
    return names


@pytest.mark.parametrize("module", [m for m in ORDER if m != "__main__"])
def test_core_modules_never_print_write_streams_or_exit(module: str) -> None:
    forbidden = {"print", "sys.exit", "SystemExit", "sys.stdout", "sys.stderr", "os._exit"}
    assert _calls(module) & forbidden == set()


def test_only_the_entry_point_writes_and_exits_and_it_never_prints() -> None:
    calls = _calls("__main__")
    assert {"sys.stdout", "sys.stderr", "SystemExit"} <= calls
    assert "print" not in calls and "sys.exit" not in calls


@pytest.mark.parametrize("module", [*ORDER, "__init__"])
def test_no_module_is_much_over_300_lines(module: str) -> None:
    lines = (PACKAGE / f"{module}.py").read_text(encoding="utf-8").count("\n")
    assert lines <= 300, lines


def test_every_exported_name_exists_and_is_prefixed() -> None:
    for name in simulated.__all__:
        assert hasattr(simulated, name), name
        assert name.lower().startswith("evalgate"), name
    assert sorted(simulated.__all__) == simulated.__all__


def test_the_names_evalgate_serve_codes_against_keep_their_signatures() -> None:
    def params(name: str) -> list[str]:
        return list(inspect.signature(getattr(simulated, name)).parameters)

    serve = inspect.signature(simulated_server.evalgate_sim_serve).parameters

    assert params("evalgate_sim_knob_names") == []
    assert params("evalgate_sim_config_from_knobs") == ["items", "source"]
    assert params("evalgate_parse_simulated_url") == ["url"]
    assert list(serve) == [
        "config",
        "answers",
        "request_log",
        "port",
        "parent_pid",
        "on_ready",
    ]


# Every simulated:// endpoint of a run is a process of its own (hundreds per test suite): the
# judge style, with numpy and the judge's pydantic models, is imported only when a spec asks for
# judge=1 (it cost each simulator 0.4 s of CPU at start), jsonschema only for tools.
_SIM_NEVER_AT_START = (
    "argparse", "pytest", "aiohttp", "numpy", "pydantic", "jsonschema",
    "pytest_evalgate.judge", "pytest_evalgate.simulated.judge_style",
)  # fmt: skip


def test_importing_the_package_and_its_entry_point_loads_no_parser_nor_pytest() -> None:
    code = (
        "import sys, pytest_evalgate.simulated, pytest_evalgate.simulated.__main__;"
        f"print(sorted(m for m in {_SIM_NEVER_AT_START!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
