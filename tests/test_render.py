"""Tables at the console's width (issue 12, defect 3): at 80, 120 and 200 columns every stage's
shape, FLOPs formula, FLOPs and parameters are on screen, whole, as the --json output has them; no
line is longer than $COLUMNS, none ends in spaces, no number is cut (`…`); the other tables
(compare, sweep, fit, verify, explain, presets, hardware) likewise; and COLUMNS=20, NO_COLOR and
TERM=dumb give sane output."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len

ROOT = Path(__file__).resolve().parent.parent
WIDTHS = (80, 120, 200)
PREFIXES = ((10**18, "E"), (10**15, "P"), (10**12, "T"), (10**9, "G"), (10**6, "M"), (10**3, "k"))


def flops_text(n: int) -> str:
    """FLOPs as the tables print them (written here apart from render/units.py)."""
    for scale, p in PREFIXES:
        if n >= scale:
            return f"{n / scale:.2f} {p}FLOP"
    return f"{n} FLOP"


def run(cli, monkeypatch, width: int | None, *args: str):
    if width is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", str(width))
    r = cli(*args)
    assert r.code == 0, r.err
    return r.out


def check_lines(out: str, width: int) -> None:
    """No line longer than the width, none with trailing spaces, no number cut short."""
    for line in out.split("\n"):
        assert cell_len(line) <= width, (width, line)
        assert line == line.rstrip(), repr(line)
    assert "…" not in out


TRACES = [
    ("--preset", "llama2-7b", "--seq", "1024"),
    ("--preset", "deepseek-v3", "--seq", "128", "--phase", "decode"),  # MLA and MoE stages
    ("--preset", "gemma3-27b", "--seq", "128"),  # two kinds of layer
    ("--preset", "gpt2", "--seq", "64", "--tp", "2", "--per-rank"),  # biases, learned positions
]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("args", TRACES, ids=lambda a: a[1])
def test_trace_shows_every_stage_whole(cli, monkeypatch, width, args):
    out = run(cli, monkeypatch, width, "trace", *args)
    doc = run(cli, monkeypatch, width, "trace", *args, "--json")
    import json

    doc = json.loads(doc)
    check_lines(out, width)
    stages = doc.get("rank_stages") or doc["stages"]  # --per-rank: one rank's stages
    table = out
    pos = 0
    found = []
    for s in stages:
        # a long name may wrap at its spaces on a narrow console (under its own indent)
        name = r"(?: +| +[^\n]*\n +)".join(map(re.escape, s["name"].split()))
        m = re.compile(rf"(?m)^ +{name}(?=  | *$)").search(table, pos)
        assert m, (width, s["name"])
        found.append(m.start())
        pos = m.end()
    found.append(table.index("totals", pos))
    for s, a, b in zip(stages, found, found[1:], strict=False):
        block = table[a:b]  # this stage's lines: one, two or three by the layout
        want = [f"[{','.join(s['dims'])}] = [{','.join(map(str, s['shape']))}]"]
        if s["flops"]:
            want += [s["flops_formula"], flops_text(s["flops"])]
        elif s["elementwise_flops"]:
            want += [s["elementwise_formula"], flops_text(s["elementwise_flops"]) + " ew"]
        if s["params"]:
            want.append(f"{s['params']:,}")
        for w in want:
            if " + " in w:  # a formula of several terms may wrap at its spaces
                assert all(t in block for t in w.split(" + ")), (width, s["name"], w)
            else:
                assert w in block, (width, s["name"], w, block)
    tot = doc["totals"]
    for n in (tot["params"], tot["flops"], tot["kv_cache_bytes"], tot["weight_bytes"]):
        assert f"{n:,}" in out


def test_trace_layouts_by_width(cli, monkeypatch):
    """The formula has its own column where there is room, and is under the FLOPs where not."""
    args = ("trace", "--preset", "llama2-7b", "--seq", "1024")
    wide = run(cli, monkeypatch, 200, *args)
    assert re.search(r"q projection +\[B,T,H·Dh\] = \[1,1024,4096\] +2·B·T·D·H·Dh +34\.36 GFLOP"
                     r" +16,777,216", wide)
    mid = run(cli, monkeypatch, 120, *args)
    assert re.search(r"q projection +\[B,T,H·Dh\] = \[1,1024,4096\] +34\.36 GFLOP +16,777,216"
                     r" +8\.00 MiB\n +2·B·T·D·H·Dh\n", mid)
    narrow = run(cli, monkeypatch, 80, *args)
    assert re.search(r"q projection +34\.36 GFLOP +16,777,216\n +\[B,T,H·Dh\] = "
                     r"\[1,1024,4096\] +2·B·T·D·H·Dh +8\.00 MiB\n", narrow)


def test_columns_20_keeps_every_number(cli, monkeypatch):
    """Too narrow for a table: one record per stage; numbers whole, only a line that is one
    word (a number, a shape) may pass the width."""
    import json

    args = ("trace", "--preset", "llama2-7b", "--seq", "1024", "--tp", "2")
    out = run(cli, monkeypatch, 20, *args)
    doc = json.loads(run(cli, monkeypatch, 20, *args, "--json"))
    assert "…" not in out
    for line in out.split("\n"):
        assert line == line.rstrip()
        assert cell_len(line) <= 20 or " " not in line.strip(), line
    words = set(out.split())
    for s in doc["stages"]:
        if s["params"]:
            assert f"{s['params']:,}" in words, s["name"]
    tp = doc["parallel"]["tp"]
    for n in (doc["totals"]["params"], doc["totals"]["flops"], tp["weight_bytes_per_rank"],
              tp["allreduce_bytes_total"]):
        assert f"{n:,}" in words


def _json(cli, monkeypatch, *args):
    import json

    monkeypatch.setenv("COLUMNS", "200")
    r = cli(*args)
    assert r.code in (0, 1), r.err
    return json.loads(r.out) if not args[0] == "sweep" else [
        json.loads(x) for x in r.out.splitlines()]


OTHERS = {
    "compare": ("compare", "llama3-8b", "llama3-70b", "mixtral-8x7b", "--gpu", "h100-sxm"),
    "compare-tp": ("compare", "llama3-8b", "--tp", "1,2,4,8", "--gpu", "h100-sxm"),
    "sweep": ("sweep", "llama3-8b", "--batch", "1,8", "--seq", "512,2048", "--gpu", "h100-sxm",
              "--format", "table"),
    "fit": ("fit", "llama3-8b", "--gpu", "h100-sxm"),
    "verify": ("verify", "--preset", "seed-tiny"),
    "verify-train": ("verify", "--train", "--preset", "seed-tiny"),
    "explain": ("explain", "--preset", "seed-tiny"),
    "presets": ("presets",),
    "presets-show": ("presets", "show", "llama3-8b"),
    "hardware": ("hardware",),
    # the commands added since (issue 11's serve, issue 13's train)
    "train": ("train", "--preset", "llama3-8b", "--seq", "1024", "--gpu", "h100-sxm", "--tp", "2",
              "--pp", "2", "--dp", "4", "--zero", "1"),
    "serve": ("serve", "--preset", "llama3-8b", "--gpu", "h100-sxm", "--rate", "6",
              "--prompt-tokens", "1024", "--output-tokens", "128", "--requests", "200", "--slo",
              "ttft=1s,itl=50ms"),
    "serve-find-gpus": ("serve", "--preset", "llama3-8b", "--gpu", "h100-sxm", "--rate", "6",
                        "--prompt-tokens", "1024", "--output-tokens", "128", "--requests", "100",
                        "--slo", "ttft=1s,itl=50ms", "--find-gpus", "--max-batched-tokens",
                        "2048"),
}


_NUMBERS: dict[str, list[str]] = {}  # by command: the --json is the same at every width


def _numbers(cli, monkeypatch, name):
    if name not in _NUMBERS:
        _NUMBERS[name] = _numbers_of(cli, monkeypatch, name)
    return _NUMBERS[name]


def _numbers_of(cli, monkeypatch, name):
    """Exact integers the table must show whole, from the command's --json."""
    if name.startswith("compare"):
        items = _json(cli, monkeypatch, *OTHERS[name], "--json")
        return [f"{it['fit']['max_batch']:,}" for it in items] + [
            f"{it['fit']['kv_tokens_fit']:,}" for it in items]
    if name == "sweep":
        rows = _json(cli, monkeypatch, *OTHERS[name][:-2], "--format", "jsonl")
        return [f"{r['kv_tokens_fit']:,}" for r in rows] + [f"{r['seq']:,}" for r in rows]
    if name == "fit":
        doc = _json(cli, monkeypatch, *OTHERS[name], "--json")
        mem = doc["memory_per_rank"]
        return [f"{mem[k]:,}" for k in ("weights", "kv_cache", "total", "capacity")] + [
            f"{doc['max_batch']:,}", f"{doc['kv_tokens_fit']:,}"]
    if name.startswith("verify"):
        doc = _json(cli, monkeypatch, *OTHERS[name], "--json")
        return [f"{c['measured']:,}" for c in doc["checks"]
                if isinstance(c["measured"], int) and not isinstance(c["measured"], bool)]
    if name in ("presets", "presets-show"):
        names = ("llama3-8b",) if name == "presets-show" else ("gpt2", "llama3-8b", "kimi-k2")
        docs = [_json(cli, monkeypatch, "trace", "--preset", n, "--seq", "1", "--json")
                for n in names]
        return [f"{d['totals']['params']:,}" for d in docs]
    if name == "train":
        doc = _json(cli, monkeypatch, *OTHERS[name], "--json")
        fl, mem, comm = doc["flops"], doc["memory"], doc["communication"]
        keys = ("forward_flops", "dx_flops", "dw_flops", "elementwise_flops")
        ints = [s[k] for s in fl["stages"] for k in keys]
        ints += [fl[k] for k in ("forward_flops", "backward_flops", "step_flops", "approx_6nt")]
        for st in mem["per_stage"]:
            ints += [t["bytes"] for t in st["model_state"]["terms"]]
            ints += [st["activation_bytes"], st["bytes"], st["params"]]
        ints += [mem["peak_bytes"], comm["dp"]["bytes_per_step"], comm["tp"]["bytes_per_step"]]
        return [f"{n:,}" for n in ints]
    if name.startswith("serve"):
        doc = _json(cli, monkeypatch, *OTHERS[name], "--json")
        if "find_gpus" in doc:
            rows = doc["find_gpus"]["frontier"]
            return [f"tp={r['tp']}" for r in rows] + [str(r["gpus"]) for r in rows]
        return [f"{doc[k]:,}" for k in ("iterations", "kv_blocks_per_replica",
                                        "kv_tokens_per_replica")]
    if name == "hardware":
        return [f"{g['memory_bytes']:,}" for g in _json(cli, monkeypatch, "hardware", "--json")]
    return []


@pytest.mark.parametrize("width", (*WIDTHS, 20))
@pytest.mark.parametrize("name", OTHERS)
def test_other_tables_fit(cli, monkeypatch, name, width):
    want = _numbers(cli, monkeypatch, name)
    monkeypatch.setenv("COLUMNS", str(width))
    r = cli(*OTHERS[name])
    assert r.code == 0, r.err
    if width >= 80:
        check_lines(r.out, width)
    else:  # a word longer than the width stays whole, on a line of its own
        assert "…" not in r.out
        for line in r.out.split("\n"):
            assert line == line.rstrip()
            assert cell_len(line) <= width or " " not in line.strip(), line
    words = set(re.split(r"[\s()]+", r.out))
    for n in want:
        assert n in words, (name, width, n)


def test_output_file_respects_columns(cli, monkeypatch, tmp_path):
    out = tmp_path / "t.txt"
    monkeypatch.setenv("COLUMNS", "100")
    r = cli("trace", "--preset", "llama2-7b", "--seq", "1024", "--output", str(out))
    assert r.code == 0 and r.out == ""
    check_lines(out.read_text(), 100)
    monkeypatch.delenv("COLUMNS")
    r = cli("trace", "--preset", "llama2-7b", "--seq", "1024", "--output", str(out))
    text = out.read_text()
    assert "2·B·T·D·H·Dh" in text and "…" not in text
    assert all(line == line.rstrip() for line in text.split("\n"))


def test_output_dash_is_stdout_at_its_width(cli, monkeypatch):
    """`--output -` is stdout: laid out for $COLUMNS as without it, not for a file's 200."""
    monkeypatch.setenv("COLUMNS", "80")
    args = ("trace", "--preset", "llama2-7b", "--seq", "1024")
    plain, dash = cli(*args), cli(*args, "--output", "-")
    assert plain.code == dash.code == 0 and dash.out == plain.out
    check_lines(dash.out, 80)


def test_rstrip_keeps_colour_codes():
    from shapecalc.render.console import _RStrip

    buf = io.StringIO()
    w = _RStrip(buf)
    w.write("a  \x1b[0m\nb   ")
    w.write("  \n c\n")
    assert buf.getvalue() == "a\x1b[0m\nb\n c\n"


def _in_a_terminal(env: dict[str, str], *args: str) -> str:
    """The CLI's output in a pseudo-terminal (stdout a tty, as a person sees it)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "shapecalc", *args], stdin=slave, stdout=slave,
                         stderr=slave, cwd=ROOT, env={**os.environ, **env})
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert p.wait(timeout=60) == 0
    return b"".join(chunks).decode()


SGR = re.compile(r"\x1b\[([0-9;]*)m")


@pytest.mark.parametrize("env", [{"NO_COLOR": "1"}, {"TERM": "dumb"}, {}],
                         ids=["NO_COLOR", "TERM=dumb", "colour"])
def test_terminal_env(env):
    out = _in_a_terminal({"COLUMNS": "80", **env}, "compare", "llama3-8b", "llama3-70b")
    codes = [c for m in SGR.findall(out) for c in m.split(";") if c]
    colours = [c for c in codes if c.startswith(("3", "4", "9")) and c not in ("3", "4")]
    if env:
        assert not colours, colours  # NO_COLOR: bold and dim only; TERM=dumb: no codes at all
        if "TERM" in env:
            assert not codes
    else:
        assert colours  # the best of each row in green: the test can tell
    plain = SGR.sub("", out)
    assert "70.55 B" in plain and "…" not in plain
    assert max(cell_len(line.rstrip("\r")) for line in plain.split("\n")) <= 80
