"""Issue 19 (part A): bad configuration is exit 4 before any request, never a traceback.

Each plugin-level case runs a real pytest session (pytester) against a loopback HTTP endpoint
that counts what it receives: the session must end with exit status 4, the message must name
the file, the key and the reason, the endpoint must have received nothing and the store must
hold nothing. The pure checks (numbers, names, URLs, JSON Lines, knobs) have unit tests below.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from suitekit import DEFAULT_POLICY, write_suite

from pytest_evalgate.errors import EvalgateConfigError, EvalgatePolicyError
from pytest_evalgate.formats.jsonlread import evalgate_json_value, evalgate_jsonl_rows
from pytest_evalgate.manifest.load import evalgate_load_manifest
from pytest_evalgate.manifest.url import evalgate_base_url_problem
from pytest_evalgate.policy.load import evalgate_load_policy
from pytest_evalgate.simulated import evalgate_parse_simulated_url

REPO = Path(__file__).resolve().parent.parent


class _Counting(ThreadingHTTPServer):
    requests = 0


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        assert isinstance(self.server, _Counting)
        self.server.requests += 1
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def endpoint() -> Iterator[_Counting]:
    """A loopback HTTP server that counts requests (and answers each with a 500)."""
    server = _Counting(("127.0.0.1", 0), _Handler)
    # shutdown() waits for serve_forever's next poll: 0.5 s by default, once per test
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _url(server: _Counting) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


def _suite(pytester: pytest.Pytester, server: _Counting, **kwargs: Any) -> Path:
    url = _url(server)
    return write_suite(pytester.path / "suite", {"candidate": url, "baseline": url}, **kwargs)


def _edit(path: Path, *keys: str, value: Any) -> None:
    """Set ``keys`` (a path into the YAML document) to ``value``."""
    document = yaml.safe_load(path.read_text())
    node = document
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def _run_refused(
    pytester: pytest.Pytester, server: _Counting, *expected: str, args: Sequence[str] = ()
) -> str:
    """Run the suite (with ``args``); assert exit 4 before any request with every ``expected``
    text."""
    store = pytester.path / "store"
    result = pytester.runpytest(
        "--evalgate", "suite", f"--evalgate-store={store}", "-p", "no:cacheprovider", *args
    )
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == 4, text
    for part in expected:
        assert part in text, (part, text)
    assert "INTERNALERROR" not in text and "Traceback" not in text
    assert server.requests == 0
    assert not store.exists() or not [p for p in store.rglob("*") if p.is_file()]
    return text


# --------------------------------------------------------------------------- environment


@pytest.mark.parametrize("args", [[], ["-n", "2"]], ids=["plain", "xdist"])
def test_a_bad_asyncio_loop_switch_is_exit_4_naming_the_variable(
    pytester: pytest.Pytester,
    endpoint: _Counting,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
) -> None:
    # Only 0 and 1 mean something; "yes" must not silently keep uvloop.
    _suite(pytester, endpoint)
    monkeypatch.setenv("PYTEST_EVALGATE_ASYNCIO_LOOP", "yes")
    _run_refused(
        pytester,
        endpoint,
        "environment: PYTEST_EVALGATE_ASYNCIO_LOOP: must be 0 or 1 (1: the runner's child runs"
        " on asyncio's loop), got 'yes'",
        args=args,
    )


# --------------------------------------------------------------------------- xdist and shards


def test_a_bad_manifest_under_xdist_is_exit_4_naming_the_key(
    pytester: pytest.Pytester, endpoint: _Counting
) -> None:
    # Each worker stops at its collection; the controller used to say only "workers ['gw1',
    # 'gw0'] crashed before reporting; no verdict" (exit 1), never which key was wrong.
    path = _suite(pytester, endpoint)
    _edit(path, "budget", "bogus", value=1)
    text = _run_refused(
        pytester, endpoint, f"{path.name}: budget.bogus: unknown key", args=["-n", "2"]
    )
    assert "crashed" not in text
    assert text.count("budget.bogus: unknown key") == 1  # both workers said it; shown once


@pytest.mark.parametrize(
    ("args", "processes"),
    [
        (["-n", "2"], "1 shard x 2 xdist workers"),
        (["--evalgate-shard", "1/2"], "2 shards x 1 xdist worker"),
        (["-n", "2", "--evalgate-shard", "0/2"], "2 shards x 2 xdist workers"),
    ],
    ids=["xdist", "shard", "both"],
)
def test_a_concurrency_budget_smaller_than_its_processes_is_exit_4_before_any_request(
    pytester: pytest.Pytester, endpoint: _Counting, args: list[str], processes: str
) -> None:
    # Every process needs one slot of the run-wide budget; under xdist this was an INTERNALERROR
    # in the middle of the item loop, sharded a collection error without the file's name.
    parts = 4 if processes.startswith("2 shards x 2") else 2
    path = _suite(pytester, endpoint, shards=2, budget={"max_concurrency": parts - 1})
    _run_refused(
        pytester,
        endpoint,
        f"{path.name}: budget.max_concurrency: {parts - 1} is less than the {parts} processes"
        f" sharing it ({processes}); each needs at least 1",
        args=args,
    )


def test_enough_concurrency_for_every_process_runs_under_xdist_and_shards(
    pytester: pytest.Pytester,
) -> None:
    # the boundary: 2 slots for 2 processes is enough
    write_suite(
        pytester.path / "suite",
        {
            "candidate": "simulated://?accuracy=1.0&seed=1",
            "baseline": "simulated://?accuracy=1.0&seed=2",
        },
        shards=2,
        budget={"max_concurrency": 2},
    )
    result = pytester.runpytest("--evalgate", "suite", "-p", "no:cacheprovider", "-n", "2")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=25)  # 2 candidates x 12 cases + the gate


def test_a_sandbox_budget_smaller_than_its_processes_is_exit_4_naming_the_manifest(
    pytester: pytest.Pytester,
) -> None:
    # The example code suite with one sandbox slot for two xdist workers: refused by the file's
    # name and key before anything starts (it was "sandbox: sandbox.max_concurrency: ...").
    suite = pytester.path / "code"
    shutil.copytree(REPO / "suites" / "code", suite)
    manifest = suite / "evalgate.yaml"
    text = manifest.read_text()
    manifest.write_text(
        text.replace("isolation: auto, max_concurrency: 4", "isolation: none, max_concurrency: 1")
    )
    log = pytester.path / "requests.log"
    result = pytester.runpytest(
        "--evalgate", "code", "-p", "no:cacheprovider", "-n", "2", f"--evalgate-request-log={log}"
    )
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == 4, output
    assert (
        "code/evalgate.yaml: sandbox.max_concurrency: 1 is less than the 4 processes sharing it"
        " (2 shards x 2 xdist workers)" not in output
    )  # not sharded by --evalgate-shard: 2 processes
    assert (
        "code/evalgate.yaml: sandbox.max_concurrency: 1 is less than the 2 processes sharing it"
        " (1 shard x 2 xdist workers)" in output
    ), output
    assert not log.exists() or log.read_text() == ""


# --------------------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    ("keys", "value", "reason"),
    [
        (("repetitions",), "1", "valid integer"),
        (("repetitions",), True, "valid integer"),
        (("shards",), 2.0, "valid integer"),
        (("generation", "temperature"), float("nan"), "finite number"),
        (("generation", "max_tokens"), "16", "valid integer"),
        (("budget", "timeout_s"), float("inf"), "finite number"),
        (("budget", "max_concurrency"), "8", "valid integer"),
        (("budget", "requests_per_second"), float("nan"), "finite number"),
    ],
)
def test_a_number_that_is_not_a_finite_number_is_exit_4_before_any_request(
    pytester: pytest.Pytester,
    endpoint: _Counting,
    keys: tuple[str, ...],
    value: Any,
    reason: str,
) -> None:
    path = _suite(pytester, endpoint)
    _edit(path, *keys, value=value)
    _run_refused(pytester, endpoint, f"{path.name}: {'.'.join(keys)}: ", reason)


def test_a_policy_margin_of_nan_is_exit_4_naming_the_rule(
    pytester: pytest.Pytester, endpoint: _Counting
) -> None:
    policy = dict(DEFAULT_POLICY, rules=[{"slice": "all", "rule": "non_inferior", "margin": 0.1}])
    path = _suite(pytester, endpoint, policy=policy)
    _edit(path.parent / "gate.yaml", "confidence", value=float("nan"))
    _run_refused(pytester, endpoint, "gate.yaml: confidence: ", "finite number")


# --------------------------------------------------------------------------- datasets


def _write_dataset(path: Path, data: bytes) -> None:
    (path.parent / "cases.jsonl").write_bytes(data)
    _edit(path, "dataset", "sha256", value=hashlib.sha256(data).hexdigest())


def test_a_dataset_with_bytes_that_are_not_utf8_is_exit_4_naming_the_line(
    pytester: pytest.Pytester, endpoint: _Counting
) -> None:
    path = _suite(pytester, endpoint)
    good = (path.parent / "cases.jsonl").read_bytes()
    _write_dataset(
        path, good + b'{"id": "x-1", "input": "\xff\xfe", "target": "1", "category": "a"}\n'
    )
    _run_refused(pytester, endpoint, "cases.jsonl: line 13: not UTF-8")


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        (b'{"id": "x", "input": "q", "target": "1", "category": "a", "cost": NaN}', "NaN"),
        (b'{"id": "x", "input": "q", "target": "1", "category": "a", "cost": 1e999}', "finite"),
        (b'{"id": "x", "input": "q", "target": Infinity, "category": "a"}', "Infinity"),
        (b'{"id": "x", "input": "q", "target": "1", "category": "a", "cluster": 7}', "cluster"),
    ],
)
def test_a_dataset_row_with_nan_or_a_wrong_type_is_exit_4(
    pytester: pytest.Pytester, endpoint: _Counting, row: bytes, reason: str
) -> None:
    path = _suite(pytester, endpoint)
    _write_dataset(path, (path.parent / "cases.jsonl").read_bytes() + row + b"\n")
    _run_refused(pytester, endpoint, "cases.jsonl: line 13", reason)


# --------------------------------------------------------------------------- endpoints


def test_an_api_key_env_naming_an_unset_variable_is_exit_4_before_any_request(
    pytester: pytest.Pytester, endpoint: _Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EVALGATE_TEST_UNSET_KEY", raising=False)
    path = _suite(pytester, endpoint)
    _edit(path, "candidates", "baseline", "api_key_env", value="EVALGATE_TEST_UNSET_KEY")
    _run_refused(
        pytester,
        endpoint,
        "evalgate.yaml: candidates.baseline.api_key_env: ",
        "EVALGATE_TEST_UNSET_KEY is not set",
    )


def test_an_api_key_with_a_trailing_newline_is_exit_4_before_any_request(
    pytester: pytest.Pytester, endpoint: _Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALGATE_TEST_NEWLINE_KEY", "sk-newline-0123456789\n")
    path = _suite(pytester, endpoint)
    _edit(path, "candidates", "baseline", "api_key_env", value="EVALGATE_TEST_NEWLINE_KEY")
    text = _run_refused(
        pytester,
        endpoint,
        "evalgate.yaml: candidates.baseline.api_key_env: ",
        "EVALGATE_TEST_NEWLINE_KEY holds a line break or NUL",
    )
    assert "sk-newline-0123456789" not in text  # the value is never quoted


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://127.0.0.1/v1", "scheme 'ftp'"),
        ("localhost:8000/v1", "scheme 'localhost'"),
        ("http:///v1", "no host"),
        ("http://user:pw@127.0.0.1/v1", "credentials in the URL"),
        ("http://127.0.0.1:99999/v1", "not a URL"),
        ("http://127.0.0.1/v1 ", "whitespace"),
    ],
)
def test_an_endpoint_url_without_a_usable_scheme_or_host_is_exit_4(
    pytester: pytest.Pytester, endpoint: _Counting, url: str, reason: str
) -> None:
    path = _suite(pytester, endpoint)
    _edit(path, "candidates", "candidate", "base_url", value=url)
    _run_refused(pytester, endpoint, "evalgate.yaml: candidates.candidate.base_url: ", reason)


@pytest.fixture(scope="module")
def sign_keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Kind -> a --evalgate-sign-key file that cannot sign: missing, garbage, a public key, a
    P-384 key. Written once by subprocesses: an in-process pytester run re-imports cryptography."""
    folder = tmp_path_factory.mktemp("sign-keys")
    keys = folder / "keys"
    made = subprocess.run([sys.executable, "-m", "pytest_evalgate.cli", "keygen", "--dir",
                           str(keys)], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert made.returncode == 0, made.stderr
    p384 = (
        "from cryptography.hazmat.primitives import serialization as s;"
        "from cryptography.hazmat.primitives.asymmetric import ec;"
        "import sys; sys.stdout.buffer.write(ec.generate_private_key(ec.SECP384R1())"
        ".private_bytes(s.Encoding.PEM, s.PrivateFormat.PKCS8, s.NoEncryption()))"
    )
    other = subprocess.run([sys.executable, "-c", p384], capture_output=True, timeout=60).stdout
    assert other.startswith(b"-----BEGIN PRIVATE KEY")
    public = [p for p in keys.iterdir() if p.suffix == ".pub"]
    paths = {"missing": folder / "none.key", "garbage": folder / "garbage.key",
             "public": public[0], "p384": folder / "p384.key"}  # fmt: skip
    paths["garbage"].write_bytes(b"-----BEGIN garbage\n")
    paths["p384"].write_bytes(other)
    return paths


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("missing", "--evalgate-sign-key: cannot read key file"),
        ("garbage", "--evalgate-sign-key: not a PEM private key"),
        ("public", "--evalgate-sign-key: not a PEM private key"),
        ("p384", "--evalgate-sign-key: not an ECDSA P-256 key"),
    ],
)
@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_a_signing_key_that_cannot_sign_is_exit_4_before_any_request(
    pytester: pytest.Pytester,
    endpoint: _Counting,
    sign_keys: dict[str, Path],
    key: str,
    reason: str,
    workers: list[str],
) -> None:
    # It was refused only at the gate, after every request was sent (issue 37, Weak).
    _suite(pytester, endpoint)
    _run_refused(
        pytester, endpoint, reason, args=[f"--evalgate-sign-key={sign_keys[key]}", *workers]
    )


def test_a_base_url_override_that_is_no_url_is_exit_4_naming_the_variable(
    pytester: pytest.Pytester, endpoint: _Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_EVALGATE_BASE_URL_CANDIDATE", "file:///etc/passwd")
    _suite(pytester, endpoint)
    _run_refused(
        pytester,
        endpoint,
        "PYTEST_EVALGATE_BASE_URL_CANDIDATE: candidates.candidate.base_url: scheme 'file'",
    )


@pytest.mark.parametrize(
    ("query", "knob", "reason"),
    [
        ("latency_ms=1e300", "latency_ms", "must be <= 600000"),
        ("output_tokens=99999999999", "output_tokens", "must be <="),
        ("accuracy=nan", "accuracy", "expected a finite number"),
        ("seed=1.5", "seed", "invalid literal"),
        ("no_such_knob=1", "no_such_knob", "unknown knob"),
    ],
)
def test_malformed_simulator_knobs_are_exit_4_before_anything_starts(
    pytester: pytest.Pytester, endpoint: _Counting, query: str, knob: str, reason: str
) -> None:
    path = _suite(pytester, endpoint)
    _edit(path, "candidates", "baseline", "base_url", value=f"simulated://?{query}")
    key = "evalgate.yaml: candidates.baseline.base_url: "
    _run_refused(pytester, endpoint, f"{key}simulated://?{query}: {knob}: {reason}")


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize("name", ["../escape", "a/b", ".hidden", "x" * 65, "ü"])
def test_a_suite_name_that_could_become_a_path_is_exit_4_in_our_words(
    pytester: pytest.Pytester, endpoint: _Counting, name: str
) -> None:
    _suite(pytester, endpoint, suite=name)
    text = _run_refused(pytester, endpoint, "evalgate.yaml: suite: ", "is not a safe name")
    assert "String should match pattern" not in text


def test_a_tier_name_that_could_become_a_path_is_exit_4(
    pytester: pytest.Pytester, endpoint: _Counting
) -> None:
    _suite(pytester, endpoint, extra={"tiers": {"../up": {"fraction": 0.5}}})
    _run_refused(pytester, endpoint, "evalgate.yaml: tiers.../up: ", "is not a safe name")


# --------------------------------------------------------------------------- unit checks


def _manifest(tmp_path: Path) -> Path:
    return write_suite(tmp_path / "s", {"candidate": "simulated://", "baseline": "simulated://"})


@pytest.mark.parametrize(
    ("keys", "value"),
    [
        (("evaluator", "pass_at_k"), True),
        (("judge",), {"model": "j", "base_url": "http://127.0.0.1/v1", "revision": "r",
                      "temperature": float("nan")}),
        (("perf",), {"prompts": "p.jsonl", "rate": float("inf"), "duration_s": 1}),
        (("tiers",), {"t": {"fraction": "0.5"}}),
        (("sandbox",), {"timeout_s": float("nan")}),
        (("sandbox",), {"memory_mb": "512"}),
        (("judge",), {"model": "j", "base_url": "http://127.0.0.1/v1", "revision": "r",
                      "budget": {"timeout_s": float("inf")}}),
        (("candidates", "candidate", "pins", "tensor_parallel"), float("nan")),
    ],
)  # fmt: skip
def test_strict_numbers_in_nested_blocks(tmp_path: Path, keys: tuple[str, ...], value: Any) -> None:
    path = _manifest(tmp_path)
    _edit(path, *keys, value=value)
    with pytest.raises(EvalgateConfigError) as info:
        evalgate_load_manifest(str(path))
    assert info.value.source == str(path)
    assert info.value.key.startswith(keys[0])
    assert "finite number" in info.value.reason or "valid" in info.value.reason


def test_an_integer_still_counts_as_a_float(tmp_path: Path) -> None:
    path = _manifest(tmp_path)
    _edit(path, "generation", "temperature", value=1)
    assert evalgate_load_manifest(str(path)).generation.temperature == 1.0


@pytest.mark.parametrize(
    ("rule", "key"),
    [
        ({"slice": "all", "rule": "non_inferior", "margin": "0.1"}, "rules[0].margin"),
        ({"slice": "all", "rule": "floor", "max_rate": float("nan")}, "rules[0].max_rate"),
        ({"metric": "ttft_p95", "rule": "perf_ratio", "max_ratio": float("inf")},
         "rules[0].max_ratio"),
        ({"slice": "all", "rule": "non_inferior", "margin": True}, "rules[0].margin"),
    ],
)  # fmt: skip
def test_policy_numbers_are_finite_numbers(tmp_path: Path, rule: dict[str, Any], key: str) -> None:
    path = tmp_path / "gate.yaml"
    path.write_text(yaml.safe_dump({"version": "v", "rules": [rule]}))
    with pytest.raises(EvalgatePolicyError) as info:
        evalgate_load_policy(path)
    assert (info.value.source, info.value.key) == (str(path), key)


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8000/v1", "https://judge.eval-llm.svc/v1", "simulated://?accuracy=0.9",
     "http://[::1]:8080"],
)  # fmt: skip
def test_usable_base_urls_pass(url: str) -> None:
    assert evalgate_base_url_problem(url) is None


SECRET = "sk-live-0123456789abcdefSECRET"


@pytest.mark.parametrize(
    ("url", "words"),
    [
        (f"http://127.0.0.1:8000/v1?api_key={SECRET}", "'http://127.0.0.1:8000/v1' followed by"),
        (f"http://127.0.0.1:8000/v1#{SECRET}", "takes no query or fragment"),
        (f"ftp://127.0.0.1/v1?key={SECRET}", "scheme 'ftp' is not one of"),
        (f"http:///v1?key={SECRET}", "no host in 'http:///v1'"),
        (f"http://127.0.0.1:0/v1?key={SECRET}", "port 0 in 'http://127.0.0.1:0/v1'"),
    ],
)
def test_a_refused_base_url_never_shows_its_query(url: str, words: str) -> None:
    # A key in a base URL's query string was refused with a message printing the whole key.
    problem = evalgate_base_url_problem(url)
    assert problem is not None and words in problem
    assert "SECRET" not in problem and "sk-live" not in problem


def test_json_values_refuse_nan_infinity_and_overflow() -> None:
    for text in ("NaN", "[Infinity]", '{"a": -Infinity}', "1e400"):
        with pytest.raises(EvalgateConfigError) as info:
            evalgate_json_value("f.jsonl", "line 3", text)
        assert (info.value.source, info.value.key) == ("f.jsonl", "line 3")
    assert evalgate_json_value("f", "k", '{"a": 1.5e3}') == {"a": 1500.0}


@pytest.mark.parametrize(
    "text",
    ['{"id": "a", "n": [1, 2.5, -0.0, null, true]}', '"\\u00e9t\\u00e9"', "  [ ]  ", '{"a": {}}'],
)
def test_json_values_parse_as_json_loads_does(text: str) -> None:
    # The reader keeps one decoder for every line; str and bytes give what json.loads gives.
    assert evalgate_json_value("f", "k", text) == json.loads(text)
    assert evalgate_json_value("f", "k", text.encode()) == json.loads(text)


def test_json_values_name_a_byte_order_mark_and_trailing_data() -> None:
    for text in ("\ufeff{}", '{"a": 1} {"b": 2}', "{"):
        with pytest.raises(EvalgateConfigError, match="not valid JSON") as info:
            evalgate_json_value("f.jsonl", "line 2", text)
        assert (info.value.source, info.value.key) == ("f.jsonl", "line 2")


def test_jsonl_rows_skip_blank_lines_and_name_unreadable_files(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"a": 1}\n\n  \n[2]\n')
    assert list(evalgate_jsonl_rows("m.yaml", "dataset.path", str(path))) == [
        (1, {"a": 1}),
        (4, [2]),
    ]
    with pytest.raises(EvalgateConfigError) as info:
        list(evalgate_jsonl_rows("m.yaml", "dataset.path", str(tmp_path / "absent")))
    assert (info.value.source, info.value.key) == ("m.yaml", "dataset.path")


def test_bounded_knobs_still_accept_ordinary_values() -> None:
    config = evalgate_parse_simulated_url("simulated://?latency_ms=40&output_tokens=64&seed=3")
    assert (config.latency_ms, config.output_tokens, config.seed) == (40.0, 64, 3)


def test_a_load_phase_prompt_file_that_is_not_utf8_is_exit_4_before_the_eval_phase(
    pytester: pytest.Pytester, endpoint: _Counting
) -> None:
    path = _suite(pytester, endpoint)
    (path.parent / "prod.jsonl").write_bytes(b'{"input": "fine"}\n{"input": "\xff"}\n')
    _edit(path, "perf", value={"prompts": "prod.jsonl", "rate": 2, "duration_s": 1})
    _run_refused(pytester, endpoint, "prod.jsonl: line 2: not UTF-8")
