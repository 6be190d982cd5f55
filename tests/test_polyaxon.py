"""``evalgate polyaxon render|check`` (issue 15): the worker and aggregation components and the
pipeline, checked by Polyaxon's own specification checker (PyPI ``polyaxon``, a test extra) and
by ours (undefined ``{{ name }}``, params naming no input); the worker's command, resolved by
Polyaxon's compiler for a shard, is the Indexed Job's pod command for that index."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_k8s import EXAMPLE, _suite

from pytest_evalgate.cli import main as cli_main
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.k8s.polyaxon import EvalgatePolyaxonOptions, evalgate_polyaxon_render
from pytest_evalgate.k8s.polyaxon_check import (
    EVALGATE_POLYAXON_GLOBALS,
    evalgate_check_polyaxonfiles,
    evalgate_template_names,
)
from pytest_evalgate.k8s.render import evalgate_render
from pytest_evalgate.k8s.render_types import EvalgateRenderOptions
from pytest_evalgate.k8s.store import EvalgateS3RenderOptions
from pytest_evalgate.manifest.code import EvalgateSandboxBlock

with warnings.catch_warnings():
    # polyaxon 2.18 still declares pydantic v1-style configs (deprecation warnings at import)
    warnings.simplefilter("ignore")
    from polyaxon._compiler.contexts.contexts import resolve_contexts, resolve_globals_contexts
    from polyaxon._contexts.sections import GLOBALS_CONTEXTS
    from polyaxon.exceptions import PolyaxonfileError
    from polyaxon.polyaxonfile import (
        CompiledOperationSpecification,
        OperationSpecification,
        check_polyaxonfile,
    )

# polyaxon 2.18 builds some pydantic models lazily, with v1-style configs: only that warning
pytestmark = pytest.mark.filterwarnings("ignore:Support for class-based `config`")
JSON = dict[str, Any]
IMAGE = "registry.example/evalgate:1"
STORE = "s3://evals-bucket/support"


def _files(shards: int = 4, **options: Any) -> dict[str, JSON]:
    opts = EvalgatePolyaxonOptions(suite_path="suites/example", **options)
    return evalgate_polyaxon_render(EXAMPLE.ExampleManifest(), shards, IMAGE, opts)


def _write(folder: Path, files: dict[str, JSON]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in files.items():
        (folder / name).write_text(yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
    return folder


def _job_command(shards: int, index: int, role: int = 0) -> list[str]:
    jobs = evalgate_render(
        EXAMPLE.ExampleManifest(), shards, IMAGE, queue=None,
        options=EvalgateRenderOptions(suite_path="suites/example"),
    )  # fmt: skip
    command = jobs[role]["spec"]["template"]["spec"]["containers"][0]["command"]
    return [word.replace("$(JOB_COMPLETION_INDEX)", str(index)) for word in command]


# --- what is rendered ---------------------------------------------------------------------------


def test_render_writes_three_polyaxonfiles_without_s3() -> None:
    files = _files()
    assert list(files) == ["worker.yaml", "aggregate.yaml", "pipeline.yaml"]
    assert [files[name]["kind"] for name in files] == ["component"] * 3
    worker = files["worker.yaml"]
    assert worker["inputs"] == [
        {"name": "shard", "type": "int"},
        {"name": "revision", "type": "str", "value": "0" * 16, "isOptional": True},
    ]
    assert worker["run"]["kind"] == "job"
    assert worker["termination"] == {"maxRetries": 3}
    assert files["aggregate.yaml"]["termination"] == {"maxRetries": 0}


@pytest.mark.parametrize("shards", [1, 5])
def test_pipeline_maps_the_worker_over_every_shard_then_aggregates(shards: int) -> None:
    dag = _files(shards)["pipeline.yaml"]["run"]
    assert dag["kind"] == "dag"
    workers, aggregate = dag["operations"]
    assert workers["pathRef"] == "worker.yaml"
    assert workers["matrix"] == {
        "kind": "mapping",
        "concurrency": shards,
        "values": [{"shard": index} for index in range(shards)],
    }
    assert workers["params"] == {"revision": {"value": "{{ revision }}"}}
    assert aggregate["pathRef"] == "aggregate.yaml"
    assert aggregate["dependencies"] == ["shards"]
    assert aggregate["trigger"] == "all_done"


def test_worker_runs_the_indexed_jobs_command_and_keeps_its_rows() -> None:
    container = _files(4)["worker.yaml"]["run"]["container"]
    job = _job_command(4, 0)
    job[job.index("--evalgate-shard=0/4")] = "--evalgate-shard={{ shard }}/4"
    junit = "--junitxml={{ globals.run_outputs_path }}/junit-shard-{{ shard }}.xml"
    assert container["command"] == [*job, junit]
    assert container["image"] == IMAGE
    assert {"name": "PYTEST_EVALGATE_DEFINITION", "value": "{{ revision }}"} in container["env"]


def test_aggregate_writes_its_report_to_the_run_outputs() -> None:
    command = _files()["aggregate.yaml"]["run"]["container"]["command"]
    job = _job_command(4, 0, role=1)
    job[job.index("--evalgate-report=/store/report")] = (
        "--evalgate-report={{ globals.run_outputs_path }}/report"
    )
    assert command == [*job, "--junitxml={{ globals.run_outputs_path }}/junit.xml"]


def test_pods_keep_the_jobs_hardening_labels_and_store_volume() -> None:
    run = _files()["worker.yaml"]["run"]
    env = run["environment"]
    assert env["labels"]["app.kubernetes.io/name"] == "evalgate"  # the NetworkPolicies select it
    assert env["serviceAccountName"] == "evalgate"
    assert env["securityContext"] == {
        "runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }  # fmt: skip
    security = run["container"]["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in run["volumes"]
        if "persistentVolumeClaim" in v
    ]
    assert claims == ["evalgate-store"]


def test_s3_store_names_the_bucket_adds_no_volume_and_the_egress_policy() -> None:
    s3 = EvalgateS3RenderOptions(
        store=STORE, endpoint="http://objects:9000", workload_identity=True
    )
    files = _files(s3=s3)
    assert list(files)[-1] == "networkpolicy.yaml"
    assert files["networkpolicy.yaml"]["kind"] == "NetworkPolicy"
    assert files["networkpolicy.yaml"]["spec"]["egress"][0]["ports"] == [
        {"protocol": "TCP", "port": 9000}
    ]
    for name in ("worker.yaml", "aggregate.yaml"):
        run = files[name]["run"]
        assert f"--evalgate-store={STORE}" in run["container"]["command"]
        assert all("persistentVolumeClaim" not in v for v in run.get("volumes", []))
        assert {"name": "AWS_ENDPOINT_URL", "value": "http://objects:9000"} in run["container"][
            "env"
        ]


@dataclasses.dataclass(frozen=True)
class _CodeManifest(EXAMPLE.ExampleManifest):  # type: ignore[misc]
    sandbox: EvalgateSandboxBlock = dataclasses.field(default_factory=EvalgateSandboxBlock)


@pytest.mark.parametrize(
    ("runtime_class", "field"), [(None, "hostUsers"), ("gvisor", "runtimeClassName")]
)
def test_a_code_suites_pod_is_refused_not_weakened(runtime_class: str | None, field: str) -> None:
    manifest = _CodeManifest(sandbox=EvalgateSandboxBlock(runtime_class=runtime_class))
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_polyaxon_render(manifest, 2, IMAGE)
    assert caught.value.source == manifest.path and caught.value.key == "polyaxon"
    assert f"the worker pod needs {field}" in caught.value.reason
    assert "use evalgate k8s render" in caught.value.reason


def test_no_shards_is_refused() -> None:
    with pytest.raises(EvalgateConfigError, match="shards"):
        evalgate_polyaxon_render(EXAMPLE.ExampleManifest(), 0, IMAGE)


# --- Polyaxon's own checker -----------------------------------------------------------------------


def _polyaxon_check(path: Path, params: JSON | None = None) -> Any:
    return check_polyaxonfile(polyaxonfile=str(path), params=params, is_cli=False, to_op=True)


@pytest.mark.parametrize("shards", [1, 4])
@pytest.mark.parametrize("store", [None, STORE])
def test_polyaxons_checker_accepts_every_file(
    tmp_path: Path, shards: int, store: str | None
) -> None:
    s3 = EvalgateS3RenderOptions(store=store, credentials_secret="s3-keys") if store else None
    folder = _write(tmp_path, _files(shards, s3=s3))
    worker = _polyaxon_check(folder / "worker.yaml", {"shard": shards - 1})
    assert worker.kind == "operation"
    assert _polyaxon_check(folder / "aggregate.yaml").kind == "operation"
    pipeline = _polyaxon_check(folder / "pipeline.yaml")
    assert pipeline.component.run.kind == "dag"
    # the pathRefs were resolved: the components were read and checked as part of the DAG
    names = [op.component.name for op in pipeline.component.run.operations]
    assert names == ["evalgate-example-worker", "evalgate-example-aggregate"]


def _resolved_command(path: Path, shard: int) -> list[str]:
    """The worker's container command as Polyaxon's compiler resolves it for one run."""
    op = _polyaxon_check(path, {"shard": shard})
    compiled = OperationSpecification.compile_operation(op)
    now = datetime.datetime.now(datetime.UTC)
    run = {"namespace": "ns", "owner_name": "o", "project_name": "p", "project_uuid": "u",
           "run_uuid": "r", "run_name": "n", "run_path": "runs/r", "iteration": 0,
           "created_at": now, "compiled_at": now}  # fmt: skip
    globals_ = resolve_globals_contexts(**run, plugins=compiled.plugins)
    compiled = CompiledOperationSpecification.apply_params(compiled, op.params, globals_)
    compiled = CompiledOperationSpecification.apply_operation_contexts(compiled, contexts=globals_)
    contexts = resolve_contexts(
        **run, compiled_operation=compiled, artifacts_store=None, connection_by_names={}
    )
    resolved = CompiledOperationSpecification.apply_runtime_contexts(compiled, contexts=contexts)
    return list(resolved.run.container.command)


def test_polyaxon_resolves_the_worker_to_the_indexed_jobs_pod_command(tmp_path: Path) -> None:
    folder = _write(tmp_path, _files(4))
    outputs = "/plx-context/artifacts/runs/r/outputs"
    for shard in (0, 3):
        assert _resolved_command(folder / "worker.yaml", shard) == [
            *_job_command(4, shard),
            f"--junitxml={outputs}/junit-shard-{shard}.xml",
        ]


def test_polyaxon_renders_an_undefined_name_as_nothing(tmp_path: Path) -> None:
    # why our own check exists: Polyaxon's checker passes this file and runs --evalgate-shard=/4
    files = _files(4)
    command = files["worker.yaml"]["run"]["container"]["command"]
    command[command.index("--evalgate-shard={{ shard }}/4")] = "--evalgate-shard={{ shrd }}/4"
    folder = _write(tmp_path, files)
    assert "--evalgate-shard=/4" in _resolved_command(folder / "worker.yaml", 1)
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_check_polyaxonfiles(files)
    assert caught.value.source == "worker.yaml"
    assert caught.value.key == "run.container.command[3]"
    assert (
        "{{ shrd }}" in caught.value.reason and "(defined: revision, shard)" in caught.value.reason
    )


def test_our_globals_are_the_ones_polyaxon_resolves() -> None:
    now = datetime.datetime.now(datetime.UTC)
    resolved = resolve_globals_contexts(
        namespace="ns", owner_name="o", project_name="p", project_uuid="u", run_uuid="r",
        run_name="n", run_path="runs/r", iteration=0, created_at=now, compiled_at=now,
    )  # fmt: skip
    # the paths are resolved when artifacts are collected; the DAG's contexts add status
    known = set(resolved["globals"]) | set(GLOBALS_CONTEXTS)
    assert known | {"run_artifacts_path", "run_outputs_path"} == EVALGATE_POLYAXON_GLOBALS


# --- a wrong input name: refused by ours and by Polyaxon's ---------------------------------------


def _wrong_param(files: dict[str, JSON]) -> dict[str, JSON]:
    changed = copy.deepcopy(files)
    workers = changed["pipeline.yaml"]["run"]["operations"][0]
    workers["params"] = {"revisoin": workers["params"]["revision"]}
    return changed


def _wrong_matrix_key(files: dict[str, JSON]) -> dict[str, JSON]:
    changed = copy.deepcopy(files)
    matrix = changed["pipeline.yaml"]["run"]["operations"][0]["matrix"]
    matrix["values"] = [{"shrd": row["shard"]} for row in matrix["values"]]
    return changed


def test_a_param_naming_no_input_is_refused_by_both(tmp_path: Path) -> None:
    files = _wrong_param(_files(2))
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_check_polyaxonfiles(files)
    assert caught.value.source == "pipeline.yaml"
    assert caught.value.key == "run.operations[shards].params.revisoin"
    assert "worker.yaml has no input or output 'revisoin'" in caught.value.reason
    # Polyaxon's checker refuses it too: a param for an input the component does not have
    with pytest.raises(PolyaxonfileError) as theirs:
        _polyaxon_check(_write(tmp_path, files) / "pipeline.yaml")
    assert "revisoin" in str(theirs.value.__cause__)


def test_a_matrix_value_naming_no_input_is_refused_by_both(tmp_path: Path) -> None:
    files = _wrong_matrix_key(_files(2))
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_check_polyaxonfiles(files)
    assert caught.value.key == "run.operations[shards].matrix.values[0].shrd"
    with pytest.raises(PolyaxonfileError) as theirs:
        _polyaxon_check(_write(tmp_path, files) / "pipeline.yaml")
    assert "Input shard is required" in str(theirs.value.__cause__)


def test_a_required_input_nobody_passes_is_refused() -> None:
    files = copy.deepcopy(_files(2))
    del files["pipeline.yaml"]["run"]["operations"][0]["matrix"]
    with pytest.raises(EvalgateConfigError, match="requires input 'shard'"):
        evalgate_check_polyaxonfiles(files)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{{ globals.run_output_path }}", "no global context 'run_output_path'"),
        ("{{ inputs.shrd }}", "no input 'shrd'"),
        ("{{ dag.inputs.nope }}", "the DAG has no input 'nope'"),
        ("{{ ops.missing.outputs.x }}", "no operation 'missing'"),
        ("{{ params.shard }}", "'params' is neither an input, an output nor a context"),
        ("{{ 'x' }}", "not a parameter name"),
    ],
)
def test_each_kind_of_undefined_reference_is_refused(text: str, reason: str) -> None:
    files = _files(2)
    files["worker.yaml"]["run"]["container"]["args"] = [text]
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_check_polyaxonfiles(files)
    assert caught.value.key == "run.container.args[0]"
    assert reason in caught.value.reason


def test_defined_references_pass() -> None:
    files = _files(2)
    files["worker.yaml"]["run"]["container"]["args"] = [
        "{{ inputs.shard }}", "{{ globals.uuid }}", "{{shard|int}}", "{{ revision }}",
    ]  # fmt: skip
    files["pipeline.yaml"]["run"]["operations"][1]["params"]["revision"] = {
        "value": "{{ dag.inputs.revision }}-{{ ops.shards.status }}"
    }
    evalgate_check_polyaxonfiles(files)


def test_template_names_are_read_from_each_expression() -> None:
    text = "a{{ shard }}b{{globals.run_outputs_path|default('x')}}{{ 1 }}"
    assert evalgate_template_names(text) == ["shard", "globals.run_outputs_path", ""]


# --- the CLI --------------------------------------------------------------------------------------


def test_cli_render_writes_checked_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = _suite(tmp_path)
    out = tmp_path / "plx"
    argv = ["polyaxon", "render", str(suite), "--image", IMAGE, "--out", str(out)]
    assert cli_main([*argv, "--shards", "2"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        f"wrote {out / name}" for name in ("worker.yaml", "aggregate.yaml", "pipeline.yaml")
    ]
    assert cli_main(["polyaxon", "check", str(out)]) == 0
    assert capsys.readouterr().out.startswith("polyaxonfiles valid: ")
    pipeline = yaml.safe_load((out / "pipeline.yaml").read_text())
    assert pipeline["run"]["operations"][0]["matrix"]["values"] == [{"shard": 0}, {"shard": 1}]
    assert _polyaxon_check(out / "pipeline.yaml").component.run.kind == "dag"


def test_cli_check_refuses_an_undefined_parameter_naming_file_and_parameter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plx"
    _write(out, _files(2))
    worker = out / "worker.yaml"
    worker.write_text(worker.read_text().replace("{{ revision }}", "{{ revison }}"))
    assert cli_main(["polyaxon", "check", str(out)]) == 4
    err = capsys.readouterr().err
    assert (
        f"evalgate polyaxon: {worker}: run.container.env[PYTEST_EVALGATE_DEFINITION].value" in err
    )
    assert "{{ revison }}: no input or output 'revison' is defined" in err


def test_cli_check_names_a_wrong_input_in_the_pipeline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _write(tmp_path / "plx", _wrong_param(_files(2)))
    assert (
        cli_main(["polyaxon", "check", str(out / "pipeline.yaml"), str(out / "worker.yaml")]) == 4
    )
    err = capsys.readouterr().err
    assert f"{out / 'pipeline.yaml'}: run.operations[shards].params.revisoin" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--store", "s3://bucket/p"], "choose one way to S3 credentials"),
        (["--store", "http://bucket"], "an S3 store is s3://BUCKET"),
        (["--shards", "0"], "need at least 1 shard"),
        (["--max-retries", "-1"], "a shard's retries must be 0 or more, got -1"),
    ],
)
def test_cli_render_refuses_bad_input_with_exit_4_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    suite = _suite(tmp_path)
    out = tmp_path / "plx"
    argv = ["polyaxon", "render", str(suite), "--image", IMAGE, "--out", str(out), *extra]
    assert cli_main(argv) == 4
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_cli_check_of_a_file_that_is_not_yaml_is_exit_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "worker.yaml"
    bad.write_text("a: [1\n")
    assert cli_main(["polyaxon", "check", str(bad)]) == 4
    assert f"{bad}: (top): not valid YAML" in capsys.readouterr().err
    assert cli_main(["polyaxon", "check", str(tmp_path / "absent.yaml")]) == 4


def test_polyaxons_cli_check_passes_the_rendered_pipeline_and_fails_a_wrong_key(
    tmp_path: Path,
) -> None:
    # `polyaxon check -f FILE`, the command docs/polyaxon.md names; offline (a temp HOME)
    folder = _write(tmp_path / "good", _files(3))
    bad = _write(tmp_path / "bad", _wrong_matrix_key(_files(3)))
    env = {**os.environ, "HOME": str(tmp_path / "home")}

    def check(folder: Path) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "polyaxon", "check", "-f", "pipeline.yaml"]
        return subprocess.run(
            argv, cwd=folder, env=env, capture_output=True, text=True, timeout=300, check=False
        )

    good = check(folder)
    assert good.returncode == 0 and "Polyaxonfile valid" in good.stdout
    refused = check(bad)
    assert refused.returncode == 1
    assert "Input shard is required" in refused.stdout
