"""endpoints/: what an endpoint is built from, checked before any request (no simulator is
started here: every URL is http, or a ``simulated://`` one only parsed).

A list of base URLs is a list of replicas (replica k takes entry k mod len); the environment's
``PYTEST_EVALGATE_BASE_URL_<NAME>`` overrides them; an API key comes from the variable the
manifest names, and a missing one or one holding a line break is refused naming file and key,
never quoting the value. The simulator's answer key holds each case's prompt and target once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from suitekit import make_cases, write_suite

from pytest_evalgate.client.redact import evalgate_redact
from pytest_evalgate.endpoints.resolve import (
    EvalgateEndpointPool,
    evalgate_answer_rows,
    evalgate_check_endpoints,
)
from pytest_evalgate.endpoints.simulators import evalgate_check_proxy, evalgate_env_key
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.manifest.load import EvalgateManifest, evalgate_load_manifest

KEY_VAR = "EVALGATE_TEST_UNITS_API_KEY"
OVERRIDE_VAR = "PYTEST_EVALGATE_BASE_URL_CAND_A"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (KEY_VAR, OVERRIDE_VAR, "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)


def _manifest(tmp_path: Path, url: Any, **candidate: Any) -> EvalgateManifest:
    path = write_suite(tmp_path, {"cand-a": "http://placeholder"}, cases=make_cases(["x"], 2))
    text = path.read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    data["candidates"]["cand-a"]["base_url"] = url
    data["candidates"]["cand-a"].update(candidate)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return evalgate_load_manifest(str(path))


# --- API keys ---------------------------------------------------------------------------------


def test_no_key_variable_named_means_no_key() -> None:
    assert evalgate_env_key("suite.yaml", "candidates.a.api_key_env", None) is None


@pytest.mark.parametrize("value", [None, ""])
def test_an_unset_or_empty_key_variable_is_refused(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is not None:
        monkeypatch.setenv(KEY_VAR, value)
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_env_key("suite.yaml", "candidates.a.api_key_env", KEY_VAR)
    assert (caught.value.source, caught.value.key) == ("suite.yaml", "candidates.a.api_key_env")
    assert caught.value.reason == f"environment variable {KEY_VAR} is not set"


def test_a_key_with_a_line_break_is_refused_without_quoting_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_VAR, "sk-units-newline-0042\n")
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_env_key("suite.yaml", "k", KEY_VAR)
    assert "sk-units-newline-0042" not in str(caught.value)
    assert caught.value.reason.startswith(f"environment variable {KEY_VAR} holds a line break")
    assert caught.value.reason.endswith("keeps its newline: strip it)")


def test_a_key_is_returned_and_registered_for_redaction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_VAR, "sk-units-secret-0043")
    assert evalgate_env_key("suite.yaml", "k", KEY_VAR) == "sk-units-secret-0043"
    redacted = evalgate_redact("auth: Bearer sk-units-secret-0043.")
    assert "sk-units-secret-0043" not in redacted


# --- endpoints --------------------------------------------------------------------------------


def test_replicas_take_their_base_url_by_index_modulo_the_list(tmp_path: Path) -> None:
    urls = ["http://127.0.0.1:9001/v1/", "http://127.0.0.1:9002/v1", "http://127.0.0.1:9003/v1"]
    manifest = _manifest(tmp_path, urls)
    candidate = manifest.candidates["cand-a"]
    pool = EvalgateEndpointPool()
    try:
        got = [pool.evalgate_endpoint(manifest, candidate, k).base_url for k in range(5)]
    finally:
        pool.evalgate_close()
    assert got == [
        "http://127.0.0.1:9001/v1",  # the trailing slash is dropped
        "http://127.0.0.1:9002/v1",
        "http://127.0.0.1:9003/v1",
        "http://127.0.0.1:9001/v1",
        "http://127.0.0.1:9002/v1",
    ]


def test_an_endpoint_carries_the_manifest_s_budget_model_and_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VAR, "sk-units-endpoint-0044")
    manifest = _manifest(tmp_path, "http://127.0.0.1:9001/v1", api_key_env=KEY_VAR)
    endpoint = EvalgateEndpointPool().evalgate_endpoint(manifest, manifest.candidates["cand-a"], 0)
    assert endpoint.model == "model-cand-a"
    assert endpoint.api_key == "sk-units-endpoint-0044"
    assert (endpoint.timeout_s, endpoint.max_attempts) == (10, 3)
    assert endpoint.api == manifest.api
    assert endpoint.model_check == "cand-a"  # the model an answer must name is checked


def test_a_gateway_that_rewrites_the_model_name_is_not_model_checked(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, "http://127.0.0.1:9001/v1", model_rewrite=True)
    endpoint = EvalgateEndpointPool().evalgate_endpoint(manifest, manifest.candidates["cand-a"], 0)
    assert endpoint.model_check is None


def test_the_environment_s_base_url_overrides_every_replica(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = _manifest(tmp_path, ["http://127.0.0.1:9001/v1", "http://127.0.0.1:9002/v1"])
    monkeypatch.setenv(OVERRIDE_VAR, "http://localhost:8000/v1/")
    pool = EvalgateEndpointPool()
    urls = {
        pool.evalgate_endpoint(manifest, manifest.candidates["cand-a"], k).base_url for k in (0, 1)
    }
    assert urls == {"http://localhost:8000/v1"}
    evalgate_check_endpoints(manifest, ["cand-a"])  # a usable override passes the check


def test_a_bad_override_is_refused_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = _manifest(tmp_path, "http://127.0.0.1:9001/v1")
    monkeypatch.setenv(OVERRIDE_VAR, "ftp://nowhere")
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_check_endpoints(manifest, ["cand-a"])
    assert (caught.value.source, caught.value.key) == (OVERRIDE_VAR, "candidates.cand-a.base_url")


def test_simulator_knobs_that_do_not_parse_are_refused_naming_the_manifest(
    tmp_path: Path,
) -> None:
    manifest = _manifest(tmp_path, "simulated://?accuracy=2")
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_check_endpoints(manifest, ["cand-a"])
    assert (caught.value.source, caught.value.key) == (manifest.path, "candidates.cand-a.base_url")
    assert "accuracy" in caught.value.reason


def test_valid_simulator_knobs_pass_the_check_without_starting_it(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, "simulated://?accuracy=0.5")
    evalgate_check_endpoints(manifest, ["cand-a"])
    evalgate_check_endpoints(manifest, [])  # no candidate named: nothing to check


def test_an_unset_key_variable_is_refused_before_any_request(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, "http://127.0.0.1:9001/v1", api_key_env=KEY_VAR)
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_check_endpoints(manifest, ["cand-a"])
    assert (caught.value.source, caught.value.key) == (
        manifest.path,
        "candidates.cand-a.api_key_env",
    )


def test_a_bad_proxy_variable_is_a_config_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    evalgate_check_proxy("http://127.0.0.1:9001/v1")  # no proxy: nothing to refuse
    monkeypatch.setenv("http_proxy", "socks5://user:pw-units-0045@proxy.invalid:1080")
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_check_proxy("http://example.invalid/v1")
    assert (caught.value.source, caught.value.key) == ("environment", "http_proxy")
    assert "pw-units-0045" not in str(caught.value)
    assert caught.value.reason.endswith("(unset it, or list example.invalid in NO_PROXY)")


def test_a_usable_proxy_s_password_is_registered_for_redaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("http_proxy", "http://user:pw-units-0046@proxy.invalid:3128")
    evalgate_check_proxy("http://example.invalid/v1")
    assert "pw-units-0046" not in evalgate_redact("echoed pw-units-0046 back")


# --- the simulator's answer key ---------------------------------------------------------------


def test_the_answer_key_holds_each_case_s_prompt_target_and_category(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, "http://127.0.0.1:9001/v1")
    rows = list(evalgate_answer_rows(manifest))
    assert [(row[1], row[2]) for row in rows] == [("0", "x"), ("2", "x")]
    assert rows[0][0] == manifest.cases[0].evalgate_prompt_json()
    assert all(len(row) == 3 for row in rows)


def test_cases_with_the_same_prompt_keep_the_first_row(tmp_path: Path) -> None:
    cases = make_cases(["x"], 3)
    cases[2]["input"] = cases[0]["input"]
    path = write_suite(tmp_path, {"cand-a": "http://127.0.0.1:9001/v1"}, cases=cases)
    rows = list(evalgate_answer_rows(evalgate_load_manifest(str(path))))
    assert [row[1] for row in rows] == ["0", "2"]  # the third case's "4" is not a second row
