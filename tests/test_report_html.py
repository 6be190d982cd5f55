"""report.html: one self-contained page, checked as text and then in a real headless browser.

The browser tests use Debian's ``chromium`` (``scripts/_venv.sh`` installs it with apt-get when
run as root and it is missing) and skip, saying why, where it is not installed. They take
screenshots into the test's temp folder, read the rendered DOM (``--dump-dom``) for every rule
and slice of decision.json with its numbers, and measure at a 375 px viewport (an iframe of that
width: a headless window is at least 500 px wide) that the page body does not scroll sideways.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from assertkit import evalgate_decision_exit
from reportkit import failing_decision, sample_decision, with_facts
from suitekit import make_cases, write_suite

from pytest_evalgate.report import (
    EvalgateReportContext,
    EvalgateSignatureStatus,
    evalgate_html,
    evalgate_write_report,
)
from pytest_evalgate.report.facts import (
    evalgate_interval,
    evalgate_num,
    evalgate_rate,
    evalgate_threshold_text,
)

_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
         "track", "wbr"}  # fmt: skip
_CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars",
]  # fmt: skip


class _Page(HTMLParser):
    """Tags with their attributes, and the text inside every element that has ``data-*``
    attributes (keyed by attribute and value)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.texts: dict[tuple[str, str], str] = {}
        self._open: list[tuple[str, list[tuple[str, str]]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {name: value or "" for name, value in attrs}
        self.tags.append((tag, found))
        self._in_script = tag == "script"
        if tag in _VOID:
            return
        keys = [(name, value) for name, value in found.items() if name.startswith("data-")]
        self._open.append((tag, keys))
        for key in keys:
            self.texts.setdefault(key, "")

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False
        while self._open:
            opened, _keys = self._open.pop()
            if opened == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts.append(data)
        for _tag, keys in self._open:
            for key in keys:
                self.texts[key] += data


def _parse(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    return page


def _text(page: _Page, attribute: str, value: str) -> str:
    return " ".join(page.texts[(attribute, value)].split())


# --------------------------------------------------------------------------- the page as text


def test_the_page_fetches_nothing() -> None:
    text = evalgate_html(with_facts(sample_decision()))
    page = _parse(text)
    tags = {tag for tag, _attrs in page.tags}
    assert not tags & {"link", "img", "iframe", "object", "embed", "video", "audio", "base"}
    for tag, attrs in page.tags:
        assert "src" not in attrs, tag  # the one script is inline
        assert not attrs.get("href", "#").strip().lower().startswith(("http", "//", "file")), tag
    assert "@import" not in text and "@font-face" not in text
    assert re.findall(r"url\((?!#)", text) == []  # only SVG-internal url(#clip) references
    for svg_ref in re.findall(r'(?:xlink:)?href="([^"]*)"', text):
        assert svg_ref.startswith("#"), svg_ref  # SVG references stay inside the page


def test_a_content_security_policy_forbids_requests_and_allows_only_its_script() -> None:
    page = _parse(evalgate_html(sample_decision()))
    policy = next(
        attrs["content"] for tag, attrs in page.tags
        if tag == "meta" and attrs.get("http-equiv") == "Content-Security-Policy"
    )  # fmt: skip
    assert "default-src 'none'" in policy and "unsafe-inline" not in policy.split("script-src")[1]
    (script,) = page.scripts
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy  # the inline script runs, nothing else
    assert "beforeprint" in script and "open=true" in script  # prints with details open


def test_every_rule_row_has_its_numbers() -> None:
    decision = failing_decision()
    page = _parse(evalgate_html(decision))
    for rule in decision["rules"]:
        row = _text(page, "data-rule", rule["name"])
        assert rule["name"] in row
        assert evalgate_num(rule["estimate"]) in row, rule["name"]
        if rule["rule"] == "no_regression":  # its alpha is the test's level, not a threshold
            assert f"α = {rule['threshold']:.4g} (test level)" in row, row
            assert evalgate_num(rule["threshold"]) not in row, row
        else:
            assert evalgate_num(rule["threshold"]) in row, (rule["name"], row)
        assert evalgate_interval(rule["lo"], rule["hi"]) in row
        assert ("FAIL" if not rule["passed"] else "pass") in row
        assert rule["reason"] in row


def test_excluded_cases_are_listed_with_their_reasons() -> None:
    decision = sample_decision()
    assert "data-excluded" not in evalgate_html(decision)
    decision["exclusions"] = [{"case": "alpha-009", "reason": "longer than <the> context"}]
    row = _text(_parse(evalgate_html(decision)), "data-excluded", "alpha-009")
    assert "alpha-009" in row and "longer than <the> context" in row, row


def test_every_slice_row_expands_to_its_flipped_ids() -> None:
    decision = sample_decision()
    text = evalgate_html(decision)
    page = _parse(text)
    for name in ("all", "alpha", "beta"):
        row = _text(page, "data-slice", name)
        n = decision["slices"][name]["n_cases"]
        assert f"n {n}" in row
        for side in ("baseline", "candidate"):
            assert evalgate_rate(decision["rates"][side][name]) in row
    assert re.search(r'<details class="slice" data-slice="alpha"><summary>.*?</summary>'
                     r'<div class="flips">.*?alpha-003.*?alpha-007', text)  # fmt: skip
    beta = re.search(r'data-slice="beta">(.*?)</details>', text)
    assert beta is not None and "alpha-003" not in beta.group(1) and "beta-001" in beta.group(1)


def test_latency_distributions_of_both_sides_and_the_signature() -> None:
    decision = sample_decision()
    status = EvalgateSignatureStatus("signed", keyid="k" * 64, envelope="decision.dsse.json")
    text = evalgate_html(decision, EvalgateReportContext(status))
    page = _parse(text)
    for metric in ("ttft", "tpot", "itl", "e2e"):
        for side in ("candidate", "baseline"):
            row = _text(page, "data-metric", metric)
            assert metric in row
            assert ("data-side", side) in page.texts
    assert "latency distributions of candidate and baseline" in text  # the box-plot SVG
    assert "30.3 ms" in _text(page, "data-metric", "ttft")
    assert _text(page, "data-signature", "signed").startswith("signature: signed: DSSE envelope")
    assert ("data-signature", "unsigned") in _parse(evalgate_html(decision)).texts


def test_inline_figures_scale_with_the_page() -> None:
    text = evalgate_html(sample_decision())
    roots = re.findall(r"<svg\b[^>]*>", text)
    assert len(roots) == 2  # forest plot and latency distributions
    for root in roots:
        assert "viewBox=" in root and " width=" not in root and " height=" not in root
    assert "<text" in text  # figure text is text (searchable, and the reader's own font)
    no_perf = sample_decision()
    no_perf["perf"] = {}
    assert len(re.findall(r"<svg\b", evalgate_html(no_perf))) == 1


def test_text_is_escaped() -> None:
    decision = sample_decision()
    decision["suite"] = "<script>alert(1)</script>"
    decision["flipped"]["cases"][0]["case_id"] = 'x"><img src=y>'
    text = evalgate_html(decision)
    assert "<script>alert(1)" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "<img" not in text


def test_case_text_only_when_asked() -> None:
    decision = sample_decision()
    texts = {"alpha-003": {"input": "What is <3+3>?", "target": "6", "candidate": "6",
                           "baseline": "five"}}  # fmt: skip
    assert "What is" not in evalgate_html(decision)
    text = evalgate_html(decision, EvalgateReportContext(texts=texts))
    assert "What is &lt;3+3&gt;?" in text and 'data-case="alpha-003"' in text


def test_facts_and_changes_sections() -> None:
    decision = with_facts(sample_decision())
    previous = copy.deepcopy(decision)
    previous["definition_parts"]["prompt.revision"] = "prompt-v0"
    page = _parse(evalgate_html(decision, EvalgateReportContext(previous=previous, searched=True)))
    ids = {attrs.get("id") for _tag, attrs in page.tags}
    assert {"judge", "sandbox", "changes", "slices", "rules", "forest", "latency"} <= ids
    assert "changed" in _text(page, "data-change", "definition.prompt.revision")
    assert "same" in _text(page, "data-change", "tokenizer")
    assert "changed" in _text(page, "data-change", "weights_digest")


# --------------------------------------------------------------------------- in a browser


@pytest.fixture(scope="module")
def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        pytest.skip(
            "Debian chromium is not installed (scripts/_venv.sh installs it with apt-get when "
            "run as root; elsewhere: apt-get install chromium)"
        )
    return found


def _browser(chromium: str, tmp: Path, *args: str) -> str:
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    argv = [chromium, *_CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def _measure(chromium: str, tmp: Path, page: Path, width: int) -> dict[str, int]:
    """Load ``page`` in an iframe ``width`` px wide; the wrapper reads the page's scroll and
    client widths (same origin under --allow-file-access-from-files) and writes them into its
    own DOM, which --dump-dom prints."""
    wrapper = tmp / f"wrapper-{width}.html"
    wrapper.write_text(
        '<!DOCTYPE html><html><body style="margin:0">'
        f'<iframe id="f" src="{page.as_uri()}" style="width:{width}px;height:900px;border:0">'
        "</iframe><script>document.getElementById('f').addEventListener('load', function () {"
        "var d = this.contentDocument, e = d.documentElement;"
        "document.body.setAttribute('data-measured', JSON.stringify({"
        "html_scroll: e.scrollWidth, html_client: e.clientWidth, body_scroll: d.body.scrollWidth,"
        "body_client: d.body.clientWidth, viewport: this.contentWindow.innerWidth}));});"
        "</script></body></html>"
    )
    dom = _browser(
        chromium, tmp, "--allow-file-access-from-files", "--window-size=800,900",
        "--virtual-time-budget=5000", "--dump-dom", wrapper.as_uri(),
    )  # fmt: skip
    found = re.search(r"data-measured=\"([^\"]*)\"", dom)
    assert found is not None, dom[-500:]
    return json.loads(found.group(1).replace("&quot;", '"'))  # type: ignore[no-any-return]


def _scrolls_sideways(measured: dict[str, int]) -> bool:
    return (
        measured["html_scroll"] > measured["html_client"]
        or measured["body_scroll"] > measured["body_client"]
    )


def _real_report(pytester: pytest.Pytester) -> Path:
    """A report folder of a real gated run: several slices, paired, floor and error rules."""
    policy = {
        "version": "html-v1",
        "bootstrap": {"resamples": 500, "seed": 0},
        "rules": [
            {"slice": "all", "rule": "non_inferior", "margin": 0.1},
            {"slice": "*", "rule": "no_regression"},
            {"slice": "gamma", "rule": "floor", "max_rate": 0.5},
            {"metric": "error_rate", "rule": "max_delta", "max_delta": 0.05},
        ],
    }
    write_suite(
        pytester.path / "suite",
        {"candidate": "simulated://?accuracy=0.9&seed=3",
         "baseline": "simulated://?accuracy=0.8&seed=4"},
        cases=make_cases(["alpha", "beta", "gamma"], 12), policy=policy,
    )  # fmt: skip
    result = pytester.runpytest("--evalgate", "suite", "-p", "no:cacheprovider", "-q",
                                "--evalgate-report=rep")  # fmt: skip
    decision = json.loads((pytester.path / "rep" / "decision.json").read_text())
    assert result.ret == evalgate_decision_exit(decision), result.stdout.str()[-3000:]
    return pytester.path / "rep"


def test_the_rendered_dom_shows_every_rule_and_slice_of_the_decision(
    pytester: pytest.Pytester, chromium: str, tmp_path: Path
) -> None:
    folder = _real_report(pytester)
    decision: dict[str, Any] = json.loads((folder / "decision.json").read_text())
    assert len(decision["rules"]) >= 5
    page = folder / "report.html"
    shot = tmp_path / "report-wide.png"
    _browser(chromium, tmp_path, "--window-size=1280,2400", f"--screenshot={shot}", page.as_uri())
    assert _png_size(shot) == (1280, 2400) and shot.stat().st_size > 20_000
    dom = _parse(_browser(chromium, tmp_path, "--virtual-time-budget=3000", "--dump-dom",
                          page.as_uri()))  # fmt: skip
    for rule in decision["rules"]:
        row = _text(dom, "data-rule", rule["name"])
        numbers = [evalgate_num(rule["estimate"]), evalgate_threshold_text(rule),
                   evalgate_interval(rule["lo"], rule["hi"])]  # fmt: skip
        assert all(number in row for number in numbers), (rule["name"], row)
    for name, entry in decision["slices"].items():
        row = _text(dom, "data-slice", name)
        assert f"n {entry['n_cases']}" in row, (name, row)
        for side in ("baseline", "candidate"):
            assert evalgate_rate(decision["rates"][side][name]) in row, (name, side, row)
    assert _text(dom, "data-verdict", decision["verdict"]).startswith("Release gate")


def test_no_sideways_scrolling_on_a_phone(
    pytester: pytest.Pytester, chromium: str, tmp_path: Path
) -> None:
    folder = _real_report(pytester)
    page = folder / "report.html"
    narrow = _measure(chromium, tmp_path, page, 375)
    assert narrow["viewport"] == 375
    assert not _scrolls_sideways(narrow), narrow
    # the check can fail: the same page with one element wider than the phone scrolls
    wide = tmp_path / "too-wide.html"
    wide.write_text(page.read_text().replace("<main>", '<main><div style="width:640px">x</div>'))
    assert _scrolls_sideways(_measure(chromium, tmp_path, wide, 375))
    # a screenshot of the phone view, for people (iframe 375 px wide in a 500 px window)
    wrapper = tmp_path / "phone.html"
    wrapper.write_text(
        f'<!DOCTYPE html><html><body style="margin:0"><iframe src="{page.as_uri()}" '
        'style="width:375px;height:2400px;border:0"></iframe></body></html>'
    )
    shot = tmp_path / "report-375.png"
    _browser(chromium, tmp_path, "--allow-file-access-from-files", "--window-size=500,2400",
             f"--screenshot={shot}", wrapper.as_uri())  # fmt: skip
    assert _png_size(shot) == (500, 2400) and shot.stat().st_size > 20_000


def test_a_failing_decision_renders_too(chromium: str, tmp_path: Path) -> None:
    folder = tmp_path / "rep"
    evalgate_write_report(str(folder), with_facts(failing_decision()))
    dom = _parse(_browser(chromium, tmp_path, "--dump-dom", (folder / "report.html").as_uri()))
    assert "FAIL" in _text(dom, "data-rule", "non_inferior[alpha]")
    assert _text(dom, "data-verdict", "fail").startswith("Release gate")
    assert not _scrolls_sideways(_measure(chromium, tmp_path, folder / "report.html", 375))
