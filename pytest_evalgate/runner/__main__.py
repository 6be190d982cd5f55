"""``python -m pytest_evalgate.runner``: the runner's child process (see ``runner.child``)."""

from __future__ import annotations

from pytest_evalgate.runner.child import evalgate_child_main

evalgate_child_main()
