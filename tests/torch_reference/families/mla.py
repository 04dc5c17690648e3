"""Multi-head Latent Attention (DeepSeek-V2, DeepSeek-V3, Kimi K2): tests/data/mla_reference.json
(read by tests/test_mla.py).
"""

from __future__ import annotations

from .family import Family

B, T = 5, 7
V, MAXPOS = 1000, 256

# Every MLA width differs (D=64, H=4, D_q=24, D_c=32, D_n=16, D_r=8, D_v=12, Dff=96, Dff_e=20)
# so that a formula using one in place of another gives a different number.
MLA = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32,
           qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, vocab_size=V,
           max_position_embeddings=MAXPOS, intermediate_size=96, moe_intermediate_size=20,
           tie_word_embeddings=False)
CASES = [
    ("deepseek_v3_qlora_e8_k2", "deepseek_v3", dict(
        MLA, q_lora_rank=24, num_hidden_layers=3, first_k_dense_replace=1, n_routed_experts=8,
        num_experts_per_tok=2, n_group=2, topk_group=1, n_shared_experts=1,
        routed_scaling_factor=2.5, norm_topk_prob=True)),
    ("deepseek_v3_noq_lora_bias", "deepseek_v3", dict(
        MLA, q_lora_rank=None, num_hidden_layers=2, first_k_dense_replace=0, n_routed_experts=6,
        num_experts_per_tok=3, n_group=1, topk_group=1, n_shared_experts=2,
        routed_scaling_factor=1.5, norm_topk_prob=False, attention_bias=True)),
    ("deepseek_v2_lite_like", "deepseek_v2", dict(
        MLA, q_lora_rank=None, num_hidden_layers=3, first_k_dense_replace=1, n_routed_experts=8,
        num_experts_per_tok=3, n_shared_experts=2, topk_method="greedy",
        routed_scaling_factor=1.0, norm_topk_prob=False)),
    ("deepseek_v2_group_limited", "deepseek_v2", dict(
        MLA, q_lora_rank=24, num_hidden_layers=2, first_k_dense_replace=1, n_routed_experts=8,
        num_experts_per_tok=2, n_shared_experts=1, topk_method="group_limited_greedy",
        n_group=4, topk_group=2, routed_scaling_factor=16.0, norm_topk_prob=False,
        attention_bias=True, mlp_bias=True)),
]

NOTES = {
    "deepseek_v3_qlora_e8_k2": (
        "q_a_proj [D->D_q], q_a_layernorm, q_b_proj [D_q->H*(D_n+D_r)]; kv_a_proj_with_mqa "
        "[D->D_c+D_r], kv_a_layernorm, kv_b_proj [D_c->H*(D_n+D_v)] applied to every cached "
        "latent (prefill: T, decode: T+1 tokens); scores over D_n+D_r, values D_v, o_proj "
        "[H*D_v->D]. Layer 0 dense (first_k_dense_replace=1). Router: sigmoid + "
        "e_score_correction_bias (a buffer), group-limited top-k (n_group=2, topk_group=1), "
        "renormalised, x2.5; one shared expert of moe_intermediate_size."
    ),
    "deepseek_v3_noq_lora_bias": (
        "q_lora_rank=None: a plain q_proj [D->H*(D_n+D_r)] without bias. attention_bias=True "
        "puts biases on kv_a_proj_with_mqa and o_proj (aten.addmm). Every layer MoE; two shared "
        "experts as one MLP of 2*moe_intermediate_size."
    ),
    "deepseek_v2_lite_like": (
        "The V2-Lite shape: q_lora_rank=None, greedy softmax top-k (not renormalised), two "
        "shared experts, layer 0 dense. RoPE by complex multiplication (no matmul)."
    ),
    "deepseek_v2_group_limited": (
        "q_lora_rank=24, group_limited_greedy routing (n_group=4, topk_group=2), x16; "
        "attention_bias on q_a_proj, kv_a_proj_with_mqa, o_proj; mlp_bias on the dense MLP and "
        "the shared experts (the routed experts have no bias)."
    ),
}

PUBLISHED = {
    "deepseek-v2-lite": dict(
        repo="deepseek-ai/DeepSeek-V2-Lite", params=None,
        figure="15.7B total parameters, 2.4B activated",
        source="DeepSeek-V2-Lite model card and the DeepSeek-V2 paper (arXiv:2405.04434), "
        "section on DeepSeek-V2-Lite: 15.7B total, 2.4B activated for each token."),
    "deepseek-v2": dict(
        repo="deepseek-ai/DeepSeek-V2", params=None,
        figure="236B total parameters, 21B activated",
        source="DeepSeek-V2 paper (arXiv:2405.04434) abstract: 236B total parameters, of which "
        "21B are activated for each token."),
    "deepseek-v3": dict(
        repo="deepseek-ai/DeepSeek-V3", params=None,
        figure="671B total parameters (main model), 37B activated; 685B on the Hub with the "
        "14B multi-token-prediction module",
        source="DeepSeek-V3 technical report (arXiv:2412.19437) abstract: 671B total parameters "
        "with 37B activated for each token; its README: 'The total size of DeepSeek-V3 models "
        "on Hugging Face is 685B, which includes 671B of the Main Model weights and 14B of the "
        "Multi-Token Prediction (MTP) Module weights.'"),
    "kimi-k2": dict(
        repo="moonshotai/Kimi-K2-Instruct", params=None,
        figure="1 trillion total parameters, 32 billion activated",
        source="Kimi K2 model card (moonshotai/Kimi-K2-Instruct): 'a state-of-the-art "
        "mixture-of-experts (MoE) language model with 32 billion activated parameters and 1 "
        "trillion total parameters'; its config.json says model_type kimi_k2 with "
        "architectures DeepseekV3ForCausalLM (transformers maps kimi_k2 to deepseek_v3)."),
}

HOW = (
    "cases: as the moe family measures (tiny models, AutoModelForCausalLM.from_config(cfg, "
    "attn_implementation='eager', dtype=torch.float32, experts_implementation='eager') after "
    "torch.manual_seed(0), routers redrawn from N(0,1), eval(), no_grad, CPU, FlopCounterMode "
    "counting matmul-like aten ops as 2*m*k*n). prefill: model(input_ids[B,T], use_cache=False); "
    "prefill_last: logits_to_keep=1; decode: one token on the DynamicCache a use_cache=True "
    "prefill filled. kv_cache_bytes_prefill / _decode: sum of numel*element_size of every "
    "tensor in cache.layers[i].keys / .values after the prefill / after the decode step "
    "(float32; MLA caches the normalised latent c_KV [B,1,T,kv_lora_rank] as keys and the "
    "rotated k_rope [B,1,T,qk_rope_head_dim] as values). published: the config.json files built "
    "on the meta device (quantization_config dropped: the count is the bf16 model's; "
    "model_type kimi_k2 read as deepseek_v3, as transformers' kimi_k25 config does); "
    "params_published is null where no exact integer is published: the figure is the "
    "publisher's rounded one."
)


def _show(c: dict) -> str:
    return (f"prefill={c['prefill_flops']:>10,d} decode={c['decode_flops']:>9,d} "
            f"kv={c['kv_cache_bytes_prefill']:,d} params={c['params']:,d}")


FAMILY = Family(
    name="mla", out="tests/data/mla_reference.json", cases=CASES, notes=NOTES, how=HOW,
    show=_show, batch=B, seq=T, vocab=V, build={"experts_implementation": "eager"},
    probes=("redraw_routers", "routing", "cache_after_decode"),
    record=["name", "model_type", "hf_config", "batch", "seq", "experts_implementation",
            "prefill_flops", "prefill_last_flops", "decode_flops", "prefill_ops", "decode_ops",
            "prefill_modules", "decode_modules", ("kv_cache_bytes_prefill", "kv_cache_bytes"),
            "kv_cache_bytes_decode", ("kv_cache_shapes_prefill", "kv_cache_shapes"), "routing",
            "expert_flops", "params", "params_meta", "note"],
    extra={"router_classes": ["Router"]},
    published=PUBLISHED,
    published_record=["file", "repo", "model_type", "architectures", ("params_meta", "text"),
                      ("params_published", "params"), "figure", "source"],
)
