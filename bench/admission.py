"""Benchmark: admission latency of ``evalgate admission serve`` over loopback HTTPS.

Setup: a registry of N digests (default 2,000), each promoted candidate -> gated on a passing
decision signed with the gate key (real keys, real DSSE envelopes, real entry files). The
webhook runs as its own process (``python -m pytest_evalgate.cli admission serve``, TLS with a
self-signed certificate made here); one keep-alive HTTPS connection sends AdmissionReviews of a
Pod in ``serve-bench`` whose image volume references one digest, one review at a time (the API
server's view: the latency of one review).

- cold: each review names a digest the webhook has not seen (read and verify its chain, two
  entry signatures, verify the decision: nothing cached);
- cached: the same N reviews again (a ``scandir`` fingerprint per digest, cached verdicts).

Latency is client-measured (send to parsed answer). Server CPU per review is read from
``/proc/<pid>/stat`` around each phase. Run: ``python bench/admission.py`` from the repo.
Prints; asserts nothing except that every review was answered as expected.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from admissionkit import (
    Client,
    Tls,
    digest_of,
    make_keys,
    make_tls,
    model_image,
    pod,
    review,
    signed_decision,
)

from pytest_evalgate.attest.keys import EVALGATE_KEY_PASSWORD_ENV
from pytest_evalgate.registry import evalgate_registry_promote
from pytest_evalgate.stats import evalgate_percentile


def build_registry(root: Path, gate_key: str, registry_key: str, digests: Sequence[str]) -> None:
    """Promote every digest to gated on a passing decision (the real promote path)."""
    for digest in digests:
        envelope = signed_decision(digest, gate_key)
        for state, given in (("candidate", [envelope]), ("gated", [])):
            evalgate_registry_promote(str(root), digest, state, given, registry_key, who="bench")


def start_webhook(work: Path, keys_pub: tuple[str, str], tls: Tls) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != EVALGATE_KEY_PASSWORD_ENV}
    env["PYTEST_EVALGATE_ADMISSION_HOST"] = "127.0.0.1"
    env["PYTEST_EVALGATE_ADMISSION_NAMESPACES"] = "serve-*"
    command = [
        sys.executable, "-m", "pytest_evalgate.cli", "admission", "serve",
        "--key", keys_pub[0], "--registry", str(work / "registry"), "--registry-key", keys_pub[1],
        "--tls-cert", tls.cert, "--tls-key", tls.key, "--port", "0",
    ]  # fmt: skip
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )


def ready_port(process: subprocess.Popen[str], timeout: float = 60.0) -> int:
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and selector.select(deadline - time.monotonic()):
            line = process.stdout.readline()
            if line.startswith("EVALGATE_ADMISSION_READY"):
                return int(line.split()[1].rsplit(":", 1)[1])
            if not line:
                break
    raise SystemExit("the webhook did not start")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_phase(client: Client, bodies: Sequence[bytes], pid: int) -> tuple[list[float], float]:
    """Latencies (ms) of one review per body, and the server's CPU seconds for the phase."""
    latencies = []
    cpu_before = cpu_seconds(pid)
    for body in bodies:
        start = time.perf_counter()
        status, answer = client.request("POST", "/validate?timeout=5s", body)
        latencies.append((time.perf_counter() - start) * 1000)
        if status != 200 or json.loads(answer)["response"]["allowed"] is not True:
            raise SystemExit(f"unexpected answer: {status} {answer[:300]!r}")
    return latencies, cpu_seconds(pid) - cpu_before


def report(name: str, latencies: list[float], cpu: float, wall: float) -> str:
    pct = {q: evalgate_percentile(latencies, q) for q in (50, 90, 99)}
    n = len(latencies)
    return (
        f"{name:<7} {n:>6} {pct[50]:>8.2f} {pct[90]:>8.2f} {pct[99]:>8.2f} {max(latencies):>8.2f}"
        f" {sum(latencies) / n:>8.2f} {n / wall:>9.0f} {cpu / n * 1000:>11.3f}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reviews", type=int, default=2000, help="digests, one review each")
    args = parser.parse_args(argv)
    os.environ.pop(EVALGATE_KEY_PASSWORD_ENV, None)
    work = Path(tempfile.mkdtemp(prefix="evalgate-bench-admission-"))
    try:
        return _bench(work, args.reviews)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _bench(work: Path, count: int) -> int:
    keys = make_keys(work / "keys")
    (work / "registry").mkdir()
    shutil.copy(keys.gate_pub, work / "registry" / "gate.pub")
    digests = [digest_of(f"bench-weights-{i}") for i in range(count)]
    started = time.perf_counter()
    build_registry(work / "registry", keys.gate, keys.registry, digests)
    setup = time.perf_counter() - started
    bodies = [
        json.dumps(
            review(pod(volumes={"weights": model_image(d)}), namespace="serve-bench")
        ).encode()
        for d in digests
    ]
    tls = make_tls(work / "tls")
    process = start_webhook(work, (keys.gate_pub, keys.registry_pub), tls)
    try:
        client = Client(ready_port(process), tls)
        client.request("GET", "/healthz")  # the TLS handshake, outside the timings
        lines = _phases(client, bodies, process.pid)
        client.close()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    print(f"registry: {count} digests, candidate -> gated each ({setup:.1f} s to build)")
    print(f"review body: {len(bodies[0])} bytes; one keep-alive HTTPS connection, 1 in flight")
    print(f"cpus: {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}")
    print("phase   reviews   p50 ms   p90 ms   p99 ms   max ms  mean ms  reviews/s server CPU ms")
    print("\n".join(lines))
    return 0


def _phases(client: Client, bodies: list[bytes], pid: int) -> list[str]:
    lines = []
    for name in ("cold", "cached"):
        started = time.perf_counter()
        latencies, cpu = run_phase(client, bodies, pid)
        lines.append(report(name, latencies, cpu, time.perf_counter() - started))
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
