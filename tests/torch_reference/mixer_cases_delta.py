"""The KDA and delta-rule hybrids' cases for measure_mixers.py (--cases): Kimi-Linear (KDA : MLA
without RoPE), each at its preset's config and at its config class's defaults, and at reduced
width with the same layout (every symbol a different number).

    python3 tests/torch_reference/measure_mixers.py --cases \\
        tests/torch_reference/mixer_cases_delta.py --out tests/data/mixers_reference_delta.json
"""

from __future__ import annotations

import json
import os

HF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "hf")


def hub(stem: str) -> dict:
    with open(os.path.join(HF_DIR, f"{stem}.json")) as f:
        return json.load(f)


# token ids inside the reduced vocabulary (the class defaults' ids are the 163840-entry one's)
IDS = dict(pad_token_id=None, bos_token_id=None, eos_token_id=None)
KIMI = hub("kimi-linear-48b-a3b")
KIMI_SMALL = dict(vocab_size=320, hidden_size=48, intermediate_size=80, num_attention_heads=4,
                  num_key_value_heads=4, kv_lora_rank=16, qk_rope_head_dim=6,
                  qk_nope_head_dim=10, v_head_dim=12, moe_intermediate_size=20, num_experts=6,
                  num_experts_per_token=2, num_expert_group=2, topk_group=1, **IDS)
CASES = [
    ("kimi-linear-48b-a3b", "the preset's config.json (the Hub's keys as quoted; the rest the "
     "class defaults); reduced width, its layer lists, 3 KDA heads of 8, 2 expert groups",
     KIMI, {**KIMI, **KIMI_SMALL, "head_dim": 5,
            "linear_attn_config": {**KIMI["linear_attn_config"], "head_dim": 8, "num_heads": 3}}),
    ("kimi_linear-class-defaults", "KimiLinearConfig's defaults (every 4th layer from layer 4 "
     "MLA, the first layer dense); reduced width, 9 layers",
     dict(model_type="kimi_linear"),
     dict(model_type="kimi_linear", num_hidden_layers=9, linear_head_dim=8, linear_num_heads=3,
          **{k: v for k, v in KIMI_SMALL.items() if k not in ("num_expert_group", "topk_group")})),
]
# OLMo-Hybrid: OlmoHybridConfig's defaults are the preset (no Hub config.json was found); the
# second case its NoPE form (rope_theta null, as the released checkpoint), β in (0, 1) and a
# layer pattern of its own
OLMO = hub("olmo-hybrid-7b")
OLMO_SMALL = dict(model_type="olmo_hybrid", vocab_size=320, hidden_size=48, intermediate_size=80,
                  num_attention_heads=4, num_key_value_heads=2, linear_num_key_heads=2,
                  linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=6, **IDS)
OLMO_VARIANT = dict(num_hidden_layers=6, linear_allow_neg_eigval=False,
                    rope_parameters={"rope_type": "default", "rope_theta": None},
                    layer_types=["linear_attention", "full_attention", "linear_attention",
                                 "linear_attention", "linear_attention", "full_attention"])
CASES += [
    ("olmo-hybrid-7b", "the preset: OlmoHybridConfig's defaults (the class's reference "
     "checkpoint; RoPE θ 10000, β = 2·σ(b)); reduced width, its 32 layers", OLMO,
     {**OLMO_SMALL, "num_hidden_layers": 32}),
    ("olmo_hybrid-nope", "OlmoHybridConfig with rope_theta null (NoPE), linear_allow_neg_eigval "
     "false and 6 layers of its own pattern; reduced width",
     {"model_type": "olmo_hybrid", **OLMO_VARIANT}, {**OLMO_SMALL, **OLMO_VARIANT}),
]
# Ling 3.0 (bailing_hybrid): BailingHybridConfig's defaults are the preset (no Hub config.json
# was found; the class names inclusionAI/Ling-3.0-Flash); the second case the unbounded
# forget gate, a q_lora_rank, groups of 3 and its own MLP pattern
LING = hub("ling-3.0-flash")
LING_SMALL = dict(model_type="bailing_hybrid", vocab_size=320, hidden_size=48,
                  intermediate_size=80, moe_intermediate_size=20, num_attention_heads=4,
                  num_key_value_heads=4, kv_lora_rank=16, qk_rope_head_dim=6,
                  qk_nope_head_dim=10, v_head_dim=12, head_dim=8, num_experts=8,
                  num_experts_per_token=2, num_expert_group=4, topk_group=2, **IDS)
LING_VARIANT = dict(kda_safe_gate=False, q_lora_rank=24, layer_group_size=3,
                    num_hidden_layers=6, rope_parameters={"rope_type": "default",
                                                          "rope_theta": 10000.0},
                    mlp_layer_types=["dense", "sparse", "sparse", "dense", "sparse", "sparse"])
CASES += [
    ("ling-3.0-flash", "the preset: BailingHybridConfig's defaults (the class's reference "
     "checkpoint); reduced width, 12 layers (two groups of 6), 8 experts in 4 groups",
     LING, {**LING_SMALL, "num_hidden_layers": 12}),
    ("bailing_hybrid-variant", "BailingHybridConfig with kda_safe_gate false, q_lora_rank, "
     "layer_group_size 3, 6 layers, its own mlp_layer_types; reduced width",
     {"model_type": "bailing_hybrid", **LING_VARIANT, "q_lora_rank": 1536},
     {**LING_SMALL, **LING_VARIANT}),
]
# Qwen3.5-27B: the text model of its config.json (as public fixtures quote it); reduced width with
# its 3 value heads per q/k head, head_dim given (D/H is not whole at full size)
Q27 = hub("qwen3.5-27b")["text_config"]
CASES += [
    ("qwen3.5-27b", "the preset's text_config (qwen3_5_text, dense); reduced width, 8 layers, 2 "
     "q/k heads serving 6 value heads", Q27,
     dict(model_type="qwen3_5_text", vocab_size=320, hidden_size=48, intermediate_size=80,
          num_hidden_layers=8, num_attention_heads=3, num_key_value_heads=1, head_dim=20,
          linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=8,
          linear_value_head_dim=10, **IDS)),
]
