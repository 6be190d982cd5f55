"""A small model of how Kyverno (ClusterPolicy verifyImages; its engine's source read on main,
after v1.19) evaluates the ``conditions`` of an attestation, for tests of
k8s/overlays/admission/kyverno.

What is modelled, read from Kyverno's engine (pkg/engine/internal/imageverifier.go, utils.go,
pkg/engine/context, pkg/engine/variables and its operator package) and its JMESPath fork
(github.com/kyverno/go-jmespath):

- **The context.** Before the attestations are checked, Kyverno adds the image under
  verification as the variable ``image`` (``reference``, ``referenceWithTag``, ``registry``,
  ``path``, ``name``, ``tag``, ``digest``; ``digest`` is the reference's ``sha256:<hex>``, empty
  for a reference by tag). For each statement of the attestation's type it merges the
  statement's ``predicate`` into the *root* of the context (``AddJSONObject``), so a condition
  reads the decision's ``verdict`` as ``{{ verdict }}``.
- **Substitution first, then evaluation.** Every ``{{ }}`` of every condition (keys, values and
  messages) is substituted before any condition is evaluated. A ``{{ x }}`` that is the whole
  string becomes the value itself (a bool stays a bool).
- **A missing key is an error, not null.** The fork's field lookup returns ``NotFoundError``
  (``Unknown key "x" in path``) for a key a map lacks, and the substitution passes it up:
  ``EvaluateConditions`` fails, the attestation check fails, the image is not verified, the Pod
  is denied. Inside a function's arguments (and ``||``, ``&&``, ``!``, pipes) the fork swallows
  ``NotFoundError`` and uses null, which is what the python ``jmespath`` package does
  everywhere. So here a plain dotted path is walked strictly (:class:`KyvernoVariableError`)
  and any other expression goes to ``jmespath`` (missing -> null). ``missing="null"`` models a
  Kyverno that would give null instead, to show that the policy denies either way.
- **any/all.** A condition block passes when all of its ``all`` and one of its ``any`` (when
  given) pass; ``all`` stops at the first false condition and reports its message; every
  block of the list must pass.
- **Equals** (the only operator the policy uses): a bool key equals a bool value only; a
  string key is matched by the value *as a wildcard pattern* (``*``, ``?``), after Kyverno's
  duration and quantity attempts (which none of our strings parse as); a null key is
  "unsupported" and false. Hence the policy puts the image digest (from the Pod) in the key and
  the signed decision's digest in the value: a pattern can only come from the signed side.

What is not: Kyverno's signature verification (cosign, the attestors' keys), image extraction
and the registry. A test built on this says what the policy's *conditions* admit.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import jmespath
import yaml

KYVERNO_OVERLAY = Path(__file__).resolve().parents[1] / "k8s" / "overlays" / "admission" / "kyverno"
JSON = dict[str, Any]
Missing = Literal["error", "null"]

_TEMPLATE = re.compile(r"\{\{\s*(.*?)\s*\}\}")
_PLAIN_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


class KyvernoVariableError(Exception):
    """A ``{{ }}`` that does not resolve: Kyverno fails the attestation check (a denial)."""


def kyverno_policy() -> JSON:
    """The ClusterPolicy the kustomization in k8s/overlays/admission/kyverno lists."""
    kustomization = yaml.safe_load((KYVERNO_OVERLAY / "kustomization.yaml").read_text())
    (resource,) = kustomization["resources"]
    (policy,) = [doc for doc in yaml.safe_load_all((KYVERNO_OVERLAY / resource).read_text()) if doc]
    assert isinstance(policy, dict)
    return policy


def image_info(reference: str) -> JSON:
    """The ``image`` variable Kyverno sets for ``reference`` (repository[:tag][@digest]),
    without ``referenceWithTag``, which no test reads."""
    name_part, _, digest = reference.partition("@")
    registry, _, path = name_part.partition("/")
    tag = ""
    if ":" in path.rsplit("/", 1)[-1]:
        path, _, tag = path.rpartition(":")
    return {
        "reference": reference,
        "registry": registry,
        "path": path,
        "name": path.rsplit("/", 1)[-1],
        "tag": tag,
        "digest": digest,
    }


def kyverno_context(predicate: Mapping[str, Any], reference: str) -> JSON:
    """The JSON context a condition sees: the image, then the predicate merged into the root
    (maps merged key by key, as ``AddJSONObject`` does)."""
    context: JSON = {
        "request": {"operation": "CREATE", "object": {"kind": "Pod"}},
        "image": image_info(reference),
    }
    return _merge(context, copy.deepcopy(dict(predicate)))


def _merge(into: JSON, data: JSON) -> JSON:
    for key, value in data.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
    return into


def resolve(expression: str, context: JSON, missing: Missing = "error") -> Any:
    """One JMESPath variable as Kyverno resolves it (see the module docstring)."""
    if not _PLAIN_PATH.fullmatch(expression):
        return jmespath.search(expression, context)
    value: Any = context
    for key in expression.split("."):
        if not isinstance(value, dict):
            return None  # a field of a non-object is null in the fork too
        if key not in value:
            if missing == "null":
                return None
            raise KyvernoVariableError(f'Unknown key "{key}" in path')
        value = value[key]
    return value


def substitute(element: Any, context: JSON, missing: Missing = "error") -> Any:
    """Every ``{{ }}`` in a JSON document; only whole-string variables are used here."""
    if isinstance(element, dict):
        return {key: substitute(value, context, missing) for key, value in element.items()}
    if isinstance(element, list):
        return [substitute(value, context, missing) for value in element]
    if isinstance(element, str) and "{{" in element:
        match = _TEMPLATE.fullmatch(element.strip())
        assert match is not None, f"only whole-string variables are modelled: {element!r}"
        return resolve(match.group(1), context, missing)
    return element


def _wildcard(pattern: str, text: str) -> bool:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, text, flags=re.DOTALL) is not None


def equals(key: Any, value: Any) -> bool:
    """Kyverno's Equals for the types our conditions produce."""
    if isinstance(key, bool):
        return isinstance(value, bool) and key == value
    if isinstance(key, str):
        return isinstance(value, str) and _wildcard(value, key)
    if key is None:
        return False  # "Unsupported type": false
    raise NotImplementedError(f"Equals with a {type(key).__name__} key is not modelled")


def condition_holds(condition: JSON) -> bool:
    """One substituted condition."""
    if condition["operator"] != "Equals":
        raise NotImplementedError(f"operator {condition['operator']} is not modelled")
    return equals(condition["key"], condition["value"])


def evaluate_conditions(
    conditions: list[JSON], context: JSON, missing: Missing = "error"
) -> tuple[bool, str]:
    """(passed, message) of an attestation's conditions; a variable that does not resolve is
    ``(False, "failed to substitute variables ...: <error>")``, as Kyverno reports it."""
    try:
        substituted = substitute(conditions, context, missing)
    except KyvernoVariableError as exc:
        return False, f"failed to substitute variables in attestation conditions: {exc}"
    for block in substituted:
        any_ok = True
        false_messages: list[str] = []
        if "any" in block:
            any_ok = False
            for condition in block["any"]:
                if condition_holds(condition):
                    any_ok = True
                    break
                false_messages.append(condition.get("message", ""))
        all_ok = True
        for condition in block.get("all", []):
            if not condition_holds(condition):
                all_ok = False
                false_messages.append(condition.get("message", ""))
                break
        if not (any_ok and all_ok):
            return False, "; ".join(m for m in false_messages if m)
    return True, ""


def failing_messages(conditions: list[JSON], context: JSON, missing: Missing = "error") -> set[str]:
    """The message of every single condition that fails on its own (or the substitution error
    of one that does not resolve), to see each check apart from the order of the list."""
    found: set[str] = set()
    for block in conditions:
        for condition in block.get("all", []) + block.get("any", []):
            passed, message = evaluate_conditions([{"all": [condition]}], context, missing)
            if not passed:
                found.add(message)
    return found
