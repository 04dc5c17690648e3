"""ZAYA's family (CCA attention, top-1 MoE with its MLP router), measured by measure_mixers.py
into its own file:

    python3 tests/torch_reference/measure_mixers.py --cases \
        tests/torch_reference/mixer_cases_zaya.py --out tests/data/mixers_reference_zaya.json

Each case: (name, what, full_config, hf_config), as measure_mixers.py's CASES: params on the meta
device at full size, FLOPs with FlopCounterMode on real tensors at the reduced width of
hf_config (every symbol a different number; eager experts: at initialisation the skip expert's
balancing bias of −1 keeps it unchosen, so every token runs one expert), caches after a bf16
prefill."""

from __future__ import annotations

import json
import os

HF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "hf")


def hub(stem: str) -> dict:
    with open(os.path.join(HF_DIR, f"{stem}.json")) as f:
        return json.load(f)


# ZAYA at reduced width: its 40 layers, Dh 12 (R = 6), K_d = K_g = 2 as the preset's
ZAYA_SMALL = dict(vocab_size=320, hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=12, moe_intermediate_size=20, num_experts=5, router_hidden_size=14)
# sliding and full layers (W = 20: past T=16 only), biases on the attention and the LM head,
# kernels 3 and 2, untied, 3 query heads a KV head
ZAYA_MIX = dict(model_type="zaya", vocab_size=320, hidden_size=40, num_hidden_layers=4,
                num_attention_heads=6, num_key_value_heads=2, head_dim=8,
                moe_intermediate_size=24, num_experts=3, router_hidden_size=10, cca_time0=3,
                cca_time1=2, attention_bias=True, lm_head_bias=True, tie_word_embeddings=False,
                sliding_window=20,
                layer_types=["hybrid", "hybrid_sliding", "hybrid_sliding", "hybrid"])
CASES = [
    ("zaya1-8b", "the preset's config.json (ZAYA1-8B, as a public test file quotes it); reduced "
     "width, its 40 layers", hub("zaya1-8b"), {**hub("zaya1-8b"), **ZAYA_SMALL}),
    ("zaya-class-defaults", "ZayaConfig's defaults; reduced width", dict(model_type="zaya"),
     dict(model_type="zaya", **ZAYA_SMALL)),
    ("zaya-sliding-bias", "ZAYA with hybrid_sliding layers (W = 20), attention and LM-head "
     "biases, kernels 3 and 2, untied, GQA 3:1", ZAYA_MIX, ZAYA_MIX),
]
