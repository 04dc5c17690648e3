#!/usr/bin/env python3
"""Measure reference matmul FLOPs, KV-cache bytes and parameter counts of Gemma 2, Gemma 3 (text)
and OLMo 2 with PyTorch and write ``tests/data/gemma_reference.json``.

Run manually (the test suite only reads the JSON; its live test imports ``measure_case``):

    pip install torch==2.13.0+cpu transformers==5.24.0
    python tests/torch_reference/measure_gemma.py [--out PATH]

Two parts:

  * ``cases``: tiny models of each family, random weights, float32, eager attention, CPU, B=5,
    T=7, sliding windows (3 and 4) smaller than T so that the windows matter; FlopCounterMode
    prefill (all logits, and logits_to_keep=1) and decode, as ``measure_moe.py`` does, and the
    Hugging Face cache after the prefill: each layer's kept tokens and bytes.
  * ``published``: each real config.json of these families in ``tests/data/hf`` built on the
    meta device; the text model's sum of parameters (and, for a multimodal Gemma 3, the whole
    model's and its vision side's) next to the published figure and its source.
"""

from __future__ import annotations

import json
import os
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure_flops import check_roundtrip, config_to_json_dict, forward_steps, run
from measure_moe import count

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO_ROOT, "tests", "data", "gemma_reference.json")
HF_DIR = os.path.join(REPO_ROOT, "tests", "data", "hf")

B, T = 5, 7
D, H, HKV, V, MAXPOS = 64, 4, 2, 1000, 256

# Dh=24 (H·Dh=96 ≠ D), query_pre_attn_scalar 20 ≠ Dh, Dff 176: a formula that swaps two of them
# gives another number. The windows (4 and 3) are shorter than T=7.
CASES = [
    ("gemma2_alternating_w4", "gemma2", dict(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=HKV, head_dim=24,
        num_hidden_layers=4, vocab_size=V, max_position_embeddings=MAXPOS,
        intermediate_size=176, query_pre_attn_scalar=20, sliding_window=4,
        attn_logit_softcapping=50.0, final_logit_softcapping=30.0, tie_word_embeddings=True)),
    ("gemma3_text_5to1_w3", "gemma3_text", dict(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=HKV, head_dim=24,
        num_hidden_layers=6, vocab_size=V, max_position_embeddings=MAXPOS,
        intermediate_size=176, query_pre_attn_scalar=20, sliding_window=3,
        rope_theta=1_000_000.0, rope_local_base_freq=10_000.0, tie_word_embeddings=True)),
    ("olmo2_gqa", "olmo2", dict(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=HKV,
        num_hidden_layers=3, vocab_size=V, max_position_embeddings=MAXPOS,
        intermediate_size=176, rope_theta=500_000.0, tie_word_embeddings=False,
        eos_token_id=1)),
]

NOTES = {
    "gemma2_alternating_w4": (
        "Layers alternate sliding_attention (even i, window 4) and full_attention. Scores scaled "
        "by query_pre_attn_scalar^-0.5, then softcapped 50*tanh(s/50) (elementwise, not "
        "counted); logits softcapped 30*tanh(l/30). Four (1+w) RMSNorms a layer. Eager prefill "
        "computes the full TxT scores on sliding layers too (the window is a mask). The sliding "
        "layers' cache keeps sliding_window-1=3 tokens, so the decode token attends over 4 keys "
        "there and over T+1=8 on the full layers."
    ),
    "gemma3_text_5to1_w3": (
        "Layers 0-4 sliding (window 3), layer 5 full (sliding_window_pattern 6). q_norm/k_norm "
        "(1+w) RMSNorm over each head's Dh (elementwise). Sliding layers rotate with "
        "rope_local_base_freq 10000, the full layer with rope_theta 1e6 (no FLOPs counted). "
        "Sliding caches keep 2 tokens; the decode token attends over 3 keys there."
    ),
    "olmo2_gqa": (
        "No pre-norms: post_attention_layernorm and post_feedforward_layernorm norm the "
        "attention and MLP outputs before the residual add. q_norm over H*Dh=64 and k_norm over "
        "H_kv*Dh=32 before the heads split (elementwise). No sliding window."
    ),
}

# The published configs in tests/data/hf: Hub repository, the exact published total (of the
# whole checkpoint: for a multimodal Gemma 3 that includes the vision tower), the rounded figure,
# and where they come from.
PUBLISHED = {
    "gemma2-9b": dict(
        repo="google/gemma-2-9b", params=9_241_705_984,
        figure="9B; 917,504,000 embedding and 8,324,201,984 non-embedding parameters",
        source="Gemma Team, 'Gemma 2: Improving Open Language Models at a Practical Size' "
        "(2024), Table 2 (embedding / non-embedding parameters); 9,241,705,984 is the Hub's "
        "safetensors total of google/gemma-2-9b."),
    "gemma2-27b": dict(
        repo="google/gemma-2-27b", params=27_227_128_320,
        figure="27B; 1,179,648,000 embedding and 26,047,480,320 non-embedding parameters",
        source="Gemma 2 technical report (2024), Table 2; 27,227,128,320 is the Hub's "
        "safetensors total of google/gemma-2-27b."),
    "gemma3-1b": dict(
        repo="google/gemma-3-1b-it", params=999_885_952,
        figure="1B (text only): 302M embedding + 698M non-embedding parameters",
        source="Gemma 3 technical report (2025), Table 1 (millions); 999,885,952 is the Hub's "
        "safetensors total of google/gemma-3-1b-it."),
    "gemma3-4b": dict(
        repo="google/gemma-3-4b-it", params=4_300_079_472,
        figure="4B: 417M vision encoder, 3,209M non-embedding parameters",
        source="Gemma 3 technical report (2025), Table 1 (millions); 4,300,079,472 is the Hub's "
        "safetensors total of google/gemma-3-4b-it (text model, SigLIP vision tower and the "
        "multimodal projector)."),
    "gemma3-27b": dict(
        repo="google/gemma-3-27b-it", params=27_432_406_640,
        figure="27B: 417M vision encoder, 25,600M non-embedding parameters",
        source="Gemma 3 technical report (2025), Table 1 (millions); 27,432,406,640 is the Hub's "
        "safetensors total of google/gemma-3-27b-it (text model, SigLIP vision tower and the "
        "multimodal projector)."),
    "olmo2-7b": dict(
        repo="allenai/OLMo-2-1124-7B", params=7_298_617_344,
        figure="7B (Hub: 7.3B params)",
        source="OLMo 2 (Ai2, Nov 2024, 'OLMo 2: The best fully open language model to date'); "
        "7,298,617,344 is the Hub's safetensors total of allenai/OLMo-2-1124-7B."),
}


def _params(model) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def meta_params(cfg) -> dict:
    """The text model's parameters on the meta device; for a multimodal config also the whole
    model's, and its vision tower's and projector's."""
    with torch.device("meta"):
        if getattr(cfg, "text_config", None) is not None and cfg.model_type == "gemma3":
            from transformers import Gemma3ForCausalLM, Gemma3ForConditionalGeneration

            whole = Gemma3ForConditionalGeneration(cfg)
            text = Gemma3ForCausalLM(cfg.text_config)
            return {"text": _params(text), "whole": _params(whole),
                    "vision_tower": _params(whole.model.vision_tower),
                    "projector": _params(whole.model.multi_modal_projector)}
        return {"text": _params(AutoModelForCausalLM.from_config(cfg))}


def hf_cache_layers(cache) -> list[dict]:
    """Each layer of a transformers cache after a prefill: its kind, tokens kept, bytes."""
    out = []
    for layer in cache.layers:
        k, v = layer.keys, layer.values
        out.append({"kind": type(layer).__name__, "tokens": int(k.shape[-2]),
                    "bytes": int(k.numel() * k.element_size() + v.numel() * v.element_size())})
    return out


def measure_case(name: str, model_type: str, kwargs: dict) -> dict:
    cfg = AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager",
                                             dtype=torch.float32)
    model.eval()
    cfg = model.config
    res = forward_steps(model, count, V, at_cache=hf_cache_layers)
    out, layers, (kv_hf, _), bytes_w = res["out"], res["at_cache"], res["kv"], res["kv_window"]
    if cfg.final_logit_softcapping if hasattr(cfg, "final_logit_softcapping") else False:
        assert out["p"].logits.abs().max() < cfg.final_logit_softcapping

    hf_config = config_to_json_dict(cfg)
    check_roundtrip(cfg, hf_config)
    n_params = _params(model)
    n_meta = meta_params(AutoConfig.for_model(**hf_config))["text"]
    assert n_meta == n_params, (n_meta, n_params)
    return {
        "name": name,
        "model_type": model_type,
        "hf_config": hf_config,
        "batch": B,
        "seq": T,
        "prefill_flops": res["prefill"][0],
        "prefill_last_flops": res["prefill_last"][0],
        "decode_flops": res["decode"][0],
        "prefill_ops": res["prefill"][1],
        "decode_ops": res["decode"][1],
        "prefill_modules": res["prefill"][2],
        "decode_modules": res["decode"][2],
        "kv_cache_layers": layers,
        "kv_cache_bytes_hf": kv_hf,
        "kv_cache_bytes_window_w": bytes_w,
        "params": n_params,
        "params_meta": n_meta,
        "note": NOTES.get(name, ""),
    }


def measure_published() -> dict:
    out = {}
    for stem, meta in PUBLISHED.items():
        path = os.path.join(HF_DIR, f"{stem}.json")
        with open(path) as f:
            raw = json.load(f)
        counts = meta_params(AutoConfig.from_pretrained(path))
        out[stem] = {
            "file": os.path.relpath(path, REPO_ROOT),
            "repo": meta["repo"],
            "model_type": raw["model_type"],
            "architectures": raw.get("architectures"),
            "params_meta": counts["text"],
            "params_meta_whole": counts.get("whole", counts["text"]),
            "params_meta_vision_tower": counts.get("vision_tower"),
            "params_meta_projector": counts.get("projector"),
            "params_published": meta["params"],
            "figure": meta["figure"],
            "source": meta["source"],
        }
    return out


HOW = (
    "cases: tiny models built with AutoModelForCausalLM.from_config(cfg, "
    "attn_implementation='eager', dtype=torch.float32) after torch.manual_seed(0); eval(), "
    "torch.no_grad(), CPU. FLOPs are torch.utils.flop_counter.FlopCounterMode totals (matmul-like "
    "aten ops as 2*m*k*n; norms, softcapping, softmax, activations, RoPE are not counted). "
    "prefill: model(input_ids[B,T], use_cache=False); prefill_last: the same with "
    "logits_to_keep=1; decode: model(input_ids, use_cache=True) outside the counter fills the "
    "cache, then model(next_ids[B,1], <that cache>) is counted. kv_cache_layers: the cache after "
    "that prefill, per layer: its class (DynamicLayer, DynamicSlidingWindowLayer), tokens kept "
    "(keys.shape[-2]) and bytes of keys and values (float32). kv_cache_bytes_hf: their sum "
    "(transformers keeps sliding_window-1 tokens on a sliding layer); kv_cache_bytes_window_w: "
    "the same with min(T, sliding_window) tokens on sliding layers (vLLM's convention, the one "
    "shapecalc reports). params = params_meta: the built model's and the meta-device model's "
    "sums. published: each config.json in tests/data/hf of these families read with "
    "AutoConfig.from_pretrained and built under torch.device('meta'): params_meta is the text "
    "model's sum(p.numel()) (Gemma3ForCausalLM of the text_config for a multimodal gemma3); "
    "params_meta_whole the whole checkpoint's model (Gemma3ForConditionalGeneration: text, "
    "vision tower, projector), to compare with params_published."
)


def main(argv=None) -> int:
    def show(c: dict) -> str:
        return (f"prefill={c['prefill_flops']:>11,d} prefill_last={c['prefill_last_flops']:>11,d} "
                f"decode={c['decode_flops']:>10,d} kv={c['kv_cache_bytes_hf']:,d}/"
                f"{c['kv_cache_bytes_window_w']:,d} params={c['params']:,d}")

    return run(argv, __doc__.splitlines()[0], DEFAULT_OUT, CASES, measure_case, show, HOW,
               published=measure_published)


if __name__ == "__main__":
    sys.exit(main())
