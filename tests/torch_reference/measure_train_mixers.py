#!/usr/bin/env python3
"""Measure one training step of tiny Mamba-2 (nemotron_h) and gated DeltaNet (qwen3_next,
qwen3_5) models with PyTorch and write ``tests/data/train_mixers_reference.json``.

Run by hand (tests/test_train_mixers.py reads the JSON and re-measures one case live when torch
is installed):

    pip install torch==2.13.0+cpu transformers==5.24.0
    python tests/torch_reference/measure_train_mixers.py [--out PATH]

The step and its counting are measure_train.py's (FLOPs: FlopCounterMode around the forward with
the loss, and apart around ``loss.backward()``, without and with gradient checkpointing) and
measure_train_saved.py's (saved bytes: saved_tensors_hooks, fp32 and bf16, eager attention,
without and with checkpointing). The mixers run transformers 5.24's torch path (no
mamba_ssm, causal_conv1d or flash-linear-attention kernels installed): Mamba-2's torch_forward
with its chunked scan, gated DeltaNet's torch_chunk_gated_delta_rule (chunks of 64). Sizes are
reduced (every symbol a different number); Mamba-2's chunk is 8 and the last (B, T) runs 70
tokens, so both scans run several chunks; the vocabulary is measure_train's V (its ids).
"""

from __future__ import annotations

import os
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import run
from measure_train import V, redraw_routers, step
from measure_train_saved import saved_run

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO_ROOT, "tests", "data", "train_mixers_reference.json")
SHAPES = [(2, 7), (3, 12), (1, 70)]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
ATTENTION = {"eager": "eager", "flash": "sdpa"}
# Mamba-2 (M), attention (*) and MLP-only (-) blocks
NEMOTRON = dict(num_hidden_layers=4, hybrid_override_pattern="M-*M", hidden_size=48,
                intermediate_size=80, num_attention_heads=4, num_key_value_heads=2, head_dim=12,
                vocab_size=V, mamba_num_heads=8, mamba_head_dim=6, n_groups=2,
                ssm_state_size=10, conv_kernel=4, chunk_size=8)
# three gated DeltaNet layers, then full attention (full_attention_interval 4)
GDN = dict(vocab_size=V, hidden_size=48, num_hidden_layers=4, num_attention_heads=4,
           num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
           linear_key_head_dim=8, linear_value_head_dim=6, linear_conv_kernel_dim=3)
CASES = [
    ("nemotron_h_tiny", "nemotron_h", NEMOTRON),
    ("qwen3_5_tiny", "qwen3_5_text", dict(GDN, intermediate_size=80)),
    ("qwen3_next_tiny", "qwen3_next", dict(GDN, intermediate_size=80, num_experts=6,
                                           num_experts_per_tok=2, moe_intermediate_size=20,
                                           shared_expert_intermediate_size=24)),
]


def build(model_type: str, kwargs: dict, dtype, attention: str):
    cfg = AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attention, dtype=dtype,
                                             experts_implementation="eager")
    redraw_routers(model)
    return model.train()


def measure_case(name: str, model_type: str, kwargs: dict, shapes=SHAPES,
                 dtypes=tuple(DTYPES), attentions=("eager",)) -> dict:
    model = build(model_type, kwargs, torch.float32, "eager")
    runs = [step(model, B, T, ck) for B, T in shapes for ck in (False, True)]
    saved = []
    for dt in dtypes:
        for attn in attentions:
            model = build(model_type, kwargs, DTYPES[dt], ATTENTION[attn])
            for ck in (False, True):
                if ck:
                    model.gradient_checkpointing_enable()
                else:
                    model.gradient_checkpointing_disable()
                for i, (B, T) in enumerate(shapes):
                    r = saved_run(model, B, T, ck, keep_tensors=i in (0, len(shapes) - 1),
                                  all_alive=False)
                    saved.append({"dtype": dt, "attention": attn, **r})
    return {"name": name, "model_type": model_type,
            "hf_config": {"model_type": model_type, **kwargs},
            "params": int(sum(p.numel() for p in model.parameters())), "runs": runs,
            "saved_runs": saved}


HOW = (
    "runs: FlopCounterMode (matmul-like ops, 1 multiply-add = 2 FLOPs) around the forward "
    "`model(ids, labels=ids, use_cache=False)` and, apart, around `loss.backward()`, float32, "
    "eager attention, eager experts, model.train(), random weights (seed 0, routers redrawn); "
    "checkpointing: gradient_checkpointing_enable(). saved_runs: measure_train_saved.py's "
    "saved_run (saved_tensors_hooks: distinct non-parameter storages, held, resident and peak "
    "bytes; a tensor saved by a branch the loss never reads is freed before the forward ends: "
    "resident counts what stays) in fp32 and bf16, eager attention, without and with "
    "checkpointing. The mixers on "
    "transformers' torch path (no fused kernels installed)."
)


def main(argv=None) -> int:
    def show(c: dict) -> str:
        return " ".join(f"{r['batch']}x{r['seq']}{'ck' if r['checkpointing'] else ''}:"
                        f"{r['forward_flops']}/{r['backward_flops']}" for r in c["runs"])

    return run(argv, __doc__.splitlines()[0], DEFAULT_OUT, CASES, measure_case, show, HOW,
               extra={"shapes": SHAPES})


if __name__ == "__main__":
    sys.exit(main())
