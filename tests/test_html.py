"""`--html` reports and `--svg` pictures, read back with html.parser and against `--json`.

The report must be a document of its own: a <title>, real tables whose cells hold the numbers of
the JSON (exact values in data-v), the charts inline, and nothing that points outside the file.
The SVG must fetch no font and be as wide as its content. Writing: every path checked before
anything is written, files replaced whole. (tests/test_html_browser.py renders the reports.)
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from shapecalc.render.console import svg_text


class Doc(HTMLParser):
    """What a test reads of a page: the title, each table's rows (cells as (text, attrs)),
    every tag's attributes, and the text of <style> and <script> elements."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.title = ""
        self.tables: dict[str, list[list[tuple[str, dict[str, str | None]]]]] = {}
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.styles: list[str] = []
        self.scripts: list[str] = []
        self._in: list[str] = []
        self._table: str | None = None
        self._section = ""  # thead or tbody
        self._cell: list[str] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "title" and any(t == "body" for t, _ in self.tags):
            self._in.append("svg-title")  # a chart's <title>: not the page's
        elif tag in ("title", "style", "script"):
            self._in.append(tag)
            if tag in ("style", "script"):
                (self.styles if tag == "style" else self.scripts).append("")
        elif tag == "table":
            self._table = a.get("id") or f"table{len(self.tables)}"
            self.tables[self._table] = []
        elif tag in ("thead", "tbody"):
            self._section = tag
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []
            self._attrs = a

    def handle_endtag(self, tag):
        if self._in and tag == self._in[-1].replace("svg-", ""):
            self._in.pop()
        elif tag in ("td", "th") and self._cell is not None and self._table:
            self.tables[self._table][-1].append(("".join(self._cell).strip(), self._attrs))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._in and self._in[-1] == "title":
            self.title += data
        elif self._in and self._in[-1] == "style":
            self.styles[-1] += data
        elif self._in and self._in[-1] == "script":
            self.scripts[-1] += data
        elif self._cell is not None:
            self._cell.append(data)

    def body(self, table: str) -> list[list[tuple[str, dict[str, str | None]]]]:
        return self.tables[table][1:]  # the header row first

    def header(self, table: str) -> list[str]:
        return [t for t, _ in self.tables[table][0]]


def assert_self_contained(text: str, doc: Doc) -> None:
    """Nothing the page would fetch: no src/href/srcset/poster/data attribute, no <link>,
    <iframe>, <object>, <embed> or <img>, no url( or @import in its style, no http(s) anywhere but
    the SVG namespace name (an identifier, never fetched)."""
    for tag, attrs in doc.tags:
        assert tag not in ("link", "iframe", "object", "embed", "img", "base", "audio",
                           "video"), tag
        for k in ("src", "href", "srcset", "poster", "data", "action", "xlink:href"):
            assert k not in attrs, (tag, attrs)
    for style in doc.styles:
        assert "url(" not in style and "@import" not in style
    for script in doc.scripts:
        assert "fetch(" not in script and "XMLHttpRequest" not in script
    ids = [a["id"] for _, a in doc.tags if a.get("id")]
    assert len(ids) == len(set(ids)), ids  # "copy as TSV" finds its table by id
    tables = {a.get("id") for t, a in doc.tags if t == "table"}
    assert all(a["data-table"] in tables for t, a in doc.tags if t == "button")
    urls = re.findall(r"https?://[^\s\"'<>]+", text)
    assert set(urls) <= {"http://www.w3.org/2000/svg"}, urls


@pytest.fixture
def report(cli, tmp_path):
    """`report(*args)`: run a command with --html, return (its text, its parse)."""

    def run(*args):
        path = tmp_path / "r.html"
        r = cli(*args, "--html", str(path))
        assert r.code in (0, 1), r.err  # fit's exit code 1: does not fit
        text = path.read_text(encoding="utf-8")
        return text, Doc(text)

    return run


def _num(cell):
    return int(cell[1]["data-v"])


# -- trace -----------------------------------------------------------------------------------------
def test_trace_report_is_the_json(cli, report):
    """Title, every stage a row in order with its name, shape, formula and exact FLOPs, params and
    bytes; every int of the totals and ledgers with its exact value; the JSON embedded intact."""
    args = ("trace", "--preset", "llama3-8b", "--seq", "512", "--tp", "2")
    doc = cli(*args, "--json").json()
    text, page = report(*args)
    assert page.title == "llama3-8b: prefill, B=1, T=512"
    assert text.startswith("<!DOCTYPE html>") and '<html lang="en">' in text
    assert page.header("stages") == ["#", "part", "stage", "shape", "FLOPs formula", "FLOPs",
                                     "params", "bytes", "dtype", "note"]
    rows = page.body("stages")
    assert len(rows) == len(doc["stages"]) == 38
    for row, s in zip(rows, doc["stages"], strict=True):
        assert row[2][0] == s["name"]
        assert row[3][0] == f"[{','.join(s['dims'])}] = [{','.join(map(str, s['shape']))}]"
        assert _num(row[5]) == (s["flops"] or s["elementwise_flops"])
        if s["flops"]:
            assert row[4][0] == s["flops_formula"]
        assert _num(row[6]) == s["params"] and _num(row[7]) == s["bytes"]
        assert row[1][0] == ("block × 32" if s["group"] == "block" else s["group"])
    qk = next(r for r in rows if r[2][0] == "QKᵀ")
    assert qk[4][0] == "2·B·H·T²·Dh" and _num(qk[5]) == 2 * 1 * 32 * 512 * 512 * 128
    ledger = {r[0][0]: r[1] for r in page.body("totals")}
    assert _num(ledger["totals.params"]) == doc["totals"]["params"] == 8_030_261_248
    assert _num(ledger["totals.flops"]) == doc["totals"]["flops"]
    assert _num(ledger["parallel.tp.allreduce_bytes_total"]) == \
        doc["parallel"]["tp"]["allreduce_bytes_total"] == 2 * 32 * 512 * 4096 * 2
    for key in ("kv_cache_bytes", "weight_bytes", "kv_cache_paged_bytes", "elementwise_flops"):
        assert _num(ledger[f"totals.{key}"]) == doc["totals"][key]
    params = {r[0][0]: _num(r[1]) for r in page.body("params")}
    assert params["total"] == doc["totals"]["params"]
    assert sum(v for k, v in params.items() if k != "total") == params["total"]
    blob = text.split('id="shapecalc-data">', 1)[1].split("</script>", 1)[0]
    assert json.loads(blob) == doc
    assert_self_contained(text, page)


def test_trace_charts_are_inline_svg_of_the_breakdowns(cli, report):
    """The memory bar and the FLOP and parameter charts: inline <svg>s whose bars carry the
    exact numbers of the JSON, and whose widths are their shares."""
    args = ("trace", "--preset", "llama3-8b", "--seq", "512")
    doc = cli(*args, "--json").json()
    text, _ = report(*args)
    svgs = re.findall(r"<svg class=\"chart\".*?</svg>", text, re.S)
    assert len(svgs) == 3
    titles = [re.search(r"<title>(.*?)</title>", s).group(1) for s in svgs]
    assert titles[0].startswith("where one device&#x27;s memory goes")
    assert titles[1:] == ["where FLOPs go", "where parameters go"]
    fb = doc["totals"]["flops_breakdown"]
    bars = dict(re.findall(r"<title>([^<:]+): (\d+)</title></rect>", svgs[1]))
    assert {k: int(v) for k, v in bars.items()} == {  # the parts with FLOPs
        **{k.replace("_", " "): v for k, v in fb.items() if v},
        "elementwise (apart)": doc["totals"]["elementwise_flops"]}
    widths = {k: float(w) for w, k in re.findall(
        r'width="([\d.]+)" height="16"><title>([^<:]+):', svgs[1])}
    total = sum(fb.values()) + doc["totals"]["elementwise_flops"]
    assert widths["ffn"] == pytest.approx(260 * fb["ffn"] / total, abs=0.06)
    tp = doc["parallel"]["tp"]
    mem = dict(re.findall(r"<title>([^<:]+): ([\d,]+) B</title>", svgs[0]))
    assert {k: int(v.replace(",", "")) for k, v in mem.items()} == {
        "weights": tp["weight_bytes_per_rank"], "KV cache": tp["kv_cache_bytes_per_rank"],
        "largest activation": tp["largest_activation_bytes_per_rank"]}
    params = dict(re.findall(r"<title>([^<:]+): (\d+)</title></rect>", svgs[2]))
    assert sum(int(v) for v in params.values()) == doc["totals"]["params"]


def test_trace_per_rank_and_layer_kinds(cli, report):
    """gemma3 (sliding and full layers) at tp=4 with --per-rank: each kind names its part, and
    one rank's stages are a table of their own."""
    args = ("trace", "--preset", "gemma3-1b", "--seq", "256", "--tp", "4", "--per-rank")
    doc = cli(*args, "--json").json()
    text, page = report(*args)
    rows = page.body("rank-stages")
    assert len(rows) == len(doc["rank_stages"])
    assert [_num(r[5]) for r in rows] == [s["flops"] or s["elementwise_flops"]
                                          for s in doc["rank_stages"]]
    parts = {r[1][0] for r in page.body("stages")}
    kinds = doc["layers"]["kinds"]
    assert len(kinds) == 2
    assert {f"block × {k['count']}: {k['label']}" for k in kinds} <= parts
    assert_self_contained(text, page)


def test_names_are_escaped(report, tmp_path):
    """A model name with markup is text in the page, never markup."""
    name = "<script>alert(1)</script> & \"q\" <img src=x>"
    cfg = tmp_path / "m.toml"
    cfg.write_text(f"name = {json.dumps(name)}\n" + Path("presets/models/gpt2.toml").read_text()
                   .split("[published]")[0])
    text, page = report("trace", "--config", str(cfg), "--seq", "16")
    assert page.title == f"{name}: prefill, B=1, T=16"
    assert "<script>alert" not in text and "<img" not in text
    assert [t for t, _ in page.tags].count("script") == 2  # the data and the sorting script
    assert_self_contained(text, page)


# -- fit, compare, sweep ---------------------------------------------------------------------------
def test_fit_report(cli, report):
    args = ("fit", "llama3-70b", "--gpu", "H100-SXM", "--tp", "2", "--seq", "4096")
    doc = cli(*args, "--json").json()
    text, page = report(*args)
    assert page.title == f"llama3-70b on H100-SXM: {doc['verdict']}"
    mem = {r[0][0]: _num(r[1]) for r in page.body("memory")}
    # the mixers' states get a row only in a model that has them
    assert mem == {k.replace("_", " "): v for k, v in doc["memory_per_rank"].items()
                   if k != "state_cache" or v}
    assert mem["total"] == sum(mem[k] for k in ("weights", "kv cache", "activations", "reserve"))
    keys = {r[0][0] for r in page.body("keys")}
    from shapecalc.render.plan import fit_flat

    assert keys == {k for k, _ in fit_flat(doc)}
    bar = re.search(r"<svg class=\"chart\".*?</svg>", text, re.S).group(0)
    assert "free: " in bar and "of capacity" in bar
    answers = {r[0][0]: r[1] for r in page.body("answers")}
    assert _num(answers["largest batch"]) == doc["max_batch"]
    assert _num(answers["KV tokens that fit"]) == doc["kv_tokens_fit"]
    assert_self_contained(text, page)


def test_fit_over_capacity(report):
    """A model that does not fit: the verdict and an over-capacity line in the bar."""
    text, page = report("fit", "llama3-70b", "--gpu", "L40S", "--seq", "4096")
    assert page.title.endswith("does not fit (memory)")
    assert 'class="cap"' in text and "over capacity" in text


def test_compare_report(cli, report):
    args = ("compare", "llama3-8b", "gpt2", "--seq", "512", "--tp", "1,2")
    items = cli(*args, "--json").json()
    text, page = report(*args)
    assert page.title == "compare: llama3-8b@tp=1, llama3-8b@tp=2, gpt2@tp=1, gpt2@tp=2"
    assert len(page.header("compare")) == 1 + len(items) == 5
    rows = {r[0][0]: r[1:] for r in page.body("compare")}
    assert [_num(c) for c in rows["params"]] == [it["totals"]["params"] for it in items]
    weights = [_num(c) for c in rows["weights / rank"]]
    assert weights == [it["parallel"]["tp"]["weight_bytes_per_rank"] for it in items]
    best = [i for i, c in enumerate(rows["weights / rank"]) if "best" in (c[1]["class"] or "")]
    assert best == [weights.index(min(weights))]
    assert_self_contained(text, page)


def test_sweep_report(cli, report, tmp_path):
    args = ("sweep", "llama3-8b", "--batch", "1..8x2", "--seq", "512,1024", "--gpu", "H100-SXM")
    points = [json.loads(x) for x in cli(*args).out.splitlines()]
    text, page = report(*args, "--output", str(tmp_path / "s.jsonl"))
    rows = page.body("sweep")
    assert len(rows) == len(points) == 8
    head = page.header("sweep")
    assert head[:3] == ["model", "batch", "seq"] and "expected_tokens_per_s" in head
    for row, p in zip(rows, points, strict=True):
        cells = dict(zip(head, row, strict=True))
        assert _num(cells["flops"]) == p["flops"] and _num(cells["batch"]) == p["batch"]
        assert float(cells["ttft_s"][1]["data-v"]) == p["ttft_s"]
    assert 'class="sortable wide"' in text
    assert_self_contained(text, page)


# -- SVG -------------------------------------------------------------------------------------------
def _svg_cols(svg: str) -> int:
    """The columns of a rich SVG: its width back through rich's layout (12.2 px a column)."""
    from rich.console import Console

    width = float(re.search(r'viewBox="0 0 ([\d.]+) ', svg).group(1))
    for cols in range(1, 400):
        c = Console(width=cols, record=True, file=None)
        w = float(re.search(r'viewBox="0 0 ([\d.]+) ', c.export_svg()).group(1))
        if w == width:
            return cols
    raise AssertionError(width)


def test_svg_is_offline_and_as_wide_as_its_content(cli, tmp_path):
    """No @font-face or url(): nothing fetched. The picture is exactly as wide as the widest line
    of the same table printed as text (rich's own export was the full console width)."""
    svg, txt = tmp_path / "t.svg", tmp_path / "t.txt"
    r = cli("trace", "--preset", "llama3-8b", "--svg", str(svg), "--output", str(txt))
    assert r.code == 0, r.err
    text = svg.read_text()
    assert text.startswith("<svg") and "@font-face" not in text
    assert not re.search(r"url\((?!#)", text)  # only the picture's own clip paths
    assert "cdnjs" not in text and "monospace" in text
    widest = max(len(line.rstrip()) for line in txt.read_text().splitlines())
    assert 150 < widest < 200
    assert _svg_cols(text) == widest


def test_svg_text_width():
    def draw(console):
        console.print("x" * 37)
        console.print("y" * 5)

    assert _svg_cols(svg_text(draw)) == 37
    assert _svg_cols(svg_text(lambda c: c.print("z"))) == len("shapecalc") + 12  # the title fits


# -- writing ---------------------------------------------------------------------------------------
def _one_line(r, field):
    assert r.code == 2 and "Traceback" not in r.err, (r.code, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], r.err
    return lines[0]


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_bad_export_path_writes_nothing(cli, tmp_path, fmt):
    """An --html or --svg that cannot be written is refused before --output is touched."""
    keep = tmp_path / "keep.txt"
    keep.write_text("mine\n")
    (tmp_path / "adir").mkdir()
    for flag, path in (("--html", tmp_path / "missing" / "x.html"),
                       ("--svg", tmp_path / "missing" / "x.svg"),
                       ("--html", tmp_path / "adir"), ("--html", "")):
        r = cli("trace", "--format", fmt, "--output", str(keep), flag, str(path))
        _one_line(r, flag[2:])
        assert keep.read_text() == "mine\n" and r.out == ""
    r = cli("trace", "--format", fmt, "--output", str(keep), "--html", str(keep))
    assert "also the --output" in _one_line(r, "html") and keep.read_text() == "mine\n"
    r = cli("trace", "--svg", str(tmp_path / "a"), "--html", str(tmp_path / "a"))
    assert "also the --svg" in _one_line(r, "html") and not (tmp_path / "a").exists()


def test_export_replaces_whole(cli, tmp_path):
    """An existing report is replaced (its permissions kept), no temporary file left behind."""
    path = tmp_path / "r.html"
    path.write_text("old")
    path.chmod(0o640)
    r = cli("trace", "--json", "--html", str(path))
    assert r.code == 0 and json.loads(r.out)["model"]["name"] == "seed-tiny"
    assert path.read_text().startswith("<!DOCTYPE html>") and path.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]
