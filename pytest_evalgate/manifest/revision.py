"""The definition a pod was rendered for: ``PYTEST_EVALGATE_DEFINITION``.

A Polyaxon worker and aggregation get the manifest's definition digest (its first 16 hex
characters, the store folder's name) as their ``revision`` input, exported to the pod. When the
suite inside the image has another definition (the image was rebuilt with a changed dataset,
prompt or evaluator after rendering), its results would land in another store folder and the
aggregation would gate something else than what was rendered: the process refuses before any
request (a configuration error, exit 4).
"""

from __future__ import annotations

import re

from pytest_evalgate.errors import EvalgateConfigError

EVALGATE_DEFINITION_ENV = "PYTEST_EVALGATE_DEFINITION"
_PREFIX = re.compile(r"^[0-9a-f]{16,64}$")


def evalgate_check_definition(source: str, digest: str, expected: str | None) -> None:
    """Refuse ``digest`` (the manifest's definition digest) unless it starts with ``expected``
    (16 to 64 lowercase hex characters); nothing is checked when ``expected`` is unset or empty.
    """
    if not expected:
        return
    if not _PREFIX.match(expected):
        reason = f"{EVALGATE_DEFINITION_ENV}={expected!r} is not 16 to 64 lowercase hex digits"
        raise EvalgateConfigError(source, "definition_digest", reason)
    if not digest.startswith(expected):
        reason = (
            f"this suite's definition is {digest[:16]}, but it was rendered for {expected} "
            f"({EVALGATE_DEFINITION_ENV}): render the pipeline again for this image"
        )
        raise EvalgateConfigError(source, "definition_digest", reason)
