"""Llama 4 against PyTorch: parameter totals equal `sum(p.numel())` of transformers' text model
built on the meta device from the real Scout and Maverick config.json files; matmul FLOPs equal
FlopCounterMode on tiny, really-run llama4_text models (chunks of C=4 smaller than T, NoPE and RoPE
layers, real routing) as engines run the experts (each on its own tokens); transformers' own
figure — every expert on every token — is that plus (E−k) expert FFNs per token and MoE layer;
KV-cache bytes equal the cache of the current chunk (vLLM), which transformers' C−1-token window
equals when T ≡ C−1 (mod C).

The numbers in tests/data/llama4_reference.json were measured with torch 2.13.0 and transformers
5.24.0 by tests/torch_reference/harness.py (llama4). With torch installed, `test_live` measures
again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.inputs.sources import load_preset, published
from shapecalc.model.config import Workload

ROOT = Path(__file__).parent.parent
REF = json.loads((ROOT / "tests" / "data" / "llama4_reference.json").read_text())
CASES = REF["cases"]


def _totals(m, case, **kw):
    return build_trace(m, Workload(batch=case["batch"], seq=case["seq"], dtype="fp32",
                                   **kw))["totals"]


@pytest.mark.parametrize("stem", sorted(REF["published"]))
def test_params_equal_the_meta_device_count_of_the_text_model(stem):
    pub = REF["published"][stem]
    m = load_hf_config(ROOT / pub["file"])
    assert "vision tower is not counted" in m.name  # the line that says what was read
    params = build_trace(m, Workload(batch=1, seq=1))["totals"]["params"]
    assert params == pub["params_meta"]
    # the whole multimodal model is the text model, the vision tower and the projector
    assert pub["params_meta_full"] == params + pub["params_vision_model"] + pub["params_projector"]
    preset = load_preset(stem)
    assert build_trace(preset, Workload(batch=1, seq=1))["totals"]["params"] == params
    assert published(stem)["params"] == params


def test_published_figures():
    """Meta's rounded figures: Scout 109B total counts the vision side (the text model alone is
    107.8B); Maverick 400B is the text model (401.6B with the vision side); both 17B active."""
    scout, mav = REF["published"]["llama4-scout"], REF["published"]["llama4-maverick"]
    assert round(scout["params_meta_full"] / 1e9) == 109
    assert round(scout["params_meta"] / 1e9) == 108
    assert round(mav["params_meta"] / 1e9) == 401 and int(mav["params_meta"] / 1e9) == 400
    for stem in ("llama4-scout", "llama4-maverick"):
        t = build_trace(load_preset(stem), Workload(batch=1, seq=1))["totals"]
        assert round(t["active_params"] / 1e9) == 17


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_flops_equal_the_routed_flop_counter(case, hf_model):
    m = hf_model(case)
    assert _totals(m, case)["params"] == case["params"]
    assert _totals(m, case)["flops"] == case["routed_prefill_flops"]
    assert _totals(m, case, logits="last")["flops"] == case["routed_prefill_last_flops"]
    # decode: transformers' chunked cache keeps C−1 keys, so with T mod C < C−1 its query also
    # multiplies keys of the chunk before (the mask hides them); shapecalc reads the chunk's
    decode = _totals(m, case, phase="decode")["flops"]
    assert decode == case["routed_decode_flops"] - case["decode_attention_extra_flops"]
    T, C = case["seq"], case["chunk"]
    assert case["decode_keys_chunked"] == {"transformers": min(T, C - 1) + 1, "vllm": T % C + 1}
    if T % C == C - 1:
        assert case["decode_attention_extra_flops"] == 0


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_transformers_dense_experts_figure(case, hf_model):
    """transformers' Llama4TextMoe runs all E experts on every token: its figure is the routed
    one plus 2·(E−k)·B·Tq·3·D·Dff_e per MoE layer (counted here from the config by hand)."""
    m = hf_model(case)
    E, k, D, F = m.n_experts, m.experts_per_token, m.d_model, m.dff_expert
    layers = (m.ffn_types or ("moe",) * m.n_layers).count("moe")
    B, T = case["batch"], case["seq"]
    for phase, tq in (("prefill", T), ("prefill_last", T), ("decode", 1)):
        extra = 2 * (E - k) * B * tq * 3 * D * F * layers
        assert case[f"hf_{phase}_flops"] == case[f"routed_{phase}_flops"] + extra
    assert _totals(m, case)["flops"] + 2 * (E - k) * B * T * 3 * D * F * layers == (
        case["hf_prefill_flops"])


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_kv_cache_bytes(case, hf_model):
    m = hf_model(case)
    B, T, C = case["batch"], case["seq"], case["chunk"]
    kv = _totals(m, case)["kv_cache_bytes"]
    assert kv == case["vllm_kv_bytes_after_prefill"]
    # transformers' cache: a window of C−1 tokens on the chunked layers
    per_token = 2 * B * m.kv_heads * m.dh * 4
    chunked = case["layer_types"].count("chunked_attention")
    full = len(case["layer_types"]) - chunked
    assert case["hf_kv_bytes_after_prefill"] == per_token * (chunked * min(T, C - 1) + full * T)
    assert case["hf_kv_tokens_after_prefill"] == [
        min(T, C - 1) if t == "chunked_attention" else T for t in case["layer_types"]]
    if T % C == C - 1:
        assert kv == case["hf_kv_bytes_after_prefill"]


def test_live(hf_model, live_measure):
    case = CASES[1]  # T = 10: the two caches differ
    live = live_measure("llama4", case)
    m = hf_model(live)
    assert _totals(m, live)["flops"] == live["routed_prefill_flops"]
    assert _totals(m, live, phase="decode")["flops"] == (
        live["routed_decode_flops"] - live["decode_attention_extra_flops"])
    assert _totals(m, live)["kv_cache_bytes"] == live["vllm_kv_bytes_after_prefill"]
    for key in ("hf_prefill_flops", "routed_prefill_flops", "routed_decode_flops",
                "hf_kv_bytes_after_prefill"):
        assert live[key] == case[key], key
