#!/usr/bin/env python3
"""Measure the classic families (GPT-NeoX, GPT-J, Phi, StableLM, Cohere, Granite, Falcon's new
decoder) with PyTorch and write ``tests/data/classic_reference.json``.

Run manually (the test suite only reads the JSON, except its live re-measure):

    pip install torch==2.13.0+cpu transformers==5.24.0
    python tests/torch_reference/measure_classic.py [--out PATH]

Two parts:

  * ``cases``: tiny models of each family, random weights, float32, eager attention, CPU, B=5,
    T=7, measured with ``torch.utils.flop_counter.FlopCounterMode`` exactly like
    ``measure_flops.py`` (prefill with all logits, prefill_last, decode), plus the KV cache the
    model's own cache holds after the T-token prefill (bytes, and the heads it keeps per layer),
    and R, the rotated width of each head, read off the built rotary embedding.
  * ``published``: each real config.json of these families in ``tests/data/hf`` built on the
    meta device: ``sum(p.numel())`` next to the published figure and its source.
"""

from __future__ import annotations

import json
import os
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM

# the config.json writing, round-trip check and FLOP counting are measure_flops.py's, shared
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure_flops import check_roundtrip, config_to_json_dict, count, forward_steps, run

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO_ROOT, "tests", "data", "classic_reference.json")
HF_DIR = os.path.join(REPO_ROOT, "tests", "data", "hf")

B, T = 5, 7
D, H, HKV, V, MAXPOS, L = 64, 4, 2, 1000, 256, 3

# Sizes differ between the symbols of a case (D=64, Dh=16 or 24, R, Dff) so that a formula that
# swaps two of them gives a different number.
CASES = [
    ("gpt_neox_parallel", "gpt_neox", dict(
        hidden_size=D, num_attention_heads=H, num_hidden_layers=L, vocab_size=V,
        max_position_embeddings=MAXPOS, intermediate_size=176, rotary_pct=0.25,
        use_parallel_residual=True, attention_bias=True, tie_word_embeddings=False)),
    ("gpt_neox_sequential", "gpt_neox", dict(
        hidden_size=D, num_attention_heads=H, num_hidden_layers=L, vocab_size=V,
        max_position_embeddings=MAXPOS, intermediate_size=176, rotary_pct=0.5,
        use_parallel_residual=False, attention_bias=False, tie_word_embeddings=False)),
    ("gptj", "gptj", dict(
        n_embd=D, n_head=H, n_layer=L, vocab_size=V, n_positions=MAXPOS, n_inner=176,
        rotary_dim=8, tie_word_embeddings=False, bos_token_id=V - 1, eos_token_id=V - 1)),
    ("phi_gqa_head24", "phi", dict(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=HKV, head_dim=24,
        num_hidden_layers=L, vocab_size=V, max_position_embeddings=MAXPOS,
        intermediate_size=176, partial_rotary_factor=0.5, qk_layernorm=False,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)),
    ("stablelm_parallel_qknorm", "stablelm", dict(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=HKV, num_hidden_layers=L,
        vocab_size=V, max_position_embeddings=MAXPOS, intermediate_size=176,
        partial_rotary_factor=0.25, qk_layernorm=True, use_parallel_residual=True,
        use_qkv_bias=False, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)),
    ("stablelm_sequential_qkv_bias", "stablelm", dict(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=H, num_hidden_layers=L,
        vocab_size=V, max_position_embeddings=MAXPOS, intermediate_size=176,
        partial_rotary_factor=0.25, qk_layernorm=False, use_parallel_residual=False,
        use_qkv_bias=True, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)),
    ("cohere_qknorm_head24", "cohere", dict(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=HKV, head_dim=24,
        num_hidden_layers=L, vocab_size=V, max_position_embeddings=MAXPOS,
        intermediate_size=176, logit_scale=0.125, use_qk_norm=True, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2, pad_token_id=0)),
    ("granite_gqa_head24", "granite", dict(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=HKV, head_dim=24,
        num_hidden_layers=L, vocab_size=V, max_position_embeddings=MAXPOS,
        intermediate_size=176, embedding_multiplier=12.0, attention_multiplier=0.0078125,
        residual_multiplier=0.22, logits_scaling=8.0, tie_word_embeddings=True)),
    ("falcon_new_two_norms", "falcon", dict(
        hidden_size=D, num_attention_heads=H, num_kv_heads=HKV, num_hidden_layers=L,
        vocab_size=V, max_position_embeddings=MAXPOS, ffn_hidden_size=176,
        new_decoder_architecture=True, parallel_attn=True, bias=False, alibi=False,
        tie_word_embeddings=True)),
    ("falcon_new_one_norm", "falcon", dict(
        hidden_size=D, num_attention_heads=H, num_kv_heads=HKV, num_hidden_layers=L,
        vocab_size=V, max_position_embeddings=MAXPOS, ffn_hidden_size=176,
        new_decoder_architecture=True, parallel_attn=True, num_ln_in_parallel_attn=1,
        bias=True, alibi=False, tie_word_embeddings=False)),
]

NOTES = {
    "gptj": "rotate_every_two on the first rotary_dim=8 of Dh=16 (interleaved pairs); one ln_1 "
    "shared by attention and MLP; lm_head has a bias.",
    "phi_gqa_head24": "head_dim=24 != D/H; R = int(24 * 0.5) = 12.",
    "stablelm_parallel_qknorm": "q/k LayerNorm per head (StableLmLayerNormPerHead, no bias): "
    "H*Dh and H_kv*Dh weights; one input_layernorm for the parallel block.",
    "cohere_qknorm_head24": "CohereLayerNorm has no bias; q_norm/k_norm weights are [H, Dh] and "
    "[H_kv, Dh]; logits * logit_scale.",
    "granite_gqa_head24": "embedding_multiplier, attention_multiplier (replaces 1/sqrt(Dh)), "
    "residual_multiplier and logits / logits_scaling are elementwise: no matmul FLOPs.",
    "falcon_new_two_norms": "new_decoder_architecture broadcasts K and V to every query head "
    "before caching: the cache holds H heads per layer although the model computes H_kv.",
    "falcon_new_one_norm": "num_ln_in_parallel_attn=1: one input_layernorm; bias=true on every "
    "linear.",
}


def _rotary_dim(model) -> int | None:
    """R from the built rotary embedding: 2·len(inv_freq), or GPT-J's sin/cos table width."""
    for name, mod in model.named_modules():
        if name.endswith("rotary_emb"):
            if hasattr(mod, "inv_freq"):
                return 2 * int(mod.inv_freq.shape[-1])
            if hasattr(mod, "pos_embd_dim"):
                return int(mod.pos_embd_dim)
    return None


def measure_case(name: str, model_type: str, kwargs: dict) -> dict:
    cfg = AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager",
                                             dtype=torch.float32)
    model.eval()
    cfg = model.config
    steps = forward_steps(model, count, cfg.vocab_size)
    (prefill, prefill_ops), (last, last_ops) = steps["prefill"], steps["prefill_last"]
    decode, decode_ops = steps["decode"]
    kv_bytes, shapes = steps["kv"]
    kv_heads = sorted({keys[1] for keys, _ in shapes})
    kv_tokens = sorted({keys[2] for keys, _ in shapes})
    hf_config = config_to_json_dict(cfg)
    check_roundtrip(cfg, hf_config)
    return {
        "name": name,
        "model_type": model_type,
        "hf_config": hf_config,
        "batch": B,
        "seq": T,
        "prefill_flops": prefill,
        "prefill_last_flops": last,
        "decode_flops": decode,
        "prefill_ops": prefill_ops,
        "prefill_last_ops": last_ops,
        "decode_ops": decode_ops,
        "params": int(sum(p.numel() for p in model.parameters())),
        "rotary_dim": _rotary_dim(model),
        "kv_cache_bytes_hf": int(kv_bytes),
        "kv_cache_heads_hf": kv_heads,
        "kv_cache_tokens_hf": kv_tokens,
        "note": NOTES.get(name, ""),
    }


# Each real config.json: the publisher's figure, exact where one is published.
PUBLISHED = {
    "pythia-1.4b": dict(params_published=1_414_647_808, figure="1.4B",
                        source="EleutherAI/pythia README, table of total params "
                        "(1,414,647,808)"),
    "gpt-neox-20b": dict(params_published=20_554_567_680, figure="20B",
                         source="EleutherAI/gpt-neox-20b model card, number of parameters "
                         "20,554,567,680 (also the GPT-NeoX-20B paper)"),
    "gpt-j-6b": dict(params_published=None, figure="6,053,381,344",
                     source="EleutherAI/gpt-j-6b model card, n_parameters 6053381344: it counts "
                     "the Mesh Transformer JAX checkpoint, 2,498,560 more than the transformers "
                     "model (not asserted; the meta-device sum is)"),
    "phi-2": dict(params_published=None, figure="2.7B",
                  source="microsoft/phi-2 model card (2.7 billion parameters)"),
    "stablelm-2-1.6b": dict(params_published=None, figure="1.6B",
                            source="stabilityai/stablelm-2-1_6b model card (1.6 billion)"),
    "stablelm-2-12b": dict(params_published=None, figure="12.1B",
                           source="stabilityai/stablelm-2-12b model card (12.1 billion)"),
    "command-r-v01": dict(params_published=None, figure="35B",
                          source="CohereForAI/c4ai-command-r-v01 model card (35 billion)"),
    "granite-3.3-8b": dict(params_published=None, figure="8B",
                           source="ibm-granite/granite-3.3-8b-instruct model card (8B; the Hub "
                           "shows 8.17B)"),
    "falcon-40b": dict(params_published=None, figure="40B",
                       source="tiiuae/falcon-40b model card (40B)"),
}


def measure_published(name: str) -> dict:
    path = os.path.join(HF_DIR, f"{name}.json")
    with open(path) as f:
        raw = json.load(f)
    cfg = AutoConfig.for_model(raw["model_type"], **{k: v for k, v in raw.items()
                                                     if k != "model_type"})
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    return {"file": f"tests/data/hf/{name}.json",
            "params_meta": int(sum(p.numel() for p in model.parameters())),
            "rotary_dim": _rotary_dim(model), **PUBLISHED[name]}


HOW = (
    "cases: as measure_flops.py (AutoModelForCausalLM.from_config(cfg, attn_implementation="
    "'eager', dtype=float32), torch.manual_seed(0), eval, no_grad, CPU, FlopCounterMode): "
    "prefill = model(ids[B,T], use_cache=False), prefill_last = the same with logits_to_keep=1, "
    "decode = one token per sequence on the cache of a T-token prefill run outside the counter. "
    "kv_cache_bytes_hf = sum of keys.numel()*element_size() + values over the cache's layers "
    "after that prefill (float32); kv_cache_heads_hf and kv_cache_tokens_hf the heads and tokens "
    "each layer holds. rotary_dim = 2*len(inv_freq) of the model's rotary embedding (GPT-J: "
    "pos_embd_dim). published: each config.json built with AutoModelForCausalLM.from_config under "
    "torch.device('meta'); params_meta = sum(p.numel()) (tied weights once)."
)


def main(argv=None) -> int:
    def show(c: dict) -> str:
        return (f"prefill={c['prefill_flops']:>10,d} decode={c['decode_flops']:>9,d} "
                f"kv={c['kv_cache_bytes_hf']:>7,d} R={c['rotary_dim']}")

    return run(argv, __doc__.splitlines()[0], DEFAULT_OUT, CASES, measure_case, show, HOW,
               published=lambda: {n: measure_published(n) for n in PUBLISHED}, threads=1)


if __name__ == "__main__":
    sys.exit(main())
