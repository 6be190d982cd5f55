"""The online judge's parts (``pytest_evalgate.onlinejudge``), and the command end to end on a
feed with a real simulated judge process (``--once --exit-when-done``): reading a feed and
shadow pairs, seeded sampling, the counts and their Prometheus text, judge errors kept apart
from scores, and the refusal of a suite whose judge is pairwise.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from inprockit import run_cli_inprocess
from judgekit import write_judged_suite
from prometheus_client.parser import text_string_to_metric_families
from suitekit import make_cases

from pytest_evalgate.onlinejudge.feed import (
    EvalgateFeedReader,
    EvalgateOnlineAnswer,
    EvalgatePairReader,
    evalgate_feed_answer,
    evalgate_pair_answers,
)
from pytest_evalgate.onlinejudge.sample import EvalgateOnlineCounts, EvalgateOnlineSampler
from pytest_evalgate.shadow.pairs import evalgate_pair, evalgate_request_question

CASES = make_cases(["alpha", "beta"], 10)
ACCURATE_JUDGE = "simulated://?judge=1&accuracy=1.0&seed=5"


def line(**obj: Any) -> bytes:
    return json.dumps(obj).encode()


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]


# --------------------------------------------------------------------------- the feed


def test_a_feed_line_is_version_question_answer_without_the_system_prompt() -> None:
    got = evalgate_feed_answer(line(version="canary", messages=chat("What is 2?"), answer="2"))
    assert got == EvalgateOnlineAnswer("canary", "What is 2?", "2")
    prompt = evalgate_feed_answer(line(version="stable", prompt="Say hi", answer="hi"))
    assert prompt == EvalgateOnlineAnswer("stable", "Say hi", "hi")


@pytest.mark.parametrize(
    "raw, reason",
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (line(version="can ary", messages=chat("q"), answer="a"), "version is not"),
        (line(version="", messages=chat("q"), answer="a"), "version is not"),
        (line(version="canary", messages=chat("q"), answer=3), "answer is not a string"),
        (line(version="canary", messages=[], answer="a"), "messages is not"),
        (line(version="canary", messages=[{"role": "user", "content": [1]}], answer="a"),
         "messages is not"),
    ],
)  # fmt: skip
def test_a_bad_feed_line_is_a_reason_never_an_answer(raw: bytes, reason: str) -> None:
    got = evalgate_feed_answer(raw)
    assert isinstance(got, str) and got.startswith(reason)


def test_the_feed_reader_follows_a_growing_file_line_by_line(tmp_path: Path) -> None:
    feed = tmp_path / "feed.jsonl"
    reader = EvalgateFeedReader(str(feed))
    assert reader.poll() == []  # no file yet
    feed.write_bytes(b'{"a": 1}\n\n{"b": ')
    assert reader.poll() == [b'{"a": 1}']  # the half-written line waits for its newline
    with feed.open("ab") as handle:
        handle.write(b'2}\n{"c": 3}\n')
    assert reader.poll() == [b'{"b": 2}', b'{"c": 3}']
    assert reader.poll() == []
    feed.write_bytes(b'{"d": 4}\n')  # replaced by a shorter file: read from its start
    assert reader.poll() == [b'{"d": 4}']


def test_a_large_feed_is_read_in_pieces_and_an_endless_line_is_cut(tmp_path: Path) -> None:
    feed = tmp_path / "feed.jsonl"
    feed.write_bytes(b"".join(b'{"n": %d}\n' % i for i in range(1000)))
    reader = EvalgateFeedReader(str(feed), read_max=1000)
    pieces = []
    while lines := reader.poll():
        pieces.append(lines)
    assert len(pieces) > 5
    assert [line for piece in pieces for line in piece] == [b'{"n": %d}' % i for i in range(1000)]
    endless = tmp_path / "endless.jsonl"
    endless.write_bytes(b"x" * (9 << 20))
    reader = EvalgateFeedReader(str(endless), read_max=16 << 20)
    (cut,) = reader.poll()
    assert evalgate_feed_answer(cut) == "the line is longer than 8 MiB"
    with endless.open("ab") as handle:
        handle.write(b'x\n{"n": 1}\n')
    assert reader.poll() == [b"x", b'{"n": 1}']  # the cut line's rest, then lines again


def test_a_line_of_exactly_8_mib_is_still_read() -> None:
    head, tail = b'{"version": "canary", "prompt": "', b'", "answer": "a"}'
    line = head + b"x" * ((8 << 20) - len(head) - len(tail)) + tail
    assert len(line) == 8 << 20
    got = evalgate_feed_answer(line)
    assert isinstance(got, EvalgateOnlineAnswer) and got.answer == "a"
    assert evalgate_feed_answer(line + b" ") == "the line is longer than 8 MiB"


# --------------------------------------------------------------------------- shadow pairs


def side(text: str, status: int = 200, error: str | None = None) -> dict[str, Any]:
    return {"status": status, "text": text, "error": error, "finish_reason": "stop"}


def test_a_pair_with_its_question_gives_stable_and_the_candidate_as_canary() -> None:
    body = json.dumps({"model": "m", "messages": chat("What is 4?")}).encode()
    question = evalgate_request_question(body, None)
    assert question == "What is 4?"
    pair = evalgate_pair(body, "/v1/chat/completions", side("4"), side("5"), question)
    assert evalgate_pair_answers(pair) == [
        EvalgateOnlineAnswer("stable", "What is 4?", "4"),
        EvalgateOnlineAnswer("canary", "What is 4?", "5"),
    ]
    failed = evalgate_pair(body, "/", side("4"), side("", 0, "timeout"), question)
    assert [a.version for a in evalgate_pair_answers(failed)] == ["stable"]
    without = evalgate_pair(body, "/", side("4"), side("5"))
    assert "question" not in without
    assert "keep-question" in str(evalgate_pair_answers(without))


def test_the_pair_reader_reads_each_new_segment_once(tmp_path: Path) -> None:
    from pytest_evalgate.shadow.pairs import EvalgatePairWriter
    from pytest_evalgate.store import EvalgateLocalStore

    store = EvalgateLocalStore(str(tmp_path / "store"))
    writer = EvalgatePairWriter(store, "s", "proxy-1")
    reader = EvalgatePairReader(store, "s")
    assert reader.poll() == ([], [])
    body = json.dumps({"messages": chat("q")}).encode()
    first = evalgate_pair(body, "/", side("a"), side("b"), "q")
    writer.add(first)
    writer.flush()
    assert reader.poll() == ([first], [])
    second = evalgate_pair(body, "/", side("c"), side("d"), "q")
    writer.add(second)
    writer.flush()
    assert reader.poll() == ([second], [])
    assert reader.poll() == ([], [])
    forged = dict(second, question="another")
    store.evalgate_write_atomic("shadow/s/pairs/forged.jsonl", json.dumps(forged).encode())
    pairs, bad = reader.poll()
    assert pairs == [] and len(bad) == 1 and "checksum mismatch" in bad[0]


def test_a_kept_question_is_redacted_of_the_request_token() -> None:
    token = "sk-live-0123456789abcdef"
    body = json.dumps({"messages": [{"role": "user", "content": f"my key is {token}"}]})
    question = evalgate_request_question(body.encode(), token)
    assert question is not None and token not in question


# --------------------------------------------------------------------------- sampling, counts


def test_sampling_is_seeded_and_at_the_rate() -> None:
    first, second, other = (EvalgateOnlineSampler(0.3, seed) for seed in (7, 7, 8))
    drawn = [first.draw() for _ in range(20_000)]
    assert drawn == [second.draw() for _ in range(20_000)]
    assert drawn != [other.draw() for _ in range(20_000)]
    # binomial sd at n = 20000, p = 0.3 is 0.0032: 5 sd either side
    assert abs(sum(drawn) / len(drawn) - 0.3) < 0.017
    assert not any(EvalgateOnlineSampler(0.0, 1).draw() for _ in range(1000))
    assert all(EvalgateOnlineSampler(1.0, 1).draw() for _ in range(1000))
    with pytest.raises(ValueError):
        EvalgateOnlineSampler(1.5, 0)


def families(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            found.setdefault(sample.name, {})[labels] = sample.value
    return found


def test_the_exposition_has_every_version_from_zero_and_errors_apart() -> None:
    counts = EvalgateOnlineCounts(("canary", "stable"), {"suite": "s", "judge_key": 'k"1'})
    start = families(counts.exposition())
    canary, stable = (("version", "canary"),), (("version", "stable"),)
    assert start["evalgate_online_judge_score_count"] == {canary: 0.0, stable: 0.0}
    assert start["evalgate_online_judge_score_sum"] == {canary: 0.0, stable: 0.0}
    assert start["evalgate_online_answers_total"] == {canary: 0.0, stable: 0.0}
    assert start["evalgate_online_refusals_total"] == {canary: 0.0, stable: 0.0}
    info = start["evalgate_online_judge_info"]
    assert info == {(("judge_key", 'k"1'), ("suite", "s")): 1.0}  # escaped and read back
    counts.seen("canary", True, True)
    counts.seen("canary", True, False)
    counts.seen("canary", False, True)  # read, not sampled: no answer, no refusal
    counts.scored("canary", 0.75)
    counts.failed("canary", "judge_unparseable")
    counts.seen("stable", True, False)
    counts.scored("stable", 1.0)
    after = families(counts.exposition())
    assert after["evalgate_online_judge_score_count"] == {canary: 1.0, stable: 1.0}
    assert after["evalgate_online_judge_score_sum"] == {canary: 0.75, stable: 1.0}
    assert after["evalgate_online_answers_total"] == {canary: 2.0, stable: 1.0}
    assert after["evalgate_online_refusals_total"] == {canary: 1.0, stable: 0.0}
    assert after["evalgate_online_seen_total"] == {canary: 3.0, stable: 1.0}
    errors = after["evalgate_online_judge_errors_total"]
    assert errors == {(("category", "judge_unparseable"), ("version", "canary")): 1.0}


def test_the_snapshot_is_the_counts_with_means_and_skip_reasons() -> None:
    counts = EvalgateOnlineCounts(("canary",))
    assert counts.snapshot() == {
        "versions": {"canary": {"seen": 0, "answers": 0, "refusals": 0, "judged": 0,
                                "score_sum": 0.0, "mean_score": None, "errors": {}}},
        "skipped": 0, "skipped_reasons": {},
    }  # fmt: skip
    for value in (1.0, 0.0, 0.0):
        counts.seen("stable", True, False)
        counts.scored("stable", value)
    counts.failed("stable", "judge_timeout")
    counts.skip("not JSON")
    counts.skip("not JSON")
    counts.skip("answer is not a string")
    snapshot = counts.snapshot()
    assert snapshot["versions"]["stable"] == {
        "seen": 3, "answers": 3, "refusals": 0, "judged": 3, "score_sum": 1.0,
        "mean_score": 0.333333, "errors": {"judge_timeout": 1},
    }  # fmt: skip
    assert snapshot["skipped"] == 3
    assert snapshot["skipped_reasons"] == {"answer is not a string": 1, "not JSON": 2}
    docs = {f.name: f.documentation for f in text_string_to_metric_families(counts.exposition())}
    assert docs["evalgate_online_judge_score"] == "judge score of sampled answers, 0..1"


def test_the_names_are_the_ones_canary_check_queries() -> None:
    from pytest_evalgate.canary import promql
    from pytest_evalgate.onlinejudge import sample

    assert sample.EVALGATE_SCORE_METRIC == promql.EVALGATE_JUDGE_SCORE
    assert sample.EVALGATE_ANSWERS_METRIC == promql.EVALGATE_ONLINE_ANSWERS
    assert sample.EVALGATE_REFUSALS_METRIC == promql.EVALGATE_ONLINE_REFUSALS


# --------------------------------------------------------------------------- the command


def judged_suite(tmp_path: Path, **overrides: Any) -> Path:
    return write_judged_suite(tmp_path / "suite", cases=CASES, **overrides).parent


def write_feed(path: Path, canary_answer: str | None = None) -> None:
    """Every case answered right by stable, and by the canary as ``canary_answer`` (or right)."""
    with path.open("w", encoding="utf-8") as handle:
        for case in CASES:
            messages = [{"role": "user", "content": case["input"]}]
            for version in ("stable", "canary"):
                answer = case["target"] if version == "stable" else canary_answer or case["target"]
                handle.write(json.dumps({"version": version, "messages": messages,
                                         "answer": answer}) + "\n")  # fmt: skip
        handle.write("not a line of the feed\n")


def serve(suite: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "pytest_evalgate.cli", "online-judge", "serve", str(suite),
            "--once", "--exit-when-done", *args]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def refused(suite: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``serve`` refused (exit 4) before its judge, /metrics or a signal handler is set up: the
    same command through the console script's main in this process."""
    return run_cli_inprocess(
        "online-judge", "serve", str(suite), "--once", "--exit-when-done", *args, cwd=suite
    )


def final(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("evalgate online judge: metrics on http://127.0.0.1:")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def test_the_pinned_judge_scores_each_version_with_the_offline_judge_key(tmp_path: Path) -> None:
    from pytest_evalgate.manifest.load import evalgate_load_manifest, evalgate_manifest_path

    suite = judged_suite(tmp_path, judge_url=ACCURATE_JUDGE)
    feed = tmp_path / "feed.jsonl"
    write_feed(feed, canary_answer="I can't help with that.")
    got = final(serve(suite, "--feed", str(feed), "--rate", "1"))
    manifest = evalgate_load_manifest(evalgate_manifest_path(str(suite)))
    assert manifest.judged is not None and got["judge_key"] == manifest.judged.key
    stable, canary = got["versions"]["stable"], got["versions"]["canary"]
    assert (stable["answers"], stable["judged"], stable["mean_score"]) == (20, 20, 1.0)
    assert (canary["answers"], canary["judged"], canary["mean_score"]) == (20, 20, 0.0)
    assert (stable["refusals"], canary["refusals"]) == (0, 20)
    assert got["skipped"] == 1 and got["skipped_reasons"] == {"not JSON": 1}


def test_the_sample_is_the_seeded_one_and_max_answers_stops_reading(tmp_path: Path) -> None:
    suite = judged_suite(tmp_path, judge_url=ACCURATE_JUDGE)
    feed = tmp_path / "feed.jsonl"
    write_feed(feed)
    got = final(serve(suite, "--feed", str(feed), "--rate", "0.5", "--seed", "3"))
    draws = random.Random(3)
    expected = {"stable": 0, "canary": 0}
    for _case in CASES:
        for version in ("stable", "canary"):
            expected[version] += draws.random() < 0.5
    assert {v: got["versions"][v]["answers"] for v in expected} == expected
    assert {v: got["versions"][v]["seen"] for v in expected} == {"stable": 20, "canary": 20}
    capped = final(serve(suite, "--feed", str(feed), "--rate", "1", "--max-answers", "7"))
    assert sum(v["answers"] for v in capped["versions"].values()) == 7
    assert sum(v["seen"] for v in capped["versions"].values()) == 7


def test_judge_errors_are_counted_apart_never_as_scores(tmp_path: Path) -> None:
    suite = judged_suite(tmp_path, judge_url="simulated://?judge=1&unparseable_rate=1&seed=5")
    feed = tmp_path / "feed.jsonl"
    write_feed(feed)
    got = final(serve(suite, "--feed", str(feed), "--rate", "1"))
    for version in ("stable", "canary"):
        counts = got["versions"][version]
        assert (counts["answers"], counts["judged"], counts["mean_score"]) == (20, 0, None)
        assert counts["errors"] == {"judge_unparseable": 20}


def test_a_pairwise_judge_is_refused_naming_the_key(tmp_path: Path) -> None:
    suite = judged_suite(tmp_path, mode="pairwise")
    feed = tmp_path / "feed.jsonl"
    write_feed(feed)
    done = refused(suite, "--feed", str(feed), "--rate", "1")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "evaluator.mode" in done.stderr and "pairwise" in done.stderr
    assert done.stdout == ""  # refused before anything listens


@pytest.mark.parametrize(
    "args, key", [(["--rate", "1.5"], "rate"), (["--rate", "1", "--versions", "a b"], "versions"),
                  (["--rate", "1", "--max-answers", "0"], "max_answers"),
                  (["--rate", "1", "--shadow-suite", "x"], "shadow_suite")],
)  # fmt: skip
def test_bad_options_exit_4_naming_the_option(tmp_path: Path, args: list[str], key: str) -> None:
    suite = judged_suite(tmp_path, judge_url=ACCURATE_JUDGE)
    done = refused(suite, "--feed", str(tmp_path / "feed.jsonl"), *args)
    assert done.returncode == 4 and key in done.stderr, done.stderr


def scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return families(response.read().decode("utf-8"))


def test_metrics_are_served_over_http_while_the_feed_grows(tmp_path: Path) -> None:
    suite = judged_suite(tmp_path, judge_url=ACCURATE_JUDGE)
    feed = tmp_path / "feed.jsonl"
    argv = [sys.executable, "-m", "pytest_evalgate.cli", "online-judge", "serve", str(suite),
            "--feed", str(feed), "--rate", "1", "--poll", "0.1"]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        ready = process.stdout.readline().strip()
        url = ready.removeprefix("evalgate online judge: metrics on ")
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        count = "evalgate_online_judge_score_count"
        assert scrape(url)[count] == {(("version", "canary"),): 0, (("version", "stable"),): 0}
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(url.removesuffix("/metrics") + "/other", timeout=10)
        assert caught.value.code == 404
        caught.value.close()
        write_feed(feed)  # the file appears after start: followed, judged
        deadline = time.monotonic() + 60
        while sum(scrape(url)[count].values()) < 40:
            assert time.monotonic() < deadline, "the feed was not judged"
            time.sleep(0.2)
        means = scrape(url)
        assert means["evalgate_online_judge_score_sum"][(("version", "canary"),)] == 20.0
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=60)
    assert process.returncode == 0
    assert json.loads(out.strip().splitlines()[-1])["versions"]["canary"]["judged"] == 20
