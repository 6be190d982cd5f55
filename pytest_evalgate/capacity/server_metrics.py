"""A vLLM server's own figures for ``evalgate probe``: KV-cache use and queue length from its
Prometheus ``/metrics`` (issue 35).

- ``metrics_url(base_url)``: the server's ``/metrics`` at the origin of an OpenAI base URL
  (``http://h:8000/v1`` -> ``http://h:8000/metrics``), where vLLM serves it.
- ``read_figures(url)``: one scrape: ``vllm:gpu_cache_usage_perc`` (KV-cache use, 0..1; newer
  vLLM names it ``vllm:kv_cache_usage_perc``, read as well), ``vllm:num_requests_waiting`` and
  ``vllm:num_requests_running``, each summed over its label sets (one per served model). An
  unreachable URL, an HTTP error or a page with none of those names is a ``Figures`` with
  ``reachable`` False or no values and a ``reason``: the probe says so and goes on.
- ``Poller``: scrapes every ``interval_s`` in a thread while the probe's levels run and keeps
  the peak of each figure since the last ``take_peak()`` (the figures at the end of a level,
  after its requests drained, would show an idle server).

The text format is parsed by hand, a few lines: ``name{labels} value [timestamp]``. The only
library that parses it (prometheus-client) is a test dependency here, and two gauges do not
justify a runtime one.
"""

from __future__ import annotations

import math
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

KV_CACHE = "vllm:gpu_cache_usage_perc"
KV_CACHE_NEW = "vllm:kv_cache_usage_perc"
WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
_NAMES = (KV_CACHE, KV_CACHE_NEW, WAITING, RUNNING)


@dataclass(frozen=True)
class Figures:
    """One scrape (or the peak of several): values by metric name; ``reason`` when none."""

    url: str
    reachable: bool
    values: Mapping[str, float] = field(default_factory=dict)
    reason: str = ""

    @property
    def kv_cache(self) -> float | None:
        """KV-cache use in [0, 1], or None when not exported."""
        return self.values.get(KV_CACHE, self.values.get(KV_CACHE_NEW))

    @property
    def waiting(self) -> float | None:
        """Requests waiting in the server's queue, or None."""
        return self.values.get(WAITING)

    @property
    def running(self) -> float | None:
        """Requests the server is running, or None."""
        return self.values.get(RUNNING)


def metrics_url(base_url: str) -> str:
    """``/metrics`` at the origin of ``base_url``."""
    parts = urllib.parse.urlsplit(base_url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/metrics", "", ""))


def parse(text: str) -> dict[str, float]:
    """The vLLM figures of a Prometheus text page, each summed over its label sets."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, value = _sample(line)
        if name in _NAMES and value is not None and math.isfinite(value):
            out[name] = out.get(name, 0.0) + value
    return out


def _sample(line: str) -> tuple[str, float | None]:
    if "{" in line:
        name, _, rest = line.partition("{")
        rest = rest.rpartition("}")[2]  # label values may hold spaces, never a closing brace
    else:
        name, _, rest = line.partition(" ")
    fields = rest.split()
    try:
        return name.strip(), float(fields[0]) if fields else None
    except ValueError:
        return name.strip(), None


def read_figures(url: str, timeout_s: float = 2.0) -> Figures:
    """Scrape ``url`` once (never raises for an unreachable or odd server)."""
    if not url.startswith(("http://", "https://")):  # urlopen would also read file:// URLs
        return Figures(url, False, reason="not an http:// or https:// URL")
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            text = response.read(4 * 1024 * 1024).decode("utf-8", errors="replace")
    except urllib.error.HTTPError as error:
        return Figures(url, False, reason=f"HTTP {error.code}")
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", None) or error
        return Figures(url, False, reason=str(reason))
    values = parse(text)
    if not values:
        reason = f"reachable, but it exports neither {KV_CACHE} nor {WAITING} (not vLLM?)"
        return Figures(url, True, reason=reason)
    return Figures(url, True, values)


def peak(figures: list[Figures], url: str) -> Figures:
    """The highest value of each figure over ``figures`` (reachable scrapes only)."""
    seen = [f for f in figures if f.reachable and f.values]
    if not seen:
        last = figures[-1] if figures else Figures(url, False, reason="not scraped")
        return Figures(url, last.reachable, reason=last.reason)
    values: dict[str, float] = {}
    for scrape in seen:
        for name, value in scrape.values.items():
            values[name] = max(value, values.get(name, -math.inf))
    return Figures(url, True, values)


class Poller:
    """Scrapes ``url`` every ``interval_s`` in a daemon thread between ``start`` and ``stop``."""

    def __init__(self, url: str, interval_s: float = 0.5) -> None:
        self.url = url
        self._interval_s = interval_s
        self._scrapes: list[Figures] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="evalgate-metrics", daemon=True)

    def start(self) -> Poller:
        """Begin scraping; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop scraping and wait for the thread."""
        self._stop.set()
        self._thread.join(timeout=5.0)

    def take_peak(self) -> Figures:
        """The peak figures since the last call (one more scrape first, so never empty)."""
        latest = read_figures(self.url, timeout_s=min(2.0, self._interval_s * 4))
        with self._lock:
            scrapes, self._scrapes = [*self._scrapes, latest], []
        return peak(scrapes, self.url)

    def _run(self) -> None:
        while not self._stop.is_set():
            scrape = read_figures(self.url, timeout_s=min(2.0, self._interval_s * 4))
            with self._lock:
                self._scrapes.append(scrape)
            self._stop.wait(self._interval_s)
