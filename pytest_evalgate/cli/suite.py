"""``evalgate pin``, ``evalgate gate`` (alias ``aggregate``) and ``evalgate report``: a suite's
manifest pin, its decision from what the store holds (no requests), and its re-rendered report.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from pytest_evalgate.cli.command import EvalgateCommand

if TYPE_CHECKING:
    from pytest_evalgate.decision.decide import EvalgateOutcome
    from pytest_evalgate.manifest.load import EvalgateManifest


def evalgate_suite_commands() -> tuple[EvalgateCommand, ...]:
    """The suite subcommands, in ``evalgate --help`` order."""
    gate_help = "gate what the store holds for a suite (no requests)"
    report_help = "re-render report.md, report.html and forest.png from decision.json"
    return (
        EvalgateCommand("pin", "write the dataset sha256 into a suite's manifest", _suite, _pin),
        EvalgateCommand("gate", gate_help, _gate_arguments, _gate),
        EvalgateCommand("aggregate", "same as gate", _gate_arguments, _gate, label="gate"),
        EvalgateCommand("report", report_help, _report_arguments, _report),
    )


def _suite(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("suite", help="suite folder or its evalgate.yaml")


def _pin(args: argparse.Namespace) -> bool:
    from pytest_evalgate.manifest.datasetpin import evalgate_pin
    from pytest_evalgate.manifest.load import evalgate_manifest_path

    digest = evalgate_pin(evalgate_manifest_path(args.suite))
    print(f"pinned dataset sha256 {digest}")
    return True


def _gate_arguments(parser: argparse.ArgumentParser) -> None:
    _suite(parser)
    parser.add_argument(
        "--store", default=".evalgate", help="result store root (a folder or s3://bucket/prefix)"
    )
    parser.add_argument("--policy", help="gate policy (default: the suite's gate.yaml)")
    parser.add_argument(
        "--report", help="write decision.json, report.md, report.html, forest.png here"
    )
    parser.add_argument(
        "--report-text",
        action="store_true",
        help="let the reports show case input, target and output (only case ids otherwise)",
    )
    parser.add_argument("--sign-key", help="sign the decision with this PEM private key")
    parser.add_argument(
        "--trust", metavar="TRUST", help="trust file: sign key needs 'gate', policy an approval"
    )
    parser.add_argument(
        "--tier",
        help="gate only the manifest's tier NAME, with its policy unless --policy (never a "
        "full-suite verdict, never signed)",
    )


def _gate(args: argparse.Namespace) -> bool:
    from pytest_evalgate.report import evalgate_summary_lines

    outcome = _decide(args)
    for line in [*evalgate_summary_lines(outcome.decision), *outcome.notes]:
        print(line)
    for path in outcome.written:
        print(f"wrote {path}")
    # the gate's own mapping (gate.evalgate_exit_status): pass, or partial with every rule passing
    return outcome.exit_status == 0


def _decide(args: argparse.Namespace) -> EvalgateOutcome:
    from pytest_evalgate.aggregate.combine import EvalgateSelection
    from pytest_evalgate.attest.trust import evalgate_trust_for_signing
    from pytest_evalgate.decision.decide import evalgate_decide
    from pytest_evalgate.manifest.load import evalgate_load_manifest, evalgate_manifest_path
    from pytest_evalgate.perf.phase import evalgate_perf_phase
    from pytest_evalgate.policy.load import evalgate_load_suite_policy
    from pytest_evalgate.store import evalgate_open_store

    trust = evalgate_trust_for_signing(args.trust, args.sign_key, "--trust", "--sign-key")
    manifest = evalgate_load_manifest(evalgate_manifest_path(args.suite))
    policy = evalgate_load_suite_policy(manifest, _policy_path(manifest, args))
    selection = EvalgateSelection(tuple(manifest.candidates), _case_ids(manifest, args.tier))
    backend = evalgate_open_store(args.store)
    perf = evalgate_perf_phase(backend, manifest, None, policy.pair)
    return evalgate_decide(
        backend, manifest, selection, policy,
        report_dir=args.report, sign_key=args.sign_key, perf=perf, tier=args.tier,
        report_text=args.report_text, trust=trust,
    )  # fmt: skip


def _policy_path(manifest: EvalgateManifest, args: argparse.Namespace) -> str | None:
    """``--policy``, else the tier's own policy (when ``--tier`` names one), else None
    (gate.yaml): the same choice as ``--evalgate-tier`` in a pytest run."""
    from pytest_evalgate.manifest.tiers import evalgate_chosen_policy

    return evalgate_chosen_policy(manifest, args.policy, args.tier)


def _case_ids(manifest: EvalgateManifest, tier: str | None) -> tuple[str, ...]:
    """Every case id of the suite, or those of the tier ``tier`` (an unknown tier: exit 4)."""
    from pytest_evalgate.manifest.tiers import evalgate_tier_member, evalgate_tier_spec

    if tier is None:
        return tuple(case.case_id for case in manifest.cases)
    spec = evalgate_tier_spec(manifest.tiers, tier, manifest.path)
    return tuple(c.case_id for c in manifest.cases if evalgate_tier_member(spec, c.case_id))


def _report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", help="folder holding decision.json")


def _report(args: argparse.Namespace) -> bool:
    from pytest_evalgate.report.write import evalgate_rerender_report

    written, note = evalgate_rerender_report(args.directory)
    for path in written:
        print(f"wrote {path}")
    if note:
        print(note)
    return True
