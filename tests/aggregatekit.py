"""Run an aggregation test over both of aggregation's paths.

Suites without a judge and without ``scorer: code`` stream into columns (``aggregate_table``);
the others read records whole. Both must give the same aggregate, so the tests that check the
aggregate's fields run twice: once as the suite would run, once with the record path forced.
"""

from __future__ import annotations

import pytest

from pytest_evalgate.aggregate import combine as aggregate


@pytest.fixture(autouse=True, params=["columns", "records"])
def aggregation_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """``columns``: the path the suite takes; ``records``: whole records for every suite."""
    if request.param == "records":
        monkeypatch.setattr(aggregate, "evalgate_column_path", lambda manifest: False)
    return str(request.param)
