#!/usr/bin/env python3
"""Measure Multi-head Latent Attention references (DeepSeek-V2, DeepSeek-V3, Kimi K2) with PyTorch
and write ``tests/data/mla_reference.json``.

Run manually (the test suite only reads the JSON, it never imports this file):

    pip install torch==2.13.0+cpu transformers==5.24.0
    python tests/torch_reference/measure_mla.py [--out PATH]

Two parts, as in ``measure_moe.py`` (whose counting, routing and meta-device helpers are reused):

  * ``cases``: tiny deepseek_v2 / deepseek_v3 models, random weights, float32, eager attention, the
    eager experts loop, real routing (routers redrawn from N(0, 1)), B=5, T=7: FlopCounterMode for
    prefill (all logits, last logit) and decode, per-module FLOPs, routing, and the bytes the
    transformers cache holds after the prefill and after the decode step (each layer's cached
    tensors: the latent c_KV [B,1,T,kv_lora_rank] and k_rope [B,1,T,qk_rope_head_dim]).
  * ``published``: the real config.json files in ``tests/data/hf`` (DeepSeek-V2-Lite, DeepSeek-V2,
    DeepSeek-V3, Kimi-K2) built on the meta device, next to the published figures.

transformers 5.24 caches the latent and applies kv_b_proj to every cached token at every step
(shapecalc's ``--mla-form latent``); the FLOPs here are that form's.
"""

from __future__ import annotations

import inspect
import os
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure_flops import cache_bytes, check_roundtrip, config_to_json_dict, run
from measure_moe import (
    ROUTER_CLASSES,
    RoutingLog,
    count,
    expert_check,
    meta_params,
    published_counts,
    randomize_routers,
)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO_ROOT, "tests", "data", "mla_reference.json")
HF_DIR = os.path.join(REPO_ROOT, "tests", "data", "hf")

B, T = 5, 7
V, MAXPOS = 1000, 256
EXPERTS_IMPL = "eager"

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


def measure_case(name: str, model_type: str, kwargs: dict) -> dict:
    cfg = AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(
        cfg, attn_implementation="eager", dtype=torch.float32, experts_implementation=EXPERTS_IMPL
    )
    model.eval()
    randomize_routers(model)
    cfg = model.config
    log = RoutingLog(model)
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, V, (B, T), generator=g)
    next_ids = torch.randint(0, V, (B, 1), generator=g)
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else (
        "past_key_values")
    res, out = {}, {}
    with torch.no_grad():
        res["prefill"] = count(lambda: out.setdefault("p", model(input_ids, use_cache=False)))
        routing = {"prefill": log.take()}
        res["prefill_last"] = count(
            lambda: out.setdefault("pl", model(input_ids, use_cache=False, logits_to_keep=1)))
        assert log.take() == routing["prefill"]
        pre = model(input_ids, use_cache=True)
        log.take()
        past = getattr(pre, "cache", None) if cache_kw == "cache" else pre.past_key_values
        kv_prefill, kv_shapes = cache_bytes(past)
        res["decode"] = count(
            lambda: out.setdefault("d", model(next_ids, use_cache=True, **{cache_kw: past})))
        routing["decode"] = log.take()
        kv_decode, _ = cache_bytes(past)
        experts = {"prefill": expert_check(cfg, res["prefill"][2], routing["prefill"]),
                   "decode": expert_check(cfg, res["decode"][2], routing["decode"])}
    assert out["d"].logits.shape == (B, 1, V)
    hf_config = config_to_json_dict(cfg)
    hf_config.pop("experts_implementation", None)
    check_roundtrip(cfg, hf_config)
    n_params = int(sum(p.numel() for p in model.parameters()))
    n_meta = meta_params(AutoConfig.for_model(**hf_config))
    assert n_meta == n_params, (n_meta, n_params)
    return {
        "name": name,
        "model_type": model_type,
        "hf_config": hf_config,
        "batch": B,
        "seq": T,
        "experts_implementation": EXPERTS_IMPL,
        "prefill_flops": res["prefill"][0],
        "prefill_last_flops": res["prefill_last"][0],
        "decode_flops": res["decode"][0],
        "prefill_ops": res["prefill"][1],
        "decode_ops": res["decode"][1],
        "prefill_modules": res["prefill"][2],
        "decode_modules": res["decode"][2],
        "kv_cache_bytes_prefill": kv_prefill,
        "kv_cache_bytes_decode": kv_decode,
        "kv_cache_shapes_prefill": kv_shapes,
        "routing": routing,
        "expert_flops": experts,
        "params": n_params,
        "params_meta": n_meta,
        "note": NOTES.get(name, ""),
    }


def _hub_config(path: str, raw: dict):
    """The config transformers builds: quantization_config dropped (the bf16 model is counted),
    model_type kimi_k2 read as deepseek_v3 (as transformers' kimi_k25 maps it)."""
    d = {k: v for k, v in raw.items() if k != "quantization_config"}
    if d["model_type"] == "kimi_k2":
        d["model_type"] = "deepseek_v3"
    return AutoConfig.for_model(**d)


def measure_published() -> dict:
    return published_counts(PUBLISHED, _hub_config)


HOW = (
    "cases: as measure_moe.py (tiny models, AutoModelForCausalLM.from_config(cfg, "
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


def main(argv=None) -> int:
    def show(c: dict) -> str:
        return (f"prefill={c['prefill_flops']:>10,d} decode={c['decode_flops']:>9,d} "
                f"kv={c['kv_cache_bytes_prefill']:,d} params={c['params']:,d}")

    return run(argv, __doc__.splitlines()[0], DEFAULT_OUT, CASES, measure_case, show, HOW,
               published=measure_published, extra={"router_classes": list(ROUTER_CLASSES)})


if __name__ == "__main__":
    sys.exit(main())
