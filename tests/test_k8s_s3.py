"""``evalgate k8s render --store s3://...`` (issue 15): the Jobs without the store volume,
credentials by workload identity or a named Secret (never inline), an egress allowance to the
object store; every object validates strictly (the checks of tests/test_k8s.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import crdkit
import pytest
import yaml
from test_k8s import CRDS, _render, _suite, _validate

from pytest_evalgate.cli import main as cli_main
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.k8s.store import (
    EvalgateS3RenderOptions,
    evalgate_s3_store_objects,
    evalgate_store_port,
)

JSON = dict[str, Any]
STORE = "s3://evals-bucket/support"
ENDPOINT = "https://objects.example:9000"


@pytest.fixture(scope="module")
def crd_schemas() -> dict[tuple[str, str], JSON]:
    if not CRDS.is_dir():
        pytest.skip(f"{CRDS} is absent (a plain clone has no shared/crds): Kueue CRDs unchecked")
    return crdkit.crd_schemas(CRDS, "kueue.x-k8s.io_*.yaml")


def _harness(job: JSON) -> JSON:
    pod = job["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "evalgate")  # type: ignore[no-any-return]


def _on_s3(sidecar: bool = False, **changes: Any) -> list[JSON]:
    options = EvalgateS3RenderOptions(
        **{"store": STORE, "endpoint": ENDPOINT, "credentials_secret": "evalgate-s3", **changes}
    )
    return evalgate_s3_store_objects(_render(sidecar, 4), options)


@pytest.mark.parametrize("sidecar", [False, True])
@pytest.mark.parametrize("identity", ["secret", "workload"])
def test_s3_rendered_objects_validate(
    sidecar: bool, identity: str, crd_schemas: dict[tuple[str, str], JSON]
) -> None:
    workload = {"credentials_secret": None, "workload_identity": True}
    changes = {} if identity == "secret" else workload
    objects = _on_s3(sidecar, **changes)
    assert [o["kind"] for o in objects] == ["Job", "Job", "NetworkPolicy"]
    for obj in objects:
        _validate(obj, crd_schemas)


def test_s3_jobs_have_no_store_volume_and_name_the_bucket() -> None:
    workers, aggregate, _policy = _on_s3()
    for job in (workers, aggregate):
        pod = job["spec"]["template"]["spec"]
        assert not any("persistentVolumeClaim" in v for v in pod["volumes"])
        harness = _harness(job)
        assert f"--evalgate-store={STORE}" in harness["command"]
        assert not any("/store" in word for word in harness["command"])
        assert all(m["mountPath"] != "/store" for m in harness["volumeMounts"])
    assert "--evalgate-report=/tmp/report" in _harness(aggregate)["command"]
    assert "--evalgate-shard=$(JOB_COMPLETION_INDEX)/4" in _harness(workers)["command"]


def test_credentials_come_from_a_named_secret_never_a_value() -> None:
    env = {e["name"]: e for e in _harness(_on_s3()[0])["env"]}
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        assert "value" not in env[key]
        assert env[key]["valueFrom"]["secretKeyRef"]["name"] == "evalgate-s3"
    assert env["AWS_ENDPOINT_URL"] == {"name": "AWS_ENDPOINT_URL", "value": ENDPOINT}


def test_workload_identity_puts_no_credential_in_the_pod() -> None:
    workers = _on_s3(credentials_secret=None, workload_identity=True)[0]
    names = {e["name"] for e in _harness(workers)["env"]}
    assert not names & {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}
    assert workers["spec"]["template"]["spec"]["serviceAccountName"] == "evalgate"


def test_the_network_policy_allows_egress_to_the_object_store() -> None:
    policy = _on_s3(egress_cidr="10.20.0.0/16")[-1]
    assert policy["spec"]["policyTypes"] == ["Egress"]
    assert policy["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "evalgate"}}
    (rule,) = policy["spec"]["egress"]
    assert rule == {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}],
                    "ports": [{"protocol": "TCP", "port": 9000}]}  # fmt: skip


@pytest.mark.parametrize(
    ("endpoint", "port"),
    [(None, 443), ("https://s3.example", 443), ("http://minio:80", 80), ("http://h", 80)],
)
def test_store_port_follows_the_endpoint(endpoint: str | None, port: int) -> None:
    assert evalgate_store_port(endpoint) == port


@pytest.mark.parametrize(
    "changes",
    [{"credentials_secret": None}, {"workload_identity": True}, {"store": "s3://"}],
)
def test_bad_store_options_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(EvalgateConfigError):
        _on_s3(**changes)


def test_cli_render_with_an_s3_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], crd_schemas: dict[tuple[str, str], JSON]
) -> None:
    suite = _suite(tmp_path)
    argv = ["k8s", "render", str(suite), "--image", "img:1", "--store", STORE]
    argv += ["--store-endpoint", ENDPOINT, "--store-secret", "evalgate-s3"]
    assert cli_main(argv) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [o["kind"] for o in objects] == ["Job", "Job", "NetworkPolicy"]
    for obj in objects:
        _validate(obj, crd_schemas)
    assert cli_main(["k8s", "render", str(suite), "--image", "img:1", "--store", STORE]) == 4
    assert "--store-secret NAME or --workload-identity" in capsys.readouterr().err
