"""``evalgate canary template|rollout|plan`` through ``main([...])`` (check: test_canary_check.py).

Real suites written by suitekit; printed YAML is parsed back and validated against the CRDs in
``../shared/crds`` (skipped with a reason where that folder is absent).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import crdkit
import pytest
import yaml
from suitekit import DEFAULT_POLICY, write_suite

from pytest_evalgate.canary import evalgate_analysis_template, evalgate_selector
from pytest_evalgate.cli import main
from pytest_evalgate.policy import load as gate_policy

REPO = Path(__file__).resolve().parents[1]
CRDS = REPO.parent / "shared" / "crds"
Capsys = pytest.CaptureFixture[str]
ONLINE = [
    {"metric": "error_rate_delta", "max": 0.002, "interval": "1m", "window": "5m"},
    {"metric": "ttft_p95_ratio", "max": 1.1, "interval": "2m", "window": "10m"},
    {"metric": "judge_score_delta", "min": -0.02, "interval": "5m", "window": "1h"},
]
SELECTOR = 'namespace="serve-support"'


def suite(tmp_path: Path, online: list[dict[str, Any]] | None = ONLINE) -> Path:
    policy = dict(DEFAULT_POLICY)
    if online is not None:
        policy["online"] = online
    manifest = write_suite(
        tmp_path / "suite",
        {"candidate": "simulated://", "baseline": "simulated://"},
        policy=policy,
        suite="Support_Eval",  # the slug lowercases and replaces the underscore
    )
    return manifest.parent


@pytest.fixture(scope="module")
def validators() -> dict[tuple[str, str], Any]:
    if not CRDS.is_dir():
        pytest.skip(f"{CRDS} is absent (a plain clone has no shared/crds): canary CRDs unchecked")
    return crdkit.crd_validators(
        CRDS,
        [
            "analysis-template-crd.yaml",
            "rollout-crd.yaml",
            "gateway.networking.k8s.io_httproutes.yaml",
            "inference.networking.k8s.io_inferencepools.yaml",
        ],
    )


def run(capsys: Capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


# --------------------------------------------------------------------------- template


def test_template_prints_the_analysis_of_the_suites_policy(
    tmp_path: Path, capsys: Capsys, validators: dict[tuple[str, str], Any]
) -> None:
    folder = suite(tmp_path)
    status, out, err = run(
        capsys, "canary", "template", str(folder), "--selector", SELECTOR,
        "--namespace", "serve-support", "--prometheus", "http://prom.monitoring:9090",
    )  # fmt: skip
    assert (status, err) == (0, "")
    (printed,) = [doc for doc in yaml.safe_load_all(out) if doc]
    policy = gate_policy.evalgate_load_policy(folder / "gate.yaml")
    expected = evalgate_analysis_template(
        policy, "support-eval-online", "http://prom.monitoring:9090",
        selector=evalgate_selector(SELECTOR), namespace="serve-support",
    )  # fmt: skip
    assert printed == expected
    assert [m["name"] for m in printed["spec"]["metrics"]] == [r["metric"] for r in ONLINE]
    validators[("argoproj.io/v1alpha1", "AnalysisTemplate")].validate(printed)


def test_template_window_and_name_options(tmp_path: Path, capsys: Capsys) -> None:
    status, out, _ = run(
        capsys, "canary", "template", str(suite(tmp_path)), "--window", "30m", "--name", "t1"
    )
    assert status == 0
    printed = yaml.safe_load(out)
    assert printed["metadata"]["name"] == "t1" and "namespace" not in printed["metadata"]
    for metric in printed["spec"]["metrics"]:
        assert "[30m]" in metric["provider"]["prometheus"]["query"]
        assert metric["initialDelay"] == "30m"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--window", "30 min"], "evalgate canary: --window: window: a duration like 30s"),
        (["--selector", "version=canary"], "evalgate canary: selector: version=canary: not a"),
        (
            ["--selector", 'ns="a",version="x"'],
            'evalgate canary: selector: version="x": version is',
        ),
    ],
)
def test_bad_options_exit_4_with_the_reason(
    tmp_path: Path, capsys: Capsys, argv: list[str], message: str
) -> None:
    status, out, err = run(capsys, "canary", "template", str(suite(tmp_path)), *argv)
    assert (status, out) == (4, "")
    assert err.startswith(message)


def test_a_suite_without_online_rules_exits_4_naming_the_key(
    tmp_path: Path, capsys: Capsys
) -> None:
    folder = suite(tmp_path, online=None)
    for command in (["template"], ["rollout", "--stable", "a", "--canary", "b"]):
        status, out, err = run(capsys, "canary", command[0], str(folder), *command[1:])
        assert (status, out) == (4, "")
        reason = "online: no online rules (SPEC section 15): nothing to render or check"
        assert err == f"evalgate canary: {folder / 'gate.yaml'}: {reason}\n"


def test_a_wrong_online_rule_exits_4_naming_file_and_key(tmp_path: Path, capsys: Capsys) -> None:
    folder = suite(tmp_path, online=[{"metric": "ttft_p95_ratio", "max": 0.9}])
    status, out, err = run(capsys, "canary", "template", str(folder))
    assert (status, out) == (4, "")
    assert err.startswith(f"evalgate canary: {folder / 'gate.yaml'}: online[0].max: a ratio's max")


def test_a_policy_option_overrides_the_suites_gate(tmp_path: Path, capsys: Capsys) -> None:
    folder = suite(tmp_path, online=None)
    other = tmp_path / "other-gate.yaml"
    other.write_text(yaml.safe_dump({**DEFAULT_POLICY, "online": ONLINE[:1]}), encoding="utf-8")
    status, out, _ = run(capsys, "canary", "template", str(folder), "--policy", str(other))
    assert status == 0
    assert [m["name"] for m in yaml.safe_load(out)["spec"]["metrics"]] == ["error_rate_delta"]


# --------------------------------------------------------------------------- rollout


def rollout(
    capsys: Capsys, folder: Path, *extra: str
) -> tuple[int, list[dict[str, Any]], str, str]:
    argv = ["canary", "rollout", str(folder), "--stable", "support-r16", "--canary", "support-r17"]
    status, out, err = run(capsys, *argv, *extra)
    docs = [doc for doc in yaml.safe_load_all(out) if doc] if status == 0 else []
    return status, docs, out, err


def test_rollout_prints_pools_route_rollout_and_the_rollback(
    tmp_path: Path, capsys: Capsys, validators: dict[tuple[str, str], Any]
) -> None:
    status, docs, out, err = rollout(capsys, suite(tmp_path), "--namespace", "serve-support")
    assert (status, err) == (0, "")
    assert [d["kind"] for d in docs] == ["InferencePool", "InferencePool", "HTTPRoute", "Rollout"]
    for doc in docs:
        validators[(doc["apiVersion"], doc["kind"])].validate(doc)
        assert doc["metadata"]["namespace"] == "serve-support"
    stable, canary, route, ro = docs
    assert (stable["metadata"]["name"], canary["metadata"]["name"]) == (
        "support-r16",
        "support-r17",
    )
    assert route["metadata"]["name"] == ro["metadata"]["name"] == "support-eval"
    strategy = ro["spec"]["strategy"]["canary"]
    assert strategy["analysis"]["templates"] == [{"templateName": "support-eval-online"}]
    assert ro["spec"]["workloadRef"]["name"] == "support-eval"
    assert stable["spec"]["selector"]["matchLabels"] == {"app": "support-eval", "version": "stable"}
    # default bakes: the slowest rule's window plus its interval (1h + 5m), at every weight
    pauses = [s["pause"] for s in strategy["steps"] if "pause" in s]
    assert pauses == [{"duration": "65m"}] * 4 + [{}]
    last = out.rstrip("\n").splitlines()[-1]
    prefix = "# rollback (all weight back to stable): "
    assert last.startswith(prefix)
    words = shlex.split(last[len(prefix) :])
    assert words[:5] == ["kubectl", "argo", "rollouts", "abort", "support-eval"]
    assert "httproute" in words and "support-eval" in words[words.index("httproute") :]


def test_rollout_names_and_bakes_can_be_given(tmp_path: Path, capsys: Capsys) -> None:
    folder = suite(tmp_path)
    argv = ["--name", "sup", "--deployment", "sup-vllm", "--route", "sup-route", "--gateway", "gw"]
    argv += ["--template", "sup-online", "--app", "vllm", "--bake", "40m,20m", "--bake", "10m,5m"]
    argv += ["--opt-out-header", "x-tenant-canary=never", "--port", "8080", "--epp-port", "9003"]
    status, docs, _, _ = rollout(capsys, folder, *argv)
    assert status == 0
    _, canary, route, ro = docs
    assert ro["metadata"]["name"] == "sup" and ro["spec"]["workloadRef"]["name"] == "sup-vllm"
    assert route["metadata"]["name"] == "sup-route"
    assert route["spec"]["parentRefs"] == [{"name": "gw"}]
    header = route["spec"]["rules"][0]["matches"][0]["headers"][0]
    assert (header["name"], header["value"]) == ("x-tenant-canary", "never")
    assert canary["spec"]["selector"]["matchLabels"]["app"] == "vllm"
    assert canary["spec"]["targetPorts"] == [{"number": 8080}]
    assert canary["spec"]["endpointPickerRef"]["port"] == {"number": 9003}
    steps = ro["spec"]["strategy"]["canary"]["steps"]
    assert [s["pause"]["duration"] for s in steps[1:8:2]] == ["40m", "20m", "10m", "5m"]
    status, docs, _, _ = rollout(capsys, folder, "--bake", "30m")
    steps = docs[3]["spec"]["strategy"]["canary"]["steps"]
    assert [s["pause"] for s in steps[1::2]] == [{"duration": "30m"}] * 4
    assert steps[-1] == {"pause": {}}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bake", "10m,10m"], "evalgate canary: canary rollout: bakes: one bake per weight"),
        (["--bake", "ten"], "bakes: a duration like 30s, 10m or 2h (got 'ten')"),
        (["--name", "Sup"], "rollout: a lowercase DNS label"),
        (["--opt-out-header", "bad header=x"], "opt_out_header: an HTTP header name"),
        (["--opt-out-header", "x-canary"], "opt_out_value: 1 to 4096 characters"),
    ],
)
def test_bad_rollout_options_exit_4(
    tmp_path: Path, capsys: Capsys, argv: list[str], message: str
) -> None:
    status, _, out, err = rollout(capsys, suite(tmp_path), *argv)
    assert (status, out) == (4, "")
    assert message in err


def test_equal_pools_exit_4(tmp_path: Path, capsys: Capsys) -> None:
    argv = ["canary", "rollout", str(suite(tmp_path)), "--stable", "p", "--canary", "p"]
    status, out, err = run(capsys, *argv)
    assert (status, out) == (4, "")
    assert "canary_pool: the canary pool must differ from stable" in err


# --------------------------------------------------------------------------- plan


def plan(capsys: Capsys, *argv: str) -> tuple[int, list[str], str]:
    status, out, err = run(capsys, "canary", "plan", *argv)
    return status, out.splitlines(), err


def test_plan_reproduces_the_seeds_numbers(capsys: Capsys) -> None:
    # 1 % of 2,000 req/s is about 72,000 requests an hour: enough for error rate and latency
    for metric, effect in (("error_rate_delta", "0.002"), ("ttft_p95_ratio", "1.05")):
        argv = ["--rate", "2000", "--weight", "1%", "--metric", metric, "--effect", effect]
        status, lines, err = plan(capsys, *argv)
        assert (status, err) == (0, "")
        assert "= 20 canary requests/s (72,000 an hour)" in lines[1]
        assert lines[3].startswith("an hour at this weight: 72,000 canary requests")
        assert lines[3].endswith("(enough)")
        assert lines[2].startswith(("bake: 3m", "bake: 4m"))
    # a 1-point judge-score change sampled on 2 % of them needs hours
    argv = ["--rate", "2000", "--weight", "0.01", "--metric", "judge_score_delta"]
    status, lines, _ = plan(capsys, *argv, "--effect", "0.01", "--sample", "2%")
    assert status == 0
    assert "x sample 2% = 0.4 sampled canary requests/s (1,440 an hour)" in lines[1]
    assert lines[2].startswith("bake: 2.7h (9,758 s)")
    assert lines[3].endswith("(not enough)")


def test_plan_states_its_formula_and_variance_assumption(capsys: Capsys) -> None:
    argv = ["--rate", "500", "--weight", "5%", "--metric", "tpot_p95_ratio", "--effect", "1.1"]
    status, lines, _ = plan(capsys, *argv, "--sd", "0.4", "--alpha", "0.01", "--power", "0.9")
    assert status == 0
    assert (
        lines[4]
        == "test: one-sided z-test at alpha 0.01 with power 0.9; z_(1-alpha) + z_power = 3.608"
    )
    assert lines[5].startswith("formula: t = (z_(1-alpha) + z_power)^2 * (var_canary / W")
    assert lines[6].startswith("variance: log-normal latency, log-sd 0.4; log of the sample p95")
    status, lines, _ = plan(
        capsys, "--rate", "500", "--weight", "5%", "--metric", "error_rate_delta",
        "--effect", "0.01", "--baseline-rate", "0.02",
    )  # fmt: skip
    assert (
        lines[-1]
        == "variance: Bernoulli events, p(1-p) per request: stable rate 0.02, canary rate 0.03"
    )


@pytest.mark.parametrize(
    ("argv", "status", "message"),
    [
        (["--weight", "5"], 4, "evalgate canary: canary plan: weight: a canary share in (0, 1)"),
        (["--weight", "150%"], 4, "weight: a canary share"),
        (["--sample", "0"], 4, "sample: a sampled fraction in (0, 1]"),
        (["--effect", "1"], 4, "effect: a ratio other than 1"),
        (["--weight", "lots"], 2, "a fraction like 0.01 or 1% (got 'lots')"),
        (["--metric", "ttft"], 2, "invalid choice: 'ttft'"),
    ],
)
def test_bad_plan_inputs_are_refused(
    capsys: Capsys, argv: list[str], status: int, message: str
) -> None:
    base = {"--rate": "100", "--weight": "0.05", "--metric": "ttft_p95_ratio", "--effect": "1.1"}
    base.update(dict(zip(argv[::2], argv[1::2], strict=True)))
    flat = [part for pair in base.items() for part in pair]
    if status == 2:  # argparse's own refusal of an unparsable value
        with pytest.raises(SystemExit) as caught:
            main(["canary", "plan", *flat])
        assert caught.value.code == 2
        assert message in capsys.readouterr().err
        return
    got, lines, err = plan(capsys, *flat)
    assert (got, lines) == (4, [])
    assert err.startswith("evalgate canary: ") and message in err
