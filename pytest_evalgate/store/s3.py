"""The S3 backend of ``EvalgateStoreBackend``: the folder store's layout as object keys.

``s3://bucket/prefix`` names the store root. Publishing is a conditional put
(``If-None-Match: *``): a published object is never replaced, and a refusal (412, or 409 while
another conditional put of the same key is in progress) is ``FileExistsError``, exactly what the
folder backend raises for a taken name. Listing is by prefix, page by page; what a listing returns
is only where to look: every object is read and verified by the reader like a segment file.

The endpoint and credentials come only from the standard AWS environment and credential chain
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, a web identity token, an instance role, ...), never
from an evalgate file or option. ``evalgate_check`` probes the bucket once, so a missing
credential, a rejected key, an absent bucket or an unreachable endpoint is a configuration error
with a clear message before any request is sent to a model.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from pytest_evalgate.errors import EvalgateConfigError, EvalgateStoreError

EVALGATE_S3_SCHEME = "s3://"
_TAKEN = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})
_CREDENTIALS = frozenset(
    {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "ExpiredToken", "403"}
)


def evalgate_is_s3(location: str) -> bool:
    """Whether a ``--evalgate-store`` value names an S3 store (``s3://bucket[/prefix]``)."""
    return location.startswith(EVALGATE_S3_SCHEME)


def evalgate_split_s3(location: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> ``("bucket", "a/b")``; ``EvalgateConfigError`` when malformed."""
    parts = urlsplit(location)
    bucket, prefix = parts.netloc, parts.path.strip("/")
    if parts.scheme != "s3" or not bucket or parts.query or parts.fragment:
        raise EvalgateConfigError(
            "--evalgate-store", location, "an S3 store is s3://BUCKET or s3://BUCKET/PREFIX"
        )
    return bucket, prefix


class EvalgateS3Store:
    """A store under ``s3://bucket/prefix``; thread-safe (one botocore client, shared)."""

    def __init__(self, location: str, client: Any = None, page_size: int = 1000) -> None:
        self.location = location.rstrip("/")
        self.bucket, self.prefix = evalgate_split_s3(location)
        self.client = client if client is not None else _default_client()
        self.page_size = page_size

    def evalgate_check(self) -> None:
        """One listing call: ``EvalgateConfigError`` when the store cannot be reached or used."""
        try:
            self.client.list_objects_v2(Bucket=self.bucket, Prefix=self._key(""), MaxKeys=1)
        except Exception as exc:
            raise EvalgateConfigError(
                "--evalgate-store", self.location, _explain(exc, self.bucket)
            ) from exc

    def evalgate_write_atomic(self, relpath: str, data: bytes, *, durable: bool = True) -> None:
        """Publish with ``If-None-Match: *``; a taken name raises ``FileExistsError``. (A put
        is durable when it returns, so ``durable`` changes nothing here.)"""
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=self._key(relpath), Body=data, IfNoneMatch="*"
            )
        except Exception as exc:
            if _code(exc) in _TAKEN:
                raise FileExistsError(f"{self.location}/{relpath}: already published") from exc
            raise self._failure("cannot publish", relpath, exc) from exc

    def evalgate_appender(self, relpath: str) -> None:
        """None: an object cannot grow, so the journal publishes whole objects here."""
        return None

    def evalgate_list(self, prefix: str) -> list[str]:
        """Every segment (``*.jsonl``, not hidden) under ``prefix``, all pages, sorted."""
        found = []
        for page in self._pages(self._folder(prefix), delimiter=None):
            for item in page.get("Contents", []):
                relpath = self._relative(item["Key"])
                if _is_segment(relpath.rsplit("/", 1)[-1]):
                    found.append(relpath)
        return sorted(found)

    def evalgate_read(self, relpath: str) -> bytes:
        """One object's bytes; ``FileNotFoundError`` when there is none."""
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(relpath))
            return bytes(response["Body"].read())
        except Exception as exc:
            if _code(exc) in _MISSING:
                raise FileNotFoundError(f"{self.location}/{relpath}") from exc
            raise self._failure("cannot read", relpath, exc) from exc

    def evalgate_children(self, prefix: str) -> list[str]:
        """Names directly under ``prefix`` ("folders" and objects), hidden names left out."""
        folder = self._folder(prefix)
        names = set()
        for page in self._pages(folder, delimiter="/"):
            for common in page.get("CommonPrefixes", []):
                names.add(common["Prefix"][len(folder) :].rstrip("/"))
            for item in page.get("Contents", []):
                names.add(item["Key"][len(folder) :])
        return sorted(name for name in names if name and not name.startswith("."))

    def _pages(self, folder: str, delimiter: str | None) -> Iterator[dict[str, Any]]:
        options: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": folder,
            "PaginationConfig": {"PageSize": self.page_size},
        }
        if delimiter:
            options["Delimiter"] = delimiter
        try:
            # the paginator follows continuation tokens: a listing is never cut at 1,000 keys
            yield from self.client.get_paginator("list_objects_v2").paginate(**options)
        except Exception as exc:
            raise self._failure("cannot list", folder, exc) from exc

    def _key(self, relpath: str) -> str:
        return f"{self.prefix}/{relpath}" if self.prefix else relpath

    def _folder(self, prefix: str) -> str:
        key = self._key(prefix.strip("/"))
        return f"{key}/" if key else ""

    def _relative(self, key: str) -> str:
        return key[len(self.prefix) + 1 :] if self.prefix else key

    def _failure(self, what: str, relpath: str, exc: Exception) -> EvalgateStoreError:
        reason = _explain(exc, self.bucket)
        return EvalgateStoreError(f"{self.location}/{relpath}: {what}: {reason}")


def _default_client() -> Any:
    # Imported here: boto3 is loaded only when an S3 store is used. Endpoint, region and
    # credentials: botocore's own chain (AWS_ENDPOINT_URL, AWS_* variables, web identity, ...).
    import boto3
    from botocore.config import Config

    config = Config(
        connect_timeout=5,
        read_timeout=60,
        retries={"mode": "standard", "max_attempts": 4},
    )
    return boto3.session.Session().client("s3", config=config)


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return ""
    code = response.get("Error", {}).get("Code")
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if status == 412:
        return "PreconditionFailed"
    return str(code or status or "")


def _explain(exc: Exception, bucket: str) -> str:
    """A message that says what to fix: credentials, endpoint, bucket, or the server's words."""
    name = type(exc).__name__
    code = _code(exc)
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        return (
            "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            "AWS_PROFILE, or a web identity (the standard AWS credential chain)"
        )
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError"):
        return f"object store unreachable ({exc}); check AWS_ENDPOINT_URL and the network"
    if code in _CREDENTIALS:
        return f"credentials rejected by the object store ({code}): check the AWS_* credentials"
    if code == "NoSuchBucket":
        return f"bucket {bucket!r} does not exist"
    return f"{name}: {exc}"


def _is_segment(name: str) -> bool:
    return name.endswith(".jsonl") and not name.startswith(".")
