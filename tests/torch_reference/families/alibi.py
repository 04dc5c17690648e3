"""BLOOM, MPT, GPT-BigCode (StarCoder 1 / SantaCoder) and StarCoder2:
tests/data/alibi_reference.json (read by tests/test_alibi_reference.py).
"""

from __future__ import annotations

from .family import Family

B, T = 5, 7
V = 1000

# Head counts 6 and 12 are not powers of two, so the extra-slope rule of ALiBi runs; D, Dh, Dff
# and the vocabulary differ so that a formula swapping two of them gives another number.
CASES = [
    ("bloom_h6", "bloom", dict(
        hidden_size=96, n_head=6, n_layer=2, vocab_size=V, tie_word_embeddings=True)),
    ("bloom_h4_untied", "bloom", dict(
        hidden_size=64, n_head=4, n_layer=3, vocab_size=V, tie_word_embeddings=False)),
    ("mpt_h12", "mpt", dict(
        d_model=96, n_heads=12, n_layers=2, vocab_size=V, max_seq_len=64,
        tie_word_embeddings=True)),
    ("gpt_bigcode_mqa", "gpt_bigcode", dict(
        n_embd=64, n_head=4, n_layer=2, n_inner=176, n_positions=64, vocab_size=V,
        multi_query=True, tie_word_embeddings=True)),
    ("gpt_bigcode_mha", "gpt_bigcode", dict(
        n_embd=64, n_head=4, n_layer=2, n_inner=None, n_positions=64, vocab_size=V,
        multi_query=False, tie_word_embeddings=False)),
    ("starcoder2_sliding4", "starcoder2", dict(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
        intermediate_size=176, vocab_size=V, max_position_embeddings=64, sliding_window=4,
        use_bias=True, tie_word_embeddings=False)),
    ("starcoder2_full_nobias", "starcoder2", dict(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=1, num_hidden_layers=2,
        intermediate_size=176, vocab_size=V, max_position_embeddings=64, sliding_window=None,
        use_bias=False, tie_word_embeddings=True)),
]

NOTES = {
    "bloom_h6": (
        "word_embeddings_layernorm (gamma, beta: 2*D params, elementwise). query_key_value "
        "[D,3D] with bias (aten.addmm). The scores are alibi.baddbmm(Q, K^T, alpha=1/sqrt(Dh)): "
        "FlopCounterMode counts baddbmm as the bmm 2*B*H*Tq*Tk*Dh; the ALiBi add is not counted. "
        "H=6 is not a power of two: slopes 2^(-8h/4) for h=1..4, then 2^(-1), 2^(-3)."
    ),
    "bloom_h4_untied": "tie_word_embeddings=false: a separate lm_head [D,V] without bias.",
    "mpt_h12": (
        "No biases, LayerNorm without beta, MLP 4*D (expansion_ratio is not read by "
        "transformers). Scores: matmul * softmax_scale + the ALiBi table sliced from "
        "max_seq_len=64 columns (elementwise)."
    ),
    "gpt_bigcode_mqa": (
        "multi_query=true: c_attn [D, D+2*Dh] with bias; the cache holds K and V of ONE head "
        "per layer ([B,1,T,Dh] each: transformers 5.x splits the fused c_attn output before "
        "caching, where 4.x cached the fused [B,T,2*Dh] key_value; the same bytes). Eager "
        "attention repeats the one K/V head for the H query heads (a view, no FLOPs)."
    ),
    "gpt_bigcode_mha": "multi_query=false: c_attn [D,3D], n_inner null = 4*D.",
    "starcoder2_sliding4": (
        "sliding_window=4 < T=7 on every layer. Eager prefill computes the full TxT scores "
        "(the window is a mask). DynamicSlidingWindowLayer keeps the last sliding_window-1=3 "
        "tokens after the prefill (kv_cache_bytes), where a cache that keeps W=4 tokens "
        "(vLLM's, and shapecalc's) holds kv_cache_bytes_window_W; the decode token attends "
        "over 3 cached keys plus itself = 4 = W either way."
    ),
    "starcoder2_full_nobias": "use_bias=false: no biases on q,k,v,o,c_fc,c_proj (aten.mm); "
                              "the LayerNorms keep beta. H_kv=1.",
}

# The published configs in tests/data/hf: Hub repository, the figure its publisher gives, and
# where the exact integer comes from (the meta-device sum must equal it when one is given).
PUBLISHED = {
    "bloom-560m": dict(
        repo="bigscience/bloom-560m", params=559_214_592,
        figure="559,214,592 parameters (256,901,120 embedding parameters)",
        source="bigscience/bloom-560m model card, 'Model Architecture and Objective'; also "
        "keras-hub's bloom_560m_multi preset 'params' and the Hub's safetensors total."),
    "bloom-7b1": dict(
        repo="bigscience/bloom-7b1", params=7_069_016_064,
        figure="7,069,016,064 parameters (1,027,604,480 embedding parameters)",
        source="bigscience/bloom-7b1 model card, 'Model Architecture and Objective'; the same "
        "integer in public BLOOM model-size lists (bloom-7b1: 7.07B, 7069016064)."),
    "mpt-7b": dict(
        repo="mosaicml/mpt-7b", params=None,
        figure="6.7B (model card hyperparameters: n_parameters 6.7B)",
        source="mosaicml/mpt-7b model card; no exact integer is published, the meta-device "
        "count 6,649,286,656 rounds to it."),
    "starcoder": dict(
        repo="bigcode/starcoder", params=15_517_456_384,
        figure="15.5B parameters",
        source="bigcode/starcoder model card and the StarCoder paper (15.5B); the exact "
        "15,517,456,384 is quoted in a public scaling-analysis table (multipl-t-starcoder-15b) "
        "- a secondary source, and the only integer the config allows."),
    "starcoder2-15b": dict(
        repo="bigcode/starcoder2-15b", params=None,
        figure="15B parameters (StarCoder2-15B)",
        source="bigcode/starcoder2-15b model card and the StarCoder 2 paper; no exact integer "
        "is published there, the meta-device count 15,957,889,024 rounds to 16B (untied "
        "lm_head, as the config says)."),
}

HOW = (
    "cases: tiny models built with AutoModelForCausalLM.from_config(cfg, "
    "attn_implementation='eager', dtype=torch.float32) after torch.manual_seed(0); eval(), "
    "torch.no_grad(), CPU. FLOPs are torch.utils.flop_counter.FlopCounterMode(display=False)"
    ".get_total_flops(): matmul-like aten ops (mm, addmm, bmm, baddbmm, ...) as 2*m*k*n; bias "
    "adds, the ALiBi add, norms, softmax, activations are NOT counted. *_ops: "
    "get_flop_counts()['Global']; *_modules: FLOPs per module not attributed to a child. "
    "prefill: model(input_ids[B,T], use_cache=False), logits for all T positions. "
    "prefill_last: the same with logits_to_keep=1. decode: model(input_ids[B,T], use_cache=True) "
    "outside the counter fills a DynamicCache, then only model(next_ids[B,1], cache=<that "
    "cache>, use_cache=True) is counted; the script asserts its logits equal the last position "
    "of a full forward over T+1 tokens. kv_cache_bytes: sum of numel*element_size of every "
    "layer's cached keys and values after the prefill (before the decode); "
    "kv_cache_tokens_per_layer and kv_cache_key_shape_per_layer: what each layer holds. "
    "kv_cache_bytes_window_W: the same cache holding min(T, W) tokens per layer (W the "
    "sliding window; T without one), computed from those shapes. hf_config: cfg.to_dict() of "
    "the built model, re-readable by AutoConfig.from_pretrained. params: sum(p.numel()) of the "
    "built model; params_meta: the same config built on the meta device (equal). published: "
    "each config.json read with AutoConfig.from_pretrained and built with "
    "AutoModelForCausalLM.from_config under torch.device('meta'); params_meta = "
    "sum(p.numel() for p in model.parameters()); params_published: the exact published "
    "integer (null where only a rounded figure is published); figure; source."
)


def _show(c: dict) -> str:
    return (f"prefill={c['prefill_flops']:>11,d} prefill_last={c['prefill_last_flops']:>11,d} "
            f"decode={c['decode_flops']:>10,d} kv={c['kv_cache_bytes']:,d} "
            f"params={c['params']:,d}")


FAMILY = Family(
    name="alibi", out="tests/data/alibi_reference.json", cases=CASES, notes=NOTES, how=HOW,
    show=_show, batch=B, seq=T, vocab=V, probes=("decode_is_full",),
    record=["name", "model_type", "hf_config", "batch", "seq", "prefill_flops",
            "prefill_last_flops", "decode_flops", "prefill_ops", "prefill_last_ops", "decode_ops",
            "prefill_modules", "decode_modules", "kv_cache_bytes",
            ("kv_cache_tokens_per_layer", lambda g: [k[-2] for k, _ in g["kv_cache_shapes"]]),
            ("kv_cache_key_shape_per_layer", lambda g: [k for k, _ in g["kv_cache_shapes"]]),
            "kv_cache_bytes_window_W", "params", "params_meta", "note"],
    published=PUBLISHED,
    published_record=["file", "repo", "model_type", "architectures", ("params_meta", "text"),
                      ("params_published", "params"), "figure", "source"],
)
