"""shadow: the shadow stage before any canary (SPEC section 21): the HTTPRoute's
``RequestMirror`` (``route``), the shadow proxy (``proxy``: stable in front, the candidate on a
seeded sample, never waited on, never returned; served by ``server``, its response bytes in
``wire``), one answer read from its bytes (``answer``), the answer pairs kept in the store
(``pairs``) and the ``shadow:`` rules judged on them (``verdict``).

Imports (docs/architecture.md, checked by tests/test_layering.py): canary, client, errors,
formats, judge, policy, store.
"""

from __future__ import annotations

from pytest_evalgate.shadow.answer import EvalgateShadowAnswer, evalgate_read_answer
from pytest_evalgate.shadow.pairs import EvalgatePairWriter, evalgate_read_pairs
from pytest_evalgate.shadow.route import EvalgateShadowRouteOptions, evalgate_shadow_route

__all__ = [
    "EvalgatePairWriter",
    "EvalgateShadowAnswer",
    "EvalgateShadowRouteOptions",
    "evalgate_read_answer",
    "evalgate_read_pairs",
    "evalgate_shadow_route",
]
