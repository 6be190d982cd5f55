"""Our own check of polyaxonfiles: every ``{{ name }}`` a file uses is defined, and every
parameter an operation passes names an input of the component it runs.

Polyaxon's own checker (``check_polyaxonfile``) validates the schema and that required inputs get
a value, but it renders a reference to an undefined parameter as an empty string (a worker
would run ``--evalgate-shard=/4``). So a file is refused (``EvalgateConfigError`` naming the
file, where in it, and the parameter) when it references a name that is not:

- an input or output of its component (``{{ shard }}``, ``{{ inputs.shard }}``,
  ``{{ outputs.x }}``);
- a Polyaxon context: ``{{ globals.<key> }}`` with a key Polyaxon resolves
  (:data:`EVALGATE_POLYAXON_GLOBALS`), ``{{ dag.inputs.<input> }}`` of the enclosing DAG, or
  ``{{ ops.<operation>... }}`` naming an operation of the same DAG.

And a DAG operation whose ``pathRef`` names one of the checked files may pass (``params``, or the
keys of a ``mapping`` matrix's values) only inputs or outputs that component declares, and must
pass each required one (no ``value``, not ``isOptional``). Pure: dicts in, errors out.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from pytest_evalgate.errors import EvalgateConfigError

# The keys of Polyaxon 2.x's ``globals`` context (polyaxon._contexts.keys, resolved by its
# compiler for every run); a test compares this list with the installed Polyaxon's.
EVALGATE_POLYAXON_GLOBALS = frozenset(
    {
        "owner_name", "project_name", "project_unique_name", "project_uuid", "username",
        "user_email", "run_info", "name", "uuid", "status", "namespace", "iteration",
        "context_path", "artifacts_path", "run_artifacts_path", "run_outputs_path",
        "run_relative_outputs_path", "store_path", "created_at", "compiled_at",
        "schedule_at", "started_at", "finished_at", "duration", "cloning_kind",
        "original_uuid", "is_independent",
    }
)  # fmt: skip
_TEMPLATE = re.compile(r"\{\{(.*?)\}\}", re.S)
_NAME = re.compile(r"\s*([A-Za-z_][\w-]*(?:\.[\w-]+)*)")


def evalgate_template_names(text: str) -> list[str]:
    """The dotted names ``text`` references (``{{ a.b | filter }}`` -> ``a.b``), in order;
    an expression that does not start with a name gives ``""`` (refused by the check)."""
    names = []
    for expression in _TEMPLATE.findall(text):
        match = _NAME.match(expression)
        names.append(match.group(1) if match else "")
    return names


def evalgate_check_polyaxonfiles(
    files: Mapping[str, Mapping[str, object]], paths: Mapping[str, str] | None = None
) -> None:
    """Check every file of ``files`` (its name as a ``pathRef`` gives it -> the parsed
    polyaxonfile); the first problem raises ``EvalgateConfigError(file, location, reason)``,
    the file named by ``paths[name]`` when given (where it lies), else by its name."""
    for name, body in files.items():
        source = (paths or {}).get(name, name)
        evalgate_check_references(source, body)
        for where, op in _dag_operations(body):
            _check_params(source, where, op, files)


def evalgate_check_references(source: str, body: Mapping[str, object]) -> None:
    """Refuse a ``{{ name }}`` in ``body`` that nothing defines (module docstring)."""
    own = _io_names(body)
    ops = {str(op.get("name")) for _where, op in _dag_operations(body)}
    for where, text in _strings(body, ""):
        for name in evalgate_template_names(text):
            reason = _undefined(name, own, ops)
            if reason:
                raise EvalgateConfigError(source, where, f"{{{{ {name} }}}}: {reason}")


def _undefined(name: str, own: frozenset[str], ops: set[str]) -> str | None:
    """Why ``name`` is not defined, or None when it is."""
    head, _, rest = name.partition(".")
    if not name:
        return "not a parameter name"
    if not rest:
        return None if head in own else f"no input or output {head!r} is defined{_listed(own)}"
    if head in ("inputs", "outputs"):
        return None if rest in own else f"no {head[:-1]} {rest!r} is defined{_listed(own)}"
    if head == "globals":
        return None if rest in EVALGATE_POLYAXON_GLOBALS else f"no global context {rest!r}"
    if head == "dag" and rest.startswith("inputs."):
        field = rest[len("inputs.") :]
        return None if field in own else f"the DAG has no input {field!r}{_listed(own)}"
    if head == "ops":
        op = rest.split(".", 1)[0]
        return None if op in ops else f"no operation {op!r} in this DAG"
    return f"{head!r} is neither an input, an output nor a context"


def _listed(names: frozenset[str]) -> str:
    return f" (defined: {', '.join(sorted(names))})" if names else " (none is declared)"


def _io_names(body: Mapping[str, Any]) -> frozenset[str]:
    found = set()
    for section in ("inputs", "outputs"):
        for io in body.get(section) or []:
            if isinstance(io, Mapping) and isinstance(io.get("name"), str):
                found.add(io["name"])
    return frozenset(found)


def _required(body: Mapping[str, Any]) -> set[str]:
    return {
        io["name"]
        for io in body.get("inputs") or []
        if isinstance(io, Mapping) and "value" not in io and not io.get("isOptional")
    }


def _strings(value: object, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield where or "(top)", value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            label = item.get("name") if isinstance(item, Mapping) else None
            yield from _strings(item, f"{where}[{label if label else index}]")


def _dag_operations(body: Mapping[str, object]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    run = body.get("run")
    if not isinstance(run, Mapping) or run.get("kind") != "dag":
        return
    for index, op in enumerate(run.get("operations") or []):
        if isinstance(op, Mapping):
            yield f"run.operations[{op.get('name', index)}]", op


def _check_params(
    source: str, where: str, op: Mapping[str, Any], files: Mapping[str, Mapping[str, Any]]
) -> None:
    target = op.get("pathRef")
    if not isinstance(target, str) or target not in files:
        return  # a component outside the checked files: Polyaxon's checker resolves it
    declared = _io_names(files[target])
    passed = {str(key): f"{where}.params.{key}" for key in op.get("params") or {}}
    matrix = op.get("matrix")
    if isinstance(matrix, Mapping) and matrix.get("kind") == "mapping":
        for index, values in enumerate(matrix.get("values") or []):
            for key in values if isinstance(values, Mapping) else ():
                passed.setdefault(str(key), f"{where}.matrix.values[{index}].{key}")
    for key, location in passed.items():
        if key not in declared:
            reason = f"{target} has no input or output {key!r}{_listed(declared)}"
            raise EvalgateConfigError(source, location, reason)
    missing = sorted(_required(files[target]) - set(passed))
    if missing:
        reason = f"{target} requires input {missing[0]!r}, which no param or matrix value passes"
        raise EvalgateConfigError(source, where, reason)
