"""``evalgate k8s render|run SUITE --image IMAGE ...``: print a suite's Indexed Job and
aggregation Job as YAML, or submit them, follow every completion index and aggregate.

``--tier NAME`` renders a tier's run (``--evalgate-tier=NAME``) at the ``eval-checkpoint``
Kueue priority, the full suite runs at ``eval-release-candidate`` (``--priority`` overrides);
sidecar workers go to the GPU serving queue, CPU Jobs to ``--queue``; ``--sku`` pins the
sidecar's pods to one serving SKU; ``--kueue`` prints the Kueue topology before the Jobs.

``run`` passes when both Jobs completed; a failed Job, or an API that is unreachable or refuses
(``EvalgateK8sError``), exits 1. A bad manifest, a plan for another N or an unpinned serving
image exit 4 before anything is submitted.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from pytest_evalgate.cli.command import EvalgateCommand

if TYPE_CHECKING:
    from pytest_evalgate.k8s.store import EvalgateS3RenderOptions


def evalgate_k8s_commands() -> tuple[EvalgateCommand, ...]:
    """The ``k8s`` subcommand (with its own ``render`` and ``run``)."""
    return (EvalgateCommand("k8s", "render or run a suite's Kubernetes Jobs", _arguments, _run),)


def _arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="k8s_command", required=True)
    for name, text in (("render", "print the Jobs as YAML"), ("run", "submit, follow, aggregate")):
        command = sub.add_parser(name, help=text, description=text)
        command.add_argument("suite", help="suite folder or its evalgate.yaml")
        command.add_argument("--shards", type=int, help="N (default: the manifest's shards)")
        command.add_argument("--image", required=True, help="harness image (suite inside)")
        command.add_argument("--serving-sidecar", action="store_true", help="GPU sidecar")
        command.add_argument("--namespace", default="evalgate")
        command.add_argument(
            "--queue", default="evalgate", help="CPU Jobs' Kueue LocalQueue ('' = no Kueue)"
        )
        command.add_argument(
            "--serving-queue", default="evalgate-serving", help="GPU sidecar workers' LocalQueue"
        )
        command.add_argument("--tier", help="run this tier only (checkpoint priority)")
        command.add_argument(
            "--priority",
            help="Kueue WorkloadPriorityClass (default: eval-checkpoint with --tier, "
            "else eval-release-candidate)",
        )
        command.add_argument("--sku", help="serving SKU (ResourceFlavor) of the sidecar's pods")
        command.add_argument("--store-claim", default="evalgate-store", help="store PVC name")
        command.add_argument(
            "--weights-claim",
            help="sidecar weights from this read-only PVC (filled by a digest-checking Job) "
            "instead of the pins.weights_image image volume",
        )
        evalgate_s3_arguments(command)
    sub.choices["render"].add_argument(
        "--kueue", action="store_true", help="print the Kueue topology objects first"
    )
    run = sub.choices["run"]
    run.add_argument("--kubeconfig", help="default: $KUBECONFIG, ~/.kube/config, in-cluster")
    run.add_argument("--context", help="kubeconfig context")
    run.add_argument("--poll", type=float, default=5.0, help="seconds between status polls")
    run.add_argument("--timeout", type=float, default=24 * 3600.0, help="seconds for both Jobs")


def evalgate_s3_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("--store", help="s3://bucket/prefix: an S3 store instead of the PVC")
    command.add_argument("--store-endpoint", help="AWS_ENDPOINT_URL of the pods (not a secret)")
    command.add_argument("--store-region", help="AWS_REGION of the pods")
    command.add_argument("--store-secret", help="Secret holding AWS_ACCESS_KEY_ID/_SECRET_KEY")
    command.add_argument(
        "--workload-identity", action="store_true", help="credentials by the service account"
    )
    command.add_argument(
        "--store-egress-cidr", default="0.0.0.0/0", help="object store addresses (egress)"
    )


def _run(args: argparse.Namespace) -> bool:
    import sys

    from pytest_evalgate.k8s.render import evalgate_to_yaml
    from pytest_evalgate.k8s.run import evalgate_api, evalgate_run

    objects = _render(args)
    if args.k8s_command == "render":
        if args.kueue:  # render only: `run` submits Jobs, the queues are installed once
            from pytest_evalgate.k8s.kueue import objects as kueue_objects

            objects = [*kueue_objects(), *objects]
        sys.stdout.write(evalgate_to_yaml(objects))
        return True
    api = evalgate_api(args.kubeconfig, args.context)
    return evalgate_run(objects, api, args.poll, args.timeout, echo=print).ok


def _render(args: argparse.Namespace) -> list[dict[str, Any]]:
    from pytest_evalgate.k8s import kueue
    from pytest_evalgate.k8s.render import evalgate_render
    from pytest_evalgate.k8s.render_types import EvalgateRenderOptions
    from pytest_evalgate.manifest.load import evalgate_load_manifest, evalgate_manifest_path
    from pytest_evalgate.shard.plan import evalgate_manifest_plan

    manifest = evalgate_load_manifest(evalgate_manifest_path(args.suite))
    shards = args.shards or manifest.shards
    # a plan for another N would make every pod exit 4: refuse before anything is submitted
    evalgate_manifest_plan(manifest, shards)
    objects = evalgate_render(
        manifest,
        shards,
        args.image,
        serving_sidecar=args.serving_sidecar,
        store_claim=args.store_claim,
        namespace=args.namespace,
        queue=args.queue or None,
        options=EvalgateRenderOptions(
            suite_path=args.suite.rstrip("/"),
            weights_claim=args.weights_claim,
            serving_queue=args.serving_queue,
            tier=args.tier,
            priority=kueue.priority_for(args.tier, args.priority),
            node_selector=kueue.sku_selector(kueue.Topology(), args.sku) if args.sku else None,
        ),
    )
    return _on_store(objects, args) if args.store else objects


def _on_store(objects: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    from pytest_evalgate.k8s.store import evalgate_s3_store_objects

    return evalgate_s3_store_objects(objects, evalgate_s3_render_options(args))


def evalgate_s3_render_options(args: argparse.Namespace) -> EvalgateS3RenderOptions:
    """The S3 store options of a render command (``evalgateevalgate_s3_arguments``) as one value."""
    from pytest_evalgate.k8s.store import EvalgateS3RenderOptions

    return EvalgateS3RenderOptions(
        store=args.store,
        endpoint=args.store_endpoint,
        region=args.store_region,
        credentials_secret=args.store_secret,
        workload_identity=args.workload_identity,
        egress_cidr=args.store_egress_cidr,
    )
