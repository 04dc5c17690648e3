#!/usr/bin/env python3
"""Measure DeepSeek-V4 (deepseek_v4: compressed attention, hyper-connections, hash routing) with
PyTorch and write ``tests/data/compressed_reference.json``.

Counted with shapecalc/reference/measure.py (the code `verify --against transformers` runs) on
transformers 5.24 / torch 2.13 CPU:

  * ``params_meta``: DeepseekV4ForCausalLM built on the meta device at full size from each
    config (the class defaults, DeepseekV4Config(); the V4-Flash layout), ``sum(p.numel())``,
    with the parameters of each module kind of layers 0..3 (one sliding, CSA and HCA layer each).
  * FLOPs: FlopCounterMode on real tensors (float32, eager, random weights) at the reduced width
    of ``reduced`` (the same layer pattern, ratios and window, small widths), B=1, T=16 and
    T=4096 (past the window, the top-k and several HCA windows), the prefill with logits on every
    position and one decode step on its cache, per module (forward_steps). The experts run
    experts_implementation="eager" on real tensors (each expert on the tokens routed to it: the
    default grouped_mm is not counted by FlopCounterMode).
  * Cache after the prefill, the reduced model in bfloat16: every tensor each layer's cache holds,
    once (the sliding K=V window is one tensor: ``keys is values``), by name, shape and dtype:
    the window, and per compressor ("compressor", and the CSA indexer's "indexer") its buffered
    kv and gate, its compressed entries and (CSA) its overlap kv and gate.

    python tests/torch_reference/measure_compressed.py [--out PATH] [--seqs 16 4096]
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import torch
from transformers import AutoModelForCausalLM
from transformers.models.deepseek_v4.configuration_deepseek_v4 import DeepseekV4Config

from shapecalc.reference.measure import forward_steps, n_params, params_by_module

# the reduced width: V4's pattern (2 sliding, then CSA/HCA alternating), its window and ratios
REDUCED: dict[str, Any] = dict(
    vocab_size=96, hidden_size=32, moe_intermediate_size=16, num_hidden_layers=4,
    num_attention_heads=4, head_dim=16, q_lora_rank=24, n_routed_experts=8,
    num_experts_per_tok=2, o_groups=2, o_lora_rank=12, index_n_heads=2, index_head_dim=8,
    index_topk=512, partial_rotary_factor=0.25, sliding_window=128, hc_mult=4,
    layer_types=["sliding_attention", "compressed_sparse_attention",
                 "heavily_compressed_attention", "compressed_sparse_attention"],
    mlp_layer_types=["hash_moe", "moe", "moe", "moe"])
FLASH = dict(  # V4-Flash's layout (the model card: layers 0, 1 sliding, then 4 and 128)
    layer_types=["sliding_attention"] * 2 + [
        "compressed_sparse_attention" if i % 2 == 0 else "heavily_compressed_attention"
        for i in range(41)])


def _tensors(cache: Any) -> list[list[dict[str, Any]]]:
    """Every tensor of each layer's cache, once, by name."""
    out = []
    for layer in cache.layers:
        items: list[tuple[str, Any]] = [("window", layer.keys)]
        if layer.values is not layer.keys:
            items.append(("values", layer.values))
        for attr in ("buffer_kv", "buffer_gate", "compressed_kv", "overlap_kv", "overlap_gate"):
            for name, t in (getattr(layer, attr, None) or {}).items():
                items.append((f"{attr}.{name}", t))
        out.append([{"name": n, "shape": list(t.shape), "dtype": str(t.dtype).split(".")[-1],
                     "bytes": t.numel() * t.element_size()} for n, t in items if t is not None])
    return out


def full_size(raw: dict[str, Any]) -> dict[str, Any]:
    cfg = DeepseekV4Config(**raw)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    by_module = {k: v for k, v in params_by_module(model).items()
                 if ".layers." not in k or any(f".layers.{i}." in k for i in range(4))}
    return {"config": raw, "layer_types": cfg.layer_types, "mlp_layer_types": cfg.mlp_layer_types,
            "params_meta": n_params(model), "params_by_module": by_module}


def reduced(seq: int) -> dict[str, Any]:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(DeepseekV4Config(**REDUCED), dtype=torch.float32,
                                             experts_implementation="eager").eval()
    res = forward_steps(model, REDUCED["vocab_size"], 1, seq, last=False)
    torch.manual_seed(0)
    bf = AutoModelForCausalLM.from_config(DeepseekV4Config(**REDUCED), dtype=torch.bfloat16,
                                          experts_implementation="eager").eval()
    ids = res["ids"]
    with torch.no_grad():
        cache = bf(ids, use_cache=True).cache
    tensors = _tensors(cache)
    return {"batch": 1, "seq": seq, "params": n_params(model),
            "prefill_flops": res["prefill"].total, "decode_flops": res["decode"].total,
            "prefill_modules": res["prefill"].modules, "decode_modules": res["decode"].modules,
            "cache_bf16": tensors, "cache_bf16_bytes": sum(t["bytes"] for x in tensors for t in x)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "data",
                                                  "compressed_reference.json"))
    ap.add_argument("--seqs", type=int, nargs="*", default=[16, 4096])
    a = ap.parse_args()
    doc = {"torch": torch.__version__.split("+")[0],
           "transformers": __import__("transformers").__version__,
           "how": "params on the meta device at full size; FLOPs with FlopCounterMode on real "
                  "tensors at reduced width (float32, CPU, eager experts), B=1, logits on every "
                  "position; cache tensors of the reduced model in bfloat16 after the prefill",
           "full_size": {"class_defaults": full_size({}), "flash_layout": full_size(FLASH)},
           "reduced": {"config": REDUCED, "cases": [reduced(T) for T in a.seqs]}}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
