"""Resolve a candidate's base URL into an endpoint this process calls.

A list of base URLs is a list of replicas: replica ``k`` (the shard index of a pod, or the xdist
worker index) uses entry ``k mod len``. ``simulated://?knobs`` URLs start the built-in simulated
model as a subprocess on 127.0.0.1 (its own core), with an answer key written from the suite's
dataset; the pool stops every simulator it started. API keys come from the environment variable
the manifest names; keys never enter files.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pytest_evalgate.client import EvalgateEndpoint
from pytest_evalgate.endpoints.simulators import (
    EvalgateSimulatorPool,
    evalgate_check_proxy,
    evalgate_env_key,
)
from pytest_evalgate.errors import EvalgateConfigError
from pytest_evalgate.formats.canonical import evalgate_sha256_hex
from pytest_evalgate.manifest.choice import evalgate_choice_delimiter
from pytest_evalgate.manifest.load import (
    EvalgateCandidate,
    EvalgateManifest,
    evalgate_base_url_env,
    evalgate_base_url_override,
)
from pytest_evalgate.manifest.url import evalgate_check_base_url
from pytest_evalgate.simulated import evalgate_parse_simulated_url, evalgate_write_answer_key

EVALGATE_SIMULATED_SCHEME = "simulated://"


def evalgate_check_endpoints(manifest: EvalgateManifest, names: Iterable[str]) -> None:
    """Refuse, before any request, what would stop candidates ``names`` at their first
    request: a base URL (the manifest's or its ``PYTEST_EVALGATE_BASE_URL_*`` override) that is
    no usable URL, simulator knobs that do not parse, an ``api_key_env`` naming an unset
    variable. Each is an ``EvalgateConfigError`` naming the file (or variable) and the key."""
    for name in names:
        candidate = manifest.candidates[name]
        for url in _urls(candidate):
            if url.startswith(EVALGATE_SIMULATED_SCHEME):
                _check_knobs(manifest, name, url)
        _api_key(manifest, candidate)


def _check_knobs(manifest: EvalgateManifest, name: str, url: str) -> None:
    try:
        evalgate_parse_simulated_url(url)
    except EvalgateConfigError as exc:
        raise EvalgateConfigError(manifest.path, f"candidates.{name}.base_url", str(exc)) from None


def _urls(candidate: EvalgateCandidate) -> tuple[str, ...]:
    override = evalgate_base_url_override(candidate.name)
    if override is None:
        return candidate.base_urls
    env = evalgate_base_url_env(candidate.name)
    evalgate_check_base_url(env, f"candidates.{candidate.name}.base_url", override)
    return (override,)


class EvalgateEndpointPool:
    """Builds endpoints for candidates and owns the simulators it spawned."""

    def __init__(self, request_log: str | None = None) -> None:
        self._pool = EvalgateSimulatorPool(request_log, "evalgate-sim-")

    def evalgate_endpoint(
        self, manifest: EvalgateManifest, candidate: EvalgateCandidate, replica: int
    ) -> EvalgateEndpoint:
        """The endpoint of ``candidate`` for replica index ``replica``."""
        url = (
            evalgate_base_url_override(candidate.name)
            or candidate.base_urls[replica % len(candidate.base_urls)]
        )
        if url.startswith(EVALGATE_SIMULATED_SCHEME):
            url = self._simulated(manifest, url)
        evalgate_check_proxy(url)
        return EvalgateEndpoint(
            base_url=url.rstrip("/"),
            model=candidate.model,
            api=manifest.api,
            api_key=_api_key(manifest, candidate),
            timeout_s=manifest.budget.timeout_s,
            max_attempts=manifest.budget.max_attempts,
            stream=manifest.stream,
            model_check=None if candidate.model_rewrite else candidate.name,
        )

    def evalgate_close(self) -> None:
        """Stop every simulator this pool started."""
        self._pool.evalgate_close()

    def _simulated(self, manifest: EvalgateManifest, url: str) -> str:
        def answer_key(path: str) -> None:
            evalgate_write_answer_key(path, evalgate_answer_rows(manifest))

        config = evalgate_parse_simulated_url(url)
        return self._pool.evalgate_base_url((manifest.path, url), config, "answers", answer_key)


def evalgate_answer_rows(manifest: EvalgateManifest) -> Iterator[tuple[object, ...]]:
    """The simulator's answer key of ``manifest``: each case's prompt and target; for a case
    with ``turns``, each turn's system messages and user text with the turn's target (the
    simulator answers a turn by them; a turn text two cases share keeps its first row); for a
    tool case, its expected calls as the plan."""
    seen: set[str] = set()
    for row in _answer_rows(manifest):
        digest = evalgate_sha256_hex(row[0])
        if digest not in seen:
            seen.add(digest)
            yield row


def _answer_rows(manifest: EvalgateManifest) -> Iterator[tuple[object, ...]]:
    for case in manifest.cases:
        prompt = case.evalgate_prompt_json()
        if case.choices:
            yield from _choice_rows(manifest, case.choices, prompt, case.target, case.category)
        elif case.turns:
            system = [m for m in prompt if isinstance(m, dict) and m["role"] == "system"]
            for turn in case.turns:
                if turn.target is not None:
                    turn_prompt = [*system, {"role": "user", "content": turn.user}]
                    yield turn_prompt, turn.target, case.category
        elif case.expect is not None:
            calls = [{"name": c.name, "arguments": dict(c.arguments)} for c in case.expect.calls]
            yield prompt, case.target, case.category, calls
        else:
            yield prompt, case.target, case.category


def _choice_rows(
    manifest: EvalgateManifest,
    choices: tuple[str, ...],
    prompt: object,
    target: str,
    category: str,
) -> Iterator[tuple[object, ...]]:
    """A multiple-choice case's rows: for ``method: generate`` its prompt and right letter;
    for ``loglikelihood`` one row per choice's whole prompt, with the echo style's plan
    (``simulated.choice_style``: the case's group, the choice's and the right index)."""
    right = int(target)
    if manifest.evaluator.method == "generate":
        yield prompt, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[right], category
        return
    context = str(prompt)
    delimiter = evalgate_choice_delimiter(manifest.evaluator.options)
    group = evalgate_sha256_hex(context)
    for index, choice in enumerate(choices):
        plan = {"group": group, "index": index, "right": right, "count": len(choices)}
        plan["context_chars"] = len(context)
        yield context + delimiter + choice, choices[right], category, plan


def _api_key(manifest: EvalgateManifest, candidate: EvalgateCandidate) -> str | None:
    key = f"candidates.{candidate.name}.api_key_env"
    return evalgate_env_key(manifest.path, key, candidate.api_key_env)
