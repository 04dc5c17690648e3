"""The convolution mixers' families, measured by measure_mixers.py into their own file:

    python3 tests/torch_reference/measure_mixers.py --cases \
        tests/torch_reference/mixer_cases_conv.py --out tests/data/mixers_reference_conv.json

Each case: (name, what, full_config, hf_config), as measure_mixers.py's CASES: params on the meta
device at full size, FLOPs with FlopCounterMode on real tensors at the reduced width of
hf_config (every symbol a different number), caches after a bf16 prefill."""

from __future__ import annotations

import json
import os

HF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "hf")


def hub(stem: str) -> dict:
    with open(os.path.join(HF_DIR, f"{stem}.json")) as f:
        return json.load(f)


# LFM2 at reduced width: Dff = 64 after the auto-adjust (⌊2·80/3⌋ = 53, up to a multiple of 16)
LFM2_SMALL = dict(vocab_size=320, hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=12, block_ff_dim=80, intermediate_size=80, block_multiple_of=16)
LFM2_MIX = dict(model_type="lfm2", vocab_size=320, hidden_size=40, num_hidden_layers=5,
                num_attention_heads=4, num_key_value_heads=1, intermediate_size=72,
                block_auto_adjust_ff_dim=False, conv_bias=True, conv_L_cache=5,
                layer_types=["conv", "full_attention", "conv", "conv", "full_attention"],
                tie_word_embeddings=False)
CASES = [
    ("lfm2-1.2b", "the preset's config.json (LFM2-1.2B); reduced width, its 16-layer pattern",
     hub("lfm2-1.2b"), {**hub("lfm2-1.2b"), **LFM2_SMALL}),
    ("lfm2-class-defaults", "Lfm2Config's defaults (full_attn_idxs null: every layer attends, "
     "no conv layer); reduced width", dict(model_type="lfm2"),
     dict(model_type="lfm2", **LFM2_SMALL)),
    ("lfm2-conv-bias", "LFM2 with conv_bias (in_proj, conv and out_proj biases), kernel 5, no "
     "FFN auto-adjust, untied, MQA, layer_types given", LFM2_MIX, LFM2_MIX),
]

# LFM3: no Hub config.json was found; Lfm3Config's defaults (its reference checkpoint LFM3-1.7B),
# written out in tests/data/hf/lfm3-1.7b.json. At reduced width its 24-layer pattern, a window of
# 7 (under both T), the kernel of 7
LFM3_SMALL = dict(vocab_size=320, hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=12, intermediate_size=80, sliding_window=7, pad_token_id=0)
LFM3_MIX = dict(model_type="lfm3", vocab_size=320, hidden_size=40, num_hidden_layers=6,
                num_attention_heads=4, num_key_value_heads=1, head_dim=10, intermediate_size=72,
                conv_bias=True, conv_L_cache=2, sliding_window=20, use_sandwich_norm=False,
                pad_token_id=0,
                use_attention_gate=False, attention_bias=True, tie_word_embeddings=False,
                layer_types=["sliding_attention", "conv", "full_attention", "conv", "conv",
                             "sliding_attention"])
CASES += [
    ("lfm3-1.7b", "the preset: Lfm3Config's defaults (no Hub config.json found); reduced width, "
     "its 24-layer pattern (conv, full and sliding attention), head gates, sandwich norms",
     hub("lfm3-1.7b"), {**hub("lfm3-1.7b"), **LFM3_SMALL}),
    ("lfm3-plain", "LFM3 without sandwich norms or head gates, attention and conv biases, kernel "
     "2, window 20 (past T=16 only), untied, layer_types given", LFM3_MIX, LFM3_MIX),
]

# LFM2-MoE: the preset's sizes as a public test file quotes LFM2-8B-A1B's config.json (the Hub
# file itself was not found); Lfm2MoeConfig's defaults give no layer_types (its model cannot be
# built without them), so the class-defaults case adds a 32-layer pattern
MOE_SMALL = dict(vocab_size=320, hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=12, intermediate_size=80, moe_intermediate_size=20, num_experts=6,
                 num_experts_per_tok=2)
PATTERN32 = ["conv", "conv", "full_attention", "conv"] * 8
CASES += [
    ("lfm2-8b-a1b", "the preset's config.json (LFM2-8B-A1B, as a public test file quotes it); "
     "reduced width, its 24-layer pattern, 2 dense layers then MoE", hub("lfm2-8b-a1b"),
     {**hub("lfm2-8b-a1b"), **MOE_SMALL}),
    ("lfm2_moe-class-defaults", "Lfm2MoeConfig's defaults with a 32-layer layer_types (the class "
     "gives none); reduced width", dict(model_type="lfm2_moe", layer_types=PATTERN32),
     dict(model_type="lfm2_moe", layer_types=PATTERN32, **MOE_SMALL)),
]
