"""Mixture-of-Experts families (mixtral, qwen2_moe, qwen3_moe, phimoe, gpt_oss, and dense qwen3):
tests/data/moe_reference.json (read by tests/test_moe_reference*.py).
"""

from __future__ import annotations

from .family import Family

B, T = 5, 7
D, H, HKV, V, MAXPOS = 64, 4, 2, 1000, 256

# Sizes differ between the symbols of a case (D=64, Dh=16 or 24, Dff_e, Dff_s, dense I=176, E, k)
# so that a formula that swaps two of them gives a different number.
CASES = [
    ("mixtral_e8_k2", "mixtral", dict(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=HKV, head_dim=16,
        num_hidden_layers=3, vocab_size=V, max_position_embeddings=MAXPOS,
        intermediate_size=48, num_local_experts=8, num_experts_per_tok=2,
        sliding_window=None, tie_word_embeddings=False)),
    ("qwen2_moe_e12_k4_shared", "qwen2_moe", dict(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=HKV,
        num_hidden_layers=3, vocab_size=V, max_position_embeddings=MAXPOS,
        intermediate_size=176, moe_intermediate_size=40, shared_expert_intermediate_size=80,
        num_experts=12, num_experts_per_tok=4, norm_topk_prob=False, decoder_sparse_step=1,
        mlp_only_layers=[], use_sliding_window=False, tie_word_embeddings=False)),
    ("qwen3_moe_e16_k4_dense0", "qwen3_moe", dict(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=HKV, head_dim=24,
        num_hidden_layers=3, vocab_size=V, max_position_embeddings=MAXPOS,
        intermediate_size=176, moe_intermediate_size=32, num_experts=16,
        num_experts_per_tok=4, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[0],
        use_sliding_window=False, tie_word_embeddings=False)),
    ("qwen3_moe_e16_k4_step2", "qwen3_moe", dict(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=HKV, head_dim=24,
        num_hidden_layers=4, vocab_size=V, max_position_embeddings=MAXPOS,
        intermediate_size=176, moe_intermediate_size=32, num_experts=16,
        num_experts_per_tok=4, norm_topk_prob=True, decoder_sparse_step=2, mlp_only_layers=[],
        use_sliding_window=False, tie_word_embeddings=False)),
    ("phimoe_e6_k2", "phimoe", dict(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=HKV,
        num_hidden_layers=3, vocab_size=V, max_position_embeddings=MAXPOS,
        intermediate_size=56, num_local_experts=6, num_experts_per_tok=2,
        attention_bias=True, lm_head_bias=True, sliding_window=None, tie_word_embeddings=False)),
    ("gpt_oss_e8_k3_sliding4", "gpt_oss", dict(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=HKV, head_dim=16,
        num_hidden_layers=4, vocab_size=V, max_position_embeddings=MAXPOS,
        intermediate_size=48, num_local_experts=8, num_experts_per_tok=3,
        layer_types=["sliding_attention", "full_attention"] * 2, sliding_window=4,
        attention_bias=True, tie_word_embeddings=False)),
    ("qwen3_dense", "qwen3", dict(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=HKV, head_dim=24,
        num_hidden_layers=3, vocab_size=V, max_position_embeddings=MAXPOS,
        intermediate_size=176, use_sliding_window=False, tie_word_embeddings=False)),
]

# Per-case remarks stored next to the numbers (facts checked against transformers 5.24.0).
NOTES = {
    "mixtral_e8_k2": (
        "Router D->E without bias (aten.mm); softmax over all E, top-k, renormalised "
        "(elementwise, not counted). Experts: gate_up_proj [E,2F,D] and down_proj [E,D,F], "
        "F=intermediate_size."
    ),
    "qwen2_moe_e12_k4_shared": (
        "Shared expert (gated MLP of width shared_expert_intermediate_size=80) runs on every "
        "token; shared_expert_gate is Linear(D,1) without bias (aten.mm, 2*N*D) and scales it by "
        "a sigmoid. q,k,v have biases (qkv_bias=True, aten.addmm), o does not. "
        "norm_topk_prob=False."
    ),
    "qwen3_moe_e16_k4_dense0": (
        "mlp_only_layers=[0]: layer 0 is a dense gated MLP of width intermediate_size=176, layers "
        "1-2 are MoE. head_dim=24 so H*Dh=96 != D=64; q_norm/k_norm are elementwise (not "
        "counted)."
    ),
    "qwen3_moe_e16_k4_step2": (
        "decoder_sparse_step=2: layer i is MoE when (i+1) % 2 == 0, so layers 1 and 3 are MoE and "
        "layers 0 and 2 are dense gated MLPs of width intermediate_size=176."
    ),
    "phimoe_e6_k2": (
        "sparsemixer routing (top-2 only, eval path: no jitter). LayerNorm with bias; "
        "attention_bias puts biases on q,k,v,o (aten.addmm); lm_head_bias=True makes the LM head "
        "an aten.addmm."
    ),
    "gpt_oss_e8_k3_sliding4": (
        "Router D->E with bias (aten.addmm); softmax over the top-k logits. Experts have biases "
        "(gate_up_proj_bias [E,2F], down_proj_bias [E,D]); the gated SwiGLU with clamp and alpha "
        "is elementwise. Attention has biases on q,k,v,o and per-head sinks (a column "
        "concatenated to the logits before the softmax: no matmul FLOPs). Eager prefill computes "
        "the full TxT scores on sliding layers too (the window is only a mask). In decode the "
        "sliding layers' cache (DynamicSlidingWindowLayer) holds the last sliding_window-1=3 "
        "keys, so the new token attends over 4 keys there and over T+1=8 on the full layers."
    ),
    "qwen3_dense": (
        "Dense Qwen3 (the path qwen3-8b takes): q_norm/k_norm elementwise; head_dim=24 != D/H."
    ),
}

# The published configs in tests/data/hf: Hub repository, the figure its publisher gives, and
# where the exact integer comes from (the meta-device sum must equal it).
PUBLISHED = {
    "mixtral-8x7b": dict(
        repo="mistralai/Mixtral-8x7B-v0.1", params=46_702_792_704,
        figure="46.7B total parameters, 12.9B used per token",
        source="Mistral AI, 'Mixtral of experts' (Dec 2023): 46.7B total, 12.9B per token; the "
        "exact 46,702,792,704 is the Hub's safetensors total and keras-hub's mixtral_8_7b_en "
        "preset 'params' (keras_hub/src/models/mixtral/mixtral_presets.py)."),
    "mixtral-8x22b": dict(
        repo="mistralai/Mixtral-8x22B-v0.1", params=140_620_634_112,
        figure="141B total parameters, 39B active",
        source="Mistral AI, 'Cheaper, Better, Faster, Stronger' (Apr 2024): 39B active of 141B; "
        "the exact 140,620,634,112 is the Hub's safetensors total of the 8x22B checkpoints (e.g. "
        "the mistral-community/Mixtral-8x22B-v0.1 and alpindale/WizardLM-2-8x22B mirrors)."),
    "qwen1.5-moe-a2.7b": dict(
        repo="Qwen/Qwen1.5-MoE-A2.7B", params=14_315_784_192,
        figure="14.3B parameters, 2.7B activated",
        source="Qwen blog 'Qwen1.5-MoE: Matching 7B Model Performance with 1/3 Activated "
        "Parameters' (Mar 2024); the exact 14,315,784,192 is the Hub's safetensors total and "
        "keras-hub's qwen1.5_moe_2.7b_en preset 'params'."),
    "qwen3-30b-a3b": dict(
        repo="Qwen/Qwen3-30B-A3B", params=30_532_122_624,
        figure="30.5B in total and 3.3B activated; non-embedding 29.9B",
        source="Qwen3-30B-A3B model card ('Number of Parameters: 30.5B in total and 3.3B "
        "activated'); the exact 30,532,122,624 is the Hub's safetensors total, keras-hub's "
        "qwen3_moe_30b_a3b_en preset 'params' and llama.cpp's general.parameter_count."),
    "qwen3-235b-a22b": dict(
        repo="Qwen/Qwen3-235B-A22B", params=235_093_634_560,
        figure="235B in total and 22B activated; non-embedding 234B",
        source="Qwen3-235B-A22B model card; the exact 235,093,634,560 is the Hub API's "
        "safetensors total (BF16) and keras-hub's qwen3_moe_235b_a22b_en preset 'params'."),
    "qwen3-8b": dict(
        repo="Qwen/Qwen3-8B", params=8_190_735_360,
        figure="8.2B parameters; non-embedding 6.95B",
        source="Qwen3-8B model card; the exact 8,190,735,360 is the Hub's safetensors total and "
        "keras-hub's qwen3_8b_en preset 'params' ('8.19B')."),
    "phi3.5-moe": dict(
        repo="microsoft/Phi-3.5-MoE-instruct", params=41_873_153_344,
        figure="16x3.8B parameters with 6.6B active parameters (Hub: 41.9B params)",
        source="Phi-3.5-MoE-instruct model card ('16x3.8B parameters with 6.6B active parameters "
        "when using 2 experts'), the Hub's '41.9B params'; the exact 41,873,153,344 is quoted in "
        "r/LocalLLaMA's Phi-3.5 release summaries (feed-forward 40,267,415,552) - a secondary "
        "source, and the only integer the config allows."),
    "gpt-oss-20b": dict(
        repo="openai/gpt-oss-20b", params=20_914_757_184,
        figure="20.91B total parameters, 3.61B active (model card table: 21B / 3.6B)",
        source="OpenAI, gpt-oss-120b & gpt-oss-20b model card (Aug 2025), parameter-count table "
        "(Total 20.91B); the exact 20,914,757,184 is llama.cpp/Ollama's general.parameter_count "
        "for gpt-oss:20b. The Hub page shows 21.5B because the MXFP4 blocks are stored as uint8."),
    "gpt-oss-120b": dict(
        repo="openai/gpt-oss-120b", params=116_829_156_672,
        figure="116.83B total parameters, 5.13B active (model card table: 117B / 5.1B)",
        source="OpenAI, gpt-oss-120b & gpt-oss-20b model card (Aug 2025), parameter-count table "
        "(Total 116.83B); the exact 116,829,156,672 is llama.cpp/Ollama's general.parameter_count "
        "for gpt-oss:120b."),
}

HOW = (
    "cases: tiny models built with AutoModelForCausalLM.from_config(cfg, "
    "attn_implementation='eager', dtype=torch.float32, experts_implementation='eager') after "
    "torch.manual_seed(0); then every router's weight (and bias, gpt_oss) is redrawn from N(0,1) "
    "(torch.Generator seed 1), so the routing is random and token-dependent whatever "
    "transformers' initialisation does (the routing of each forward is recorded under "
    "'routing'). eval(), torch.no_grad(), CPU. FLOPs are "
    "torch.utils.flop_counter.FlopCounterMode(display=False).get_total_flops(): matmul-like aten "
    "ops (mm, addmm, bmm, ...) as 2*m*k*n; bias adds, softmax, top-k, norms, activations, routing "
    "weights and the weighted combine are NOT counted. *_ops: get_flop_counts()['Global']. "
    "*_modules: FLOPs per module not attributed to a child module, keyed by the path below the "
    "model class (so 'model.layers.0.self_attn' alone is the attention core QK^T and AV, "
    "'model.layers.i.mlp.experts' the routed experts, 'model.layers.i.mlp.gate' or '.router' the "
    "router); they sum to the total. prefill: model(input_ids[B,T], use_cache=False), logits for "
    "all T positions. prefill_last: the same with logits_to_keep=1. decode: model(input_ids[B,T], "
    "use_cache=True) outside the counter fills a DynamicCache, then only model(next_ids[B,1], "
    "cache=<that cache>, use_cache=True) is counted. experts_implementation='eager' is the "
    "experts class's own forward: a loop over the experts hit, each running gate_up and down on "
    "the tokens routed to it (aten.mm), so the routed-expert FLOPs are exactly "
    "2*assignments*3*D*Dff_e per MoE layer (assignments = tokens*k: no capacity limit, no dropped "
    "tokens); the script asserts this for every MoE layer (expert_flops). "
    "prefill_flops_by_experts_implementation re-measures the prefill under the other "
    "implementations: 'batched_mm' gathers one weight matrix per (token, expert) pair and "
    "multiplies with aten.bmm, also only the routed pairs, so it gives the same total; "
    "'grouped_mm' calls torch.nn.functional.grouped_mm, which FlopCounterMode in torch 2.13 has "
    "no formula for, so the routed experts count zero there. routing: per MoE layer the router's "
    "top-k indices of that forward: tokens, top_k, assignments, experts_hit, tokens_per_expert. "
    "hf_config is cfg.to_dict() of the built model (JSON-serialisable entries) and re-reads via "
    "AutoConfig.from_pretrained. params: sum(p.numel()) of the built model; params_meta: the same "
    "config built on the meta device (equal). published: each config.json in tests/data/hf read "
    "with AutoConfig.from_pretrained and built with AutoModelForCausalLM.from_config under "
    "torch.device('meta'); params_meta = sum(p.numel() for p in model.parameters()); "
    "params_published: the exact published integer, figure: the publisher's rounded figure, "
    "source: where both come from. kv_cache_bytes: sum of numel*element_size of every tensor in "
    "cache.layers[i].keys/.values after the use_cache=True prefill (float32), kv_cache_shapes "
    "each layer's; kv_cache_bytes_window_W: the same cache if each sliding layer kept min(T, W) "
    "tokens (vLLM's convention, which shapecalc reports) instead of transformers' W-1. "
    "gpt-oss's quantization_config (mxfp4) is not applied by "
    "from_config: the count is of the dequantized (bf16) model, as the model card counts."
)


def _show(c: dict) -> str:
    return (f"prefill={c['prefill_flops']:>11,d} prefill_last={c['prefill_last_flops']:>11,d} "
            f"decode={c['decode_flops']:>10,d} params={c['params']:,d}")


FAMILY = Family(
    name="moe", out="tests/data/moe_reference.json", cases=CASES, notes=NOTES, how=HOW,
    show=_show, batch=B, seq=T, vocab=V, build={"experts_implementation": "eager"},
    probes=("redraw_routers", "routing", "experts_implementations"),
    record=["name", "model_type", "hf_config", "batch", "seq", "experts_implementation",
            "prefill_flops", "prefill_last_flops", "decode_flops", "prefill_ops",
            "prefill_last_ops", "decode_ops", "prefill_modules", "prefill_last_modules",
            "decode_modules", "params", "params_meta", "kv_cache_bytes", "kv_cache_bytes_window_W",
            "kv_cache_shapes", "note", "routing?", "expert_flops?",
            "prefill_flops_by_experts_implementation?"],
    published=PUBLISHED,
    published_record=["file", "repo", "model_type", "architectures", ("params_meta", "text"),
                      ("params_published", "params"), "figure", "source"],
)
