"""The Mamba-1 family and the Mamba-2 hybrids of issue 19 (jamba, falcon_h1, granitemoehybrid),
measured apart from mixers_reference.json:

    python3 tests/torch_reference/measure_mixers.py \
        --cases tests/torch_reference/mixer_cases_ssm.py \
        --out tests/data/mixers_reference_ssm.json

Each case: (name, what, full_config, hf_config): the params on the meta device at full size, the
FLOPs and caches at the reduced width of hf_config (measure_mixers.py's docstring)."""

from __future__ import annotations

import json
import os

HF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "hf")


def hub(stem: str) -> dict:
    """A preset's config.json as stored in tests/data/hf (only the keys the class takes)."""
    with open(os.path.join(HF_DIR, f"{stem}.json")) as f:
        cfg = json.load(f)
    return {k: v for k, v in cfg.items() if k not in ("architectures", "torch_dtype",
                                                      "transformers_version")}


# Jamba at reduced width: 8 layers keep the 1:7 pattern (attention at layer 4) and MoE on the odd
# layers; every symbol a different number (D_i = 2·48 = 96, R_dt = 5, N_s = 10)
JSMALL = dict(vocab_size=320, hidden_size=48, intermediate_size=80, num_hidden_layers=8,
              num_attention_heads=4, num_key_value_heads=2, num_experts=6, num_experts_per_tok=2,
              mamba_d_state=10, mamba_dt_rank=5)
CASES = [
    ("jamba-mini-1.5", "the preset: AI21-Jamba-1.5-Mini's config.json; reduced width, its 8 "
     "first layers", hub("jamba-mini-1.5"), {**hub("jamba-mini-1.5"), **JSMALL}),
    ("jamba-class-defaults", "JambaConfig's defaults (Jamba-v0.1: mamba_dt_rank auto = ⌈D/16⌉); "
     "reduced width with dt rank auto (3), attention at layer 1 of a period 3, MoE on even "
     "layers", dict(model_type="jamba"),
     dict(model_type="jamba", vocab_size=320, hidden_size=48, intermediate_size=80,
          num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, num_experts=4,
          mamba_d_state=6, attn_layer_period=3, attn_layer_offset=1, expert_layer_period=2,
          expert_layer_offset=0)),
]
