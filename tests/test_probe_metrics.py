"""``evalgate probe`` and a vLLM server's ``/metrics`` (issue 35): KV-cache use and queue length
when the page is reachable, one line saying so when it is not.

Real parts: a Prometheus exporter (``prometheus_client`` with its own registry) and small
``http.server`` pages on 127.0.0.1, and a simulator process as the OpenAI endpoint (the
simulator has no ``/metrics``, so ``--metrics-url`` points the probe at the exporter).
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from pytest_evalgate.capacity import server_metrics
from pytest_evalgate.cli import main
from pytest_evalgate.simulated import EvalgateSimConfig
from pytest_evalgate.simulated.process import evalgate_spawn_simulator


@contextmanager
def exporter(kv: float, waiting: float) -> Iterator[tuple[str, Gauge]]:
    """A real Prometheus exporter with vLLM's gauge names, two served models."""
    registry = CollectorRegistry()
    cache = Gauge("vllm:gpu_cache_usage_perc", "KV cache", ["model_name"], registry=registry)
    queue = Gauge("vllm:num_requests_waiting", "waiting", ["model_name"], registry=registry)
    running = Gauge("vllm:num_requests_running", "running", ["model_name"], registry=registry)
    cache.labels("m a").set(kv)
    queue.labels("m a").set(waiting)
    queue.labels("other").set(1)
    running.labels("m a").set(2)
    Counter("vllm:prompt_tokens", "not read", registry=registry).inc(5)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield f"http://127.0.0.1:{server.server_port}/metrics", cache
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def pages(*texts: str, done: threading.Event | None = None) -> Iterator[str]:
    """A loopback server answering GET with ``texts`` in turn (the last one repeats; ``done``
    is set when the last one is served)."""
    served = list(texts)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            last = len(served) == 1
            body = (served[0] if last else served.pop(0)).encode()
            if last and done is not None:  # the pages before it were all scraped
                done.set()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------- the module


def test_metrics_url_is_the_origin_s_metrics() -> None:
    assert server_metrics.metrics_url("http://10.0.0.5:8000/v1") == "http://10.0.0.5:8000/metrics"
    assert server_metrics.metrics_url("https://h/v1/") == "https://h/metrics"


def test_parse_sums_label_sets_and_skips_the_rest() -> None:
    text = (
        "# HELP vllm:num_requests_waiting waiting\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{model_name="a b",engine="0"} 3.0\n'
        'vllm:num_requests_waiting{model_name="c"} 2 1700000000000\n'
        "vllm:gpu_cache_usage_perc 0.25\n"
        "vllm:num_requests_running NaN\n"
        "vllm:other_total 9\n"
    )
    assert server_metrics.parse(text) == {
        "vllm:num_requests_waiting": 5.0,
        "vllm:gpu_cache_usage_perc": 0.25,
    }
    assert server_metrics.parse("vllm:kv_cache_usage_perc 0.5\n") == {
        "vllm:kv_cache_usage_perc": 0.5
    }


def test_read_figures_from_a_real_exporter() -> None:
    with exporter(0.42, 3) as (url, _):
        figures = server_metrics.read_figures(url)
    assert figures.reachable and figures.reason == ""
    assert figures.kv_cache == pytest.approx(0.42)
    assert figures.waiting == 4.0  # 3 for "m a" plus 1 for "other"
    assert figures.running == 2.0


def test_unreachable_not_vllm_and_not_http_say_why() -> None:
    down = server_metrics.read_figures(f"http://127.0.0.1:{closed_port()}/metrics")
    assert not down.reachable and "refused" in down.reason.lower()
    with pages("process_cpu_seconds_total 1.5\n") as url:
        other = server_metrics.read_figures(url)
    assert other.reachable and not other.values and "exports neither" in other.reason
    local = server_metrics.read_figures("file:///etc/hostname")
    assert not local.reachable and "http" in local.reason


def test_the_poller_keeps_the_peak_since_the_last_take() -> None:
    texts = [f"vllm:num_requests_waiting {n}\nvllm:gpu_cache_usage_perc 0.{n}\n" for n in (1, 9)]
    idle = "vllm:num_requests_waiting 0\nvllm:gpu_cache_usage_perc 0.0\n"
    served = threading.Event()
    with pages(*texts, idle, done=served) as url:
        poller = server_metrics.Poller(url, interval_s=0.05).start()
        try:
            assert served.wait(timeout=30)  # the poller scraped 0.1, 0.9 and then idle pages
            first = poller.take_peak()
            second = poller.take_peak()
        finally:
            poller.stop()
    assert first.waiting == 9.0 and first.kv_cache == pytest.approx(0.9)
    assert second.waiting == 0.0  # the peak was taken: later takes start afresh


# --------------------------------------------------------------------------- the command


def test_probe_reports_the_server_s_figures_per_level(capsys: pytest.CaptureFixture[str]) -> None:
    config = EvalgateSimConfig(latency_ms=20.0, output_tokens=4)
    with exporter(0.42, 3) as (url, _), evalgate_spawn_simulator(config, None) as sim:
        argv = ["probe", sim.base_url, "--model", "m", "--levels", "1,2", "--rounds", "2"]
        assert main([*argv, "--metrics-url", url]) == 0
    out = capsys.readouterr().out
    expected = "KV cache 42.0 %, 4 waiting, 2 running"
    assert f"server metrics: {url} (vllm:gpu_cache_usage_perc, vllm:num_requests_waiting): " in out
    assert f"  server at 1: peak {expected}" in out and f"  server at 2: peak {expected}" in out
    assert out.splitlines()[-1].startswith("recommended budget.max_concurrency: ")


def test_probe_says_so_when_metrics_are_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{closed_port()}/metrics"
    with evalgate_spawn_simulator(EvalgateSimConfig(latency_ms=5.0), None) as sim:
        argv = ["probe", sim.base_url, "--model", "m", "--levels", "1", "--rounds", "2"]
        assert main([*argv, "--metrics-url", url]) == 0
    out = capsys.readouterr().out
    assert f"server metrics: {url} not reachable: " in out
    assert "; KV-cache and queue figures not reported" in out
    assert "server at 1" not in out


def test_probe_derives_the_metrics_url_from_the_base_url(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the simulator serves no /metrics: the derived URL is tried and reported as unusable
    with evalgate_spawn_simulator(EvalgateSimConfig(latency_ms=5.0), None) as sim:
        argv = ["probe", sim.base_url, "--model", "m", "--levels", "1", "--rounds", "1"]
        assert main(argv) == 0
        origin = sim.base_url.rsplit("/v1", 1)[0]
    out = capsys.readouterr().out
    assert f"server metrics: {origin}/metrics " in out
    assert "KV-cache and queue figures not reported" in out


def test_a_metrics_url_that_is_not_http_exits_4(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["probe", "http://127.0.0.1:9/v1", "--model", "m", "--metrics-url", "file:///etc/x"]
    assert main(argv) == 4
    captured = capsys.readouterr()
    assert "--metrics-url: must be an http:// or https:// URL" in captured.err
    assert "server metrics" not in captured.out
