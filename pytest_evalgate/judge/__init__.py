"""LLM-as-judge as a pinned dependency (SPEC section 10): the pure core.

One job per module, imports one way (``spec`` <- ``refusals``, ``prompt``, ``parse`` <-
``pairwise``, ``golden`` <- ``agreement`` <- ``simjudge``)::

    spec       value types, the manifest's ``judge:`` block, the judge key
    refusals   the checks that refuse a judge before any request
    prompt     judge request messages and body (and their inverse, for the simulated judge)
    parse      a judge's raw answer -> a typed verdict or a ``judge_unparseable`` value
    pairwise   two orders of one (case, repetition) -> win/loss/tie; net win rate and interval
    golden     the golden-set loaders (people's labels and preferences) and their rows
    agreement  Cohen's kappa (plain and quadratic), confusion, bootstrap
    simjudge   the simulated judge's decisions: accuracy, position and verbosity bias

Nothing here imports pytest, prints, parses arguments or exits. See ``docs/judges.md``.
"""

from __future__ import annotations
