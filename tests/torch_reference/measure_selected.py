#!/usr/bin/env python3
"""Measure the selected-attention families (DeepSeek Sparse Attention) with PyTorch and write
``tests/data/selected_reference.json``. Run by hand; the tests only read the JSON
(tests/test_selected.py re-measures one reduced case live when torch is installed):

    pip install torch==2.13.0+cpu transformers==5.24.0
    python tests/torch_reference/measure_selected.py [--out PATH] [--only NAME]

Counting is shapecalc/reference/measure.py's (``count``, ``forward_steps``, ``n_params``). Per
case (a config.json shapecalc's reader takes):

  * ``full``: the model at full size on the meta device, bf16, eager attention, the routed
    experts on transformers' shape-static ``batched_mm`` path (the eager experts call nonzero(),
    which meta tensors cannot run): ``params_meta`` (sum of numel), FlopCounterMode of the prefill
    (logits on every position) and of one decode step on its cache, at B=1, T=16 and T=4096 (past
    index_topk = 2048), and the cache after each prefill: the latent K/V tensors and the
    indexer's key cache, every tensor once, in bytes.
  * ``reduced``: the same at a reduced width on real tensors (float32, CPU, random weights, real
    routing and a real top-k), for FLOPs at T=16 and at T past its index_topk.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from typing import Any

import torch
import transformers
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from shapecalc.reference.measure import (
    config_from_dict,
    forward_steps,
    n_params,
    text_config,
)

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")

V32_REDUCED = {
    "model_type": "deepseek_v32", "vocab_size": 512, "hidden_size": 128,
    "intermediate_size": 192, "moe_intermediate_size": 48, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 4, "n_routed_experts": 8,
    "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1, "first_k_dense_replace": 1,
    "kv_lora_rank": 32, "q_lora_rank": 48, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
    "v_head_dim": 16, "index_topk": 64, "index_n_heads": 4, "index_head_dim": 32,
}

# GLM-5's IndexShare at a reduced width: layers 2 and 3 reuse layer 1's top-k (GLM-5.2's
# index_topk_freq / index_skip_topk_offset schedule, shortened)
GLM_REDUCED = {
    **{k: v for k, v in V32_REDUCED.items() if k != "model_type"}, "model_type": "glm_moe_dsa",
    "num_hidden_layers": 4, "index_topk_freq": 3, "index_skip_topk_offset": 1,
}

# Hunyuan 4 at a reduced width: HYV4Config's default indexer_types on 6 layers (full, full,
# shared, shared, shared, full: layers 2-4 reuse layer 1's top-k), sinks, the output gate, 4
# hyper-connection streams, the first layer dense, the routed experts' SwiGLU clamped
HY_REDUCED = {
    "model_type": "hy_v4", "vocab_size": 512, "hidden_size": 128, "intermediate_size": 192,
    "moe_intermediate_size": 48, "num_hidden_layers": 6, "num_attention_heads": 4,
    "num_key_value_heads": 4, "n_routed_experts": 8, "num_experts_per_tok": 2,
    "n_shared_experts": 1, "kv_lora_rank": 32, "q_lora_rank": 48, "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8, "v_head_dim": 24, "index_topk": 64, "index_n_heads": 4,
    "index_head_dim": 32, "hc_mult": 4, "swiglu_limit": 0.05, "pad_token_id": 0,
}

CASES: list[dict[str, Any]] = [
    {"name": "deepseek-v3.2-exp", "config": "hf/deepseek-v3.2-exp.json", "seqs": [16, 4096],
     "reduced": V32_REDUCED, "reduced_seqs": [16, 100]},
    {"name": "deepseek_v32 class defaults", "hf_config": {"model_type": "deepseek_v32"},
     "seqs": [16, 4096]},
    {"name": "glm-5", "config": "hf/glm-5.json", "seqs": [16, 4096], "reduced": GLM_REDUCED,
     "reduced_seqs": [16, 100]},
    {"name": "glm_moe_dsa class defaults", "hf_config": {"model_type": "glm_moe_dsa"},
     "seqs": [16, 4096]},
    {"name": "hunyuan-4", "config": "hf/hunyuan-4.json", "seqs": [16, 4096],
     "reduced": HY_REDUCED, "reduced_seqs": [16, 100]},
    {"name": "hy_v4 class defaults", "hf_config": {"model_type": "hy_v4"}, "seqs": [16, 4096]},
]


def _cache_tensors(cache: Any) -> dict[str, Any]:
    """Every tensor of a DSA cache once: each layer's latent keys and values and its indexer
    keys; bytes and shapes."""
    total, indexer, shapes = 0, 0, []
    for layer in cache.layers:
        main = [t for t in (layer.keys, layer.values) if t is not None]
        idx = getattr(layer, "indexer_keys", None)
        total += sum(t.numel() * t.element_size() for t in main)
        if idx is not None:
            indexer += idx.numel() * idx.element_size()
        shapes.append([list(t.shape) for t in main] + ([list(idx.shape)] if idx is not None
                                                        else []))
    return {"kv_bytes": int(total), "indexer_bytes": int(indexer),
            "bytes": int(total + indexer), "shapes": shapes[:2], "layers": len(shapes)}


def _steps(model: Any, vocab: int, seq: int, meta: bool) -> dict[str, Any]:
    res = forward_steps(model, vocab, 1, seq, last=False, cached_prefill=meta,
                        at_cache=_cache_tensors)
    return {"seq": seq, "prefill": res["prefill"].total, "decode": res["decode"].total,
            "prefill_ops": res["prefill"].ops, "decode_ops": res["decode"].ops,
            "cache_after_prefill": res["at_cache"]}


def _build(raw: dict[str, Any], device: str, dtype: Any) -> Any:
    cfg = text_config(config_from_dict(raw))
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=dtype,
                                                 experts_implementation="batched_mm")
    return model.eval(), model.config


def measure(case: dict[str, Any], reduced: Any = None) -> dict[str, Any]:
    """One case: at full size on the meta device, and at reduced width on real tensors;
    `reduced(raw, dtype)` builds the reduced model (default: `_build` on the CPU)."""
    build = reduced or (lambda raw, dtype: _build(raw, "cpu", dtype))
    raw = case.get("hf_config") or json.load(open(os.path.join(DATA, case["config"])))
    model, cfg = _build(raw, "meta", torch.bfloat16)
    out: dict[str, Any] = {"name": case["name"], "hf_config": raw,
                           "full": {"params_meta": n_params(model),
                                    "steps": [_steps(model, cfg.vocab_size, T, True)
                                              for T in case["seqs"]]}}
    if "reduced" in case:
        torch.manual_seed(0)
        small, scfg = build(case["reduced"], torch.float32)
        steps = [_steps(small, scfg.vocab_size, T, False) for T in case["reduced_seqs"]]
        bf, bcfg = build(case["reduced"], torch.bfloat16)  # the cache in bf16
        for s in steps:
            s["cache_after_prefill_bf16"] = forward_steps(
                bf, bcfg.vocab_size, 1, s["seq"], last=False, at_cache=_cache_tensors,
                count_fn=lambda fn: fn())["at_cache"]
        out["reduced"] = {"hf_config": case["reduced"], "params": n_params(small),
                          "steps": steps}
    return out


HOW = ("tests/torch_reference/measure_selected.py: params on the meta device at full "
               "size; FLOPs = FlopCounterMode (shapecalc/reference/measure.py's count) at full "
               "size on the meta device (bf16, eager attention, experts_implementation="
               "batched_mm) and at a reduced width on real tensors (float32, CPU, real routing "
               "and top-k), B=1, logits on every position, prefill and one decode step on the "
               "prefill's cache; cache bytes = every tensor of transformers' cache after the "
               "prefill (the latent keys/values and the indexer's key cache).")


def run(cases: list[dict[str, Any]], out: str, how: str, measure_case: Any) -> None:
    """The command line of this script and of the ones that reuse it (measure_dots3.py,
    measure_block_sparse.py), each with its `measure_case(case)`: --out, --only; the cases not
    measured again are kept from --out."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=out)
    ap.add_argument("--only", action="append", help="measure only these cases (by name)")
    args = ap.parse_args()
    transformers.logging.set_verbosity_error()
    warnings.simplefilter("ignore")
    old = json.load(open(args.out))["cases"] if os.path.exists(args.out) else []
    done = {c["name"]: c for c in old}
    for case in cases:
        if args.only and case["name"] not in args.only:
            continue
        print("measuring", case["name"], flush=True)
        done[case["name"]] = measure_case(case)
    doc = {"how": how,
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
           "cases": [done[c["name"]] for c in cases if c["name"] in done]}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def main() -> None:
    run(CASES, os.path.join(DATA, "selected_reference.json"), HOW, measure)


if __name__ == "__main__":
    main()
