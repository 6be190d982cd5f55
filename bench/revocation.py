"""Benchmark: how long a revocation takes to reach every cell's admission webhook.

The design (docs/canary.md, "Cells"): one registry, read by every cell's webhook. Each cell runs
its own ``evalgate admission serve`` (here: ``--cells`` processes on loopback HTTPS, a
self-signed certificate made here), all on the same registry folder (in a cluster: a
ReadWriteMany volume, or an object-store mount, that every cell's webhook mounts read-only).
A webhook reads the digest's entries on every review (a ``scandir`` fingerprint decides whether
its cache still holds), so a revocation is seen by the next review, with no push and no TTL.

Measured: one digest gated and admitted by every webhook; then ``registry revoke`` (the real
signed append), and from its return each webhook is asked in turn, until each denies (bounded:
``--timeout`` seconds). Prints the delay per cell, over ``--rounds`` digests. Asserts nothing.

    python bench/revocation.py --cells 3 --rounds 20
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from admission import ready_port, start_webhook  # bench/admission.py
from admissionkit import (
    Client,
    digest_of,
    make_keys,
    make_tls,
    model_image,
    pod,
    review,
    signed_decision,
)

from pytest_evalgate.attest.keys import EVALGATE_KEY_PASSWORD_ENV
from pytest_evalgate.registry import evalgate_registry_promote, evalgate_registry_revoke
from pytest_evalgate.stats import evalgate_percentile


def allowed(client: Client, digest: str) -> bool:
    body = json.dumps(review(pod(volumes={"weights": model_image(digest)}), namespace="serve-a"))
    status, answer = client.request("POST", "/validate?timeout=5s", body.encode())
    if status != 200:
        raise SystemExit(f"webhook answered {status}")
    return bool(json.loads(answer)["response"]["allowed"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=10.0)
    args = parser.parse_args()
    os.environ.pop(EVALGATE_KEY_PASSWORD_ENV, None)
    work = Path(tempfile.mkdtemp(prefix="evalgate-bench-revocation-"))
    processes = []
    try:
        keys, tls = make_keys(work / "keys"), make_tls(work / "tls")
        registry = work / "registry"
        registry.mkdir()
        shutil.copy(keys.gate_pub, registry / "gate.pub")
        for _ in range(args.cells):
            processes.append(start_webhook(work, (keys.gate_pub, keys.registry_pub), tls))
        clients = [Client(ready_port(process), tls) for process in processes]
        delays: list[list[float]] = [[] for _ in clients]
        asks = [0 for _ in clients]
        for round_ in range(args.rounds):
            digest = digest_of(f"revocation-bench-{round_}")
            envelope = signed_decision(digest, keys.gate)
            evalgate_registry_promote(
                str(registry), digest, "candidate", [envelope], keys.registry, who="b"
            )
            evalgate_registry_promote(str(registry), digest, "gated", [], keys.registry, who="b")
            if not all(allowed(client, digest) for client in clients):
                raise SystemExit("a gated digest was not admitted")
            evalgate_registry_revoke(str(registry), digest, "bench", keys.registry, who="sre")
            revoked = time.perf_counter()
            pending = set(range(len(clients)))
            while pending and time.perf_counter() - revoked < args.timeout:
                for index in sorted(pending):
                    asks[index] += 1
                    if not allowed(clients[index], digest):
                        delays[index].append((time.perf_counter() - revoked) * 1000)
                        pending.discard(index)
            if pending:
                print(f"round {round_}: cells {sorted(pending)} still admit after {args.timeout} s")
        print(f"{args.cells} cells' webhooks on one registry, {args.rounds} revocations")
        print("cell  revocations  reviews  p50 ms  max ms  (from revoke to the cell's first deny)")
        for index, values in enumerate(delays):
            p50 = evalgate_percentile(values, 50) if values else float("nan")
            top = max(values) if values else float("nan")
            print(f"{index + 1:>4}  {len(values):>11}  {asks[index]:>7}  {p50:>6.2f}  {top:>6.2f}")
        print(
            "(the cells are asked in turn: cell k's delay includes the reviews of cells before it)"
        )
        for client in clients:
            client.close()
        return 0
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
