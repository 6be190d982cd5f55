"""YAML that cannot hurt: the one reader of manifests and policies.

``yaml.safe_load`` constructs no objects, but it still (1) lets a later duplicate key silently
win, so a policy can say ``margin: 0.01`` and ``margin: 0.5`` and mean the looser one, and (2)
expands aliases by reference, so a few hundred bytes of nested aliases ("billion laughs") become
a document whose walk (validation, canonical JSON) never ends. This reader refuses duplicate
keys, with their line, and refuses a document whose expanded size passes a bound, counting
through aliases with a budget, so the check itself stays linear in the bound.
"""

from __future__ import annotations

from typing import Any

import yaml

# EvalgateYamlError is defined in the one tree and re-exported here for the readers' callers.
from pytest_evalgate.errors import EvalgateYamlError as EvalgateYamlError

EVALGATE_YAML_MAX_NODES = 200_000
"""Most scalars plus containers a manifest or policy may expand to (aliases counted each use)."""


class _EvalgateLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses a mapping naming one key twice."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if _hashable(key) and key in seen:
                raise EvalgateYamlError(
                    f"duplicate key {key!r} on line {line} (first on line {seen[key]})"
                )
            if _hashable(key):
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def evalgate_load_yaml(text: str, max_nodes: int = EVALGATE_YAML_MAX_NODES) -> Any:
    """Parse ``text``; raise ``EvalgateYamlError`` for invalid YAML, a duplicate key, or a
    document larger than ``max_nodes`` once aliases are expanded."""
    try:
        value = yaml.load(text, Loader=_EvalgateLoader)
    except yaml.YAMLError as exc:
        raise EvalgateYamlError(f"not valid YAML: {exc}") from None
    _check_size(value, max_nodes)
    return value


def _check_size(value: object, max_nodes: int) -> None:
    # Iterative, with a budget: an alias bomb is refused after max_nodes steps, not after 9**9.
    stack = [value]
    count = 0
    while stack:
        item = stack.pop()
        count += 1
        if count > max_nodes:
            raise EvalgateYamlError(
                f"the document expands to more than {max_nodes} values (nested aliases?)"
            )
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
