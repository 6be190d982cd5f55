"""The refund tool's mock HTTP service (suites/support-tools, SPEC 17).

The harness starts it per run with ``PYTEST_EVALGATE_TOOL_PORT`` (its loopback port) and
``PYTEST_EVALGATE_TOOL_STATE`` (a folder that outlives runs). ``GET /health`` answers 200;
``POST /call/issue_refund`` with ``{"arguments", "identity", "idempotency_key"}`` applies a
refund once per idempotency key: the first time it appends a line to ``refunds.jsonl`` in the
state folder (flushed and fsynced before it answers); a key seen before (a retry, a resumed run)
answers the same refund without applying it again. Standard library only.
"""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STATE = os.environ.get("PYTEST_EVALGATE_TOOL_STATE", ".")
LOG = os.path.join(STATE, "refunds.jsonl")
LOCK = threading.Lock()


def _applied() -> dict[str, dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    if os.path.exists(LOG):
        with open(LOG, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    row = json.loads(line)
                    seen[row["key"]] = row["result"]
    return seen


APPLIED = _applied()


def refund(payload: dict[str, Any]) -> dict[str, Any]:
    """Apply (once per key) and return the refund."""
    key = str(payload["idempotency_key"])
    with LOCK:
        if key in APPLIED:
            return APPLIED[key]
        order = str(payload["arguments"]["order_id"])
        result = {"order_id": order, "refund_id": f"R-{key[:8]}", "status": "refunded"}
        row = {"key": key, "identity": payload.get("identity"), "order_id": order, "result": result}
        with open(LOG, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        APPLIED[key] = result
        return result


class Handler(BaseHTTPRequestHandler):
    """GET /health, POST /call/issue_refund."""

    def do_GET(self) -> None:
        self._send(200 if self.path == "/health" else 404, {"ok": self.path == "/health"})

    def do_POST(self) -> None:
        if self.path != "/call/issue_refund":
            self._send(404, {"error": "no such tool"})
            return
        length = int(self.headers.get("Content-Length", "0"))
        payload = json.loads(self.rfile.read(length) or b"{}")
        self._send(200, {"result": refund(payload)})

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the harness keeps this process's output only for its start-up errors."""


def main() -> None:
    port = int(os.environ["PYTEST_EVALGATE_TOOL_PORT"])
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
