"""Gemma 2, Gemma 3 (text) and OLMo 2: tests/data/gemma_reference.json (read by
tests/test_gemma.py).
"""

from __future__ import annotations

from .family import Family

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


def _show(c: dict) -> str:
    return (f"prefill={c['prefill_flops']:>11,d} prefill_last={c['prefill_last_flops']:>11,d} "
            f"decode={c['decode_flops']:>10,d} kv={c['kv_cache_bytes_hf']:,d}/"
            f"{c['kv_cache_bytes_window_w']:,d} params={c['params']:,d}")


FAMILY = Family(
    name="gemma", out="tests/data/gemma_reference.json", cases=CASES, notes=NOTES, how=HOW,
    show=_show, batch=B, seq=T, vocab=V,
    record=["name", "model_type", "hf_config", "batch", "seq", "prefill_flops",
            "prefill_last_flops", "decode_flops", "prefill_ops", "decode_ops", "prefill_modules",
            "decode_modules", "kv_cache_layers", ("kv_cache_bytes_hf", "kv_cache_bytes"),
            ("kv_cache_bytes_window_w", "kv_cache_bytes_window_W"), "params", "params_meta",
            "note"],
    published=PUBLISHED,
    published_record=["file", "repo", "model_type", "architectures", ("params_meta", "text"),
                      ("params_meta_whole", "whole"),
                      ("params_meta_vision_tower", lambda g: g.get("vision_tower")),
                      ("params_meta_projector", lambda g: g.get("multi_modal_projector")),
                      ("params_published", "params"), "figure", "source"],
)
