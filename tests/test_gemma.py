"""Gemma 2, Gemma 3 (text) and OLMo 2 against PyTorch and their published totals.

Parameter totals equal `sum(p.numel())` of the transformers model built on the meta device from
each real config.json (and the published checkpoint totals: a multimodal Gemma 3's adds its vision
tower and projector, which shapecalc does not count); matmul FLOPs equal FlopCounterMode on tiny,
really-run models with windows shorter than T; KV-cache bytes equal the Hugging Face cache after a
prefill (transformers keeps W−1 tokens on a sliding layer, shapecalc and vLLM W). The numbers in
tests/data/gemma_reference.json were measured by tests/torch_reference/harness.py (gemma).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hardware import load_gpu
from shapecalc.inputs.hf import load_hf_config
from shapecalc.inputs.sources import load_preset, published
from shapecalc.model.config import Workload
from shapecalc.model.quant import source_fields
from shapecalc.plan.fit import fit
from shapecalc.plan.options import PlanOptions

DATA = Path(__file__).parent / "data"
HF = DATA / "hf"
REF = json.loads((DATA / "gemma_reference.json").read_text())
STEMS = sorted(REF["published"])


def _totals(m, **kw):
    return build_trace(m, Workload(**{"batch": 1, "seq": 1, **kw}))["totals"]


@pytest.mark.parametrize("stem", STEMS)
def test_params_equal_the_meta_device_count_and_the_published_one(stem):
    pub = REF["published"][stem]
    m = load_hf_config(HF / f"{stem}.json")
    assert _totals(m)["params"] == pub["params_meta"]
    # the checkpoint's published total: the text model, plus a multimodal Gemma 3's vision side
    vision = (pub["params_meta_vision_tower"] or 0) + (pub["params_meta_projector"] or 0)
    assert pub["params_meta"] + vision == pub["params_meta_whole"] == pub["params_published"]
    assert ("text_config of a multimodal config" in m.name) == (pub["model_type"] == "gemma3")


@pytest.mark.parametrize("stem", STEMS)
def test_preset_equals_config(stem):
    got, want = load_hf_config(HF / f"{stem}.json"), load_preset(stem)
    for attr in got.model_dump(exclude={"name"}):
        assert getattr(got, attr) == getattr(want, attr), attr
    assert published(stem)["params"] == REF["published"][stem]["params_meta"]
    assert _totals(want)["params"] == REF["published"][stem]["params_meta"]


def test_published_figures_by_hand():
    """Gemma 2 9B: 42 layers of q, k, v, o (H·Dh = 4096, H_kv·Dh = 2048), a GeGLU of 14336 and
    four norms, the tied 256000-row table, the final norm (the report's 917,504,000 embedding
    and 8,324,201,984 other parameters). OLMo 2 7B: per layer q_norm and k_norm over 4096 beside
    its two output norms, no pre-norms; an untied head."""
    D, Dff = 3584, 14336
    layer = D * 4096 * 2 + D * 2048 * 2 + 3 * D * Dff + 4 * D
    assert 256000 * D == 917_504_000 and 42 * layer + D == 8_324_201_984
    assert _totals(load_preset("gemma2-9b"))["params"] == 917_504_000 + 8_324_201_984
    D, Dff, V = 4096, 11008, 100352
    layer = 4 * D * D + 3 * D * Dff + 4 * D
    assert _totals(load_preset("olmo2-7b"))["params"] == 32 * layer + D + 2 * V * D


@pytest.mark.parametrize("case", REF["cases"], ids=[c["name"] for c in REF["cases"]])
def test_flops_and_kv_cache_equal_pytorch(case, hf_model):
    m = hf_model(case)
    B, T = case["batch"], case["seq"]

    def t(**kw):
        return build_trace(m, Workload(batch=B, seq=T, dtype="fp32", **kw))["totals"]

    assert t()["flops"] == case["prefill_flops"]
    assert t(logits="last")["flops"] == case["prefill_last_flops"]
    assert t(phase="decode")["flops"] == case["decode_flops"]
    assert t()["params"] == case["params"] == case["params_meta"]
    # the KV cache after the prefill: W tokens on a sliding layer; transformers keeps W−1
    assert t()["kv_cache_bytes"] == case["kv_cache_bytes_window_w"]
    if m.sliding_window is not None:
        w1 = m.model_copy(update={"sliding_window": m.sliding_window - 1})
        kv = build_trace(w1, Workload(batch=B, seq=T, dtype="fp32"))["totals"]["kv_cache_bytes"]
        assert kv == case["kv_cache_bytes_hf"] < case["kv_cache_bytes_window_w"]
        kept = [x["tokens"] for x in case["kv_cache_layers"]]
        W = m.sliding_window
        types = m.layer_types or ("sliding",) * m.n_layers
        assert kept == [min(T, W - 1) if k == "sliding" else T for k in types]


@pytest.mark.parametrize("name", [  # one in the default run (torch's import is most of it)
    c["name"] if i == 0 else pytest.param(c["name"], marks=pytest.mark.slow)
    for i, c in enumerate(REF["cases"])])
def test_live_flop_counter(name, hf_model, live_measure):
    case = next(c for c in REF["cases"] if c["name"] == name)
    live = live_measure("gemma", case)
    m = hf_model(live)
    for key, kw in (("prefill_flops", {}), ("decode_flops", {"phase": "decode"})):
        wl = Workload(batch=live["batch"], seq=live["seq"], dtype="fp32", **kw)
        assert build_trace(m, wl)["totals"]["flops"] == live[key]
    wl = Workload(batch=live["batch"], seq=live["seq"], dtype="fp32")
    assert build_trace(m, wl)["totals"]["kv_cache_bytes"] == live["kv_cache_bytes_window_w"]


# ── local and global layers ──────────────────────────────────────────────────────────────────


def test_gemma2_9b_trace_at_8192_sums_the_kinds():
    """21 local layers hold 4096 tokens and 21 global ones 8192: not 42 × 8192."""
    doc = build_trace(load_preset("gemma2-9b"), Workload(seq=8192))
    kinds = doc["layers"]["kinds"]
    assert [(k["label"], k["count"]) for k in kinds] == [
        ("sliding window W=4096", 21), ("full attention", 21)]
    per_token_layer = 2 * 8 * 256 * 2  # K and V, H_kv = 8, Dh = 256, bf16
    kv = doc["totals"]["kv_cache_bytes"]
    assert kv == (21 * 4096 + 21 * 8192) * per_token_layer == 2_113_929_216
    assert kv != 42 * 8192 * per_token_layer
    assert doc["totals"]["kv_cache_groups"] == [
        {"window": 4096, "chunk": None, "layers": 21, "tokens": 4096,
         "bytes": 21 * 4096 * per_token_layer},
        {"window": None, "chunk": None, "layers": 21, "tokens": 8192,
         "bytes": 21 * 8192 * per_token_layer}]
    writes = [s for s in doc["stages"] if s["role"] == "kv.write"]
    assert [(s["dims"][3], s["shape"][3], s["repeat"]) for s in writes] == [
        ("W", 4096, 21), ("T", 8192, 21)]


def test_gemma2_9b_trace_text_shows_both_kinds(cli):
    r = cli("trace", "--preset", "gemma2-9b", "--seq", "8192")
    assert r.code == 0, r.err
    assert "21 layers: sliding window W=4096" in r.out and "21 layers: full attention" in r.out
    assert "21 layers × 4,096 tokens (W=4,096)" in r.out
    assert "21 layers × 8,192 tokens (full attention)" in r.out


def test_decode_reads_follow_each_layers_window():
    doc = build_trace(load_preset("gemma3-27b"), Workload(seq=8192, phase="decode"))
    reads = [(s["shape"][3], s["repeat"]) for s in doc["stages"] if s["role"] == "kv.read"]
    assert reads == [(1024, 52), (8193, 10)]  # 62 layers: 5 local : 1 global, then 2 local


def test_fit_longest_context_uses_the_per_kind_cache():
    gpu, opts = load_gpu("H100-SXM"), PlanOptions()
    m = load_preset("gemma2-9b")
    every_full = m.model_copy(update={"layer_types": None, "sliding_window": None})
    wl = Workload(batch=1, seq=8192, logits="last")
    got, all_full = fit(m, wl, gpu, opts), fit(every_full, wl, gpu, opts)
    assert got["memory_per_rank"]["kv_cache"] == 2_113_929_216  # block 16 divides both
    assert all_full["memory_per_rank"]["kv_cache"] == 42 * 8192 * 8192
    # the local layers stop growing at 4096 tokens: a longer context fits in the same memory
    assert got["max_seq_memory"] > all_full["max_seq_memory"]
    T = got["max_seq_memory"]
    need = 21 * 8192 * (-(-min(T, 4096) // 16) * 16 + -(-T // 16) * 16)
    at = fit(m, wl.model_copy(update={"seq": T}), gpu, opts)
    # T is past max_positions: memory fits, the context does not (fit's verdict says which)
    mem = at["memory_per_rank"]
    assert mem["kv_cache"] == need and mem["total"] <= mem["capacity"]
    assert at["verdict"] == "does not fit (context)"
    over = fit(m, wl.model_copy(update={"seq": T + 16}), gpu, opts)["memory_per_rank"]
    assert over["total"] > over["capacity"]


# ── the import ───────────────────────────────────────────────────────────────────────────────


def _write(tmp_path, cfg):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return p


def test_class_defaults_and_rope_bases(tmp_path):
    g2 = load_hf_config(_write(tmp_path, {"model_type": "gemma2"}))  # Gemma2Config()
    assert (g2.d_model, g2.n_layers, g2.n_heads, g2.kv_heads, g2.dh, g2.vocab_size) == (
        2304, 26, 8, 4, 256, 256000)
    assert (g2.attn_softcap, g2.final_softcap, g2.query_pre_attn_scalar) == (50.0, 30.0, 256.0)
    assert g2.layer_types == ("sliding", "full") * 13 and g2.sliding_window == 4096
    g3 = load_preset("gemma3-27b")
    assert (g3.rope_base, g3.rope_base_local, g3.attn_softcap) == (1e6, 1e4, None)
    # transformers 5.x writes rope_parameters per layer type
    new = load_hf_config(_write(tmp_path, {"model_type": "gemma3_text", "rope_parameters": {
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 5e5},
        "sliding_attention": {"rope_type": "default", "rope_theta": 2e4}}}))
    assert (new.rope_base, new.rope_base_local) == (5e5, 2e4)
    assert new.layer_types == (("sliding",) * 5 + ("full",)) * 4 + ("sliding",) * 2
    o = load_preset("olmo2-7b")
    assert (o.norm_position, o.qk_norm, o.qk_norm_width, o.rope_base) == (
        "output", True, "all", 5e5)


def test_refusals_name_the_key(tmp_path, cli):
    p = _write(tmp_path, {"model_type": "gemma3_text", "use_bidirectional_attention": True})
    r = cli("trace", "--hf-config", str(p))
    assert r.code == 2 and "use_bidirectional_attention" in r.err
    assert len(r.err.strip().splitlines()) == 1
    # OLMo 2's whole-width q/k norm needs every head on one rank
    r = cli("trace", "--preset", "olmo2-7b", "--tp", "2")
    assert r.code == 2 and r.err.strip().startswith("error: tp:") and "qk_norm_width" in r.err


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_kv_cache_groups_sum_to_the_cache_on_every_preset(phase):
    from shapecalc.inputs.sources import list_presets

    for name in sorted(list_presets()):
        m = load_preset(name)
        wl = Workload(batch=3, seq=1000 if m.positions == "learned" else 5000, phase=phase,
                      **source_fields(m, {}))  # a quantized preset's weights' dtype
        t = build_trace(m, wl)["totals"]
        assert sum(g["bytes"] for g in t["kv_cache_groups"]) == t["kv_cache_bytes"], name
        # every layer that attends (a stateful mixer's layer keeps its state instead; Falcon-H1's
        # parallel layers, ZAYA's CCA and Inkling's conv-wrapped attention attend)
        attending = sum(mx in ("attention", "parallel", "cca", "inkling") for mx in m.mixers)
        assert sum(g["layers"] for g in t["kv_cache_groups"]) == attending, name
