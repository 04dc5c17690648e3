"""Charts for planning (issue 12, defect 10): `--chart` bars in the terminal and `--plot FILE.png
|.svg` (matplotlib, optional) in sweep and compare. The bars show the values the --json rows
hold, against the swept axis, one series per case; a bad request exits 2 in one line before any
output; matplotlib is not imported on the start-up path."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SWEEP = ("sweep", "llama3-8b", "--batch", "1,4,16,64", "--seq", "512,4096", "--gpu", "h100-sxm")
COMPARE = ("compare", "llama3-8b", "llama3-70b@tp=4", "--batch", "1,8,32", "--gpu", "h100-sxm")


def bars(out: str) -> dict[str, list[tuple[int, float, str]]]:
    """The chart's series: label → [(x, bar length in cells, value text)]."""
    chart = out[out.index("against"):]
    series: dict[str, list[tuple[int, float, str]]] = {}
    label = ""
    for line in chart.split("\n")[1:]:
        m = re.match(r"^  (?:batch|seq) ([\d,]+) +([█▏▎▍▌▋▊▉]*) +(\S.*)$", line)
        if m:
            cells = m.group(2)
            part = "▏▎▍▌▋▊▉".find(cells[-1]) + 1 if cells else 0  # eighths of a cell
            length = cells.count("█") + part / 8
            series[label].append((int(m.group(1).replace(",", "")), length, m.group(3)))
        elif line.strip():
            label = line.strip()
            series[label] = []
    return series


def rate(x: float) -> str:
    return f"{x:,.1f}"


def test_sweep_chart_shows_the_json_values(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    r = cli(*SWEEP, "--format", "table", "--chart")
    assert r.code == 0, r.err
    assert "tokens/s, expected (calibrated model) against batch" in r.out
    rows = [json.loads(x) for x in cli(*SWEEP).out.splitlines()]
    got = bars(r.out)
    assert list(got) == ["llama3-8b · seq 512", "llama3-8b · seq 4,096"]
    top = max(row["expected_tokens_per_s"] for row in rows)
    longest = max(length for s in got.values() for _, length, _ in s)
    for label, points in got.items():
        seq = int(label.rsplit(" ", 1)[1].replace(",", ""))
        want = sorted((row["batch"], row["expected_tokens_per_s"]) for row in rows
                      if row["seq"] == seq)
        assert [x for x, _, _ in points] == [b for b, _ in want]
        for (_, length, text), (_, y) in zip(points, want, strict=True):
            assert text == rate(y)
            assert abs(length - y / top * longest) <= 1 / 8 + 1e-9  # bars to scale


def test_compare_chart_one_series_per_case(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    r = cli(*COMPARE, "--chart", "--chart-y", "mem_total")
    assert r.code == 0, r.err
    items = json.loads(cli(*COMPARE, "--json").out)
    got = bars(r.out)
    assert list(got) == ["llama3-8b · tp 1", "llama3-70b · tp 4"]
    for label, points in got.items():
        case = label.split(" · ")[0]
        want = [(it["workload"]["batch"], it["fit"]["memory_per_rank"]["total"]) for it in items
                if it["case"].split("@")[0] == case]
        assert [x for x, _, _ in points] == [1, 8, 32]
        assert [t for _, _, t in points] == [f"{b / 2**30:.2f} GiB" for _, b in want]


def test_chart_with_rows_in_a_file(cli, monkeypatch, tmp_path):
    """The rows go to --output, the bars alone to stdout."""
    out = tmp_path / "rows.csv"
    monkeypatch.setenv("COLUMNS", "80")
    r = cli(*SWEEP, "--format", "csv", "-o", str(out), "--chart", "--chart-y",
            "kv_cache_bytes_per_rank")
    assert r.code == 0, r.err
    assert r.out.startswith("KV cache per rank against batch")
    assert out.read_text().startswith("case,")
    assert all(len(line) <= 80 for line in r.out.split("\n"))


@pytest.mark.parametrize("args,field", [
    ((*SWEEP, "--chart"), "chart"),  # the bars would land in the JSON Lines on stdout
    (("sweep", "llama3-8b", "--format", "table", "--chart"), "chart"),  # nothing swept
    (("compare", "llama3-8b", "--batch", "1,8", "--chart", "--chart-y", "mem_total"), "chart-y"),
    ((*COMPARE, "--chart", "--chart-y", "watts"), "chart-y"),
    ((*COMPARE, "--plot", "chart.pdf"), "plot"),
    ((*COMPARE, "--plot", "no/such/folder/chart.png"), "plot"),
    ((*COMPARE, "--format", "csv", "-o", "c.svg", "--plot", "c.svg"), "plot"),  # one file twice
])
def test_bad_chart_requests(cli, args, field, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = cli(*args)
    assert r.code == 2
    assert r.out == ""  # refused before any output
    assert r.err.startswith(f"error: {field}:") and r.err.count("\n") == 1, r.err
    assert "Traceback" not in r.err
    assert list(tmp_path.iterdir()) == []


def test_plot_without_matplotlib(cli, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails, as when not installed
    r = cli(*COMPARE, "--plot", str(tmp_path / "c.png"))
    assert r.code == 2 and r.out == ""
    assert r.err == "error: plot: writing a PNG or SVG needs matplotlib: pip install " \
        "'shapecalc[plot]'\n"
    assert not (tmp_path / "c.png").exists()


def test_startup_does_not_import_matplotlib():
    code = ("import sys; from shapecalc.cli import app, plan; from shapecalc.render import chart; "
            "assert 'matplotlib' not in sys.modules, 'matplotlib imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def need_matplotlib() -> None:
    """Skip where matplotlib (the optional `.[plot]` extra) is missing, except in CI: .ci/run sets
    SHAPECALC_REQUIRE_PLOT=1 (`.[test]` installs matplotlib), so CI cannot skip these."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if os.environ.get("SHAPECALC_REQUIRE_PLOT"):
            pytest.fail("SHAPECALC_REQUIRE_PLOT is set but matplotlib is not installed "
                        "(pip install -e '.[test]')")
        pytest.skip("no matplotlib (pip install -e '.[plot]'); CI installs it with .[test]")


def test_require_plot_fails_instead_of_skipping(monkeypatch):
    """In CI a missing matplotlib is a failure, not a skip (the check the plot tests rely on)."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails, as when not installed
    monkeypatch.setenv("SHAPECALC_REQUIRE_PLOT", "1")
    with pytest.raises(pytest.fail.Exception, match="SHAPECALC_REQUIRE_PLOT"):
        need_matplotlib()
    monkeypatch.delenv("SHAPECALC_REQUIRE_PLOT")
    with pytest.raises(pytest.skip.Exception):
        need_matplotlib()


def test_plot_png_and_svg(cli, tmp_path):
    need_matplotlib()
    png, svg, svg2 = tmp_path / "s.png", tmp_path / "s.svg", tmp_path / "again.svg"
    r = cli(*SWEEP, "--format", "csv", "-o", str(tmp_path / "rows.csv"), "--plot", str(png))
    assert r.code == 0 and r.out == "", r.err
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (800, 480)
    for path in (svg, svg2):
        r = cli(*COMPARE, "--plot", str(path))
        assert r.code == 0, r.err
    import xml.etree.ElementTree as ET

    root = ET.parse(svg).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    text = svg.read_text()
    assert "<image" not in text and "url(http" not in text and "@import" not in text
    assert "font-family" not in text  # glyphs as paths: no font to load
    assert svg.read_bytes() == svg2.read_bytes()  # no date: the same chart, the same bytes


def test_chart_points_are_the_json_values(cli):
    """What --plot draws: the chart's series hold the --json values exactly."""
    from shapecalc.render.chart import compare_points, make_chart

    items = json.loads(cli(*COMPARE, "--json").out)
    chart = make_chart(compare_points(items, "expected_tokens_per_s"), "expected_tokens_per_s")
    assert chart.x == "batch"
    by_case = {label.split(" · ")[0]: ys for label, _, ys in chart.series}
    for it in items:
        case = it["case"].split("@")[0]
        assert it["fit"]["expected"]["tokens_per_s"] in by_case[case]
