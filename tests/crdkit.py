"""CRDs from ``../shared/crds`` as strict JSON Schemas (the recipe of that folder's README).

``nullable`` becomes a null type, ``x-kubernetes-int-or-string`` integer-or-string, and every
object that lists ``properties`` without ``x-kubernetes-preserve-unknown-fields`` gets
``additionalProperties: false``, so unknown fields fail as with ``kubectl --validate=strict``.
CEL rules (``x-kubernetes-validations``) are not run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CRDS = Path(__file__).resolve().parents[2] / "shared" / "crds"
JSON = dict[str, Any]


def crd_to_jsonschema(node: Any) -> Any:
    """One openAPIV3Schema node (recursively) as strict JSON Schema."""
    if isinstance(node, list):
        return [crd_to_jsonschema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: crd_to_jsonschema(v) for k, v in node.items() if not k.startswith("x-kubernetes")}
    out.pop("nullable", None)
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("additionalProperties", False)
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def crd_schema(file_name: str, version: str) -> dict[str, Any]:
    """The strict schema of ``version`` in the CRD file ``file_name`` of ``../shared/crds``."""
    crd = yaml.safe_load((CRDS / file_name).read_text(encoding="utf-8"))
    (found,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema: dict[str, Any] = crd_to_jsonschema(found["schema"]["openAPIV3Schema"])
    return schema


def crd_schemas(folder: Path, pattern: str) -> dict[tuple[str, str], JSON]:
    """``(apiVersion, kind) -> JSON Schema`` for every version of the CRDs matching ``pattern``."""
    schemas: dict[tuple[str, str], JSON] = {}
    for path in sorted(folder.glob(pattern)):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = crd_to_jsonschema(version["schema"]["openAPIV3Schema"])
            schemas[(f"{group}/{version['name']}", kind)] = schema
    return schemas


def crd_validators(folder: Path, patterns: list[str]) -> dict[tuple[str, str], Any]:
    """A jsonschema validator per ``(apiVersion, kind)`` of the matching CRDs; each schema is
    checked once here (``jsonschema.validate`` would re-check a large CRD schema on every call)."""
    import jsonschema

    validators: dict[tuple[str, str], Any] = {}
    for pattern in patterns:
        for key, schema in crd_schemas(folder, pattern).items():
            cls = jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
            validators[key] = cls(schema)
    return validators
