"""sweep's streamed writer: byte for byte what a plain writer (csv module, json.dumps per row)
writes, across chunks and blocks, with huge integers, NaN/None and bools; a closed pipe; the
bound on the grid. No timing here: benchmarks/bench_sweep.py measures the speed."""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shapecalc.inputs.hardware import load_gpu
from shapecalc.inputs.sources import load_preset
from shapecalc.plan import sweep as sweeping
from shapecalc.plan.cases import Case
from shapecalc.plan.options import PlanOptions
from shapecalc.render import sweep as render

ROOT = Path(__file__).resolve().parents[1]


# -- a plain reference writer ---------------------------------------------------------------------


def _plain(v: object) -> object:
    """A cell as Python sees it: numpy scalars unwrapped, NaN as None."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def reference_rows(chunks: list[sweeping.SweepChunk], keys: list[str]) -> list[dict]:
    rows = []
    for c in chunks:
        cols = {k: c.columns[k].tolist() for k in keys[2:]}
        for i in range(len(c)):
            rows.append({"case": c.case, "model": c.model,
                         **{k: _plain(cols[k][i]) for k in keys[2:]}})
    return rows


def reference_jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows)


def reference_csv(rows: list[dict], keys: list[str]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(keys)
    for r in rows:
        w.writerow(["" if r[k] is None else ("true" if r[k] else "false")
                    if isinstance(r[k], bool) else r[k] for k in keys])
    return buf.getvalue()


def written(chunks: list[sweeping.SweepChunk], fmt: str, keys: list[str]) -> str:
    out = io.BytesIO()
    render.write_sweep(chunks, fmt, keys, out.write)
    return out.getvalue().decode("utf-8")


# -- a handmade chunk: every kind of column -------------------------------------------------------


def handmade(n: int, seed: int) -> sweeping.SweepChunk:
    rng = np.random.default_rng(seed)
    big = [int(x) * 10 ** int(k) for x, k in zip(rng.integers(1, 10**6, n),
                                                  rng.integers(0, 20, n), strict=True)]
    big[0] = 2**64 + 1  # beyond int64
    ints = rng.integers(0, 10**18, n) // 10 ** rng.integers(0, 18, n)
    ints[:3] = [0, 9_223_372_036_854_775_807, 10_000]
    times = rng.random(n) * 10.0 ** rng.integers(-9, 9, n)
    times[rng.random(n) < 0.2] = np.nan
    times[1:3] = [-0.0, 1e16]
    bound = np.array(["compute", "memory", "comm", None], dtype=object)[rng.integers(0, 4, n)]
    cols = {
        "batch": rng.integers(1, 300, n),  # int64, many widths
        "seq": np.full(n, 4096),  # constant
        "phase": np.array(["prefill", "decode"], dtype=object)[rng.integers(0, 2, n)],
        "flops": np.array(big, dtype=object),  # Python ints, some beyond 2⁶³
        "small_obj": np.array([int(x) for x in ints], dtype=object),  # object, fits int64
        "bytes": ints,
        "fits": rng.random(n) < 0.5,
        "ttft_s": times,
        "prefill_s": times,  # the same array (as plan_arrays gives ttft_s)
        "tokens_per_s": np.round(rng.random(n) * 4, 1),  # floats that repeat
        "bound": bound,
        "label": np.array(['a,b', 'say "hi"', "plain"])[rng.integers(0, 3, n)],  # numpy text
    }
    return sweeping.SweepChunk('my,"case"', "m", cols, {})


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_writer_equals_a_plain_writer(fmt, monkeypatch):
    chunks = [handmade(3000, 1), handmade(3, 2), handmade(700, 3)]
    keys = ["case", "model", *chunks[0].columns]
    monkeypatch.setattr(render, "BLOCK_BYTES", 20_000)  # many blocks a chunk
    rows = reference_rows(chunks, keys)
    want = reference_csv(rows, keys) if fmt == "csv" else reference_jsonl(rows)
    assert written(chunks, fmt, keys) == want


def test_float_text_is_numpys_str():
    a = np.array([0.1, 1 / 3, 1e-5, 1e16, 123456789012345678.0, 5e-324, -0.0, 2.5e-7])
    chunk = sweeping.SweepChunk("c", "m", {"x": a, "y": a[::-1].copy()}, {})
    lines = written([chunk], "csv", ["case", "model", "x", "y"]).splitlines()[1:]
    assert [ln.split(",")[2] for ln in lines] == a.astype(str).tolist()


# -- the real grid, chunked, against the whole grid at once ---------------------------------------


def _grid_rows(cli, args: list[str], fmt: str) -> str:
    r = cli("sweep", *args, "--format", fmt)
    assert r.code == 0, r.err
    return r.out


def test_cli_chunks_equal_one_evaluation_and_a_plain_writer(cli, monkeypatch):
    # gpt2: seq beyond 1024 skipped (prefill and decode differ), tp 5 skipped; fits with NaN
    # times (fp8 has no A100 peak) and None bounds; both phases
    args = ["gpt2", "llama2-70b", "--batch", "1..64x2", "--seq", "1..1100+37", "--tp", "1,2,5",
            "--dtype", "bf16,fp8", "--kv-dtype", "bf16,int4", "--phase", "decode,prefill",
            "--gpu", "A100-80GB", "--price", "2"]
    monkeypatch.setattr(sweeping, "CHUNK_POINTS", 999)
    jl = _grid_rows(cli, args, "jsonl")
    cs = _grid_rows(cli, args, "csv")
    gpu, opts = load_gpu("A100-80GB"), PlanOptions(price=2)
    axes = sweeping.SweepAxes(batch=[1, 2, 4, 8, 16, 32, 64], seq=list(range(1, 1101, 37)),
                              tp=[1, 2, 5], pp=[1], dtype=["bf16", "fp8"],
                              kv_dtype=["bf16", "int4"], phase=["decode", "prefill"])
    whole = [sweeping.sweep(Case(m, load_preset(m)), axes, {}, gpu, opts)
             for m in ("gpt2", "llama2-70b")]
    keys = sweeping.SweepGrid(Case("gpt2", load_preset("gpt2")), axes, {}, gpu, opts).keys
    rows = reference_rows(whole, keys)
    assert len(rows) > 3 * 999
    assert any(r["prefill_s"] is None for r in rows) and any(r["fits"] for r in rows)
    assert jl == reference_jsonl(rows)
    assert cs == reference_csv(rows, keys)
    # the order: phase, tp, batch, seq, pp, dtype, kv dtype (the last fastest)
    axes_of = [(r["phase"], r["tp"], r["batch"], r["seq"], r["dtype"], r["kv_dtype"])
               for r in rows if r["model"] == "gpt2"]
    want = [(ph, p, b, t, d, k) for ph, p, b, t, d, k in itertools.product(
        axes.phase, [1, 2], axes.batch, axes.seq, axes.dtype, axes.kv_dtype)
        if t <= (1023 if ph == "decode" else 1024)]
    assert axes_of == want


def test_more_than_one_default_chunk(cli):
    args = ["gpt2", "--batch", "1..48", "--seq", "1..1024", "--phase", "prefill,decode"]
    out = _grid_rows(cli, args, "csv")
    lines = out.splitlines()
    assert len(lines) == 1 + 48 * 1024 * 2 - 48 and lines.count(lines[0]) == 1
    axes = sweeping.SweepAxes(batch=list(range(1, 49)), seq=list(range(1, 1025)), tp=[1],
                              pp=[1], dtype=["bf16"], kv_dtype=[None],
                              phase=["prefill", "decode"])
    grid = sweeping.SweepGrid(Case("gpt2", load_preset("gpt2")), axes, {})
    assert len(list(grid.chunks())) == 4 and grid.skipped == {"seq": 48}  # 2 a phase
    whole = sweeping.sweep(Case("gpt2", load_preset("gpt2")), axes, {})
    assert out == reference_csv(reference_rows([whole], grid.keys), grid.keys)


def test_huge_values_are_exact(cli):
    # 10⁸ sequences of 10⁵ tokens: FLOPs beyond 2⁶³ (Python ints), as exact integers
    r = cli("sweep", "llama2-70b", "--batch", "1,100000000", "--seq", "100000", "--tp", "1,8")
    rows = [json.loads(x) for x in r.out.splitlines()]
    assert max(x["flops"] for x in rows) > 2**63
    chunk = sweeping.sweep(Case("llama2-70b", load_preset("llama2-70b")), sweeping.SweepAxes(
        batch=[1, 100_000_000], seq=[100_000], tp=[1, 8], pp=[1], dtype=["bf16"],
        kv_dtype=[None], phase=["prefill"]), {})
    assert [x["flops"] for x in rows] == [int(v) for v in chunk.columns["flops"]]
    r = cli("sweep", "llama2-70b", "--batch", "1,100000000", "--seq", "100000", "--tp", "1,8",
            "--format", "csv")
    assert [int(x["flops"]) for x in csv.DictReader(io.StringIO(r.out))] == \
        [x["flops"] for x in rows]


def test_keys_do_not_depend_on_the_first_case(cli):
    # gpt2 has no valid point (seq 2048 > its 1024 positions); the fit columns are still there
    r = cli("sweep", "gpt2", "llama2-70b", "--seq", "2048", "--gpu", "H100-SXM",
            "--format", "csv")
    assert r.code == 1, r.err  # nothing fits one H100 (README: Exit status); the rows are written
    header, row = r.out.splitlines()
    assert "fits" in header.split(",") and row.startswith("llama2-70b,")
    assert len(row.split(",")) == len(header.split(","))


# -- a closed pipe, the bounds --------------------------------------------------------------------


def test_broken_pipe_exits_quietly():
    p = subprocess.Popen(
        [sys.executable, "-m", "shapecalc", "sweep", "llama2-70b", "--batch", "1..256x2",
         "--seq", "8..4096+8", "--tp", "1,2,4,8", "--format", "csv"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert p.stdout is not None and p.stderr is not None
    assert p.stdout.readline().startswith(b"case,model,")
    p.stdout.close()  # `| head -1`
    err = p.stderr.read()
    assert p.wait(timeout=120) == 0
    assert err == b""


def test_too_big_a_grid_is_refused(cli):
    r = cli("sweep", "llama2-70b", "--batch", "1..10000", "--seq", "1..20000")
    assert r.code == 2 and r.out == ""
    assert r.err.strip() == ("error: grid: 200,000,000 points, more than the 100,000,000 a "
                             "sweep takes: narrow an axis")
    assert len(r.err.strip().splitlines()) == 1


def test_a_table_holds_at_most_max_table_rows(cli, tmp_path):
    args = ["sweep", "llama2-70b", "--batch", "1..11", "--seq", "1..1000"]
    for extra in (["--format", "table"], ["--svg", str(tmp_path / "s.svg")]):
        r = cli(*args, *extra)
        assert r.code == 2 and r.out == "" and "11,000 rows" in r.err and "grid" in r.err
    r = cli(*args, "--format", "markdown")  # markdown streams
    assert r.code == 0 and len(r.out.splitlines()) == 2 + 11_000


@pytest.mark.parametrize("block", [8 << 20, 5_000])  # one block; blocks of whole runs
def test_runs_and_labels_write_as_plain_columns(block, monkeypatch):
    # a chunk with runs (the inner axes of 3 and 6 rows): ints the same along 6 or 3 rows or
    # neither, floats repeated next to each other, label columns with their codes
    from shapecalc.costs.grid import largest_of

    rng = np.random.default_rng(7)
    n = 6 * 500
    terms = [rng.random(n) for _ in range(3)]
    terms[0][rng.random(n) < 0.1] = np.nan
    cols = {
        "per6": np.repeat(rng.integers(0, 10**15, n // 6), 6),
        "per3": np.repeat(rng.integers(0, 10**9, n // 3), 3),
        "per3_not6": np.repeat(np.arange(n // 3) % 2, 3),
        "every": rng.integers(0, 10**6, n),
        "almost": np.repeat(rng.integers(0, 99, n // 6), 6),
        "runs": np.repeat(rng.random(n // 3), 3),
        "const": np.full(n, 0.25),
        "bound": largest_of(tuple(terms), ("compute", "memory", "comm")),
    }
    cols["almost"][5] += 1  # one row breaks its run of 6 (then of 3)
    # label columns by their codes: one label on every row; two labels of one text (two
    # dtypes' activations, both bf16); labels that change once a run of 3 (the dtype)
    labels = {"phase": (np.ones(n, dtype=np.intp), ("prefill", "decode")),
              "act": (rng.integers(0, 2, n), ("bf16", "bf16")),
              "dtype": (np.repeat(rng.integers(0, 3, n // 3), 3), ("bf16", "fp8", "a,b"))}
    for k, (c, names) in labels.items():
        cols[k] = np.array(names, dtype=object)[c]
    monkeypatch.setattr(render, "BLOCK_BYTES", block)
    keys = ["case", "model", *cols]
    plain = sweeping.SweepChunk("c", "m", dict(cols), {})
    runs = sweeping.SweepChunk("c", "m", dict(cols), {}, labels, periods=(3, 6))
    pieces = render._pieces(runs, "csv", keys)
    assert b",decode,bf16," in b"".join(p for p in pieces if isinstance(p, bytes))
    # per6, per3 and per3_not6 joined into one item a run of 3, and the dtype's labels
    assert [p[1] for p in pieces if isinstance(p, tuple)] == [3, 3]
    assert render._period(cols["per6"], (3, 6)) == 6 and render._period(cols["almost"], (3, 6)) == 1
    assert render._period(cols["per3"], (3, 6)) == 3 and render._period(cols["every"], (3, 6)) == 1
    assert cols["bound"].codes is not None and None in cols["bound"].tolist()
    for fmt in ("csv", "jsonl"):
        want = written([plain], fmt, keys)
        assert written([runs], fmt, keys) == want
        rows = reference_rows([plain], keys)
        assert want == (reference_jsonl(rows) if fmt == "jsonl" else reference_csv(rows, keys))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=8),
       st.sampled_from([(2,), (3, 6), (2, 4, 12)]), st.data())
def test_a_columns_period_is_the_longest_run_it_keeps(values, periods, data):
    """_period: the longest of the runs along which a column does not change, by brute force."""
    n = periods[-1] * data.draw(st.integers(1, 6))
    a = np.array([values[i] for i in data.draw(st.lists(st.integers(0, len(values) - 1),
                                                        min_size=n, max_size=n))])
    if data.draw(st.booleans()):  # constant along some runs
        r = data.draw(st.sampled_from(periods))
        a = np.repeat(a[::r], r)
    want = max((r for r in periods if all(len(set(a[i:i + r])) == 1 for i in range(0, n, r))),
               default=1)
    assert render._period(a, periods) == want


def test_largest_of_never_picks_a_nan_and_is_none_without_the_first():
    from shapecalc.costs.grid import largest_of

    nan = float("nan")
    terms = (np.array([1.0, nan, 3.0, 2.0, -5.0]), np.array([2.0, 9.0, nan, 2.0, nan]),
             np.array([0.5, 1.0, 3.0, 7.0, -6.0]))
    got = largest_of(terms, ("a", "b", "c"))
    assert got.tolist() == ["b", None, "a", "c", "a"]  # ties: the first; NaN: never the largest
    assert got.codes.tolist() == [1, 3, 0, 2, 0] and got.labels == ("a", "b", "c", None)


def test_kept_plans_stay_under_their_bound(monkeypatch):
    # both phases with --gpu: a prefill chunk's plan is kept for the decode rows at the same
    # points, within KEPT_PLAN_BYTES; past it the decode chunks compute their own, the same
    axes = sweeping.SweepAxes(batch=[1, 2, 4, 8], seq=list(range(8, 800, 8)), tp=[1, 2],
                              pp=[1, 2], dtype=["bf16", "fp8"], kv_dtype=["bf16", "int4"],
                              phase=["prefill", "decode"])
    case, gpu = Case("llama2-70b", load_preset("llama2-70b")), load_gpu("H100-SXM")
    monkeypatch.setattr(sweeping, "CHUNK_POINTS", 512)

    def run() -> tuple[str, int, int]:
        grid = sweeping.SweepGrid(case, axes, {}, gpu)
        chunks, most, kept = [], 0, 0
        for c in grid.chunks():
            chunks.append(c)
            most, kept = max(most, grid._kept), max(kept, len(grid._plans))
        return written(chunks, "csv", grid.keys), most, kept

    whole, most, kept = run()
    assert kept > 10 and most > 0
    monkeypatch.setattr(sweeping, "KEPT_PLAN_BYTES", most // 3)
    bounded, most3, kept3 = run()
    assert bounded == whole and 0 < most3 <= most // 3 and kept3 < kept
    one = sweeping.sweep(case, axes, {}, gpu)  # one chunk: nothing kept
    assert written([one], "csv", sweeping.SweepGrid(case, axes, {}, gpu).keys) == whole


def test_chunks_hold_one_tp_degree_each(monkeypatch):
    # a degree's rows past a chunk: split into near-equal chunks of whole runs, none across two
    # degrees (evaluated as one part); the rows are the one evaluation's, in order
    axes = sweeping.SweepAxes(batch=[1, 2, 3], seq=list(range(8, 400, 8)), tp=[1, 2, 4],
                              pp=[1, 2], dtype=["bf16", "fp8"], kv_dtype=["bf16"],
                              phase=["prefill", "decode"])
    case = Case("llama2-70b", load_preset("llama2-70b"))
    monkeypatch.setattr(sweeping, "CHUNK_POINTS", 200)
    grid = sweeping.SweepGrid(case, axes, {})
    chunks = list(grid.chunks())
    per_tp = 3 * 49 * 4  # batch × seq × (pp × dtype)
    assert all(len(c) <= 200 and len(set(c.columns["tp"].tolist())) == 1 for c in chunks)
    assert all(len(c) % 4 == 0 and c.periods for c in chunks)
    assert len(chunks) == 2 * 3 * -(-per_tp // 200)
    one = sweeping.sweep(case, axes, {})
    assert written(chunks, "csv", grid.keys) == written([one], "csv", grid.keys)
