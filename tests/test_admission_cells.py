"""A revocation reaches every cell's admission: three webhooks (real HTTPS servers on loopback,
one per cell, each with its own checker and caches) read one registry folder; after a
``registry revoke`` each denies the very next review of the digest, with no restart and no
wait, and a digest gated afterwards is admitted by all three (the caches do not hold stale
verdicts in either direction). The delay is measured by ``bench/revocation.py``."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from admissionkit import (
    Client,
    Keys,
    Tls,
    digest_of,
    make_keys,
    make_tls,
    model_image,
    pod,
    review,
    signed_decision,
)

from pytest_evalgate.admission import (
    EvalgateAdmission,
    EvalgateAdmissionConfig,
    EvalgateAdmissionServer,
)
from pytest_evalgate.attest.keys import EVALGATE_KEY_PASSWORD_ENV
from pytest_evalgate.registry import evalgate_registry_promote, evalgate_registry_revoke

CELLS = ("use1a", "use1b", "euw1a")


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(EVALGATE_KEY_PASSWORD_ENV, raising=False)
        return make_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return make_tls(tmp_path_factory.mktemp("tls"))


@contextlib.contextmanager
def webhooks(root: Path, keys: Keys, tls: Tls) -> Iterator[list[Client]]:
    with contextlib.ExitStack() as stack:
        clients = []
        for _cell in CELLS:
            config = EvalgateAdmissionConfig(keys.gate_pub, str(root), keys.registry_pub)
            server = stack.enter_context(
                EvalgateAdmissionServer(EvalgateAdmission(config), tls.cert, tls.key, port=0)
            )
            client = Client(server.port, tls)
            stack.callback(client.close)
            clients.append(client)
        yield clients


def allowed(client: Client, digest: str, namespace: str) -> bool:
    body = review(pod(volumes={"weights": model_image(digest)}), namespace=namespace)
    answer = client.review(body)
    return bool(answer["response"]["allowed"])


def gate(root: Path, keys: Keys, digest: str) -> None:
    envelope = signed_decision(digest, keys.gate)
    evalgate_registry_promote(str(root), digest, "candidate", [envelope], keys.registry, who="ci")
    evalgate_registry_promote(str(root), digest, "gated", [], keys.registry, who="ci")


def test_a_revocation_reaches_every_cells_webhook(tmp_path: Path, keys: Keys, tls: Tls) -> None:
    root = tmp_path / "registry"
    root.mkdir()
    shutil.copy(keys.gate_pub, root / "gate.pub")
    first, second = digest_of("cells-r1"), digest_of("cells-r2")
    with webhooks(root, keys, tls) as clients:
        gate(root, keys, first)
        for cell, client in zip(CELLS, clients, strict=True):
            for _ in range(2):  # the second answer comes from the cache
                assert allowed(client, first, f"serve-{cell}")
        evalgate_registry_revoke(str(root), first, "eval set leaked", keys.registry, who="sre")
        answers = [
            allowed(c, first, f"serve-{cell}") for cell, c in zip(CELLS, clients, strict=True)
        ]
        assert answers == [False, False, False]  # the next review of each cell denies
        gate(root, keys, second)
        answers = [
            allowed(c, second, f"serve-{cell}") for cell, c in zip(CELLS, clients, strict=True)
        ]
        assert answers == [True, True, True]
        assert not any(allowed(client, first, "serve-x") for client in clients)
