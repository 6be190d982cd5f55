"""The checks of a policy's rules that are not the schema's: the rules a single-model policy
cannot have, the ``public_private_gap`` lists (no category twice, none both public and private)
and their entries against the suite, and the one check of a slice name
(``evalgate_unknown_category``, which ``policy.load``, ``gate.rules`` and the gap lists ask, so
their refusals read alike).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from pytest_evalgate.errors import EvalgatePolicyError
from pytest_evalgate.policy.values import EVALGATE_GAP_RULE, EVALGATE_SINGLE_RULES, EvalgateRule


def evalgate_check_single(source: str, baseline: str | None, rules: Iterable[EvalgateRule]) -> None:
    """Refuse, naming the rule, a rule that needs a baseline in a policy with ``baseline: null``.

    ``rules`` are ``policy.EvalgateRule`` values (``rule`` and ``index`` are read). Raises
    ``EvalgatePolicyError(source, "rules[i].rule", reason)`` for the first such rule.
    """
    if baseline is not None:
        return
    for rule in rules:
        if rule.rule not in EVALGATE_SINGLE_RULES:
            allowed = ", ".join(sorted(EVALGATE_SINGLE_RULES))
            reason = (
                f"rule {rule.rule!r} compares the candidate with a baseline, and the policy has "
                f"baseline: null; a single-model policy may use {allowed}"
            )
            raise EvalgatePolicyError(source, f"rules[{rule.index}].rule", reason)


def evalgate_check_gap_lists(source: str, rules: Iterable[EvalgateRule]) -> None:
    """Refuse, naming ``rules[i].public[j]`` or ``rules[i].private[j]``, a category given twice
    in one list or in both lists of a ``public_private_gap`` rule (``policy.EvalgateRule``
    values)."""
    for rule in rules:
        if rule.rule != EVALGATE_GAP_RULE:
            continue
        for key, names in (("public", rule.public), ("private", rule.private)):
            for position, name in enumerate(names):
                where = f"rules[{rule.index}].{key}[{position}]"
                if name in names[:position]:
                    raise EvalgatePolicyError(source, where, f"{name!r} is listed twice")
                if key == "private" and name in rule.public:
                    reason = f"{name!r} is both public and private"
                    raise EvalgatePolicyError(source, where, reason)


def evalgate_check_gap_rules(
    source: str,
    rules: Iterable[EvalgateRule],
    categories: Collection[str],
    private: Collection[str],
    manifest: str,
) -> None:
    """Check every ``public_private_gap`` rule of a policy against its suite.

    ``rules`` are ``policy.EvalgateRule`` values (``rule``, ``index``, ``public``, ``private``);
    ``categories`` the suite's, ``private`` the manifest's held-out ones. Raises
    ``EvalgatePolicyError(source, "rules[i].public[j]", reason)`` for the first wrong entry.
    """
    for rule in rules:
        if rule.rule != EVALGATE_GAP_RULE:
            continue
        for key, names in (("public", rule.public), ("private", rule.private)):
            for position, name in enumerate(names):
                reason = _entry_problem(key, name, categories, private, manifest)
                if reason:
                    raise EvalgatePolicyError(
                        source, f"rules[{rule.index}].{key}[{position}]", reason
                    )


def evalgate_unknown_category(name: str, categories: Collection[str]) -> str | None:
    """Why ``name`` is not a slice of the suite (the reason lists its categories), or None.

    The one check of a slice name: ``evalgate_check_slices`` (rules' slices against the suite),
    the ``public_private_gap`` lists, and ``gate.rules`` (slices against the gate input's
    categories) all ask it, so the three refusals read alike.
    """
    if name in categories:
        return None
    return f"no category {name!r} in the suite; categories: {', '.join(sorted(categories))}"


def _entry_problem(
    key: str, name: str, categories: Collection[str], private: Collection[str], manifest: str
) -> str | None:
    unknown = evalgate_unknown_category(name, categories)
    if unknown is not None:
        return unknown
    declared = ", ".join(sorted(private)) or "none"
    if key == "private" and name not in private:
        return f"{name!r} is not declared private in {manifest} (private: {declared})"
    if key == "public" and name in private:
        return f"{name!r} is declared private in {manifest}: a held-out set is not a public slice"
    return None
