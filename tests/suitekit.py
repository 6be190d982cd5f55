"""Write small, pinned evalgate suites into a test folder (used by the plugin tests)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from pytest_evalgate.endpoints.resolve import evalgate_answer_rows
from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.simulated import evalgate_write_answer_key

DEFAULT_POLICY: dict[str, Any] = {
    "version": "test-gate-v1",
    "confidence": 0.95,
    "correction": "holm",
    "bootstrap": {"resamples": 2000, "seed": 0},
    "rules": [{"slice": "all", "rule": "non_inferior", "margin": 0.05}],
}


def make_cases(
    categories: Sequence[str], per_category: int, cluster_size: int = 2
) -> list[dict[str, Any]]:
    """Cases ``<category>-NNN`` with exact answers and clusters of ``cluster_size``."""
    cases = []
    for category in categories:
        for i in range(per_category):
            cases.append(
                {
                    "id": f"{category}-{i:03d}",
                    "input": f"Question {i} about {category}: what is {i} + {i}?",
                    "target": str(2 * i),
                    "category": category,
                    "cluster": f"{category}-p{i // cluster_size}",
                }
            )
    return cases


def write_suite(
    folder: Path,
    candidates: Mapping[str, str],
    *,
    cases: Sequence[Mapping[str, Any]] | None = None,
    repetitions: int = 1,
    shards: int = 1,
    budget: Mapping[str, Any] | None = None,
    policy: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    suite: str = "test-suite",
    revision: str = "test-v1",
    models: Mapping[str, str] | None = None,
) -> Path:
    """Write evalgate.yaml (pinned), cases.jsonl and gate.yaml; returns the manifest path.

    ``candidates`` maps a name to its base URL (``simulated://?...`` or ``http://...``);
    ``models`` its model id (default ``model-<name>``); ``extra`` overrides top-level keys.
    """
    folder.mkdir(parents=True, exist_ok=True)
    rows = list(cases if cases is not None else make_cases(["alpha", "beta"], 6))
    data = "".join(json.dumps(row) + "\n" for row in rows).encode()
    (folder / "cases.jsonl").write_bytes(data)
    manifest: dict[str, Any] = {
        "evalgate": 1,
        "suite": suite,
        "dataset": {
            "path": "cases.jsonl",
            "revision": revision,
            "sha256": hashlib.sha256(data).hexdigest(),
        },
        "prompt": {"revision": "p1", "template": "{input}"},
        "evaluator": {"revision": "e1", "scorer": "exact"},
        "repetitions": repetitions,
        "shards": shards,
        "generation": {"temperature": 0.0, "max_tokens": 16, "seed": 7},
        "candidates": {
            name: {
                "model": (models or {}).get(name, f"model-{name}"),
                "base_url": url,
                "pins": {"weights_digest": "sha256:" + "ab" * 32},
            }
            for name, url in candidates.items()
        },
        "budget": dict(budget or {"max_concurrency": 8, "max_attempts": 3, "timeout_s": 10}),
    }
    manifest.update(extra or {})
    path = folder / "evalgate.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    (folder / "gate.yaml").write_text(
        yaml.safe_dump(dict(policy or DEFAULT_POLICY), sort_keys=False)
    )
    return path


def write_answer_key(manifest_path: Path, key_path: Path) -> Path:
    """The simulator's answer key for a suite (what ``simulated://`` URLs get automatically),
    for tests that start a standalone simulator; returns ``key_path``."""
    manifest = evalgate_load_manifest(str(manifest_path))
    evalgate_write_answer_key(key_path, evalgate_answer_rows(manifest))
    return key_path


def make_choice_cases(
    count: int, categories: Sequence[str] = ("alpha", "beta")
) -> list[dict[str, Any]]:
    """``count`` four-choice rows (SPEC 18), distinct questions, the right choice's index as
    target, categories in turn; the right choice moves between positions and lengths."""
    rows = []
    for i in range(count):
        right = i % 4
        # lengths 10 to 23 characters: acc_norm's per-character pick differs from acc's at times
        choices = [f"option {i}-{k}" + " more" * ((i + k) % 3) + "xxx" * (k % 2) for k in range(4)]
        rows.append(
            {
                "id": f"{categories[i % len(categories)]}-{i:03d}",
                "input": f"Question {i}: which option is right?",
                "choices": choices,
                "target": right,
                "category": categories[i % len(categories)],
            }
        )
    return rows
