"""Checkpoint tiers (issue 16, SPEC section 12): a stable subset by hash of (seed, case id), its
own policy, the tier in the decision, and never a signed full-suite pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from suitekit import make_cases, write_suite

from pytest_evalgate.attest.dsse import evalgate_refusal_reason
from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.manifest.tiers import evalgate_tier_draw, evalgate_tier_member

TIERS = {"checkpoint": {"fraction": 0.2, "seed": 3, "policy": "gate-checkpoint.yaml"}}
TIER_POLICY: dict[str, Any] = {
    "version": "checkpoint-v1",
    "baseline": None,
    "rules": [{"slice": "all", "rule": "min_rate", "min": 0.5}],
}


def _members(manifest_path: Path) -> set[str]:
    manifest = evalgate_load_manifest(str(manifest_path))
    spec = manifest.tiers["checkpoint"]
    return {c.case_id for c in manifest.cases if evalgate_tier_member(spec, c.case_id)}


def _suite(folder: Path, per_category: int) -> Path:
    path = write_suite(
        folder,
        {
            "candidate": "simulated://?accuracy=0.95&seed=1",
            "baseline": "simulated://?accuracy=0.9&seed=2",
        },
        cases=make_cases(["alpha", "beta"], per_category),
        extra={"tiers": TIERS},
    )
    (folder / "gate-checkpoint.yaml").write_text(yaml.safe_dump(TIER_POLICY, sort_keys=False))
    return path


def test_adding_ten_percent_more_cases_keeps_every_member(tmp_path: Path) -> None:
    before = _members(_suite(tmp_path / "a", 200))
    after = _members(_suite(tmp_path / "b", 220))
    assert before <= after and len(after) > len(before)
    assert 0.15 < len(before) / 400 < 0.25  # about the fraction


def test_the_draw_is_a_hash_of_seed_and_case_id() -> None:
    assert evalgate_tier_draw(0, "a") == evalgate_tier_draw(0, "a")
    assert evalgate_tier_draw(0, "a") != evalgate_tier_draw(1, "a")
    draws = [evalgate_tier_draw(0, f"case-{i}") for i in range(2000)]
    assert all(0.0 <= d < 1.0 for d in draws)
    assert 0.45 < sum(d < 0.5 for d in draws) / 2000 < 0.55


def test_a_tier_run_gates_only_its_cases_with_its_policy(pytester: pytest.Pytester) -> None:
    path = _suite(pytester.path / "suite", 50)
    members = _members(path)
    log = pytester.path / "requests.jsonl"
    result = pytester.runpytest(
        "--evalgate", "suite", "-p", "no:cacheprovider", "-q", "--evalgate-tier=checkpoint",
        "--evalgate-report=rep", f"--evalgate-request-log={log}",
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*verdict PASS*", "*min_rate[[]all]*"])
    decision = json.loads((pytester.path / "rep" / "decision.json").read_text())
    assert decision["verdict"] == "pass" and decision["partial"] is False
    assert decision["policy"]["version"] == "checkpoint-v1"
    assert decision["tier"]["name"] == "checkpoint"
    assert decision["tier"]["cases"] == len(members) and decision["tier"]["suite_cases"] == 100
    assert decision["counts"]["expected"] == 2 * len(members)
    assert decision["attestable"] is False
    assert evalgate_refusal_reason(decision) is not None  # never signed as a full-suite pass
    lines = log.read_text().splitlines()
    asked = [str(json.loads(line)["identity"]).split("/") for line in lines]
    assert len(asked) == 2 * len(members)  # revision/candidate/case/rN
    assert {parts[2] for parts in asked} == members


def test_a_tier_decision_is_not_signed(pytester: pytest.Pytester) -> None:
    _suite(pytester.path / "suite", 20)
    from pytest_evalgate.cli import main

    key = pytester.path / "evalgate.key"
    assert main(["keygen", "--dir", str(pytester.path)]) == 0
    result = pytester.runpytest(
        "--evalgate", "suite", "-p", "no:cacheprovider", "-q", "--evalgate-tier=checkpoint",
        "--evalgate-report=rep", f"--evalgate-sign-key={key}",
    )  # fmt: skip
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*decision not signed*"])
    assert not (pytester.path / "rep" / "decision.dsse.json").exists()


def test_an_unknown_tier_is_a_usage_error(pytester: pytest.Pytester) -> None:
    _suite(pytester.path / "suite", 5)
    result = pytester.runpytest(
        "--evalgate", "suite", "-p", "no:cacheprovider", "--evalgate-tier=nightly"
    )
    assert result.ret == 4
    assert "no tier 'nightly' (tiers: checkpoint)" in result.stderr.str()


def test_a_bad_fraction_is_refused(tmp_path: Path) -> None:
    from pytest_evalgate.errors import EvalgateConfigError

    path = write_suite(
        tmp_path / "s", {"candidate": "simulated://"}, extra={"tiers": {"t": {"fraction": 1.5}}}
    )
    with pytest.raises(EvalgateConfigError, match=r"tiers\.t\.fraction"):
        evalgate_load_manifest(str(path))


# --------------------------------------------------------------------------- evalgate gate --tier


def _gate(*args: str) -> int:
    from pytest_evalgate.cli import main

    return main(["gate", "suite", "--store", ".evalgate", *args])


def test_evalgate_gate_tier_gates_the_tier_like_the_pytest_option(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_evalgate.cli import main

    path = _suite(pytester.path / "suite", 50)
    members = _members(path)
    run = pytester.runpytest(
        "--evalgate", "suite", "-p", "no:cacheprovider", "-q", "--evalgate-tier=checkpoint",
        "--evalgate-report=rep",
    )  # fmt: skip
    assert run.ret == 0
    assert main(["keygen", "--dir", str(pytester.path)]) == 0
    capsys.readouterr()
    status = _gate("--tier", "checkpoint", "--report", "cli", "--sign-key", "evalgate.key")
    out = capsys.readouterr().out
    assert status == 0, out
    assert "verdict PASS" in out and "min_rate[all]" in out and "decision not signed" in out
    decision = json.loads((pytester.path / "cli" / "decision.json").read_text())
    in_pytest = json.loads((pytester.path / "rep" / "decision.json").read_text())
    assert decision["tier"] == in_pytest["tier"] and decision["tier"]["cases"] == len(members)
    assert decision["policy"] == in_pytest["policy"]  # the tier's own policy, checkpoint-v1
    assert decision["rules"] == in_pytest["rules"]  # same selection, same numbers
    assert decision["counts"]["expected"] == 2 * len(members)
    assert decision["attestable"] is False and decision["verdict"] == "pass"
    assert not (pytester.path / "cli" / "decision.dsse.json").exists()


def test_a_tier_pass_is_never_a_full_suite_pass(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_evalgate.attest.dsse import evalgate_sign, evalgate_statement
    from pytest_evalgate.cli import main
    from pytest_evalgate.errors import EvalgateSignatureError

    _suite(pytester.path / "suite", 50)
    run = pytester.runpytest(
        "--evalgate", "suite", "-p", "no:cacheprovider", "-q", "--evalgate-tier=checkpoint"
    )
    assert run.ret == 0
    assert main(["keygen", "--dir", str(pytester.path)]) == 0
    # the same store gated as the full suite: the tier's records are not the suite's
    assert _gate("--report", "full", "--sign-key", "evalgate.key") == 1
    full = json.loads((pytester.path / "full" / "decision.json").read_text())
    assert full["verdict"] == "incomplete" and "tier" not in full
    assert not (pytester.path / "full" / "decision.dsse.json").exists()
    # and a tier decision cannot be signed even when asked directly
    assert _gate("--tier", "checkpoint", "--report", "tier") == 0
    tier = json.loads((pytester.path / "tier" / "decision.json").read_text())
    with pytest.raises(EvalgateSignatureError, match="attestable"):
        evalgate_sign(evalgate_statement(tier), str(pytester.path / "evalgate.key"))


def test_evalgate_gate_with_an_unknown_tier_exits_4(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    _suite(pytester.path / "suite", 5)
    assert _gate("--tier", "nightly") == 4
    assert "no tier 'nightly' (tiers: checkpoint)" in capsys.readouterr().err


def test_evalgate_gate_tier_with_policy_uses_the_named_policy(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    _suite(pytester.path / "suite", 50)
    assert (
        pytester.runpytest(
            "--evalgate", "suite", "-p", "no:cacheprovider", "-q", "--evalgate-tier=checkpoint"
        ).ret
        == 0
    )
    strict = {**TIER_POLICY, "version": "strict-v1", "rules": [
        {"slice": "all", "rule": "min_rate", "min": 0.99}]}  # fmt: skip
    (pytester.path / "strict.yaml").write_text(yaml.safe_dump(strict))
    status = _gate("--tier", "checkpoint", "--policy", "strict.yaml", "--report", "rep")
    decision = json.loads((pytester.path / "rep" / "decision.json").read_text())
    assert status == 1 and decision["verdict"] == "fail"
    assert decision["policy"]["version"] == "strict-v1" and decision["tier"]["name"] == "checkpoint"
