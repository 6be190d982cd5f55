"""The ``evalgate`` console script's one error wrapper and one verdict -> exit status mapping.

Real calls of ``main([...])`` (and of the wrapper with real commands): a configuration error is
exit 4 with ``evalgate LABEL: MESSAGE`` on stderr, another evalgate error exit 1 with the same
message, a bug propagates with its traceback and never becomes exit 4; a command's verdict maps
to 0 (passed) or 1 (did not).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from suitekit import DEFAULT_POLICY, make_cases, write_suite

from pytest_evalgate.cli import (
    EVALGATE_EXIT_FAIL,
    EVALGATE_EXIT_PASS,
    EVALGATE_EXIT_UNDECIDED,
    EVALGATE_EXIT_USAGE,
    EvalgateCommand,
    evalgate_build_parser,
    evalgate_commands,
    evalgate_run_command,
    evalgate_verdict_status,
    main,
)
from pytest_evalgate.errors import (
    EvalgateConfigError,
    EvalgateError,
    EvalgateK8sError,
    EvalgatePolicyError,
    EvalgateSignatureError,
    EvalgateStoreError,
)

Capsys = pytest.CaptureFixture[str]


# --------------------------------------------------------------------------- the wrapper


def _command(
    run: Callable[[argparse.Namespace], bool | None],
    usage_errors: tuple[type[Exception], ...] = (),
    label: str = "",
) -> EvalgateCommand:
    return EvalgateCommand("probe", "a probe", lambda parser: None, run, label, usage_errors)


def _raising(exc: BaseException) -> Callable[[argparse.Namespace], bool]:
    def run(args: argparse.Namespace) -> bool:
        raise exc

    return run


def test_a_config_error_exits_4_with_its_message_on_stderr(tmp_path: Path, capsys: Capsys) -> None:
    missing = tmp_path / "nowhere"
    assert main(["pin", str(missing)]) == EVALGATE_EXIT_USAGE == 4
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"evalgate pin: {missing}: -: cannot read: No such file or directory\n"


def test_a_policy_error_is_a_config_error_named_by_the_label(
    tmp_path: Path, capsys: Capsys
) -> None:
    policy = {**DEFAULT_POLICY, "candidate": "nope"}
    suite = write_suite(tmp_path / "s", {"candidate": "simulated://"}, policy=policy).parent
    for name in ("gate", "aggregate"):  # aggregate is gate by another name, errors included
        assert main([name, str(suite), "--store", str(tmp_path / "store")]) == 4
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("evalgate gate: ") and "'nope'" in err, err


def test_another_evalgate_error_exits_1_with_its_message(tmp_path: Path, capsys: Capsys) -> None:
    not_an_envelope = tmp_path / "gate.yaml"
    not_an_envelope.write_text("rules: []\n")
    argv = ["override", str(not_an_envelope), "--approver", "a", "--reason", "r"]
    assert main([*argv, "--expires", "2000-01-01T00:00:00Z", "--key", "k.pem"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("evalgate override: ") and "not a JSON envelope" in err
    assert not (tmp_path / "gate.yaml.override.json").exists()


def test_an_unloadable_kubeconfig_is_an_api_error_not_a_usage_error(
    tmp_path: Path, capsys: Capsys
) -> None:
    suite = write_suite(tmp_path / "s", {"candidate": "simulated://"}).parent
    argv = ["k8s", "run", str(suite), "--image", "img", "--kubeconfig", str(tmp_path / "none")]
    assert main(argv) == EVALGATE_EXIT_FAIL == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("evalgate k8s: cannot load kubeconfig ")


def test_a_bug_propagates_from_main_and_prints_nothing(tmp_path: Path, capsys: Capsys) -> None:
    (tmp_path / "decision.json").write_text("{}")  # no "suite": the renderer indexes it
    with pytest.raises(KeyError) as caught:
        main(["report", str(tmp_path)])
    assert not isinstance(caught.value, EvalgateError)
    assert capsys.readouterr() == ("", "")


def test_a_bug_in_the_console_script_shows_its_traceback_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "decision.json").write_text("{}")
    argv = [sys.executable, "-m", "pytest_evalgate.cli", "report", str(tmp_path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr and "KeyError" in done.stderr
    assert "evalgate report:" not in done.stderr


@pytest.mark.parametrize(
    "exc", [ValueError("bad"), KeyError("k"), TypeError("t"), Exception("e"), OSError(2, "gone")]
)
def test_the_wrapper_lets_every_error_outside_the_tree_through(
    exc: BaseException, capsys: Capsys
) -> None:
    with pytest.raises(type(exc)) as caught:
        evalgate_run_command(_command(_raising(exc)), argparse.Namespace())
    assert caught.value is exc
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (EvalgateConfigError("f.yaml", "key", "why"), 4),
        (EvalgatePolicyError("gate.yaml", "rules[0]", "why"), 4),
        (EvalgateStoreError("f.yaml: key: why"), 1),
        (EvalgateSignatureError("f.yaml: key: why"), 1),
        (EvalgateK8sError("f.yaml: key: why"), 1),
        (EvalgateError("f.yaml: key: why"), 1),
    ],
)
def test_the_wrapper_maps_the_tree(exc: EvalgateError, status: int, capsys: Capsys) -> None:
    assert evalgate_run_command(_command(_raising(exc)), argparse.Namespace()) == status
    assert capsys.readouterr() == ("", f"evalgate probe: {exc}\n")


def test_declared_usage_errors_exit_4_and_only_for_that_command(capsys: Capsys) -> None:
    gone = FileNotFoundError(2, "No such file or directory", "x.jsonl")
    files = _command(_raising(gone), usage_errors=(OSError,), label="files")
    assert evalgate_run_command(files, argparse.Namespace()) == 4
    assert capsys.readouterr().err == f"evalgate files: {gone}\n"
    with pytest.raises(FileNotFoundError):
        evalgate_run_command(_command(_raising(gone)), argparse.Namespace())


def test_only_the_serving_and_file_writing_commands_declare_usage_errors() -> None:
    declared = {c.name: c.usage_errors for c in evalgate_commands() if c.usage_errors}
    assert declared == {
        "serve": (OSError,), "shard-plan": (OSError,), "registry": (OSError,),
        "online-judge": (OSError,),
        "admission": (OSError,), "canary-scan": (OSError,), "trend": (OSError,),
        "polyaxon": (OSError,), "policy": (OSError,), "weights": (OSError,), "import": (OSError,),
    }  # fmt: skip


def test_an_unwritable_plan_is_a_usage_error(tmp_path: Path, capsys: Capsys) -> None:
    suite = write_suite(tmp_path / "s", {"candidate": "simulated://"}).parent
    target = tmp_path / "no" / "plan.json"
    assert main(["shard-plan", str(suite), "--shards", "2", "--output", str(target)]) == 4
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("evalgate shard-plan: [Errno 2] No such file")


# --------------------------------------------------------------------------- verdict -> status


def test_a_verdict_maps_to_0_1_or_2_when_undecided() -> None:
    assert evalgate_verdict_status(True) == EVALGATE_EXIT_PASS == 0
    assert evalgate_verdict_status(False) == EVALGATE_EXIT_FAIL == 1
    assert evalgate_verdict_status(None) == EVALGATE_EXIT_UNDECIDED == 2


def test_the_wrapper_returns_the_verdict_status(capsys: Capsys) -> None:
    def passed(args: argparse.Namespace) -> bool:
        print("passed")
        return True

    def failed(args: argparse.Namespace) -> bool:
        print("failed")
        return False

    def undecided(args: argparse.Namespace) -> None:
        print("undecided")

    assert evalgate_run_command(_command(passed), argparse.Namespace()) == 0
    assert evalgate_run_command(_command(failed), argparse.Namespace()) == 1
    assert evalgate_run_command(_command(undecided), argparse.Namespace()) == 2
    assert capsys.readouterr() == ("passed\nfailed\nundecided\n", "")


def _gated_suite(pytester: pytest.Pytester, name: str, candidate: float, status: int) -> Path:
    suite = write_suite(
        pytester.path / name,
        {
            "candidate": f"simulated://?accuracy={candidate}&seed=3",
            "baseline": "simulated://?accuracy=1&seed=4",
        },
        cases=make_cases(["alpha", "beta"], 40),
        budget={"max_concurrency": 16, "max_attempts": 2, "timeout_s": 10},
    ).parent
    store = pytester.path / f"{name}-store"
    result = pytester.runpytest("--evalgate", str(suite), f"--evalgate-store={store}", "-q")
    assert result.ret == status, result.stdout.str()  # the run's verdict is the gate's below
    return suite


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("keys")
    assert main(["keygen", "--dir", str(folder)]) == 0
    return folder


@pytest.mark.slow
def test_gate_and_verify_exit_by_verdict(
    pytester: pytest.Pytester, keys: Path, capsys: Capsys
) -> None:
    for name, accuracy, verdict, status in (("good", 1.0, "PASS", 0), ("bad", 0.5, "FAIL", 1)):
        suite = _gated_suite(pytester, name, accuracy, status)
        capsys.readouterr()
        report = pytester.path / f"{name}-report"
        argv = ["gate", str(suite), "--store", str(pytester.path / f"{name}-store")]
        argv += ["--report", str(report), "--sign-key", str(keys / "evalgate.key")]
        assert main(argv) == status, capsys.readouterr()
        out, err = capsys.readouterr()
        assert f"verdict {verdict}" in out and err == ""
        envelope = str(report / "decision.dsse.json")
        assert f"wrote {envelope}" in out
        pub = str(keys / "evalgate.pub")
        assert main(["verify", envelope, "--key", pub]) == 0  # signed and valid either way
        assert capsys.readouterr().out.endswith("result: VALID\n")
        assert main(["verify", envelope, "--key", pub, "--require-pass"]) == status
        assert ("--require-pass fails" in capsys.readouterr().out) is (status == 1)


def test_gate_on_an_empty_store_is_incomplete_and_exits_1(tmp_path: Path, capsys: Capsys) -> None:
    suite = write_suite(tmp_path / "s", {"candidate": "simulated://", "baseline": "simulated://"})
    assert main(["gate", str(suite.parent), "--store", str(tmp_path / "empty")]) == 1
    out, err = capsys.readouterr()
    assert "verdict INCOMPLETE" in out and err == ""


def test_an_invalid_signature_is_a_verdict_on_stdout_not_an_error(
    tmp_path: Path, keys: Path, capsys: Capsys
) -> None:
    from pytest_evalgate.attest.dsse import evalgate_sign

    subject = [{"name": "m", "digest": {"sha256": "ab" * 32}}]
    statement = {"_type": "https://in-toto.io/Statement/v1", "subject": subject}
    statement.update(predicateType="https://example.invalid/other", predicate={"n": 1})
    envelope = evalgate_sign(statement, str(keys / "evalgate.key"))
    other = evalgate_sign({**statement, "predicate": {"n": 2}}, str(keys / "evalgate.key"))
    envelope["signatures"] = other["signatures"]  # a valid signature, of other bytes
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(envelope))
    assert main(["verify", str(path), "--key", str(keys / "evalgate.pub")]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("INVALID: ") and "signature" in out and err == ""
    envelope["signatures"] = evalgate_sign(statement, str(keys / "evalgate.key"))["signatures"]
    path.write_text(json.dumps(envelope))
    assert main(["verify", str(path), "--key", str(keys / "evalgate.pub")]) == 0
    assert capsys.readouterr().out.endswith("result: VALID\n")


def test_every_subcommand_is_registered_in_help_order(capsys: Capsys) -> None:
    names = [command.name for command in evalgate_commands()]
    assert names == [
        "pin", "gate", "aggregate", "report", "judge-agreement", "rejudge", "keygen", "verify",
        "override", "policy", "weights", "serve", "shard-plan", "k8s", "polyaxon", "registry",
        "admission", "canary", "shadow", "online-judge", "canary-scan", "trend", "import", "plan",
        "probe", "reference",
    ]  # fmt: skip
    with pytest.raises(SystemExit) as caught:
        evalgate_build_parser().parse_args(["--help"])
    assert caught.value.code == 0
    assert "{" + ",".join(names) + "}" in capsys.readouterr().out


def test_unparsable_options_are_argparse_errors(capsys: Capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["shard-plan", "suite"])  # --shards is required
    assert caught.value.code == 2
    assert "--shards" in capsys.readouterr().err
