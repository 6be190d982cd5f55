"""Which cases this process keeps: ``--evalgate-tier`` and ``--evalgate-shard`` applied.

``EvalgateSelector`` answers, from the manifests alone, whether a case is in the tier, which
shard it falls in (the manifest's shard plan when it names one) and whether that is this
process's shard; ``evalgate_deselect`` applies such an answer to pytest's items. An unknown tier
or a bad shard plan is a usage error (exit 4).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pytest_evalgate.items import EvalgateItem
from pytest_evalgate.manifest.load import EvalgateManifest
from pytest_evalgate.manifest.tiers import evalgate_tier_member, evalgate_tier_spec
from pytest_evalgate.session.usage import evalgate_usage_errors
from pytest_evalgate.shard.plan import (
    EvalgateTopology,
    evalgate_manifest_plan,
    evalgate_shard_of,
)


class EvalgateSelector:
    """The tier and shard of each case; the shard plans, read once per (suite, count)."""

    def __init__(
        self,
        manifest_of: Callable[[str], EvalgateManifest],
        topology: EvalgateTopology,
        tier: str | None,
    ) -> None:
        self._manifest_of = manifest_of
        self._topology = topology
        self._tier = tier
        self._plans: dict[tuple[str, int], dict[str, int] | None] = {}

    @property
    def evalgate_sharded(self) -> bool:
        """Whether the run is split over shards (``--evalgate-shard`` with more than one)."""
        return self._topology.sharded

    def evalgate_in_tier(self, path: str, case_id: str) -> bool:
        """Whether the case is in ``--evalgate-tier`` (all cases when no tier is named)."""
        if self._tier is None:
            return True
        manifest = self._manifest_of(path)
        with evalgate_usage_errors():
            spec = evalgate_tier_spec(manifest.tiers, self._tier, manifest.path)
        return evalgate_tier_member(spec, case_id)

    def evalgate_in_shard(self, path: str, case_id: str) -> bool:
        """Whether the case falls in this process's shard."""
        topology = self._topology
        return self.evalgate_shard(path, case_id, topology.shard_count) == topology.shard_index

    def evalgate_shard(self, path: str, case_id: str, count: int) -> int:
        """The case's shard among ``count``: the manifest's shard plan if it names one."""
        key = (path, count)
        if key not in self._plans:
            with evalgate_usage_errors():
                self._plans[key] = evalgate_manifest_plan(self._manifest_of(path), count)
        return evalgate_shard_of(case_id, count, self._plans[key])

    def evalgate_loads(self, path: str) -> bool:
        """Whether the tier and the shard plan of the suite at ``path`` load (if not,
        collection reports the usage error, and nothing starts early)."""
        manifest = self._manifest_of(path)
        if not manifest.cases:
            return False
        first = manifest.cases[0].case_id
        try:
            self.evalgate_in_tier(path, first)
            self.evalgate_shard(path, first, manifest.shards)
            if self._topology.sharded:
                self.evalgate_in_shard(path, first)
        except pytest.UsageError:
            return False
        return True


def evalgate_deselect(
    config: pytest.Config, items: list[pytest.Item], keeps: Callable[[str, str], bool]
) -> None:
    """Deselect the identity items whose (suite path, case id) ``keeps`` refuses."""
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        mine = not isinstance(item, EvalgateItem) or keeps(item.suite_path, item.case.case_id)
        (keep if mine else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
