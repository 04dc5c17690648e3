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

# Falcon-H1 at reduced width: every symbol a different number (I = H_s·D_s = 6·10, G = 2, N_s = 12)
FSMALL = dict(vocab_size=320, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, mamba_d_ssm=60,
              mamba_n_heads=6, mamba_d_head=10, mamba_n_groups=2, mamba_d_state=12)
# μP multipliers as Falcon-H1's checkpoints give them (none 1), and the gated RMSNorm
MUP = dict(lm_head_multiplier=0.5, embedding_multiplier=2.0, mlp_multipliers=[1.5, 0.5],
           key_multiplier=0.8, attention_out_multiplier=0.7, attention_in_multiplier=1.2,
           ssm_multipliers=[0.9, 1.1, 0.8, 1.2, 1.3], ssm_in_multiplier=1.1,
           ssm_out_multiplier=0.6)
CASES += [
    ("falcon-h1-7b", "the preset: Falcon-H1-7B's sizes as a public test quotes its config.json "
     "(the rest FalconH1Config's defaults: mamba_rms_norm false, multipliers 1); reduced width, "
     "chunk 128", hub("falcon-h1-7b"), {**hub("falcon-h1-7b"), **FSMALL}),
    ("falcon_h1-class-defaults", "FalconH1Config's defaults (chunk 256, one group, no gated "
     "norm); reduced width", dict(model_type="falcon_h1"),
     dict(model_type="falcon_h1", **{**FSMALL, "mamba_n_groups": 1})),
    ("falcon_h1-mup-gated-norm", "FalconH1Config with μP multipliers and mamba_rms_norm (the "
     "gated RMSNorm over G groups, gate first); reduced width, chunk 64",
     dict(model_type="falcon_h1", mamba_rms_norm=True, mamba_norm_before_gate=False, **MUP),
     dict(model_type="falcon_h1", mamba_rms_norm=True, mamba_norm_before_gate=False,
          mamba_chunk_size=64, **FSMALL, **MUP)),
]

# Granite 4.0-H (granitemoehybrid): granite-4.0-h-small's config.json as stored (its preset header
# says where each key comes from)
GSMALL = dict(model_type="granitemoehybrid", vocab_size=320, hidden_size=48, intermediate_size=20,
              num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
              num_local_experts=6, num_experts_per_tok=2, shared_intermediate_size=24,
              mamba_n_heads=8, mamba_n_groups=2, mamba_d_state=10, mamba_chunk_size=64)
GLAYOUT = dict(layer_types=["mamba", "mamba", "attention", "mamba"], embedding_multiplier=12.0,
               attention_multiplier=0.015625, residual_multiplier=0.22, logits_scaling=2.0)
CASES += [
    ("granitemoehybrid-class-defaults", "GraniteMoeHybridConfig's defaults (every layer Mamba-2, "
     "8 experts, a shared MLP of 1024); reduced width with its last layer attention "
     "(transformers' decode cannot run on Mamba-2 layers alone: get_seq_length needs one)",
     dict(model_type="granitemoehybrid"),
     {**GSMALL, "layer_types": ["mamba", "mamba", "mamba", "attention"]}),
    ("granite-4.0-h-small", "Granite-4.0-H-Small (tests/data/hf/granite-4.0-h-small.json); reduced "
     "width with its layout: Mamba-2 and attention by layer_types, NoPE, tied embeddings, the "
     "multipliers Granite 4.0-H's tiny configs write (they change no count)",
     hub("granite-4.0-h-small"),
     {**GSMALL, **GLAYOUT, "position_embedding_type": "nope", "tie_word_embeddings": True}),
    ("granitemoehybrid-rope", "GraniteMoeHybridConfig with position_embedding_type rope and "
     "layer_types (attention first); reduced width",
     dict(model_type="granitemoehybrid", position_embedding_type="rope",
          layer_types=["attention"] + ["mamba"] * 31),
     {**GSMALL, "position_embedding_type": "rope",
      "layer_types": ["attention", "mamba", "mamba", "attention"]}),
]
