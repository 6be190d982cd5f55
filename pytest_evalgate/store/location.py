"""Which backend a store location names: ``s3://bucket/prefix`` or a folder.

The one place that turns a ``--evalgate-store`` value (plugin, ``evalgate gate``) into an
``EvalgateStoreBackend``. An S3 store is probed when opened, so a credentials error or an
unreachable endpoint is an ``EvalgateConfigError`` before any request is sent to a model.
"""

from __future__ import annotations

from pytest_evalgate.store.backend import EvalgateLocalStore, EvalgateStoreBackend
from pytest_evalgate.store.s3 import EvalgateS3Store, evalgate_is_s3


def evalgate_open_store(location: str) -> EvalgateStoreBackend:
    """The backend of ``location``; an S3 store is checked (``EvalgateConfigError``)."""
    if not evalgate_is_s3(location):
        return EvalgateLocalStore(location)
    store = EvalgateS3Store(location)
    store.evalgate_check()
    return store
