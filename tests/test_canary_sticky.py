"""Stickiness (SPEC 21): ``canary rollout --sticky-header`` puts ``sessionPersistence`` of type
``Header`` on the weighted rule. Validated against the experimental-channel HTTPRoute CRD of
``../shared/crds`` (and refused by the standard one, which lacks the field: such a route needs
the experimental CRD installed); skipped with a reason where that folder is absent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import crdkit
import jsonschema
import pytest
import yaml

from pytest_evalgate.cli import main

REPO = Path(__file__).resolve().parents[1]
CRDS = REPO.parent / "shared" / "crds"
SUPPORT = REPO / "suites" / "support"
EXPERIMENTAL = "gateway.networking.k8s.io_httproutes.experimental.yaml"
STANDARD = "gateway.networking.k8s.io_httproutes.yaml"
Capsys = pytest.CaptureFixture[str]


def route_validator(file_name: str) -> Any:
    if not CRDS.is_dir():
        pytest.skip(f"{CRDS} is absent (a plain clone has no shared/crds): routes unchecked")
    return crdkit.crd_validators(CRDS, [file_name])[("gateway.networking.k8s.io/v1", "HTTPRoute")]


def routes(capsys: Capsys, *extra: str) -> list[dict[str, Any]]:
    argv = ["canary", "rollout", str(SUPPORT), "--stable", "s", "--canary", "c", *extra]
    assert main(argv) == 0
    objects = [obj for obj in yaml.safe_load_all(capsys.readouterr().out) if obj]
    return [obj for obj in objects if obj["kind"] == "HTTPRoute"]


def test_a_sticky_route_validates_against_the_experimental_crd(capsys: Capsys) -> None:
    (route,) = routes(capsys, "--sticky-header", "x-conversation-id")
    route_validator(EXPERIMENTAL).validate(route)
    opt_out, weighted = route["spec"]["rules"]
    assert weighted["sessionPersistence"] == {
        "type": "Header",
        "header": {"name": "x-conversation-id"},
    }
    assert "sessionPersistence" not in opt_out  # the opt-out rule always goes to stable
    with pytest.raises(jsonschema.ValidationError, match="sessionPersistence"):
        route_validator(STANDARD).validate(route)


def test_without_the_option_the_route_stays_standard(capsys: Capsys) -> None:
    (route,) = routes(capsys)
    route_validator(STANDARD).validate(route)
    assert all("sessionPersistence" not in rule for rule in route["spec"]["rules"])


def test_every_cell_route_is_sticky(capsys: Capsys, tmp_path: Path) -> None:
    cells = tmp_path / "cells.yaml"
    cells.write_text(
        "cells:\n"
        "  - {name: a, route: r-a, namespace: n-a, pools: {stable: s, canary: c}}\n"
        "  - {name: b, route: r-b, namespace: n-b, pools: {stable: s, canary: c}}\n",
        encoding="utf-8",
    )
    argv = ["canary", "rollout", str(SUPPORT), "--cells", str(cells), "--sticky-header", "x-conv"]
    assert main(argv) == 0
    objects = [obj for obj in yaml.safe_load_all(capsys.readouterr().out) if obj]
    found = [obj for obj in objects if obj["kind"] == "HTTPRoute"]
    assert len(found) == 2
    for route in found:
        route_validator(EXPERIMENTAL).validate(route)
        assert route["spec"]["rules"][1]["sessionPersistence"]["header"]["name"] == "x-conv"


def test_a_bad_header_name_exits_4(capsys: Capsys) -> None:
    argv = ["canary", "rollout", str(SUPPORT), "--stable", "s", "--canary", "c",
            "--sticky-header", "bad header"]  # fmt: skip
    assert main(argv) == 4
    assert "sticky_header" in capsys.readouterr().err
