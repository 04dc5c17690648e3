#!/usr/bin/env python3
"""Measure one LoRA fine-tuning step of tiny Hugging Face causal LMs wrapped by peft (LoRA
adapters on a frozen base) and write ``tests/data/lora_reference.json``: the trainable
parameters, the matmul FLOPs of the forward and of the backward (FlopCounterMode, as
measure_train.py counts the full step) and what autograd saves (saved_tensors_hooks, as
measure_train_saved.py's ``saved_run`` measures the full step).

Run manually (tests read the JSON; `tests/test_lora.py` re-measures one case live through
``measure_case`` when torch and peft are installed):

    pip install torch==2.13.0+cpu transformers==5.24.0 peft==0.21.2
    python tests/torch_reference/measure_lora.py [--out PATH]

The models are measure_train.py's tiny llama (GQA) and qwen2 (GQA, q/k/v biases), random weights
(seed 0), ``peft.get_peft_model(model, LoraConfig(r, lora_alpha, target_modules, lora_dropout,
bias="none"))``: every base parameter frozen, lora_A (d_in → r) and lora_B (r → d_out) on each
targeted nn.Linear. peft's default ``autocast_adapter_dtype=True`` keeps the adapters in fp32 on
a bf16 model and casts each adapter's input to fp32 (peft/tuners/lora/layer.py, Linear.forward:
``x = self._cast_input_dtype(x, lora_A.weight.dtype)``; ``result + lora_B(lora_A(dropout(x))) *
scaling``). Each run: fp32 and bf16 models, eager and sdpa (flash) attention, no gradient
checkpointing, at the (B, T) of measure_train.py; target sets: every projection
(q,k,v,o,gate,up,down), q,v only, and down only (the first layer's attention then takes no
gradient); lora_dropout 0 and, for one set, 0.1 (its masks are saved). The first set is also
run with ``model.gradient_checkpointing_enable()`` (non-reentrant, per decoder layer; transformers
then calls enable_input_require_grads, so the embedding's output takes a gradient).
"""

from __future__ import annotations

import os
import sys

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check_roundtrip, config_to_json_dict, run
from measure_train import FLOP_CASES, SHAPES, V, counted
from measure_train_saved import ATTENTION, DTYPES, saved_run

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO_ROOT, "tests", "data", "lora_reference.json")
MODULES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj",
           "up": "up_proj", "down": "down_proj"}
# (targets, rank, alpha, dropout)
ADAPTERS = [("q,k,v,o,gate,up,down", 4, 8, 0.0), ("q,v", 8, 16, 0.0), ("down", 4, 8, 0.0),
            ("q,k,v,o,gate,up,down", 4, 8, 0.1)]
CASES = [(name, *FLOP_CASES[name]) for name in ("llama_gqa", "qwen2_gqa")]


def flops_run(model, B: int, T: int) -> dict:
    model.train()
    model.zero_grad(set_to_none=True)
    g = torch.Generator().manual_seed(B * 1000 + T)
    ids = torch.randint(0, V, (B, T), generator=g)
    out: dict = {}
    fwd, fwd_ops = counted(lambda: out.setdefault("o", model(ids, labels=ids, use_cache=False)))
    bwd, bwd_ops = counted(lambda: out["o"].loss.backward())
    return {"forward_flops": fwd, "backward_flops": bwd, "forward_by_op": fwd_ops,
            "backward_by_op": bwd_ops}


def build(model_type: str, kwargs: dict, dt: str, attn: str, targets: str, r: int,
          alpha: int, dropout: float):
    cfg = AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_config(cfg, attn_implementation=ATTENTION[attn],
                                            dtype=DTYPES[dt])
    hf = config_to_json_dict(base.config)
    check_roundtrip(base.config, hf)
    hf["dtype"] = "float32"
    lc = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, bias="none",
                    target_modules=[MODULES[t] for t in targets.split(",")])
    return get_peft_model(base, lc), hf


def measure_case(name: str, model_type: str, kwargs: dict, shapes=SHAPES,
                 dtypes=tuple(DTYPES), attentions=tuple(ATTENTION), adapters=ADAPTERS,
                 checkpointing=None) -> dict:
    runs, hf = [], None
    for j, (targets, r, alpha, dropout) in enumerate(adapters):
        # gradient checkpointing: the first adapter set (every projection, no dropout)
        cks = checkpointing if checkpointing is not None else (False, True) if j == 0 else (
            False,)
        for ck in cks:
            runs += _runs(model_type, kwargs, shapes, dtypes, attentions, targets, r, alpha,
                          dropout, ck)
            hf = runs[-1].pop("hf")
    for x in runs:
        x.pop("hf", None)
    return {"name": name, "model_type": model_type, "hf_config": hf, "runs": runs}


def _runs(model_type, kwargs, shapes, dtypes, attentions, targets, r, alpha, dropout, ck):
    runs = []
    for dt in dtypes:
        for attn in attentions:
            model, hf = build(model_type, kwargs, dt, attn, targets, r, alpha, dropout)
            if ck:  # transformers then makes the embedding's output require a gradient
                model.gradient_checkpointing_enable()
            trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
            adapter_dtype = str(next(p for p in model.parameters()
                                     if p.requires_grad).dtype).replace("torch.", "")
            for i, (B, T) in enumerate(shapes):
                torch.manual_seed(B * 7 + T)  # dropout's masks
                s = saved_run(model, B, T, ck, keep_tensors=i == 0)
                f = flops_run(model, B, T) if attn == "eager" else {}
                runs.append({"targets": targets, "rank": r, "alpha": alpha,
                             "dropout": dropout, "dtype": dt, "attention": attn,
                             "trainable_params": trainable,
                             "adapter_dtype": adapter_dtype, **s, **f, "hf": hf})
    return runs


HOW = (
    "peft 0.21.2 get_peft_model(LoraConfig(r, lora_alpha, target_modules, lora_dropout, "
    "bias='none')) over a tiny model (measure_train.py's llama_gqa and qwen2_gqa; random "
    "weights, seed 0), fp32 and bf16, eager and sdpa attention, without checkpointing (and the "
    "first adapter set also with gradient_checkpointing_enable()). "
    "trainable_params: parameters with requires_grad. saved_*: measure_train_saved.saved_run "
    "(saved_tensors_hooks around the forward and loss; parameters, frozen or not, apart). "
    "forward_flops/backward_flops (eager runs): FlopCounterMode around the forward and loss and "
    "around loss.backward()."
)


def main(argv=None) -> int:
    def show(c: dict) -> str:
        r = [x for x in c["runs"] if (x["batch"], x["seq"]) == SHAPES[0]
             and x["attention"] == "eager"]
        return " ".join(f"{x['targets']}/{x['dtype']}:{x['saved_bytes']}" for x in r)

    return run(argv, __doc__.splitlines()[0], DEFAULT_OUT, CASES, measure_case, show, HOW,
               extra={"shapes": SHAPES, "adapters": ADAPTERS})


if __name__ == "__main__":
    sys.exit(main())
