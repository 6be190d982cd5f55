"""Parity with lm-evaluation-harness (issue 32): the same multiple-choice items, prompt format and
server, scored by ``pytest --evalgate`` and by lm-eval's ``local-completions`` model; per item,
the choices' log-likelihoods, ``acc`` and ``acc_norm`` compared.

One simulator (``EvalgateSimServer``, accuracy 0.7, the suite's answer key) answers both. lm-eval
runs from another Python (``--lm-eval-python``: a venv with ``lm_eval[api]==0.4.*``, never the
project's) on a task written here: ``output_type: multiple_choice``, ``doc_to_text: "{{input}}\\n
Answer:"``, the row's ``choices`` and ``target``, ``target_delimiter: " "``, ``--log_samples``;
``tokenizer_backend=remote`` (lm-eval counts context tokens with the server's ``/tokenize``,
which the simulator serves) and ``tokenized_requests=False``. lm-eval sends ``max_tokens: 1``
and drops the last token; evalgate sends ``max_tokens: 0`` and selects tokens by
``text_offset``. Printed: items compared, agreement of acc and acc_norm picks and of every
log-likelihood (equal to 1e-9), and each side's acc and acc_norm. Asserts nothing; exit 1 on
any disagreement. ``--keep DIR`` keeps lm-eval's samples file (a test fixture, written by the
real lm-eval).

    python bench/mc_parity.py --lm-eval-python VENV/bin/python [--cases 200] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from suitekit import make_choice_cases, write_answer_key, write_suite

from pytest_evalgate.simulated import EvalgateSimConfig
from pytest_evalgate.simulated.server import EvalgateSimServer

MODEL = "sim"
TASK = """task: evalgate_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{input}}}}\\nAnswer:"
doc_to_choice: choices
doc_to_target: target
target_delimiter: " "
metric_list:
  - metric: acc
  - metric: acc_norm
metadata:
  version: 1.0
"""


def _suite(folder: Path, cases: int, base_url: str) -> Path:
    return write_suite(
        folder,
        {"candidate": base_url},
        cases=make_choice_cases(cases),
        budget={"max_concurrency": 16, "max_attempts": 2, "timeout_s": 30},
        extra={
            "evaluator": {"revision": "e1", "scorer": "choice", "method": "loglikelihood"},
            "api": "completions",
            "stream": False,
            "prompt": {"revision": "p1", "template": "{input}\nAnswer:"},
        },
        models={"candidate": MODEL},
        policy={"version": "v", "baseline": None, "rules": [
            {"slice": "all", "rule": "min_rate", "min": 0.0}]},
    )  # fmt: skip


def _evalgate(work: Path, manifest: Path) -> dict[str, dict[str, Any]]:
    subprocess.run(
        [sys.executable, "-m", "pytest", "--evalgate", str(manifest), "-q", "-p",
         "no:cacheprovider", "--evalgate-store=store"],
        cwd=work, capture_output=True, text=True, check=False,
    )  # fmt: skip
    records = {}
    for path in (work / "store").rglob("seg-*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            records[record["identity"]["case_id"]] = record
    return records


def _lm_eval(python: str, work: Path, data: Path, base_url: str) -> dict[str, dict[str, Any]]:
    tasks = work / "tasks"
    tasks.mkdir()
    (tasks / "evalgate_mc.yaml").write_text(TASK.format(data=data))
    args = f"model={MODEL},base_url={base_url}/completions,tokenizer_backend=remote,"
    args += "tokenized_requests=False,num_concurrent=8,max_retries=1"
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", PYTHONPATH="")
    run = subprocess.run(
        [python, "-m", "lm_eval", "--model", "local-completions", "--model_args", args,
         "--include_path", str(tasks), "--tasks", "evalgate_mc", "--log_samples",
         "--output_path", str(work / "lm")],
        cwd=work, capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    if run.returncode != 0:
        sys.exit(f"lm_eval failed ({run.returncode}):\n{run.stderr[-3000:]}")
    samples = {}
    for path in (work / "lm").rglob("samples_evalgate_mc_*.jsonl"):
        for line in path.read_text().splitlines():
            sample = json.loads(line)
            samples[sample["doc"]["id"]] = sample
    return samples


def _first(resp: Any) -> Any:
    """The log-likelihood of one of lm-eval's ``filtered_resps`` entries (``[ll, greedy]``)."""
    while isinstance(resp, list):
        resp = resp[0]
    return resp


def _compare(records: dict[str, dict[str, Any]], samples: dict[str, dict[str, Any]]) -> int:
    ids = sorted(set(records) & set(samples))
    acc = acc_norm = logliks = 0
    ours = [0.0, 0.0]
    theirs = [0.0, 0.0]
    for case_id in ids:
        facts, sample = records[case_id]["choice"], samples[case_id]
        target = facts["target"]
        mine = [c["loglikelihood"] for c in facts["choices"]]
        lm = [float(_first(resp)) for resp in sample["filtered_resps"]]
        logliks += all(abs(a - b) <= 1e-9 for a, b in zip(mine, lm, strict=True))
        our_acc, our_norm = float(facts["acc"] == target), float(facts["acc_norm"] == target)
        acc += our_acc == float(sample["acc"])
        acc_norm += our_norm == float(sample["acc_norm"])
        ours[0] += our_acc
        ours[1] += our_norm
        theirs[0] += float(sample["acc"])
        theirs[1] += float(sample["acc_norm"])
    n = len(ids)
    print(f"items: evalgate {len(records)}, lm-eval {len(samples)}, compared {n}")
    print(f"acc picks agree {acc}/{n}, disagree {n - acc}; acc_norm agree {acc_norm}/{n},"
          f" disagree {n - acc_norm}; log-likelihoods equal (1e-9) on {logliks}/{n}")  # fmt: skip
    print(f"evalgate acc {ours[0] / n:.4f} acc_norm {ours[1] / n:.4f} | "
          f"lm-eval acc {theirs[0] / n:.4f} acc_norm {theirs[1] / n:.4f}")  # fmt: skip
    return 0 if acc == acc_norm == logliks == n == len(records) == len(samples) else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lm-eval-python", required=True)
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--keep", help="copy lm-eval's samples file into this folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        placeholder = _suite(work / "suite", args.cases, "http://127.0.0.1:9/v1")
        key = write_answer_key(placeholder, work / "answers.jsonl")
        with EvalgateSimServer(EvalgateSimConfig(accuracy=0.7, seed=1), answers=key) as server:
            manifest = _suite(work / "suite", args.cases, server.base_url)
            records = _evalgate(work, manifest)
            samples = _lm_eval(args.lm_eval_python, work, work / "suite" / "cases.jsonl",
                               server.base_url)  # fmt: skip
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
            for path in (work / "lm").rglob("samples_evalgate_mc_*.jsonl"):
                shutil.copy(path, Path(args.keep) / "samples_evalgate_mc.jsonl")
        status = _compare(records, samples)
    sys.exit(status)


if __name__ == "__main__":
    main()
