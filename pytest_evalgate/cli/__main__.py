"""``python -m pytest_evalgate.cli ...``: the same as the ``evalgate`` console script."""

from __future__ import annotations

from pytest_evalgate.cli import main

raise SystemExit(main())
