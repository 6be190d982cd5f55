"""The S3 store on a real object store (SeaweedFS, tests/seaweedkit.py): conditional writes,
racing writers, paginated listing, and clear errors before any request to a model.

The backend-neutral behaviour (verification, corruption reports, generations) is
tests/test_store.py, run against the folder store and this one alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from assertkit import evalgate_decided_exit
from inprockit import patched_environ, run_cli_inprocess, run_pytest_inprocess
from seaweedkit import EvalgateSeaweed, _free_ports
from suitekit import write_suite
from test_store import EXPECT, PREFIX, record

from pytest_evalgate.errors import EvalgateConfigError, EvalgateStoreError
from pytest_evalgate.formats.canonical import evalgate_canonical_json
from pytest_evalgate.store import (
    EvalgateLocalStore,
    EvalgateS3Store,
    EvalgateSegmentWriter,
    EvalgateStoreBackend,
    evalgate_open_store,
    evalgate_read_generation,
)
from pytest_evalgate.store.s3 import evalgate_split_s3

NO_CACHE = ("-p", "no:cacheprovider")


@pytest.fixture
def s3(seaweed: EvalgateSeaweed) -> EvalgateS3Store:
    return EvalgateS3Store(seaweed.new_store(), client=seaweed.client())


@pytest.fixture(params=["folder", "s3"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> EvalgateStoreBackend:
    if request.param == "folder":
        return EvalgateLocalStore(str(tmp_path / "store"))
    return request.getfixturevalue("s3")  # type: ignore[no-any-return]


def lines(*records: dict[str, Any]) -> bytes:
    return b"".join(evalgate_canonical_json(r) + b"\n" for r in records)


# -- locations ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("location", "split"),
    [("s3://b/a/b", ("b", "a/b")), ("s3://bucket", ("bucket", "")), ("s3://b/p/", ("b", "p"))],
)
def test_s3_locations_split_into_bucket_and_prefix(location: str, split: tuple[str, str]) -> None:
    assert evalgate_split_s3(location) == split


@pytest.mark.parametrize("location", ["s3://", "s3:///prefix", "s3://b/p?x=1"])
def test_a_malformed_s3_location_is_a_config_error(location: str) -> None:
    with pytest.raises(EvalgateConfigError, match="s3://BUCKET"):
        evalgate_split_s3(location)


def test_a_folder_location_opens_the_folder_store(tmp_path: Path) -> None:
    store = evalgate_open_store(str(tmp_path / "x"))
    assert isinstance(store, EvalgateLocalStore) and store.root == str(tmp_path / "x")


# -- publishing: If-None-Match ------------------------------------------------------------------


def test_a_published_object_is_never_replaced(s3: EvalgateS3Store) -> None:
    relpath = f"{PREFIX}/shard-0-of-1/seg-w-000001.jsonl"
    s3.evalgate_write_atomic(relpath, b"first\n")
    with pytest.raises(FileExistsError):
        s3.evalgate_write_atomic(relpath, b"second\n")
    assert s3.evalgate_read(relpath) == b"first\n"


def test_objects_live_under_the_prefix_as_the_folder_layout(s3: EvalgateS3Store) -> None:
    relpath = f"{PREFIX}/gen-1/shard-0-of-1/seg-w-000001.jsonl"
    s3.evalgate_write_atomic(relpath, b"x\n")
    listed = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix=s3.prefix + "/")
    assert [item["Key"] for item in listed["Contents"]] == [f"{s3.prefix}/{relpath}"]
    assert s3.evalgate_children(PREFIX) == ["gen-1"]
    assert s3.evalgate_children(f"{PREFIX}/gen-1/shard-0-of-1") == ["seg-w-000001.jsonl"]
    assert s3.evalgate_children("absent/folder") == []


def test_reading_an_absent_object_is_file_not_found(s3: EvalgateS3Store) -> None:
    with pytest.raises(FileNotFoundError):
        s3.evalgate_read(f"{PREFIX}/nothing.jsonl")


def test_two_racing_puts_of_one_name_one_wins(any_store: EvalgateStoreBackend) -> None:
    relpath = f"{PREFIX}/shard-0-of-1/seg-w-000001.jsonl"
    start = threading.Barrier(8)
    outcome: dict[int, str] = {}

    def put(index: int) -> None:
        start.wait()
        try:
            any_store.evalgate_write_atomic(relpath, f"writer {index}\n".encode())
            outcome[index] = "won"
        except FileExistsError:
            outcome[index] = "refused"

    threads = [threading.Thread(target=put, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    winners = [i for i, what in outcome.items() if what == "won"]
    assert len(outcome) == 8 and len(winners) == 1, outcome
    assert any_store.evalgate_read(relpath) == f"writer {winners[0]}\n".encode()


def test_a_writer_refused_a_name_commits_under_a_new_one(any_store: EvalgateStoreBackend) -> None:
    # Two writers with one writer id (a restarted pod reusing it) race for the same names:
    # one wins each name, the other is refused and writes under its next sequence number.
    writers = [EvalgateSegmentWriter(any_store, "shard-0-of-1", writer="same") for _ in range(2)]
    writers[0].evalgate_add(PREFIX, record("a"))
    writers[1].evalgate_add(PREFIX, record("b"))
    start = threading.Barrier(2)

    def commit(writer: EvalgateSegmentWriter) -> None:
        start.wait()
        writer.evalgate_commit()

    threads = [threading.Thread(target=commit, args=(w,)) for w in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert [w.committed for w in writers] == [1, 1]
    names = [p.rsplit("/", 1)[1] for p in any_store.evalgate_list(PREFIX)]
    assert names == ["seg-same-000001.jsonl", "seg-same-000002.jsonl"]
    view = evalgate_read_generation(any_store, PREFIX, EXPECT)
    assert (len(view.results), view.problems, view.duplicates) == (2, [], 0)


def test_listing_follows_every_page(seaweed: EvalgateSeaweed) -> None:
    store = EvalgateS3Store(seaweed.new_store(), client=seaweed.client(), page_size=2)
    written = [f"{PREFIX}/shard-0-of-1/seg-w-{n:06d}.jsonl" for n in range(7)]
    for relpath in written:
        store.evalgate_write_atomic(relpath, lines(record(relpath[-11:-6])))
    store.evalgate_write_atomic(f"{PREFIX}/shard-0-of-1/.tmp-x", b"half")  # not a segment
    for n in range(5):
        store.evalgate_write_atomic(f"{PREFIX}/gen-{n}/GENERATION.json", b"{}")
    assert store.evalgate_list(PREFIX) == written
    assert store.evalgate_children(PREFIX) == [*(f"gen-{n}" for n in range(5)), "shard-0-of-1"]
    view = evalgate_read_generation(store, PREFIX, EXPECT)
    assert (view.segments, len(view.results), view.problems) == (7, 7, [])


# -- clear errors before any request --------------------------------------------------------


def test_rejected_credentials_are_named(seaweed: EvalgateSeaweed) -> None:
    client = seaweed.client(aws_access_key_id="nobody", aws_secret_access_key="wrong")
    store = EvalgateS3Store(seaweed.new_store(), client=client)
    with pytest.raises(EvalgateConfigError, match="credentials rejected"):
        store.evalgate_check()


def test_an_unreachable_endpoint_is_named(seaweed: EvalgateSeaweed) -> None:
    closed = f"http://127.0.0.1:{_free_ports(1)[0]}"
    store = EvalgateS3Store(seaweed.new_store(), client=seaweed.client(endpoint_url=closed))
    with pytest.raises(EvalgateConfigError, match="object store unreachable"):
        store.evalgate_check()


def test_an_absent_bucket_is_named(seaweed: EvalgateSeaweed) -> None:
    store = EvalgateS3Store("s3://no-such-bucket-here/p", client=seaweed.client())
    with pytest.raises(EvalgateConfigError, match="'no-such-bucket-here' does not exist"):
        store.evalgate_check()


def test_missing_credentials_are_named(
    seaweed: EvalgateSeaweed, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    # no shared files and no instance metadata either: only the chain's empty end is left
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", seaweed.endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with pytest.raises(EvalgateConfigError, match="no AWS credentials found"):
        evalgate_open_store(seaweed.new_store())


def test_a_failed_put_is_a_store_error(seaweed: EvalgateSeaweed) -> None:
    client = seaweed.client(aws_access_key_id="nobody", aws_secret_access_key="wrong")
    store = EvalgateS3Store(seaweed.new_store(), client=client)
    with pytest.raises(EvalgateStoreError, match="cannot publish: credentials rejected"):
        store.evalgate_write_atomic(f"{PREFIX}/x.jsonl", b"x\n")


def _env_changes(seaweed: EvalgateSeaweed, **changes: str) -> dict[str, str | None]:
    """The environment changes that point a run at ``seaweed`` alone: every other ``AWS_``
    variable removed, then ``changes``."""
    removed: dict[str, str | None] = {k: None for k in os.environ if k.startswith("AWS_")}
    return {**removed, **seaweed.env(), **changes}


def _pytest(
    pytester: pytest.Pytester, cwd: Path, env: dict[str, str | None], *args: str
) -> subprocess.CompletedProcess[str]:
    # in this process (tests/inprockit.py): the store's client is made per run from the
    # environment of the run, and the store is a process of its own either way
    with patched_environ(env):
        return run_pytest_inprocess(
            pytester, "--evalgate", "suite", *NO_CACHE, "-q", *args, cwd=cwd
        )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"AWS_SECRET_ACCESS_KEY": "wrong"}, "credentials rejected"),
        ({"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}, "object store unreachable"),
    ],
)
def test_a_run_with_a_broken_store_stops_before_any_request(
    seaweed: EvalgateSeaweed,
    tmp_path: Path,
    changes: dict[str, str],
    message: str,
    pytester: pytest.Pytester,
) -> None:
    write_suite(
        tmp_path / "suite", {"candidate": "simulated://?seed=1", "baseline": "simulated://?seed=2"}
    )
    log = tmp_path / "requests.jsonl"
    args = [f"--evalgate-store={seaweed.new_store()}", f"--evalgate-request-log={log}"]
    ran = _pytest(pytester, tmp_path, _env_changes(seaweed, **changes), *args)
    assert ran.returncode == 4, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert message in ran.stderr
    assert not log.exists()  # the simulated model never got a request


def test_evalgate_gate_reads_an_s3_store_and_names_a_broken_one(
    seaweed: EvalgateSeaweed, tmp_path: Path, pytester: pytest.Pytester
) -> None:
    suite = write_suite(
        tmp_path / "suite", {"candidate": "simulated://?seed=1", "baseline": "simulated://?seed=2"}
    )
    location = seaweed.new_store()
    ran = _pytest(pytester, tmp_path, _env_changes(seaweed), f"--evalgate-store={location}")
    assert ran.returncode == evalgate_decided_exit(ran.stdout), ran.stderr[-3000:]
    gate = ["gate", str(suite), "--store", location, "--report", str(tmp_path / "rep")]
    good = run_cli_inprocess(*gate, cwd=tmp_path, env=_env_changes(seaweed))
    assert good.returncode == ran.returncode, good.stdout + good.stderr
    decision = json.loads((tmp_path / "rep" / "decision.json").read_text())
    assert decision["counts"]["completed"] == decision["counts"]["expected"] > 0
    bad_env = _env_changes(seaweed, AWS_SECRET_ACCESS_KEY="x")
    bad = run_cli_inprocess(*gate, cwd=tmp_path, env=bad_env)
    assert bad.returncode == 4
    assert "credentials rejected" in bad.stdout + bad.stderr
