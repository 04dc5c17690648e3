#!/usr/bin/env python3
"""Measure DeepSeek-V4's hyper-connections (mHC) with PyTorch and write
``tests/data/hyper_reference.json``.

Each case is a tiny DeepseekV4ForCausalLM (transformers 5.24, random weights, float32, eager, CPU)
at one n_hc (hc_mult) and t_max (hc_sinkhorn_iters). Counted with shapecalc/reference/measure.py
(the code `verify --against transformers` runs): parameters per module, and FLOPs per module with
FlopCounterMode over a prefill of B=1 × T (all logits) and one decode step on its cache
(forward_steps). What the file keeps of each, per layer 0 and the head:

  * params of ``attn_hc``, ``ffn_hc`` (each fn [(n+2)·n, n·D], base, scale) and ``hc_head``;
  * the self FLOPs of ``attn_hc`` and ``ffn_hc`` (the projection), of ``hc_head``, and of the
    decoder layer itself (its two merges combᵀ·x; every other matmul is a child module's);
  * the residual a layer hands on, per token (a forward hook on layer 0's output: n_hc·D), what
    crosses a pipeline boundary.

Run by hand (the tests read the JSON; tests/test_hyper.py re-measures one case live when torch
is installed):

    python tests/torch_reference/measure_hyper.py [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import torch
from transformers import AutoModelForCausalLM
from transformers.models.deepseek_v4.configuration_deepseek_v4 import DeepseekV4Config

from shapecalc.reference.measure import forward_steps, params_by_module

# a tiny DeepSeek-V4: every layer HCA (ratio 8 ≤ the window) so the attention is the simplest;
# what is measured here is the hyper-connections around it
BASE: dict[str, Any] = dict(
    vocab_size=64, hidden_size=32, moe_intermediate_size=16, num_hidden_layers=2,
    num_attention_heads=4, head_dim=16, q_lora_rank=24, n_routed_experts=4,
    num_experts_per_tok=2, sliding_window=8, o_groups=2, o_lora_rank=12, index_n_heads=2,
    index_head_dim=8, index_topk=3, partial_rotary_factor=0.25,
    layer_types=["heavily_compressed_attention"] * 2, mlp_layer_types=["moe"] * 2,
    compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8})
CASES = [(4, 20), (3, 4), (1, 1)]  # (hc_mult, hc_sinkhorn_iters): V4's own, others, one stream
SEQS = (16, 300)


def measure(n: int, iters: int, seq: int) -> dict[str, Any]:
    raw = {**BASE, "hc_mult": n, "hc_sinkhorn_iters": iters}
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(DeepseekV4Config(**raw), dtype=torch.float32).eval()
    shapes: list[list[int]] = []
    model.model.layers[0].register_forward_hook(lambda _m, _i, out: shapes.append(list(out.shape)))
    res = forward_steps(model, raw["vocab_size"], 1, seq, last=False)
    pm = params_by_module(model)

    def flops(step: str) -> dict[str, int]:
        mods = res[step].modules
        return {k: mods.get(f"model.{k}", 0) for k in
                ("layers.0.attn_hc", "layers.0.ffn_hc", "layers.0", "hc_head")}

    return {"hf_config": raw, "batch": 1, "seq": seq,
            "params": {k: pm[f"model.{k}"] for k in
                       ("layers.0.attn_hc", "layers.0.ffn_hc", "hc_head")},
            "prefill_flops": flops("prefill"), "decode_flops": flops("decode"),
            "residual_per_token": shapes[0][2] * shapes[0][3]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "data",
                                                  "hyper_reference.json"))
    out = ap.parse_args().out
    doc = {"torch": torch.__version__.split("+")[0], "transformers": __import__(
        "transformers").__version__, "how": "FlopCounterMode on real tensors (float32, CPU, "
        "eager) at reduced width; shapecalc/reference/measure.py's forward_steps and "
        "params_by_module", "cases": [measure(n, it, T) for n, it in CASES for T in SEQS]}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
