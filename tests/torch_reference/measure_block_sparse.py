#!/usr/bin/env python3
"""Measure MiniMax-M3's text model (block-sparse attention) with PyTorch and write
``tests/data/block_sparse_reference.json``. Run by hand; the tests only read the JSON
(tests/test_block_sparse.py re-measures one reduced case live when torch is installed):

    pip install torch==2.13.0+cpu transformers==5.24.0
    python tests/torch_reference/measure_block_sparse.py [--out PATH] [--only NAME]

Counting is shapecalc/reference/measure.py's (``count``, ``forward_steps``, ``n_params``,
``cache_tensors``). Per case (a config.json shapecalc's reader takes):

  * ``full``: MiniMaxM3VLForCausalLM at full size on the meta device, bf16, eager attention, the
    routed experts on transformers' shape-static ``batched_mm`` path (the eager experts call
    nonzero(), which meta tensors cannot run): ``params_meta`` (sum of numel), FlopCounterMode
    of the prefill (logits on every position) and of one decode step on its cache, at B=1,
    T=16 and T=4096 (past K_blk·S_blk = 2048 keys), and the cache after each prefill, every
    tensor once (keys, values and the block indexer's idx_keys), in bytes.
  * ``reduced``: the same at a reduced width on real tensors (float32, CPU, random weights, real
    routing and a real block top-k; the eager experts), for FLOPs at T=16 and at T past its
    K_blk·S_blk, and the cache in bf16.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from shapecalc.reference.measure import (
    cache_tensors,
    config_from_dict,
    forward_steps,
    n_params,
    text_config,
)
from tests.torch_reference.measure_selected import run

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")

# layer 0 dense attention and a dense MLP; layers 1, 2 block-sparse with MoE; blocks of 8 keys,
# the top 2 per query (16 keys): T = 40 reaches past them; partial RoPE (8 of 16)
M3_REDUCED = {"model_type": "minimax_m3_vl", "text_config": {
    "model_type": "minimax_m3_vl_text", "vocab_size": 128, "hidden_size": 64,
    "intermediate_size": 32, "dense_intermediate_size": 48, "shared_intermediate_size": 24,
    "num_hidden_layers": 3, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16,
    "num_local_experts": 4, "num_experts_per_tok": 2, "routed_scaling_factor": 2.0,
    "swiglu_limit": 7.0, "partial_rotary_factor": 0.5, "moe_layer_freq": [0, 1, 1],
    "tie_word_embeddings": False,
    "sparse_attention_config": {"sparse_num_index_heads": 2, "sparse_index_dim": 16,
                                "sparse_topk_blocks": 2, "sparse_block_size": 8,
                                "sparse_local_block": 1, "sparse_attention_freq": [0, 1, 1]}}}

CASES: list[dict[str, Any]] = [
    {"name": "minimax-m3", "config": "hf/minimax-m3.json", "seqs": [16, 4096],
     "reduced": M3_REDUCED, "reduced_seqs": [16, 40]},
    {"name": "minimax_m3_vl class defaults",
     "hf_config": {"model_type": "minimax_m3_vl",
                   "text_config": {"model_type": "minimax_m3_vl_text"}},
     "seqs": [16, 4096]},
]


def _cache(cache: Any) -> dict[str, Any]:
    """Every tensor of the cache once: keys and values, and the block indexer's idx_keys."""
    rows = cache_tensors(cache)
    idx = sum(r["bytes"] for r in rows if r["part"] == "idx_keys")
    total = sum(r["bytes"] for r in rows)
    return {"bytes": total, "indexer_bytes": idx, "kv_bytes": total - idx,
            "parts": sorted({r["part"] for r in rows}),
            "shapes": [[r["part"], r["shape"], r["dtype"]] for r in rows if r["layer"] in (0, 3)
                       or (r["layer"] == 1 and r["part"] == "idx_keys")],
            "layers": len(cache.layers)}


def _steps(model: Any, vocab: int, seq: int, meta: bool) -> dict[str, Any]:
    res = forward_steps(model, vocab, 1, seq, last=False, cached_prefill=meta, at_cache=_cache)
    return {"seq": seq, "prefill": res["prefill"].total, "decode": res["decode"].total,
            "prefill_ops": res["prefill"].ops, "decode_ops": res["decode"].ops,
            "cache_after_prefill": res["at_cache"]}


def _build(raw: dict[str, Any], device: str, dtype: Any, meta: bool) -> Any:
    cfg = text_config(config_from_dict(raw))
    kw = {"experts_implementation": "batched_mm" if meta else "eager"}
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=dtype,
                                                 **kw)
    return model.eval(), model.config


def measure(case: dict[str, Any]) -> dict[str, Any]:
    raw = case.get("hf_config") or json.load(open(os.path.join(DATA, case["config"])))
    model, cfg = _build(raw, "meta", torch.bfloat16, True)
    out: dict[str, Any] = {"name": case["name"], "hf_config": raw,
                           "model_class": type(model).__name__,
                           "full": {"how": "meta device, bf16, eager attention, batched_mm "
                                           "experts",
                                    "params_meta": n_params(model),
                                    "steps": [_steps(model, cfg.vocab_size, T, True)
                                              for T in case["seqs"]]}}
    if "reduced" in case:
        torch.manual_seed(0)
        small, scfg = _build(case["reduced"], "cpu", torch.float32, False)
        steps = [_steps(small, scfg.vocab_size, T, False) for T in case["reduced_seqs"]]
        bf, bcfg = _build(case["reduced"], "cpu", torch.bfloat16, False)  # the cache in bf16
        for s in steps:
            s["cache_after_prefill_bf16"] = forward_steps(
                bf, bcfg.vocab_size, 1, s["seq"], last=False, at_cache=_cache,
                count_fn=lambda fn: fn())["at_cache"]
        out["reduced"] = {"how": "real tensors, float32, CPU, eager attention and experts",
                          "hf_config": case["reduced"], "params": n_params(small),
                          "steps": steps}
    return out


HOW = ("tests/torch_reference/measure_block_sparse.py: params on the meta device at "
               "full size; FLOPs = FlopCounterMode (shapecalc/reference/measure.py's count) at "
               "full size on the meta device (bf16, eager attention, experts_implementation="
               "batched_mm) and at a reduced width on real tensors (float32, CPU, real routing "
               "and block top-k, eager experts), B=1, logits on every position, prefill and one "
               "decode step on the prefill's cache; cache bytes = every tensor of transformers' "
               "cache after the prefill (keys, values and the block indexer's idx_keys).")


def main() -> None:
    run(CASES, os.path.join(DATA, "block_sparse_reference.json"), HOW, measure)


if __name__ == "__main__":
    main()
