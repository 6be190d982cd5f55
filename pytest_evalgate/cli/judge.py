"""``evalgate judge-agreement SUITE`` and ``evalgate rejudge SUITE`` (SPEC section 10).

``judge-agreement`` judges the suite's golden set with the pinned judge (what is not judged
under the current judge key yet) and prints raw agreement, Cohen's kappa with its bootstrap
interval and the confusion matrix (people in rows, the judge in columns); it passes when
``--min-kappa`` is not given or the interval's lower bound reaches it. ``rejudge`` judges every
stored answer of every candidate under the current judge key, without one candidate request.
"""

from __future__ import annotations

import argparse
from typing import Any

from pytest_evalgate.cli.command import EvalgateCommand


def evalgate_judge_commands() -> tuple[EvalgateCommand, ...]:
    """The judge subcommands, in ``evalgate --help`` order."""
    agreement_help = "judge the golden set; print agreement, kappa and its interval, confusion"
    rejudge_help = "judge every stored answer under the current judge (no candidate requests)"
    return (
        EvalgateCommand("judge-agreement", agreement_help, _agreement_arguments, _agreement),
        EvalgateCommand("rejudge", rejudge_help, _common, _rejudge),
    )


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("suite", help="suite folder or its evalgate.yaml")
    parser.add_argument("--store", default=".evalgate", help="result store root")
    parser.add_argument("--request-log", help="simulated judges log each request to this file")


def _agreement_arguments(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument("--min-kappa", type=float, help="fail when kappa's lower bound is below")
    parser.add_argument("--confidence", type=float, default=0.95, help="interval confidence")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples")


def _load(args: argparse.Namespace) -> tuple[Any, Any]:
    from pytest_evalgate.manifest.load import evalgate_load_manifest, evalgate_manifest_path
    from pytest_evalgate.store import EvalgateLocalStore

    manifest = evalgate_load_manifest(evalgate_manifest_path(args.suite))
    return EvalgateLocalStore(args.store), manifest


def _agreement(args: argparse.Namespace) -> bool:
    from pytest_evalgate.runner.rejudge import evalgate_judge_agreement

    backend, manifest = _load(args)
    agreement, why, progress = evalgate_judge_agreement(
        backend, manifest, request_log=args.request_log,
        confidence=args.confidence, resamples=args.resamples,
    )  # fmt: skip
    judge = manifest.judged.judge
    print(f"judge {judge.model} ({judge.revision}), key {manifest.judged.key[:16]}")
    print(f"golden judgments: {progress.sent} requested, {progress.reused} reused")
    if agreement is None:
        print(f"agreement not computed: {why}")
        return False
    for line in evalgate_agreement_lines(agreement.evalgate_json()):
        print(line)
    return args.min_kappa is None or agreement.lo >= args.min_kappa


def evalgate_agreement_lines(agreement: dict[str, Any]) -> list[str]:
    """The printed form of ``EvalgateAgreement.evalgate_json()``."""
    lo, hi = agreement["interval"]
    lines = [
        f"rows {agreement['n']}, weights {agreement['weights']}",
        f"raw agreement {_number(agreement['raw_agreement'])}",
        f"kappa {_number(agreement['kappa'])} "
        f"[{_number(lo)}, {_number(hi)}] ({agreement['confidence']:.0%} cluster bootstrap, "
        f"{agreement['resamples']} resamples)",
        "confusion (rows: people, columns: judge):",
    ]
    labels = [str(label) for label in agreement["labels"]]
    width = max(5, *(len(label) for label in labels))
    lines.append(" " * (width + 1) + " ".join(label.rjust(width) for label in labels))
    for label, row in zip(labels, agreement["confusion"], strict=True):
        lines.append(label.rjust(width) + " " + " ".join(str(v).rjust(width) for v in row))
    return lines


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _rejudge(args: argparse.Namespace) -> bool:
    from pytest_evalgate.policy.load import evalgate_load_suite_policy
    from pytest_evalgate.runner.rejudge import evalgate_rejudge

    backend, manifest = _load(args)
    policy = evalgate_load_suite_policy(manifest, None)
    done = evalgate_rejudge(backend, manifest, policy.pair, request_log=args.request_log)
    progress = done.progress
    print(f"judge key {manifest.judged.key[:16]}: {done.answers} stored answers, "
          f"{done.golden} golden rows")  # fmt: skip
    print(f"judge requests {progress.sent}, judgments reused {progress.reused}, "
          f"errors {dict(sorted(progress.errors.items())) or 'none'}")  # fmt: skip
    return not progress.errors
