"""``evalgate reference``: print the reference of everything a user writes (docs/reference.md).

The text is put together from the parts that are generated from the code: the manifest's keys
and the dataset row fields (``manifest.reference``), the gate policy's keys and rule kinds
(``policy.reference``) and the trust file (``attest.trust``). ``tests/test_reference.py`` fails
while docs/reference.md differs from it.
"""

from __future__ import annotations

import argparse
import sys

from pytest_evalgate.cli.command import EvalgateCommand

_HEAD = """# Reference: everything a user writes

Generated from the code (`evalgate reference`, `pytest_evalgate/cli/reference.py`); do not edit
by hand. `PYTEST_EVALGATE_WRITE_REFERENCE=1 python -m pytest tests/test_reference.py` rewrites
it, and that test fails while this file differs from the code. Sections: the manifest
(`evalgate.yaml`), dataset rows, the gate policy (`gate.yaml`), trust files and approvals.

"""


def evalgate_reference_commands() -> tuple[EvalgateCommand, ...]:
    """The ``reference`` subcommand."""
    text = "print the reference of the manifest, dataset rows, gate policy and trust files"
    return (EvalgateCommand("reference", text, _arguments, _run),)


def evalgate_reference_text() -> str:
    """docs/reference.md's text; ``KeyError`` names a key, field or rule without its meaning."""
    from pytest_evalgate.attest.trust import evalgate_trust_reference
    from pytest_evalgate.manifest.reference import (
        evalgate_manifest_reference,
        evalgate_rows_reference,
    )
    from pytest_evalgate.policy.reference import evalgate_policy_reference

    parts = (
        evalgate_manifest_reference(), evalgate_rows_reference(), evalgate_policy_reference(),
        evalgate_trust_reference(),
    )  # fmt: skip
    return _HEAD + "\n".join(parts)


def _arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no options


def _run(args: argparse.Namespace) -> bool:
    del args
    sys.stdout.write(evalgate_reference_text())
    return True
