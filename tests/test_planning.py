"""compare, sweep and fit: hand calculations, roofline formulas, contracts, bad input."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hardware import load_gpu
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import Workload
from shapecalc.plan.cases import parse_int_grid
from shapecalc.plan.fit import fit
from shapecalc.plan.options import PlanOptions
from shapecalc.plan.schemas import CompareOut, FitOut, SweepRow, schemas

MiB, GiB = 2**20, 2**30


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def llama_params_per_rank(D, N, H, Hkv, Dh, Dff, V, p, layers=None, embed=True, head=True):
    """Hand count of a Llama rank's parameters (no biases, RMSNorm γ, untied, SwiGLU)."""
    q = D * (H // p) * Dh
    kv = 2 * D * max(1, Hkv // p) * Dh
    o = (H // p) * Dh * D
    ffn = 3 * D * (Dff // p)
    per_layer = q + kv + o + ffn + 2 * D
    n = N if layers is None else layers
    return n * per_layer + (ceil_div(V, p) * D if embed else 0) + (
        ceil_div(V, p) * D + D if head else 0
    )


def reserve(capacity: int, utilization=(9, 10)) -> int:
    return capacity - capacity * utilization[0] // utilization[1]


def largest_ok(ok, lo=1):
    """Largest x with ok(x), by plain doubling and bisection (independent of plan/fit.py)."""
    if not ok(lo):
        return lo - 1
    hi = lo
    while ok(hi * 2):
        hi *= 2
    good, bad = hi, hi * 2
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if ok(mid) else (good, mid)
    return good


# ── fit against hand calculations ────────────────────────────────────────────────────────────


def test_fit_llama2_70b_on_h100_tp4(cli):
    D, N, H, Hkv, Dh, Dff, V = 8192, 80, 64, 8, 128, 28672, 32000
    B, T, p = 1, 2048, 4
    C = 81559 * MiB
    W = 2 * llama_params_per_rank(D, N, H, Hkv, Dh, Dff, V, p)
    assert W == 2 * 17_245_151_232
    kv_tok = N * 2 * (Hkv // p) * Dh * 2  # bytes per token per rank
    KV = kv_tok * T * B
    assert KV == 167_772_160  # the trace's per-rank KV at this workload
    A = 2 * (B * T * D * 2)  # the residual stream [B,T,D] is the largest tensor (> Dff/p = 7168)
    R = reserve(C)
    r = cli("fit", "llama2-70b", "--gpu", "H100-SXM", "--tp", "4", "--batch", "1", "--seq",
            "2048", "--dtype", "fp16", "--price", "2", "--max-batched-tokens", "0", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    FitOut.model_validate(doc)
    assert doc["memory_per_rank"] == {"weights": W, "kv_cache": KV, "state_cache": 0,
                                      "activations": A, "reserve": R, "total": W + KV + A + R,
                                      "capacity": C}
    assert doc["fits"] is True
    # largest batch at T: weights + B·(KV + activations of one sequence) + reserve ≤ capacity
    assert doc["max_batch"] == (C - R - W) // (KV + A) == 180
    # longest context at B=1: capped at max_positions 4096; memory alone (16-token blocks):
    assert doc["max_seq"] == 4096

    def fits_T(t):
        return W + ceil_div(t, 16) * 16 * kv_tok + 2 * t * D * 2 + R <= C

    assert doc["max_seq_memory"] == largest_ok(fits_T) == 370_378
    # smallest tp: tp=1 cannot even hold the weights; tp=2 fits
    w2 = 2 * llama_params_per_rank(D, N, H, Hkv, Dh, Dff, V, 2)
    assert 2 * llama_params_per_rank(D, N, H, Hkv, Dh, Dff, V, 1) > C
    assert w2 + N * 2 * 4 * Dh * 2 * T + A + R <= C
    assert doc["min_tp"] == 2 and doc["min_pp"] == 1
    assert doc["kv_tokens_fit"] == (C - R - W - A) // (16 * kv_tok) * 16

    # roofline: prefill and decode against the formulas, FLOPs from the stage pipeline
    pre = build_trace(load_preset("llama2-70b"),
                      Workload(batch=1, seq=2048, dtype="fp16", tp=4, logits="last"))
    dec = build_trace(load_preset("llama2-70b"),
                      Workload(batch=1, seq=2048, dtype="fp16", tp=4, logits="last",
                               phase="decode"))
    peak, bw, link = 989.5e12, 3.35e12, 450e9
    ring_pre = 2 * N * 2 * (p - 1) * ceil_div(B * T * D * 2, p)  # 2 all-reduces a layer
    ring_dec = 2 * N * 2 * (p - 1) * ceil_div(B * 1 * D * 2, p)
    assert ring_pre == 8_053_063_680 == 1.5 * 5 * GiB
    # a causal kernel skips QKᵀ's and A·V's masked upper triangle: T² − T(T+1)/2 pairs of
    # 2·Dh FLOPs each, per matmul, query head of the rank and layer
    masked = 2 * 2 * Dh * B * (H // p) * N * (T * T - T * (T + 1) // 2)
    pc = (pre["parallel"]["tp"]["flops_per_rank"] - masked) / peak
    pm = (W + KV) / bw
    prefill = max(pc, pm) + ring_pre / link
    kv_read = kv_tok * (T + 1) * B  # the new token reads T′ = T+1 keys
    dc = dec["parallel"]["tp"]["flops_per_rank"] / peak
    # of the untied embedding (32000/4 rows a rank) a step gathers only its ⌈B/4⌉ rows
    dm = (W - (V // p - ceil_div(B, p)) * D * 2 + kv_read) / bw
    decode = max(dc, dm) + ring_dec / link
    t = doc["times"]
    assert t["prefill_s"] == pytest.approx(prefill, rel=1e-12)
    assert t["ttft_s"] == t["prefill_s"]
    assert t["decode_s_per_token"] == pytest.approx(decode, rel=1e-12)
    assert t["itl_s"] == t["decode_s_per_token"]
    assert t["tokens_per_s"] == pytest.approx(B / decode, rel=1e-12)
    assert t["prefill_bound"] == "compute" and t["decode_bound"] == "memory"
    assert doc["cost_per_million_tokens"] == pytest.approx(2 * 4 / 3600 * decode / B * 1e6)


def test_fit_llama3_8b_on_a100_80gb():
    N, Dff = 32, 14336
    B, T = 16, 8192
    C = 80 * GiB
    model = load_preset("llama3-8b")
    W = 2 * 8_030_261_248  # the published parameter count, bf16
    kv_tok = N * 2 * 8 * 128 * 2
    A1 = 2 * (T * Dff * 2)  # per sequence: the FFN's [B,T,Dff] is the largest tensor
    R = reserve(C)
    assert R == 8 * GiB
    wl = Workload(batch=B, seq=T, logits="last")
    doc = fit(model, wl, load_gpu("A100-80GB"), PlanOptions(price=1.5, max_batched_tokens=None))
    FitOut.model_validate(json.loads(json.dumps(doc)))
    mem = doc["memory_per_rank"]
    assert (mem["weights"], mem["kv_cache"], mem["activations"], mem["reserve"]) == (
        W, B * T * kv_tok, B * A1, R)
    assert doc["fits"] is True
    assert doc["max_batch"] == (C - R - W) // (T * kv_tok + A1) == 39
    assert doc["max_seq"] == 8192  # max_positions

    def fits_T(t):
        return W + B * ceil_div(t, 16) * 16 * kv_tok + B * 2 * t * Dff * 2 + R <= C

    assert doc["max_seq_memory"] == largest_ok(fits_T)
    assert doc["min_tp"] == 1 and doc["min_pp"] == 1
    pre = build_trace(model, wl)
    dec = build_trace(model, wl.model_copy(update={"phase": "decode"}))
    peak, bw = 312e12, 2.039e12
    masked = 2 * 2 * 128 * B * 32 * N * (T * T - T * (T + 1) // 2)  # see the test above
    prefill = max((pre["totals"]["flops"] - masked) / peak, (W + B * T * kv_tok) / bw)
    table = (128256 - B) * 4096 * 2  # the embedding rows a decode step does not look up
    decode = max(dec["totals"]["flops"] / peak, (W - table + B * (T + 1) * kv_tok) / bw)
    t = doc["times"]
    assert t["prefill_s"] == pytest.approx(prefill, rel=1e-12)
    assert t["decode_s_per_token"] == pytest.approx(decode, rel=1e-12)
    assert t["prefill_comm_s"] == 0 and t["decode_comm_s"] == 0
    assert t["tokens_per_s"] == pytest.approx(B / decode, rel=1e-12)
    assert doc["cost_per_million_tokens"] == pytest.approx(1.5 / 3600 * decode / B * 1e6)


def test_chunked_prefill_sizes_the_workspace_like_vllm(cli):
    """--max-batched-tokens N: the activation estimate is for one prefill step of N tokens."""
    N, Dff, T = 32, 14336, 8192
    C, R, W = 80 * GiB, 8 * GiB, 2 * 8_030_261_248
    kv_tok = N * 2 * 8 * 128 * 2
    r = cli("fit", "llama3-8b", "--gpu", "A100-80GB", "--batch", "16", "--seq", str(T),
            "--max-batched-tokens", "8192", "--json")
    doc = r.json()
    A = 2 * 8192 * Dff * 2  # the FFN's [1, 8192, Dff] for the 8192 tokens of one step
    assert doc["memory_per_rank"]["activations"] == A
    assert doc["assumptions"]["max_batched_tokens"] == 8192
    assert doc["max_batch"] == (C - R - W - A) // (T * kv_tok) == 56  # 39 without chunking
    whole = cli("fit", "llama3-8b", "--gpu", "A100-80GB", "--batch", "16", "--seq", str(T),
                "--max-batched-tokens", "0", "--json").json()  # 0: the whole batch at once
    assert whole["assumptions"]["max_batched_tokens"] is None and whole["max_batch"] == 39
    assert cli("fit", "llama3-8b", "--gpu", "A100-80GB", "--batch", "16", "--seq", str(T),
               "--json").json()["max_batch"] == 56  # 8192 is the default
    r = cli("fit", "llama3-8b", "--gpu", "A100-80GB", "--max-batched-tokens", "-1")
    assert r.code == 2 and r.err.startswith("error: max-batched-tokens:")


def test_fit_tp_and_pp_on_a100_40gb():
    D, N, H, Hkv, Dh, Dff, V = 8192, 80, 64, 8, 128, 28672, 32000
    B, T = 1, 2048
    C = 40 * GiB
    R = reserve(C)
    A = 2 * B * T * D * 2
    gpu = load_gpu("A100-40GB")
    model = load_preset("llama2-70b")
    doc = fit(model, Workload(batch=B, seq=T, logits="last"), gpu, PlanOptions())
    assert doc["fits"] is False and doc["max_batch"] == 0 and doc["max_seq"] == 0
    # the smallest tp at pp=1 is 4: tp=2 holds 64 GiB of weights per rank
    w4 = 2 * llama_params_per_rank(D, N, H, Hkv, Dh, Dff, V, 4)
    assert w4 + N * 2 * 2 * Dh * 2 * T + A + R <= C
    assert 2 * llama_params_per_rank(D, N, H, Hkv, Dh, Dff, V, 2) > C
    assert doc["min_tp"] == 4
    # at tp=2 two pipeline stages are needed; the last (LM head, final norm) is the fullest
    d2 = fit(model, Workload(batch=B, seq=T, tp=2, pp=2, logits="last"), gpu, PlanOptions())
    last = 2 * llama_params_per_rank(D, N, H, Hkv, Dh, Dff, V, 2, layers=40, embed=False)
    first = 2 * llama_params_per_rank(D, N, H, Hkv, Dh, Dff, V, 2, layers=40, head=False)
    assert last > first and d2["pp_stage"] == 1
    kv = 40 * 2 * 4 * Dh * 2 * T
    A2 = 2 * B * T * (Dff // 2) * 2  # at tp=2 the FFN's Dff/p = 14336 > D is the largest tensor
    assert d2["memory_per_rank"]["weights"] == last
    assert d2["memory_per_rank"]["kv_cache"] == kv
    assert d2["memory_per_rank"]["activations"] == A2
    assert d2["memory_per_rank"]["total"] == last + kv + A2 + R <= C
    assert d2["fits"] is True and d2["min_pp"] == 2 and d2["min_tp"] == 2
    # the pipeline boundary adds its bytes to the link term
    pre = build_trace(model, Workload(batch=B, seq=T, tp=2, pp=2, logits="last"))
    ring = pre["parallel"]["tp"]["ring_bytes_per_rank_total"]
    assert ring == 2 * N * 2 * 1 * ceil_div(B * T * D * 2, 2)
    assert d2["times"]["prefill_comm_s"] == pytest.approx((ring + B * T * D * 2) / 300e9)


def test_fit_replicates_kv_heads_beyond_h_kv():
    """2 KV heads at tp=4: each rank holds one (replicated ×2), as vLLM does."""
    model = load_preset("llama3-8b")
    from shapecalc.inputs.sources import apply_overrides

    m2 = apply_overrides(model, ["n_kv_heads=2"])
    doc = fit(m2, Workload(batch=4, seq=4096, tp=4, logits="last"), load_gpu("H100-SXM"),
              PlanOptions())
    assert doc["kv_heads_per_rank"] == 1 and doc["kv_heads_replicated"] is True
    assert doc["kv_cache_bytes_per_token_per_rank"] == 32 * 2 * 1 * 128 * 2  # not 32·2·½·128·2
    assert doc["memory_per_rank"]["kv_cache"] == 4 * 4096 * 32 * 2 * 1 * 128 * 2


def test_efficiency_factors_scale_each_term():
    model, gpu = load_preset("llama2-70b"), load_gpu("H100-SXM")
    wl = Workload(batch=8, seq=1024, tp=8, logits="last")
    base = fit(model, wl, gpu, PlanOptions())["times"]
    slow = fit(model, wl, gpu, PlanOptions(compute_efficiency=0.5, memory_efficiency=0.8,
                                           link_efficiency=0.25))["times"]
    assert slow["prefill_compute_s"] == pytest.approx(2 * base["prefill_compute_s"])
    assert slow["decode_memory_s"] == pytest.approx(base["decode_memory_s"] / 0.8)
    assert slow["prefill_comm_s"] == pytest.approx(4 * base["prefill_comm_s"])
    assert slow["prefill_s"] == pytest.approx(
        max(slow["prefill_compute_s"], slow["prefill_memory_s"]) + slow["prefill_comm_s"])


def test_fit_reserve_follows_utilization():
    doc = fit(load_preset("gpt2"), Workload(seq=1023, logits="last"), load_gpu("RTX-4090"),
              PlanOptions(utilization=0.5))
    C = 24564 * MiB
    assert doc["memory_per_rank"]["reserve"] == C - C // 2
    assert doc["max_seq"] == 1024  # gpt2's learned positions
    assert doc["times"]["decode_s_per_token"] is not None


def test_fp8_on_a100_is_refused_or_falls_back_clearly(cli):
    r = cli("fit", "llama3-8b", "--gpu", "A100-80GB", "--dtype", "fp8", "--json")
    assert r.code == 2 and r.out == ""
    assert r.err.startswith("error: compute-dtype: A100-80GB has no fp8 peak")
    assert r.err.count("\n") == 1
    r = cli("fit", "llama3-8b", "--gpu", "A100-80GB", "--dtype", "fp8", "--compute-dtype",
            "bf16", "--json")
    assert r.code == 0
    doc = r.json()
    assert doc["assumptions"]["compute_dtype"] == "bf16"
    assert doc["memory_per_rank"]["weights"] == 8_030_261_248  # fp8 weights: 1 byte each


# ── compare ──────────────────────────────────────────────────────────────────────────────────


def test_compare_llama2_70b_tp_degrees_shows_the_seed_ledger(cli):
    r = cli("compare", "llama2-70b", "llama2-70b@n_kv_heads=2", "--tp", "1,2,4,8", "--batch",
            "1", "--seq", "2048", "--dtype", "fp16", "--json")
    assert r.code == 0, r.err
    items = r.json()
    CompareOut.model_validate(items)
    assert [it["case"] for it in items[:4]] == [f"llama2-70b@tp={p}" for p in (1, 2, 4, 8)]
    by = {(it["model"]["n_kv_heads"], it["workload"]["tp"]): it for it in items}
    tp4 = by[(8, 4)]["parallel"]["tp"]
    # the second seed's §11 (the TP communication ledger): hidden 8192, TP 4, batch 1, seq 2048,
    # fp16
    assert tp4["allreduce_bytes"] == 32 * MiB
    assert tp4["allreduce_bytes_per_layer"] == 64 * MiB
    assert tp4["allreduce_bytes_total"] == 5 * GiB
    assert tp4["ring_bytes_per_rank_total"] == 1.5 * 5 * GiB
    assert by[(8, 4)]["derived"]["pp_boundary_bytes_per_crossing"] == 32 * MiB
    # KV per rank at each degree: 8 KV heads split evenly, one each at TP=8 (no replication)
    full = 2 * 80 * 1 * 8 * 2048 * 128 * 2
    for p in (1, 2, 4, 8):
        it = by[(8, p)]
        assert it["parallel"]["tp"]["kv_cache_bytes_per_rank"] == full // p
        assert it["derived"]["kv_heads_per_rank"] == 8 // p
        assert it["derived"]["kv_heads_replicated"] is False
    # 2 KV heads at TP=4: one per rank, replicated ×2, so each rank holds half, not a quarter
    two = by[(2, 4)]
    assert two["derived"]["kv_heads_per_rank"] == 1 and two["derived"]["kv_replication"] == 2
    total2 = two["totals"]["kv_cache_bytes"]
    assert total2 == full // 4  # 2 KV heads instead of 8
    assert two["parallel"]["tp"]["kv_cache_bytes_per_rank"] == total2 // 2  # not total2 // 4
    assert two["derived"]["kv_cache_bytes_per_token_per_rank"] == 80 * 2 * 1 * 128 * 2
    # the same keys as trace --json's totals and parallel sections
    doc = build_trace(load_preset("llama2-70b"),
                      Workload(batch=1, seq=2048, dtype="fp16", tp=4))
    assert by[(8, 4)]["totals"] == doc["totals"]
    assert by[(8, 4)]["parallel"] == doc["parallel"]
    # the table says it too
    r = cli("compare", "llama2-70b", "llama2-70b@n_kv_heads=2,tp=4", "--tp", "1,2,4,8",
            "--batch", "1", "--seq", "2048", "--dtype", "fp16")
    assert r.code == 0
    for text in ("32.00 MiB", "64.00 MiB", "5.00 GiB", "7.50 GiB", "replicated ×2",
                 "160.00 MiB", "80.00 MiB"):
        assert text in r.out, text


def test_compare_with_gpu_pp_and_formats(cli, tmp_path):
    r = cli("compare", "llama3-70b@tp=8,seq=8192,kv_dtype=fp8", "llama2-70b@tp=4", "--pp", "2",
            "--gpu", "H100-SXM", "--price", "3", "--json")
    assert r.code == 0, r.err
    items = r.json()
    CompareOut.model_validate(items)
    assert items[0]["workload"]["kv_dtype"] == "fp8" and items[0]["workload"]["seq"] == 8192
    assert items[1]["parallel"]["pp"]["boundary_bytes"] == 32 * MiB
    assert items[0]["fit"]["cost_per_million_tokens"] > 0
    assert items[0]["fit"]["workload"]["logits"] == "last"
    r = cli("compare", "llama2-70b", "llama3-70b", "--tp", "4", "--format", "csv")
    rows = list(csv.reader(io.StringIO(r.out)))
    assert rows[0] == ["row", "llama2-70b", "llama3-70b"]
    assert ["all-reduce (one)", str(32 * MiB), str(32 * MiB)] in rows
    r = cli("compare", "llama2-70b", "llama3-70b", "--tp", "4", "--format", "markdown",
            "--ratio")
    assert r.out.startswith("|  | llama2-70b | llama3-70b |") and "×" in r.out
    svg, html, out = tmp_path / "c.svg", tmp_path / "c.html", tmp_path / "c.txt"
    r = cli("compare", "gpt2", "gpt2-medium", "--seq", "512", "--svg", str(svg), "--html",
            str(html), "--output", str(out))
    assert r.code == 0 and r.out == ""
    assert svg.read_text().startswith("<svg") and "<html" in html.read_text()
    assert "params" in out.read_text() and "\x1b[" not in out.read_text()


# ── sweep ────────────────────────────────────────────────────────────────────────────────────


def test_sweep_rows_match_the_trace_and_pass_the_schema(cli):
    r = cli("sweep", "llama3-8b", "gpt2", "--batch", "1..8x2", "--seq", "16,1024,2048",
            "--tp", "1,2,3", "--phase", "prefill,decode", "--kv-dtype", "bf16,int4")
    assert r.code == 0, r.err
    rows = [json.loads(line) for line in r.out.splitlines()]
    for row in rows:
        SweepRow.model_validate(row)
    # llama3-8b: tp=3 skipped; gpt2: seq 2048 (and 1024 in decode) skipped, tp=3 is fine
    assert "skipped" in r.err and "llama3-8b" in r.err and "gpt2" in r.err
    assert {(r_["model"], r_["tp"]) for r_ in rows} == {
        ("llama3-8b", 1), ("llama3-8b", 2), ("gpt2", 1), ("gpt2", 2), ("gpt2", 3)}
    assert len([x for x in rows if x["model"] == "llama3-8b"]) == 4 * 3 * 2 * 2 * 2
    for row in rows[::17]:
        model = load_preset(row["model"])
        wl = Workload(batch=row["batch"], seq=row["seq"], phase=row["phase"], tp=row["tp"],
                      pp=row["pp"], dtype=row["dtype"], kv_dtype=row["kv_dtype"])
        doc = build_trace(model, wl)
        assert row["flops"] == doc["totals"]["flops"]
        assert row["kv_cache_bytes_per_rank"] == doc["parallel"]["tp"]["kv_cache_bytes_per_rank"]
        assert row["ring_bytes_per_rank_total"] == doc["parallel"]["tp"][
            "ring_bytes_per_rank_total"]


def test_sweep_csv_and_output_file(cli, tmp_path):
    args = ["sweep", "llama2-70b", "--batch", "1,4", "--seq", "512..2048x2", "--tp", "4,8",
            "--pp", "1,2"]
    jl = [json.loads(line) for line in cli(*args).out.splitlines()]
    out = tmp_path / "s.csv"
    r = cli(*args, "--format", "csv", "--output", str(out))
    assert r.code == 0 and r.out == ""
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert len(rows) == len(jl) == 2 * 3 * 2 * 2
    for a, b in zip(rows, jl, strict=True):
        assert list(a) == list(b)
        assert {k: str(v) for k, v in b.items()} == a


def test_sweep_with_gpu_agrees_with_fit(cli):
    r = cli("sweep", "llama2-70b", "--batch", "1,64", "--seq", "2048", "--tp", "4,8",
            "--gpu", "H100-SXM", "--price", "2", "--json")
    assert r.code == 0, r.err
    gpu = load_gpu("H100-SXM")
    for row in map(json.loads, r.out.splitlines()):
        SweepRow.model_validate(row)
        doc = fit(load_preset("llama2-70b"), Workload(batch=row["batch"], seq=row["seq"],
                                                      tp=row["tp"], logits="last"),
                  gpu, PlanOptions(price=2))
        mem = doc["memory_per_rank"]
        assert (row["mem_weights"], row["mem_kv_cache"], row["mem_activations"],
                row["mem_total"], row["fits"], row["kv_tokens_fit"]) == (
            mem["weights"], mem["kv_cache"], mem["activations"], mem["total"], doc["fits"],
            doc["kv_tokens_fit"])
        for k in ("prefill_s", "decode_s_per_token", "tokens_per_s"):
            assert row[k] == pytest.approx(doc["times"][k], rel=1e-12)
        assert row["cost_per_million_tokens"] == pytest.approx(doc["cost_per_million_tokens"])


def test_sweep_marks_missing_peaks_as_null(cli):
    r = cli("sweep", "llama3-8b", "--dtype", "bf16,fp8", "--gpu", "A100-80GB", "--json")
    rows = [json.loads(line) for line in r.out.splitlines()]
    assert [x["dtype"] for x in rows] == ["bf16", "fp8"]
    assert rows[0]["prefill_s"] > 0 and rows[1]["prefill_s"] is None
    assert rows[1]["fits"] is True  # memory needs no peak


@pytest.mark.parametrize(
    "text, values",
    [
        ("1..256x2", [1, 2, 4, 8, 16, 32, 64, 128, 256]),
        ("512,2048,8192", [512, 2048, 8192]),
        ("1..64+16", [1, 17, 33, 49]),
        ("3..5", [3, 4, 5]),
        ("1,2,64..256x2,2", [1, 2, 64, 128, 256]),
        ("1_000", [1000]),
    ],
)
def test_grid_syntax(text, values):
    assert parse_int_grid(text, "batch") == values


# ── contracts and errors ─────────────────────────────────────────────────────────────────────


def test_fit_json_contract_and_formats(cli, tmp_path):
    r = cli("fit", "--preset", "qwen2.5-7b", "--gpu", "L40S", "--seq", "4096", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    FitOut.model_validate(doc)
    for key in ("fits", "memory_per_rank", "max_batch", "max_seq", "min_tp", "times"):
        assert key in doc
    assert list(doc["memory_per_rank"]) == ["weights", "kv_cache", "state_cache", "activations",
                                            "reserve", "total", "capacity"]
    for key in ("prefill_s", "decode_s_per_token", "ttft_s", "tokens_per_s", "prefill_bound",
                "decode_bound"):
        assert key in doc["times"]
    # no --price: the profile's cited default, and the output says so (issue 22 item 9)
    assert doc["price_per_gpu_hour"] == 1.40
    assert doc["price_source"].startswith("L40S profile default: deploybase.ai")
    r = cli("fit", "--preset", "qwen2.5-7b", "--gpu", "A100-40GB", "--seq", "4096", "--json")
    assert "cost_per_million_tokens" not in r.json()  # a profile with no cited price: none
    assert all(isinstance(v, int) for v in doc["memory_per_rank"].values())
    r = cli("fit", "qwen2.5-7b", "--gpu", "L40S", "--format", "csv")
    pairs = dict(csv.reader(io.StringIO(r.out)))
    assert pairs["memory_per_rank.capacity"] == str(46068 * MiB)
    r = cli("fit", "qwen2.5-7b", "--gpu", "L40S", "--format", "markdown")
    assert "| weights |" in r.out and "largest batch" in r.out
    svg = tmp_path / "fit.svg"
    r = cli("fit", "qwen2.5-7b", "--gpu", "L40S", "--json", "--svg", str(svg))
    assert r.json()["model"] == "qwen2.5-7b" and "weights" in svg.read_text()
    r = cli("fit", "qwen2.5-7b", "--gpu", "L40S")
    assert "LOWER BOUNDS" in r.out and "█" in r.out and "fits" in r.out


def test_schema_command_includes_planning(cli):
    r = cli("schema", "--all")
    assert {"compare", "sweep_row", "fit"} <= set(r.json())
    assert set(schemas()) == {"compare", "sweep_row", "fit"}
    assert cli("schema", "fit").json()["properties"]["memory_per_rank"]


@pytest.mark.parametrize(
    "args, field",
    [
        (["fit", "llama2-70b", "--gpu", "X100"], "gpu"),
        (["sweep", "llama2-70b", "--gpu", "X100"], "gpu"),
        (["compare", "llama2-70b", "--gpu", "nope"], "gpu"),
        (["fit", "llama2-70b"], "gpu"),
        (["sweep", "llama2-70b", "--batch", "1..0"], "batch"),
        (["sweep", "llama2-70b", "--seq", "9..3"], "seq"),
        (["sweep", "llama2-70b", "--batch", "1..8x1"], "batch"),
        (["sweep", "llama2-70b", "--tp", "two"], "tp"),
        (["sweep", "llama2-70b", "--tp", "3"], "grid"),
        (["sweep", "llama2-70b", "--dtype", "fp7"], "dtype"),
        (["fit", "llama2-70b", "--gpu", "H100-SXM", "--price", "-1"], "price"),
        (["compare", "llama2-70b", "--gpu", "H100-SXM", "--price", "-0.5"], "price"),
        (["fit", "llama2-70b", "--gpu", "H100-SXM", "--utilization", "0"], "utilization"),
        (["fit", "llama2-70b", "--gpu", "H100-SXM", "--compute-efficiency", "2"],
         "compute-efficiency"),
        (["compare", "llama2-70b@"], "case"),
        (["compare", "llama2-70b@tp"], "case"),
        (["compare", "llama2-70b@warp=9"], "case"),
        (["compare", "@tp=4"], "case"),
        (["compare", "missing.toml"], "case"),
        (["compare", "llama2-70b@tp=3"], "tp"),
        (["compare", "nope"], "preset"),
        (["fit", "llama2-70b", "--gpu", "H100-SXM", "--format", "xml"], "format"),
        (["fit", "llama2-70b", "--gpu", "H100-SXM", "--set-gpu", "speed=9"], "set-gpu"),
        (["fit", "llama2-70b", "--gpu", "H100-SXM", "--preset", "gpt2"], "model"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, args, field):
    r = cli(*args)
    assert r.code == 2, (args, r.out, r.err)
    assert r.err.startswith(f"error: {field}: "), r.err
    assert r.err.strip().count("\n") == 0 and "Traceback" not in r.err
    assert not r.out


def test_times_are_finite_and_labelled_lower_bounds(cli):
    r = cli("fit", "mistral-7b", "--gpu", "MI300X", "--seq", "32768", "--batch", "8", "--json")
    doc = r.json()
    assert doc["assumptions"]["lower_bound"] is True
    assert doc["memory_per_rank"]["kv_cache"] == 8 * 4096 * 32 * 2 * 8 * 128 * 2  # W = 4096
    assert all(math.isfinite(v) for k, v in doc["times"].items() if k.endswith("_s"))
