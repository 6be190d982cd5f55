"""The dataset's pin: its sha256, the check against ``dataset.sha256``, and ``evalgate pin``.

A manifest whose dataset is not pinned, or whose pin differs from the file's digest, is refused
(``dataset.sha256``). ``evalgate_pin`` writes the digest into the manifest, changing only that
value in the file's text so that comments and layout survive, and replaces the file atomically.
"""

from __future__ import annotations

import os

import yaml

from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.formats.canonical import evalgate_file_sha256
from pytest_evalgate.manifest.schema import EvalgateManifestSchema
from pytest_evalgate.manifest.validate import read_yaml


def dataset_digest(path: str, dataset_path: str) -> str:
    try:
        return evalgate_file_sha256(dataset_path)
    except OSError as exc:
        raise EvalgateConfigError(
            path, "dataset.path", f"cannot read {dataset_path}: {exc.strerror}"
        ) from None


def check_pin(path: str, model: EvalgateManifestSchema, actual: str) -> None:
    pinned = model.dataset.sha256
    if pinned is None:
        reason = "not pinned: run `evalgate pin` on the suite to record the dataset's sha256"
        raise EvalgateConfigError(path, "dataset.sha256", reason)
    if pinned.lower() != actual:
        reason = f"dataset digest {actual} differs from the pin {pinned}: the dataset changed"
        raise EvalgateConfigError(path, "dataset.sha256", reason)


def evalgate_pin(path: str) -> str:
    """Write the dataset's sha256 into the manifest's ``dataset.sha256``; returns the digest.

    Only that one value is changed in the file's text, so comments and layout survive.
    """
    raw = read_yaml(path)
    if not isinstance(raw, dict) or not isinstance(raw.get("dataset"), dict):
        raise EvalgateConfigError(path, "dataset", "missing dataset block")
    dataset_rel = raw["dataset"].get("path")
    if not isinstance(dataset_rel, str):
        raise EvalgateConfigError(path, "dataset.path", "missing or not a string")
    digest = dataset_digest(path, os.path.join(os.path.dirname(os.path.abspath(path)), dataset_rel))
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    new_text = _replace_pin(path, text, raw["dataset"].get("sha256"), digest)
    _atomic_write_text(path, new_text)
    return digest


def _replace_pin(path: str, text: str, old: object, digest: str) -> str:
    if isinstance(old, str) and old and text.count(old) == 1:
        return text.replace(old, digest)
    if old is None and "dataset: {" in text:
        return text.replace("dataset: {", f'dataset: {{sha256: "{digest}", ', 1)
    raw = yaml.safe_load(text)
    raw["dataset"]["sha256"] = digest
    return str(yaml.safe_dump(raw, sort_keys=False))


def _atomic_write_text(path: str, text: str) -> None:
    temp = f"{path}.tmp-{os.getpid()}"
    with open(temp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)
