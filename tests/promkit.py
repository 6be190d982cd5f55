"""A real Prometheus and a vLLM-shaped exporter for the canary tests.

``EvalgatePromServer`` runs Debian's ``prometheus`` binary as a plain child process on a loopback
port with a temporary data folder and a short scrape interval (0.2 s unless told: a test's
windows and waits scale with it); ``stop`` sends SIGTERM to its PID, then SIGKILL after a grace
period. Its targets come from a file (``file_sd_configs``) that ``set_targets`` may write after
the start: Prometheus 2.42 hands its first targets to the scrape manager only after a fixed 5 s
(the discovery manager's update throttle, not configurable), so a test that starts Prometheus
first and its targets meanwhile does not wait twice. ``VllmExporter`` serves, with
``prometheus-client``, the metrics a vLLM server exposes (TTFT and TPOT histograms with vLLM's
buckets, generation tokens, finished requests, HTTP requests by status class) plus the online
judge score summary, labelled ``version`` (canary/stable) and ``scenario`` (one per test case, so
several canaries can share one Prometheus). A background thread plays traffic in ticks of
``TICK_S``, seeded.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import prometheus_client as pc

# The bucket bounds vLLM's own metrics use (vllm/engine/metrics.py, v0.6-0.8 era).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                2.5, 5.0, 7.5, 10.0)  # fmt: skip
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
TICK_S = 0.02  # 150 ticks in the tests' 3 s windows, as many as 0.1 s ticks put in 15 s


def prometheus_binary() -> str | None:
    """Path of the ``prometheus`` binary, or None."""
    return shutil.which("prometheus")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(
    condition: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.05
) -> None:
    """Poll ``condition`` every ``poll_s`` until it holds; AssertionError naming ``what`` after."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(poll_s)


def serve_in_thread(server: http.server.HTTPServer) -> threading.Thread:
    """``server.serve_forever`` on a daemon thread that looks at its shutdown flag every 10 ms
    (the default 0.5 s is paid by every ``shutdown``)."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
    )
    thread.start()
    return thread


class EvalgatePromServer:
    """Prometheus scraping ``targets`` every ``scrape_s`` seconds, listening on 127.0.0.1."""

    def __init__(
        self, binary: str, data_dir: Path, targets: list[str], scrape_s: float = 0.2
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._targets = data_dir / "targets.json"
        self.set_targets(targets)
        config = data_dir / "prometheus.yml"
        config.write_text(_config(self._targets, scrape_s), encoding="utf-8")
        self._log = (data_dir / "prometheus.log").open("wb")
        command = [
            binary, f"--config.file={config}", f"--storage.tsdb.path={data_dir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn",
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)

    def set_targets(self, targets: list[str]) -> None:
        """Replace the scraped ``host:port`` targets (written whole, then renamed into place)."""
        partial = self._targets.with_suffix(".partial")
        partial.write_text(json.dumps([{"targets": targets}]), encoding="utf-8")
        partial.replace(self._targets)

    def ready(self) -> bool:
        """Whether /-/ready answers 200 (and the process is alive)."""
        assert self.process.poll() is None, f"prometheus exited with {self.process.returncode}"
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def value(self, promql: str) -> float:
        """One instant query's single value (NaN when empty)."""
        query = urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{query}", timeout=5) as response:
            result = json.load(response)["data"]["result"]
        return float(result[0]["value"][1]) if result else float("nan")

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM to our PID, SIGKILL after ``grace_s``."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=grace_s)
        self._log.close()


def _config(targets: Path, scrape_s: float) -> str:
    every = f"{round(scrape_s * 1000)}ms"
    # the targets file is watched (inotify) and, should a change be missed, read every second
    files = f"[{{files: [{json.dumps(str(targets))}], refresh_interval: 1s}}]"
    return (
        f"global: {{scrape_interval: {every}, evaluation_interval: {every},"
        f" scrape_timeout: {every}}}\n"
        "scrape_configs:\n"
        "  - job_name: vllm\n"
        f"    file_sd_configs: {files}\n"
    )


@dataclass(frozen=True)
class Traffic:
    """One version's traffic in a scenario: requests per tick and how they look."""

    per_tick: int = 20
    ttft_median_s: float = 0.30
    tpot_median_s: float = 0.030
    tokens_median: float = 200.0
    error_rate: float = 0.01
    judge_mean: float = 0.80


class VllmExporter:
    """The metrics of two vLLM pools (canary, stable) per scenario, on a loopback port."""

    def __init__(self, scenarios: dict[str, dict[str, Traffic | None]], seed: int = 0) -> None:
        self.registry = pc.CollectorRegistry()
        self._metrics = _vllm_metrics(self.registry)
        self._scenarios = scenarios
        self._rng = np.random.default_rng(seed)
        for scenario, versions in scenarios.items():
            for version in versions:
                self._touch(scenario, version)  # series exist from the first scrape, at 0
        self.server = _text_format_server(self.registry)
        serve_in_thread(self.server)
        self.target = f"127.0.0.1:{self.server.server_port}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._play, name="vllm-exporter", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.server.shutdown()
        self.server.server_close()

    def _touch(self, scenario: str, version: str) -> None:
        labels = {"version": version, "scenario": scenario}
        for name, metric in self._metrics.items():
            if name == "http":
                for status in ("2xx", "5xx"):
                    metric.labels(status=status, handler="/v1/chat/completions", **labels)
            else:
                metric.labels(**labels)

    def _play(self) -> None:
        next_tick = time.monotonic()
        while not self._stop.is_set():
            for scenario, versions in self._scenarios.items():
                for version, traffic in versions.items():
                    if traffic is not None:
                        self._requests(scenario, version, traffic)
            next_tick += TICK_S
            self._stop.wait(max(0.0, next_tick - time.monotonic()))

    def _requests(self, scenario: str, version: str, traffic: Traffic) -> None:
        labels = {"version": version, "scenario": scenario}
        m, n, rng = self._metrics, traffic.per_tick, self._rng
        ttft_side = m["ttft"].labels(**labels)
        for ttft in traffic.ttft_median_s * rng.lognormal(0.0, 0.5, n):
            ttft_side.observe(float(ttft))
        tpot_side = m["tpot"].labels(**labels)
        for tpot in traffic.tpot_median_s * rng.lognormal(0.0, 0.3, n):
            tpot_side.observe(float(tpot))
        tokens = np.maximum(1, np.rint(traffic.tokens_median * rng.lognormal(0.0, 0.6, n)))
        m["tokens"].labels(**labels).inc(float(tokens.sum()))
        m["success"].labels(**labels).inc(n)
        errors = int(rng.binomial(n, traffic.error_rate))
        handler = "/v1/chat/completions"
        m["http"].labels(status="5xx", handler=handler, **labels).inc(errors)
        m["http"].labels(status="2xx", handler=handler, **labels).inc(n - errors)
        mean, k = traffic.judge_mean, 20.0
        judge_side = m["judge"].labels(**labels)
        for score in rng.beta(mean * k, (1 - mean) * k, n):
            judge_side.observe(float(score))


def _text_format_server(registry: pc.CollectorRegistry) -> http.server.ThreadingHTTPServer:
    """/metrics in the classic text format, whatever the scraper accepts: prometheus-client 0.26
    turns ``vllm:`` into ``vllm_`` in its OpenMetrics output (escaping=underscores), which
    Prometheus 2.42 asks for first, and real vLLM series keep the colon."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pc.generate_latest(registry)
            self.send_response(200)
            self.send_header("Content-Type", pc.CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)


def _vllm_metrics(registry: pc.CollectorRegistry) -> dict[str, Any]:
    labels = ["version", "scenario"]
    kw: dict[str, Any] = {"registry": registry}
    return {
        "ttft": pc.Histogram("vllm:time_to_first_token_seconds", "TTFT", labels,
                             buckets=TTFT_BUCKETS, **kw),
        "tpot": pc.Histogram("vllm:time_per_output_token_seconds", "TPOT", labels,
                             buckets=TPOT_BUCKETS, **kw),
        "tokens": pc.Counter("vllm:generation_tokens", "generated tokens", labels, **kw),
        "success": pc.Counter("vllm:request_success", "finished requests", labels, **kw),
        "http": pc.Counter("http_requests", "HTTP requests", [*labels, "status", "handler"], **kw),
        "judge": pc.Summary("evalgate_online_judge_score", "online judge score", labels, **kw),
    }  # fmt: skip


@dataclass
class RecordingProxy:
    """A loopback HTTP proxy in front of Prometheus that records every ``query`` it forwards."""

    upstream: str
    queries: list[str]
    url: str = ""

    def __post_init__(self) -> None:
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                params = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                proxy.queries += params.get("query", [])
                try:
                    with urllib.request.urlopen(proxy.upstream + self.path, timeout=10) as up:
                        status, body = up.status, up.read()
                except urllib.error.HTTPError as error:
                    status, body = error.code, error.read()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = serve_in_thread(self._server)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
