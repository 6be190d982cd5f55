"""store/ and formats/: store paths that stay under the root, the served-by fold, and the JSON
Lines reader every dataset goes through. One fact each; every refusal names the path or the
file and line, and the reason.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_evalgate.errors import EvalgateConfigError, EvalgateStorePathError
from pytest_evalgate.formats.jsonlread import (
    evalgate_json_value,
    evalgate_jsonl_rows,
    evalgate_text_lines,
)
from pytest_evalgate.store import (
    EvalgateLocalStore,
    evalgate_check_store_folder,
    evalgate_open_store,
    evalgate_served_by,
)
from pytest_evalgate.store.paths import (
    evalgate_check_inside,
    evalgate_is_inside,
    evalgate_open_nofollow,
    evalgate_store_path,
)

# --- store paths ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "path", "inside"),
    [
        ("/a/b", "/a/b", True),
        ("/a/b", "/a/b/c/d", True),
        ("/a/b", "/a/bc", False),  # a shared prefix of characters is not a parent
        ("/a/b", "/a", False),
        ("/a/b", "/x/b", False),
        ("/", "/anything", True),
    ],
)
def test_is_inside_compares_whole_components(base: str, path: str, inside: bool) -> None:
    assert evalgate_is_inside(base, path) is inside


@pytest.mark.parametrize("relpath", ["", "suite", "suite/def/seg.jsonl", "a/b.c/ü"])
def test_a_plain_relative_path_resolves_under_the_root(tmp_path: Path, relpath: str) -> None:
    resolved = evalgate_store_path(str(tmp_path), relpath)
    assert resolved == os.path.realpath(os.path.join(tmp_path, relpath))
    assert evalgate_is_inside(os.path.realpath(tmp_path), resolved)


@pytest.mark.parametrize("relpath", ["/etc/passwd", "../x", "a/../b", "a//b", "a/", "/"])
def test_a_path_that_is_not_plain_and_relative_is_refused(tmp_path: Path, relpath: str) -> None:
    with pytest.raises(EvalgateStorePathError) as caught:
        evalgate_store_path(str(tmp_path), relpath)
    assert caught.value.path == os.path.join(tmp_path, relpath)
    assert caught.value.reason == (
        "not a plain relative path in the store (absolute, or an empty or '..' component)"
    )


def test_a_symlink_out_of_the_root_is_refused_naming_where_it_leads(tmp_path: Path) -> None:
    root, outside = tmp_path / "store", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "link").symlink_to(outside)
    with pytest.raises(EvalgateStorePathError) as caught:
        evalgate_store_path(str(root), "link/seg.jsonl")
    expected = (
        f"refusing to follow a symlink that leaves the store {os.path.realpath(root)}: "
        f"it leads to {os.path.realpath(outside / 'seg.jsonl')}"
    )
    assert caught.value.reason == expected
    assert caught.value.path == os.path.join(root, "link/seg.jsonl")


def test_a_symlink_that_stays_inside_is_followed(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    resolved = evalgate_store_path(str(tmp_path), "alias/x")
    assert resolved == os.path.realpath(tmp_path / "real" / "x")


def test_check_inside_refuses_only_paths_under_the_root_that_resolve_out(tmp_path: Path) -> None:
    root, outside = tmp_path / "store", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "out").symlink_to(outside)
    assert evalgate_check_inside(str(root), str(root / "reports")) == os.path.realpath(
        root / "reports"
    )
    assert evalgate_check_inside(str(root), str(outside)) == os.path.realpath(outside)
    with pytest.raises(EvalgateStorePathError) as caught:
        evalgate_check_inside(str(root), str(root / "out" / "reports"))
    assert caught.value.path == str(root / "out" / "reports")
    assert caught.value.reason.endswith(f"it leads to {os.path.realpath(outside / 'reports')}")


def test_the_store_folder_check_names_the_option(tmp_path: Path) -> None:
    root, outside = tmp_path / "store", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "out").symlink_to(outside)
    store = EvalgateLocalStore(str(root))
    evalgate_check_store_folder(store, str(root / "fine"), "--evalgate-report")
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_check_store_folder(store, str(root / "out"), "--evalgate-report")
    assert (caught.value.source, caught.value.key) == (str(root / "out"), "--evalgate-report")
    assert caught.value.reason.startswith("refusing to follow a symlink that leaves the store")


def test_open_nofollow_refuses_a_last_component_that_is_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "target").write_bytes(b"x")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    fd = evalgate_open_nofollow(str(tmp_path / "target"), os.O_RDONLY)
    os.close(fd)
    with pytest.raises(EvalgateStorePathError) as caught:
        evalgate_open_nofollow(str(tmp_path / "link"), os.O_RDONLY)
    assert caught.value.reason == (
        "refusing to follow a symlink that leaves the store: it became a symlink"
    )
    with pytest.raises(FileNotFoundError):
        evalgate_open_nofollow(str(tmp_path / "absent"), os.O_RDONLY)


def test_a_folder_location_opens_a_local_store_without_touching_it(tmp_path: Path) -> None:
    store = evalgate_open_store(str(tmp_path / "not-yet"))
    assert isinstance(store, EvalgateLocalStore)
    assert store.root == str(tmp_path / "not-yet")
    assert not (tmp_path / "not-yet").exists()


def test_a_local_store_round_trips_and_never_replaces(tmp_path: Path) -> None:
    store = EvalgateLocalStore(str(tmp_path))
    store.evalgate_write_atomic("s/d/a.jsonl", b"one\n")
    store.evalgate_write_atomic("s/d/notes.txt", b"two\n", durable=False)
    assert store.evalgate_read("s/d/a.jsonl") == b"one\n"
    assert store.evalgate_list("s") == ["s/d/a.jsonl"]  # segments only
    assert store.evalgate_children("s/d") == ["a.jsonl", "notes.txt"]
    assert store.evalgate_children("absent") == []
    with pytest.raises(FileExistsError):
        store.evalgate_write_atomic("s/d/a.jsonl", b"other\n")
    assert store.evalgate_read("s/d/a.jsonl") == b"one\n"
    assert [p.name for p in (tmp_path / "s" / "d").iterdir() if p.name.startswith(".")] == []


def test_listing_finds_nested_segments_and_names_a_folder_that_leads_out(tmp_path: Path) -> None:
    root, outside = tmp_path / "store", tmp_path / "outside"
    store = EvalgateLocalStore(str(root))
    store.evalgate_write_atomic("s/d/shard-0/seg-b.jsonl", b"x\n")
    store.evalgate_write_atomic("s/d/shard-1/seg-a.jsonl", b"y\n")
    store.evalgate_write_atomic("s/d/shard-1/.hidden.jsonl", b"z\n")
    (outside / "seg.jsonl").parent.mkdir(parents=True)
    (outside / "seg.jsonl").write_bytes(b"w\n")
    (root / "s" / "d" / "shard-2").symlink_to(outside)
    (root / "s" / "d" / "shard-3").symlink_to(root / "s" / "d" / "shard-0")  # stays inside
    assert store.evalgate_list("s") == [
        "s/d/shard-0/seg-b.jsonl",
        "s/d/shard-1/seg-a.jsonl",
        "s/d/shard-2",  # listed under its own name, so a reader refuses it by name
    ]
    assert store.evalgate_list("") == [
        "s/d/shard-0/seg-b.jsonl",
        "s/d/shard-1/seg-a.jsonl",
        "s/d/shard-2",
    ]
    assert store.evalgate_list("s/d/shard-1") == ["s/d/shard-1/seg-a.jsonl"]
    assert store.evalgate_list("absent") == []
    with pytest.raises(EvalgateStorePathError):
        store.evalgate_read("s/d/shard-2/seg.jsonl")


def test_a_local_appender_appends_and_refuses_an_existing_file(tmp_path: Path) -> None:
    store = EvalgateLocalStore(str(tmp_path))
    appender = store.evalgate_appender("g/journal/w-000001.journal")
    appender.evalgate_append(b"a\n")
    appender.evalgate_append(b"b\n")
    appender.evalgate_close()
    assert (tmp_path / "g/journal/w-000001.journal").read_bytes() == b"a\nb\n"
    with pytest.raises(FileExistsError):
        store.evalgate_appender("g/journal/w-000001.journal")


# --- served by --------------------------------------------------------------------------------


def test_served_by_folds_models_and_fingerprints_counting_unreported() -> None:
    records: list[dict[str, object]] = [
        {"model": "m-2", "system_fingerprint": "fp-b"},
        {"model": "m-1", "system_fingerprint": "fp-a"},
        {"model": "m-1", "system_fingerprint": None},
        {"model": None, "system_fingerprint": "fp-c"},  # a fingerprint still counts
        {},  # written before the fields existed
        {"model": 3},  # not a string: unreported
    ]
    served = evalgate_served_by(records)
    assert served.models == {"m-1", "m-2"}
    assert served.system_fingerprints == {"fp-a", "fp-b", "fp-c"}
    assert served.unreported == 3
    assert served.evalgate_fields() == {
        "models": ["m-1", "m-2"],
        "system_fingerprints": ["fp-a", "fp-b", "fp-c"],
        "unreported": 3,
    }


def test_served_by_of_no_records_is_empty() -> None:
    assert evalgate_served_by([]).evalgate_fields() == {
        "models": [],
        "system_fingerprints": [],
        "unreported": 0,
    }


# --- JSON Lines -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": 1.5}', {"a": 1.5}),
        ("[1, 2]", [1, 2]),
        ('"ünïcode"', "ünïcode"),
        (b'{"b": null}', {"b": None}),
        ('\ufeff{"bom": 1}', None),  # a byte order mark is refused as not JSON
        ("1e308", 1e308),
    ],
)
def test_json_values_parse_as_json(text: str | bytes, value: object) -> None:
    if value is None:
        with pytest.raises(EvalgateConfigError, match="not valid JSON"):
            evalgate_json_value("f.jsonl", "line 1", text)
        return
    assert evalgate_json_value("f.jsonl", "line 1", text) == value


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"a": NaN}', "NaN is not a JSON number (only finite numbers are)"),
        ("[Infinity]", "Infinity is not a JSON number (only finite numbers are)"),
        ("-Infinity", "-Infinity is not a JSON number (only finite numbers are)"),
        ("1e999", "1e999 is too large for a finite number"),
        ("{oops", "not valid JSON: Expecting property name enclosed in double quotes"),
        ('{"a": 1} x', "not valid JSON: Extra data"),
        ("", "not valid JSON: Expecting value"),
        (b"\xff\xfe{", "not UTF-8 ("),
        (b'"\xc3"', "not UTF-8 ("),
        ("[" * 100_000 + "]" * 100_000, "maximum recursion depth exceeded"),
    ],
)
def test_bad_json_is_refused_naming_source_place_and_reason(text: str | bytes, reason: str) -> None:
    with pytest.raises(EvalgateConfigError) as caught:
        evalgate_json_value("data.jsonl", "line 4", text)
    assert (caught.value.source, caught.value.key) == ("data.jsonl", "line 4")
    assert caught.value.reason.startswith(reason)


def test_text_lines_skip_blank_lines_but_count_them(tmp_path: Path) -> None:
    path = tmp_path / "prompts.txt"
    path.write_bytes("first\n\n   \nsécond\r\n\nlast".encode())
    assert list(evalgate_text_lines("suite.yaml", "prompt.file", str(path))) == [
        (1, "first"),
        (4, "sécond\r"),
        (6, "last"),
    ]


def test_a_file_that_cannot_be_read_is_refused_naming_the_key(tmp_path: Path) -> None:
    missing = tmp_path / "absent.jsonl"
    with pytest.raises(EvalgateConfigError) as caught:
        list(evalgate_text_lines("suite.yaml", "dataset.path", str(missing)))
    assert (caught.value.source, caught.value.key) == ("suite.yaml", "dataset.path")
    assert caught.value.reason == f"cannot read {missing}: No such file or directory"


def test_bytes_that_are_not_utf8_are_refused_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": "\xc3"}\n')
    rows = evalgate_jsonl_rows("suite.yaml", "dataset.path", str(path))
    assert next(rows) == (1, {"a": 1})
    with pytest.raises(EvalgateConfigError) as caught:
        next(rows)
    assert (caught.value.source, caught.value.key) == (str(path), "line 2")
    assert caught.value.reason.startswith("not UTF-8 text (byte 7 of the line:")


def test_jsonl_rows_name_the_line_of_bad_json(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text('{"id": "a"}\n\n{"id": NaN}\n', encoding="utf-8")
    with pytest.raises(EvalgateConfigError) as caught:
        list(evalgate_jsonl_rows("suite.yaml", "dataset.path", str(path)))
    assert str(caught.value) == (
        f"{path}: line 3: NaN is not a JSON number (only finite numbers are)"
    )


def test_jsonl_rows_of_an_empty_file_are_none(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"\n\n")
    assert list(evalgate_jsonl_rows("s", "k", str(path))) == []
