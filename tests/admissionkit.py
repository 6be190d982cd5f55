"""Real keys, decisions, registries, certificates, Pods and AdmissionReviews for the registry
and admission tests (and ``bench/admission.py``). Nothing here is mocked: keys are P-256 keys
made by the code under test, certificates are made with ``cryptography``, envelopes are signed.
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import ssl
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from pytest_evalgate.attest.dsse import (
    EVALGATE_PAYLOAD_TYPE,
    evalgate_pae,
    evalgate_sign,
    evalgate_statement,
)
from pytest_evalgate.attest.keys import (
    evalgate_generate_key,
    evalgate_keyid,
    evalgate_load_private_key,
)
from pytest_evalgate.attest.override import evalgate_override
from pytest_evalgate.formats.canonical import evalgate_canonical_json

JSON = dict[str, Any]


def digest_of(label: str) -> str:
    """A weights digest made from a label (64 lowercase hex)."""
    import hashlib

    return "sha256:" + hashlib.sha256(label.encode()).hexdigest()


@dataclass(frozen=True)
class Keys:
    """Key pairs: the gate's, the registry's, and a stranger's."""

    gate: str
    gate_pub: str
    registry: str
    registry_pub: str
    other: str
    other_pub: str


def make_keys(folder: Path) -> Keys:
    """Three P-256 key pairs written by :func:`evalgate_generate_key` (unencrypted)."""
    pairs = [evalgate_generate_key(str(folder / name)) for name in ("gate", "registry", "other")]
    return Keys(*(path for pair in pairs for path in pair))


def decision(digest: str, verdict: str = "pass", attestable: Any = True) -> JSON:
    """A decision record for the candidate with weights ``digest``."""
    return {
        "verdict": verdict,
        "attestable": attestable,
        "suite": "support-eval",
        "definition_digest": "d" * 64,
        "candidate": {
            "name": "candidate",
            "model": "support-app-r17",
            "key": "candidate-0123abcd",
            "pins": {"weights_digest": digest},
        },
        "baseline": {"name": "baseline", "model": "support-app-r16", "pins": {}},
        "rules": [{"slice": "all", "rule": "non_inferior", "lower": -0.004, "pass": True}],
        "counts": {"completed": 400, "expected": 400},
    }


def signed_decision(digest: str, key: str, verdict: str = "pass") -> JSON:
    """A DSSE envelope of ``decision(digest, verdict)`` signed with ``key``."""
    return evalgate_sign(evalgate_statement(decision(digest, verdict)), key)


def sign_raw(statement: JSON, private_path: str) -> JSON:
    """Sign a statement the way another tool might, bypassing our statement checks (so a
    ``partial`` decision can be signed at all)."""
    key = evalgate_load_private_key(private_path)
    body = evalgate_canonical_json(statement)
    sig = key.sign(evalgate_pae(EVALGATE_PAYLOAD_TYPE, body), ec.ECDSA(hashes.SHA256()))
    signature = {"keyid": evalgate_keyid(key.public_key()), "sig": base64.b64encode(sig).decode()}
    return {
        "payloadType": EVALGATE_PAYLOAD_TYPE,
        "payload": base64.b64encode(body).decode(),
        "signatures": [signature],
    }


def signed_unattestable(digest: str, key: str, verdict: str) -> JSON:
    """A validly signed decision with an unattestable verdict (``partial``, ``incomplete``)."""
    statement = evalgate_statement(decision(digest, "fail"))
    statement["predicate"]["verdict"] = verdict
    return sign_raw(statement, key)


def override_of(
    decision_env: JSON,
    key: str,
    *,
    now: datetime | None = None,
    hours: float = 24.0,
) -> JSON:
    """An override of ``decision_env`` issued at ``now`` (default: now) valid for ``hours``."""
    issued = now or datetime.now(UTC)
    return evalgate_override(
        decision_env,
        "alice@example.com",
        "judge flake on billing, INC-123",
        issued + timedelta(hours=hours),
        key,
        now=issued,
    )


def flip_payload_byte(envelope: JSON, index: int = 40) -> JSON:
    """A copy of ``envelope`` whose decoded payload has one byte changed (signature kept)."""
    body = bytearray(base64.b64decode(envelope["payload"]))
    body[index] ^= 0x01
    return {**envelope, "payload": base64.b64encode(bytes(body)).decode()}


# --- TLS ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tls:
    """A self-signed certificate for 127.0.0.1/localhost and its key (PEM files)."""

    cert: str
    key: str


def make_tls(folder: Path, name: str = "webhook") -> Tls:
    """Write a fresh self-signed P-256 certificate valid for 127.0.0.1 and localhost."""
    folder.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / f"{name}.crt", folder / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return Tls(str(cert_path), str(key_path))


def client_context(tls: Tls) -> ssl.SSLContext:
    """A client context that trusts only the test's certificate (and checks the host name)."""
    return ssl.create_default_context(cafile=tls.cert)


class Client:
    """A keep-alive HTTPS client for the webhook, like the API server's."""

    def __init__(self, port: int, tls: Tls, timeout: float = 10.0) -> None:
        self._connection = http.client.HTTPSConnection(
            "127.0.0.1", port, context=client_context(tls), timeout=timeout
        )

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """(status, body) of one request on the kept-alive connection."""
        headers = {"Content-Type": "application/json"} if body is not None else {}
        self._connection.request(method, path, body=body, headers=headers)
        response = self._connection.getresponse()
        return response.status, response.read()

    def review(self, review: JSON) -> JSON:
        """POST an AdmissionReview to /validate and return the answer (HTTP 200 expected)."""
        status, body = self.request("POST", "/validate?timeout=5s", json.dumps(review).encode())
        assert status == 200, (status, body)
        answer: JSON = json.loads(body)
        return answer

    def close(self) -> None:
        self._connection.close()


# --- Pods and reviews --------------------------------------------------------------------------


def pod(
    *,
    volumes: dict[str, str] | None = None,
    images: dict[str, str] | None = None,
    annotation: str | None = None,
    name: str = "support-0",
) -> JSON:
    """A Pod serving a model: image volumes ``{name: reference}``, containers
    ``{name: image}`` (default: one vLLM container), and the weights annotation."""
    containers = images or {"server": "registry.example/vllm@sha256:" + "a" * 64}
    spec: JSON = {
        "containers": [
            {"name": cname, "image": image, "volumeMounts": []}
            for cname, image in containers.items()
        ]
    }
    if volumes:
        spec["volumes"] = [
            {"name": vname, "image": {"reference": ref, "pullPolicy": "IfNotPresent"}}
            for vname, ref in volumes.items()
        ]
        spec["containers"][0]["volumeMounts"] = [
            {"name": vname, "mountPath": f"/models/{vname}", "readOnly": True} for vname in volumes
        ]
    metadata: JSON = {"name": name, "labels": {"app": "support"}}
    if annotation is not None:
        metadata["annotations"] = {"evalgate.dev/weights-digest": annotation}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def review(
    obj: JSON | None,
    *,
    namespace: str = "serve-support",
    operation: str = "CREATE",
    kind: str = "Pod",
    uid: str | None = None,
) -> JSON:
    """An ``admission.k8s.io/v1`` AdmissionReview as the API server sends it."""
    request: JSON = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": "", "version": "v1", "kind": kind},
        "resource": {"group": "", "version": "v1", "resource": kind.lower() + "s"},
        "requestKind": {"group": "", "version": "v1", "kind": kind},
        "requestResource": {"group": "", "version": "v1", "resource": kind.lower() + "s"},
        "name": (obj or {}).get("metadata", {}).get("name", ""),
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def model_image(digest: str, repository: str = "registry.example/models/support") -> str:
    """An image reference of model weights by digest."""
    return f"{repository}@{digest}"


def stop_process(process: Any) -> None:
    """End a webhook process this test started (SIGTERM, by its PID) and close its pipes."""
    import signal

    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()
