"""``python -m pytest_evalgate.runner``: the runner's child process (``runner.child_process``
around the loop of ``runner.child``)."""

from __future__ import annotations

from pytest_evalgate.runner.child_process import evalgate_child_main

evalgate_child_main()
