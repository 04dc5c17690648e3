"""Inkling's text decoder (short convs on k, v and both branches, the relative bias from the
hidden states, own sliding-layer heads, shared experts in the router's softmax), measured by
measure_mixers.py into its own file:

    python3 tests/torch_reference/measure_mixers.py --cases \
        tests/torch_reference/mixer_cases_inkling.py --out tests/data/mixers_reference_inkling.json

Each case: (name, what, full_config, hf_config), as measure_mixers.py's CASES: params on the meta
device at full size, FLOPs with FlopCounterMode on real tensors at the reduced width of hf_config
(every symbol a different number; eager experts, each on its own tokens), caches after a bf16
prefill (the conv windows stay fp32: InklingShortConvolution runs in fp32)."""

from __future__ import annotations

import json
import os

HF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "hf")


def hub(stem: str) -> dict:
    with open(os.path.join(HF_DIR, f"{stem}.json")) as f:
        return json.load(f)


def _small(cfg: dict) -> dict:
    """A config at reduced width: its layer lists kept, its widths replaced."""
    return {**{k: v for k, v in cfg.items() if k != "architectures"}, **INKLING_SMALL}


# the preset's 66 layers at reduced width: sliding heads of their own (6, 3, 10 against 4, 2,
# 12), W = 20 and X_rel = 40 (both passed at T=300 only), D_rel 5, E 7, k 2, n_s 2, K_c 4
INKLING_SMALL = dict(vocab_size=320, hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                     head_dim=12, swa_num_attention_heads=6, swa_num_key_value_heads=3,
                     swa_head_dim=10, sliding_window_size=20, d_rel=5, rel_extent=40,
                     intermediate_size=80, moe_intermediate_size=20, n_routed_experts=7,
                     num_experts_per_tok=2, n_shared_experts=2, conv_kernel_size=4)
# dense layers first (dense_mlp_idx, its width in dense_intermediate_size: intermediate_size is
# then the experts'), local_layer_ids naming the sliding layers, kernel 3, an unpadded head,
# μP multiplier 16, 3 shared experts, GQA 4:1 on the full layers
INKLING_MIX = dict(model_type="inkling_text", vocab_size=320, unpadded_vocab_size=300,
                   hidden_size=40, num_hidden_layers=5, num_attention_heads=8,
                   num_key_value_heads=2, head_dim=6, swa_num_attention_heads=4,
                   swa_num_key_value_heads=4, swa_head_dim=8, sliding_window_size=24, d_rel=3,
                   rel_extent=30, local_layer_ids=[1, 2, 4], dense_mlp_idx=2,
                   dense_intermediate_size=72, intermediate_size=18, n_routed_experts=5,
                   num_experts_per_tok=3, n_shared_experts=3, conv_kernel_size=3,
                   route_scale=2.5, logits_mup_width_multiplier=16.0)
# every layer's type given, no MoE layer (a dense model), the sliding layers' heads the full ones',
# the full layers' logits log-scaled from position 8 on
INKLING_DENSE = dict(model_type="inkling_text", vocab_size=256, hidden_size=32,
                     num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                     head_dim=8, swa_num_attention_heads=4, swa_num_key_value_heads=4,
                     swa_head_dim=8, sliding_window_size=10, d_rel=2, rel_extent=12,
                     layer_types=["hybrid", "hybrid_sliding", "hybrid"],
                     mlp_layer_types=["dense", "dense", "dense"], intermediate_size=56,
                     conv_kernel_size=2, log_scaling_n_floor=8, log_scaling_alpha=0.3)
CASES = [
    ("inkling", "the preset's config.json: InklingTextConfig's defaults (no Hub config.json "
     "found); reduced width, its 66 layers", hub("inkling"), _small(hub("inkling"))),
    ("inkling-dense-first", "Inkling with dense_mlp_idx 2 (dense_intermediate_size), "
     "local_layer_ids, sliding heads of their own, kernel 3, unpadded_vocab_size, 3 shared "
     "experts", INKLING_MIX, INKLING_MIX),
    ("inkling-all-dense", "Inkling with layer_types and mlp_layer_types given, every layer "
     "dense, kernel 2, log-scaled logits (log_scaling_n_floor 8)", INKLING_DENSE, INKLING_DENSE),
]
