"""`verify --against transformers` on tiny models: shapecalc.reference.measure.measure_config's
record (the meta device, float32) of one case of each family, written to
tests/data/against_reference.json. tests/test_verify_against.py compares shapecalc with these
records without torch, and checks them against the family's real-tensor numbers.

The cases are chosen for what transformers does differently from shapecalc's conventions, each
of which verify --against converts: sliding layers keeping W−1 tokens, chunked layers, Falcon's
broadcast K/V cache, MLA's latent form, Llama 4's dense experts; and for the module paths of
several families. Regenerate after the families (each record's config is its case's hf_config).
"""

from __future__ import annotations

OUT = "tests/data/against_reference.json"
# (family, case): B and T are the case's
CASES = [
    ("flops", "llama_gqa"),
    ("flops", "gpt2"),  # fused c_attn (Conv1D), learned positions, tied head
    ("flops", "mistral_gqa_sliding4"),  # W=4 < T=7
    ("alibi", "bloom_h6"),  # ALiBi, embedding LayerNorm
    ("classic", "falcon_new_two_norms"),  # K and V cached for every query head
    ("classic", "stablelm_parallel_qknorm"),  # per-head q/k norms (a ModuleList of norms)
    ("gemma", "gemma3_text_5to1_w3"),  # five sliding layers of W=3 to one full
    ("moe", "qwen2_moe_e12_k4_shared"),  # shared expert and its gate
    ("moe", "gpt_oss_e8_k3_sliding4"),  # sinks, biases, alternating sliding layers
    ("mla", "deepseek_v3_qlora_e8_k2"),  # MLA with q_lora, group-limited routing
    ("llama4", "llama4_c4_t10"),  # chunks of C=4, T=10: the caches and decode keys differ
]
HOW = (
    "shapecalc.reference.measure.measure_config(hf_config, B, T, 'fp32') of each case: the "
    "case's hf_config built with AutoModelForCausalLM.from_config(..., "
    "attn_implementation='eager', dtype=float32, experts_implementation='batched_mm') under "
    "torch.device('meta') (Llama 4's MoE routed: route_llama4); params per module; "
    "FlopCounterMode FLOPs per module over a prefill of B×T with all logits (use_cache=True: "
    "on the meta device the uncached mask looks for packed sequences, a data-dependent test) "
    "and one decode step on its cache; the cache after the prefill, layer by layer; the "
    "modules in forward order."
)
