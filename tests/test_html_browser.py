"""The --html reports and the --svg picture in a real browser: headless Chromium (the Debian package
`chromium`), driven over the DevTools protocol on a pipe by tests/browser.py (stdlib only, so no
Python browser library to install and pin: the browser is the one dependency).

Each page is opened at 1280×900 and must: make no request but its own file (every request the
page starts is recorded, and nothing may have been refused by its Content-Security-Policy either),
not overflow horizontally (the document no wider than 1280 px, and no table scrolling inside its
box), carry its title, sort a table on a header click, and give a full-page screenshot. Negative
controls show that the checks catch a page that fetches and a page that overflows.

Skipped, saying why, only when no Chromium is installed; `.ci/run` installs it and sets
SHAPECALC_REQUIRE_BROWSER=1, which turns that skip into a failure.
"""

from __future__ import annotations

import os
import struct

import pytest
from browser import Browser, find_chromium

EXE = find_chromium()
if EXE is None:
    if os.environ.get("SHAPECALC_REQUIRE_BROWSER"):
        raise RuntimeError("SHAPECALC_REQUIRE_BROWSER is set but no chromium is installed "
                           "(apt-get install -y chromium)")
    pytest.skip("no Chromium on PATH (Debian: apt-get install -y chromium); .ci/run installs it",
                allow_module_level=True)

WIDTH = 1280


@pytest.fixture(scope="module")
def browser():
    b = Browser(EXE)
    yield b
    b.close()


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    w, h = struct.unpack(">II", data[16:24])
    return w, h


def check_page(browser, path, title: str | None, shots) -> object:
    """Open `path` at 1280 px and assert the contract; returns the page (open) for more checks."""
    url = path.resolve().as_uri()
    page = browser.load(url, WIDTH)
    assert page.requests() == [url]
    assert page.blocked() == []
    scroll, client = page.evaluate("[document.documentElement.scrollWidth,"
                                   "document.documentElement.clientWidth]")
    assert client == WIDTH and scroll <= WIDTH, (path.name, scroll)
    # a table may not hide its overflow in a scrolling box either
    boxes = page.evaluate("Array.from(document.querySelectorAll('.wrap'))"
                          ".map(function(e){return [e.scrollWidth, e.clientWidth]})")
    assert all(s <= c for s, c in boxes), (path.name, boxes)
    if title is not None:
        assert page.evaluate("document.title") == title
    png = page.screenshot()
    height = page.evaluate("document.documentElement.scrollHeight")
    assert png_size(png) == (WIDTH, height) and len(png) > 20_000
    shots.joinpath(path.name + ".png").write_bytes(png)
    return page


@pytest.fixture
def shots(tmp_path):
    return tmp_path


def test_trace_report_in_chromium(cli, browser, tmp_path, shots):
    """The widest trace: gemma3 (two layer kinds) with one rank's stages as well; the FLOPs
    column sorts by its exact values, both ways; "copy as TSV" copies exact values."""
    html, svg = tmp_path / "trace.html", tmp_path / "trace.svg"
    r = cli("trace", "--preset", "gemma3-27b", "--tp", "4", "--per-rank", "--html", str(html),
            "--svg", str(svg))
    assert r.code == 0, r.err
    doc = cli("trace", "--preset", "gemma3-27b", "--tp", "4", "--json").json()
    page = check_page(browser, html, "gemma3-27b: prefill, B=1, T=2048", shots)
    flops = "Array.from(document.querySelectorAll('#stages tbody tr')).map(function(r){" \
            "return r.cells[5].dataset.v})"
    before = [int(v) for v in page.evaluate(flops)]
    page.evaluate("document.querySelector('#stages thead th:nth-child(6)').click()")
    assert [int(v) for v in page.evaluate(flops)] == sorted(before)
    page.evaluate("document.querySelector('#stages thead th:nth-child(6)').click()")
    assert [int(v) for v in page.evaluate(flops)] == sorted(before, reverse=True)
    assert page.evaluate("document.querySelectorAll('svg.chart').length") == 3
    # "copy as TSV" copies the exact values (the clipboard is stubbed: headless has none)
    copied = page.evaluate(
        "new Promise(function(r){Object.defineProperty(navigator,'clipboard',{configurable:true,"
        "value:{writeText:function(t){r(t);return Promise.resolve()}}});"
        "document.querySelector('button[data-table=totals]').click()})")
    lines = [x.split("\t") for x in copied.split("\n")]
    assert lines[0] == ["key", "value", "", "meaning"]
    assert dict((x[0], x[1]) for x in lines[1:])["totals.params"] == str(doc["totals"]["params"])
    page.close()
    # the SVG picture: no font or anything else fetched (rich's own fetched Fira Code from a CDN)
    page = check_page(browser, svg, None, shots)
    page.close()


def test_plan_reports_in_chromium(cli, browser, tmp_path, shots):
    """fit, a compare of 8 columns and a sweep of 22 columns all fit 1280 px."""
    fit, cmp, swp = tmp_path / "fit.html", tmp_path / "compare.html", tmp_path / "sweep.html"
    r = cli("fit", "deepseek-v3", "--gpu", "H200", "--tp", "8", "--html", str(fit))
    assert r.code in (0, 1), r.err
    assert cli("compare", "llama3-70b", "llama3-8b", "--tp", "1,2,4,8", "--seq", "4096",
               "--gpu", "H100-SXM", "--html", str(cmp)).code == 0
    r = cli("sweep", "deepseek-v2-lite", "--batch", "1..256x2", "--seq", "1024,8192", "--tp",
            "1,2", "--gpu", "H100-SXM", "--html", str(swp), "--output", str(tmp_path / "s.csv"))
    assert r.code == 0, r.err
    for path in (fit, cmp, swp):
        check_page(browser, path, None, shots).close()


def test_the_checks_can_fail(browser, tmp_path, shots):
    """Negative controls: requests to elsewhere are recorded, with and without a CSP (blocked
    then), and a page wider than the window is caught."""
    fetching = tmp_path / "fetching.html"
    fetching.write_text(
        "<!DOCTYPE html><html><head><title>x</title>"
        '<link rel="stylesheet" href="http://127.0.0.1:9/x.css">'
        "<style>@font-face{font-family:F;src:url(http://127.0.0.1:9/f.woff2)}"
        "body{font-family:F}</style></head><body>text</body></html>")
    page = browser.load(fetching.as_uri(), WIDTH)
    urls = page.requests()
    assert "http://127.0.0.1:9/x.css" in urls and "http://127.0.0.1:9/f.woff2" in urls
    page.close()
    csp = tmp_path / "csp.html"
    csp.write_text(
        "<!DOCTYPE html><html><head><meta http-equiv=\"Content-Security-Policy\" "
        "content=\"default-src 'none'\"><title>x</title>"
        '<link rel="stylesheet" href="http://127.0.0.1:9/x.css"></head><body></body></html>')
    page = browser.load(csp.as_uri(), WIDTH)
    assert page.blocked() == ["http://127.0.0.1:9/x.css"]
    page.close()
    wide = tmp_path / "wide.html"
    wide.write_text("<!DOCTYPE html><title>w</title><table><tr><td style=\"white-space:nowrap\">"
                    + "wide " * 400 + "</td></tr></table>")
    with pytest.raises(AssertionError, match=r"wide\.html"):
        check_page(browser, wide, None, shots)
