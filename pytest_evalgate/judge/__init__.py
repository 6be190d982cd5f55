"""LLM-as-judge as a pinned dependency (SPEC section 10): the pure core.

One job per module, imports one way (``spec`` <- ``prompt`` <- ``simjudge``; ``parse``,
``pairwise`` and ``agreement`` need only ``spec``)::

    spec       value types, the manifest's ``judge:`` block, the judge key, the refusals
    prompt     judge request messages and body (and their inverse, for the simulated judge)
    parse      a judge's raw answer -> a typed verdict or a ``judge_unparseable`` value
    pairwise   two orders of one (case, repetition) -> win/loss/tie; net win rate and interval
    agreement  Cohen's kappa (plain and quadratic), confusion, bootstrap; the golden set loader
    simjudge   the simulated judge's decisions: accuracy, position and verbosity bias

Nothing here imports pytest, prints, parses arguments or exits. See ``docs/judges.md``.
"""

from __future__ import annotations
