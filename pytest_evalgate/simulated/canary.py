"""A contaminated model, simulated: the ``canary`` and ``canary_rate`` knobs (issue 16).

A model trained on an eval set may reproduce the set's canary string. With ``canary=TEXT`` and
``canary_rate=r`` the simulator appends ``TEXT`` to an answer when the ask's draw (a hash of its
draws key, ``draws.py``) falls under ``r``: deterministic, so a request repeated at temperature 0
leaks again, and about ``r`` of the distinct prompts leak. Without both knobs the inner answer
logic is returned unchanged (the same function object).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from pytest_evalgate.simulated.draws import evalgate_sim_uniform
from pytest_evalgate.simulated.knobs import EvalgateSimConfig


class _Salted(Protocol):
    """What the leak reads of an ask (``styles.EvalgateSimAsk``): its draws key."""

    @property
    def salt(self) -> tuple[Any, ...]: ...


_Ask = TypeVar("_Ask", bound=_Salted)


def evalgate_sim_leaks(config: EvalgateSimConfig, salt: tuple[object, ...]) -> bool:
    """Whether the ask with draws key ``salt`` leaks the canary under ``config``."""
    if not config.canary or config.canary_rate <= 0.0:
        return False
    return evalgate_sim_uniform("canary", *salt) < config.canary_rate


def evalgate_sim_canary_answerer(
    config: EvalgateSimConfig, inner: Callable[[_Ask], str]
) -> Callable[[_Ask], str]:
    """``inner``, with the canary appended (after a space) to the asks that leak."""
    if not config.canary or config.canary_rate <= 0.0:
        return inner

    def answer(ask: _Ask) -> str:
        text = inner(ask)
        return f"{text} {config.canary}" if evalgate_sim_leaks(config, ask.salt) else text

    return answer
