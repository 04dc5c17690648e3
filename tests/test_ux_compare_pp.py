"""Issue 12, defect 2: compare's per-rank rows follow --pp, as fit and trace do.

On tp × pp grids of several presets (GQA, tied embeddings with a learned table, sliding and full
layers, MoE, MLA), one GPU of the fullest pipeline stage holds the same weights and KV cache in
`compare`, in `fit` and in a hand sum over `trace --per-rank`'s stages (each layer of the trace's
layer plan placed on its stage by `layers_per_stage`, the embedding group on the first stage, the
head group, and with tied embeddings the table's own copy, on the last)."""

from __future__ import annotations

import pytest

GPU = "H100-SXM"
B, T = 2, 1024  # T a multiple of the block size: the paged cache is the contiguous one
GRIDS = {
    "llama3-70b": ("1,2,8", "1,3,4"),
    "gpt2": ("1,2", "1,2,3"),  # layouts fill whole nodes (or sit in one)
    "gemma2-9b": ("1,2", "1,4"),
    "qwen3-30b-a3b": ("1,2", "1,2,3"),
    "deepseek-v2-lite": ("1,2", "1,2"),
}


def hand_stages(doc: dict) -> list[tuple[int, int, int]]:
    """(weight bytes, KV cache bytes, prefill matmul FLOPs) of one rank of each pipeline stage,
    summed by hand from the trace's JSON (bf16: 2 bytes a parameter)."""
    st = doc.get("rank_stages", doc["stages"])
    kinds = [k["kind"] for k in doc["layers"]["kinds"]]
    params = {k: sum(s["params"] for s in st if s["kind"] == k) for k in kinds}
    cache = {k: sum(s["bytes"] for s in st if s["kind"] == k and s["op"] == "kv_cache")
             for k in kinds}
    flops = {k: sum(s["flops"] for s in st if s["kind"] == k) for k in kinds}
    order = [r["kind"] for r in doc["layers"]["runs"] for _ in range(r["count"])]
    out, first = [], 0
    sizes = doc["parallel"]["pp"]["layers_per_stage"]
    for i, n in enumerate(sizes):
        layers = order[first:first + n]
        first += n
        p = sum(params[k] for k in layers)
        f = sum(flops[k] for k in layers)
        if i == 0:
            p += sum(s["params"] for s in st if s["group"] == "embedding")
            f += sum(s["flops"] * s["repeat"] for s in st if s["group"] == "embedding")
        if i == len(sizes) - 1:
            p += sum(s["params"] for s in st if s["group"] == "head")
            f += sum(s["flops"] * s["repeat"] for s in st if s["group"] == "head")
            if doc["model"]["tie_embeddings"] and len(sizes) > 1:
                p += sum(s["params"] for s in st if s["role"] == "embed")
        out.append((2 * p, sum(cache[k] for k in layers), f))
    assert first == len(order) == doc["model"]["n_layers"]
    return out


@pytest.mark.parametrize("preset", sorted(GRIDS))
def test_compare_fit_and_trace_agree_per_stage(cli, preset):
    tps, pps = GRIDS[preset]
    r = cli("compare", preset, "--tp", tps, "--pp", pps, "--batch", str(B), "--seq", str(T),
            "--gpu", GPU, "--json")
    assert r.code == 0, r.err
    items = r.json()
    assert len(items) == len(tps.split(",")) * len(pps.split(","))
    for it in items:
        wl, d = it["workload"], it["derived"]
        tp, pp = wl["tp"], wl["pp"]
        flags = ["--preset", preset, "--tp", str(tp), "--pp", str(pp), "--batch", str(B),
                 "--seq", str(T), "--json"]
        fit = cli("fit", *flags, "--gpu", GPU)
        assert fit.code in (0, 1), fit.err
        f = fit.json()
        trace = cli("trace", *flags, "--per-rank").json()
        stages = hand_stages(trace)
        i = d["pp_stage"]
        where = f"{preset} tp={tp} pp={pp}"
        # the fullest stage: the first of the largest weights + KV cache
        totals = [w + kv for w, kv, _ in stages]
        assert i == totals.index(max(totals)) == f["pp_stage"], where
        assert d["stage_weight_bytes_per_rank"] == stages[i][0], where
        assert d["stage_kv_cache_bytes_per_rank"] == stages[i][1], where
        assert d["stage_prefill_flops_per_rank"] == stages[i][2], where
        # the stages' FLOPs add up to the trace's tensor-parallel rank (all layers), as compare's
        # prefill_flops_per_rank keeps it
        assert sum(f for _, _, f in stages) == trace["parallel"]["tp"]["flops_per_rank"] \
            == d["prefill_flops_per_rank"], where
        # fit: alone and inside compare
        for mem in (f["memory_per_rank"], it["fit"]["memory_per_rank"]):
            assert mem["weights"] == d["stage_weight_bytes_per_rank"], where
            assert mem["kv_cache"] == d["stage_kv_cache_bytes_per_rank"], where
        assert (d["stage_kv_cache_bytes_per_token_per_rank"]
                == f["kv_cache_bytes_per_token_per_rank"]), where
        # one sequence's cache on the stage: the batch's over B (all B sequences hold T tokens)
        assert d["stage_kv_cache_bytes_per_sequence_per_rank"] * B == stages[i][1], where
        # without pipeline stages: the trace's tensor-parallel rank, whole
        if pp == 1:
            assert d["stage_weight_bytes_per_rank"] == trace["parallel"]["tp"][
                "weight_bytes_per_rank"], where
            assert d["stage_kv_cache_bytes_per_rank"] == trace["parallel"]["tp"][
                "kv_cache_bytes_per_rank"], where
            assert d["stage_prefill_flops_per_rank"] == d["prefill_flops_per_rank"], where
        # one rank per stage: the trace's pipeline ledger
        if tp == 1:
            ledger = trace["parallel"]["pp"]
            assert d["stage_weight_bytes_per_rank"] == ledger["weight_bytes_per_stage"][i], where
            assert d["stage_kv_cache_bytes_per_rank"] == ledger["kv_cache_bytes_per_stage"][i]


def test_compare_table_rows_follow_pp(cli):
    """The issue's case: llama3-70b at pp 1, 2, 4 showed 131.42 GiB of weights in every column."""
    r = cli("compare", "llama3-70b@pp=1", "llama3-70b@pp=2", "llama3-70b@pp=4", "--seq", "1000")
    assert r.code == 0, r.err
    row = next(line for line in r.out.splitlines() if "weights / rank" in line)
    # a layer: D·H·Dh·2 + 2·D·H_kv·Dh + 3·D·Dff + 2·D = 855,654,400 params; V·D = 1,050,673,152
    # the table (and the head). pp=1: 70,553,706,496 × 2 B = 131.42 GiB; pp=2, either stage:
    # 40 layers + V·D (+ D) = 65.71 GiB; pp=4, the last: 20 layers + V·D + D = 33.83 GiB
    assert "131.42 GiB" in row and "65.71 GiB" in row and "33.83 GiB" in row
    kv = next(line for line in r.out.splitlines() if "KV cache / token / rank" in line)
    # 2·N·H_kv·Dh·2 B = 2·80·8·128·2 = 320 KiB; per stage of 40 and 20 layers
    assert "320.00 KiB" in kv and "160.00 KiB" in kv and "80.00 KiB" in kv
    # prefill FLOPs of one rank of that stage (B=1, T=1000): a layer is q and o 2·T·D·H·Dh =
    # 134,217,728,000 each, k and v 2·T·D·H_kv·Dh = 16,777,216,000 each, QKᵀ and A·V
    # 2·H·T²·Dh = 16,384,000,000 each, the FFN 3 · 2·T·D·Dff = 1,409,286,144,000: together
    # 1,744,044,032,000; the LM head 2·T·D·N_vocab = 2,101,346,304,000 on the last stage.
    # pp=1: 80 layers + head = 141.62 TFLOP; pp=2: 40 + head = 71.86; pp=4: 20 + head = 36.98
    fl = next(line for line in r.out.splitlines() if "prefill FLOPs / rank" in line)
    assert "141.62 TFLOP" in fl and "71.86 TFLOP" in fl and "36.98 TFLOP" in fl
