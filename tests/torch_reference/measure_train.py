#!/usr/bin/env python3
"""Measure the matmul FLOPs of one training step (forward, loss, backward) of tiny Hugging Face
causal LMs with PyTorch's FlopCounterMode and write ``tests/data/train_reference.json``.

Run manually (tests read the JSON; `tests/test_train_reference.py` re-measures a few cases live
through ``measure_case`` when torch is installed):

    pip install torch==2.13.0+cpu transformers==5.24.0
    python tests/torch_reference/measure_train.py [--out PATH]

Models are built from configs with random weights (no downloads), float32, eager attention, the
eager experts loop (Mixtral), ``model.train()`` (every dropout probability is 0 in these configs).
One step: ``loss = model(ids, labels=ids, use_cache=False).loss`` counted by one FlopCounterMode
(the forward, with the logits of every position and the cross-entropy), then ``loss.backward()``
counted by another. With ``model.gradient_checkpointing_enable()`` each decoder layer's forward
runs again inside the backward (counted there). FlopCounterMode counts only matmul-like ops
(mm, addmm, bmm, baddbmm): not the cross-entropy, norms, softmax, activations or the embedding's
backward (an index_put/embedding_dense_backward).
"""

from __future__ import annotations

import os
import sys

import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from families import flops
from harness import check_roundtrip, config_to_json_dict, run

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO_ROOT, "tests", "data", "train_reference.json")

# the tiny models of families/flops.py (its sizes and the very llama and qwen2 cases), trained here
FLOP_CASES = {name: (model_type, kwargs) for name, model_type, kwargs in flops.CASES}
V = flops.V
# (B, T) pairs: T ≠ B and both differ from every model size, so a swapped factor shows
SHAPES = [(2, 7), (3, 12), (1, 20)]
CASES = [
    *((name, *FLOP_CASES[name]) for name in ("llama_gqa", "llama_mha_bias_tied", "qwen2_gqa")),
    # GPT-2's dropouts off: a step is then deterministic (no dropout masks saved or drawn)
    ("gpt2", "gpt2", dict(FLOP_CASES["gpt2"][1], resid_pdrop=0.0, embd_pdrop=0.0,
                          attn_pdrop=0.0)),
    ("mixtral_e8_k2", "mixtral", dict(
        hidden_size=flops.D, num_attention_heads=flops.H, num_key_value_heads=flops.HKV,
        head_dim=flops.DH, num_hidden_layers=flops.L, vocab_size=V,
        max_position_embeddings=flops.MAXPOS, intermediate_size=48, num_local_experts=8,
        num_experts_per_tok=2, sliding_window=None, tie_word_embeddings=False,
        router_jitter_noise=0.0)),
]


def counted(fn) -> tuple[int, dict]:
    """Run fn under FlopCounterMode: (total, {op: flops})."""
    fc = FlopCounterMode(display=False)
    with fc:
        fn()
    ops = {str(op): int(n) for op, n in fc.get_flop_counts().get("Global", {}).items()}
    return int(fc.get_total_flops()), dict(sorted(ops.items()))


def redraw_routers(model, seed: int = 1) -> None:
    """Router weights from N(0, 1), as harness.randomize_routers draws them: real,
    token-dependent routing."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".mlp.gate." in name or name.endswith("block_sparse_moe.gate.weight"):
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))


def step(model, B: int, T: int, checkpointing: bool) -> dict:
    if checkpointing:
        model.gradient_checkpointing_enable()
    else:
        model.gradient_checkpointing_disable()
    model.train()
    model.zero_grad(set_to_none=True)
    g = torch.Generator().manual_seed(B * 1000 + T)
    ids = torch.randint(0, V, (B, T), generator=g)
    out: dict = {}
    fwd, fwd_ops = counted(lambda: out.setdefault("o", model(ids, labels=ids, use_cache=False)))
    assert out["o"].logits.shape == (B, T, V)
    bwd, bwd_ops = counted(lambda: out["o"].loss.backward())
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing, missing  # every parameter got its gradient
    return {"batch": B, "seq": T, "checkpointing": checkpointing, "forward_flops": fwd,
            "backward_flops": bwd, "forward_by_op": fwd_ops, "backward_by_op": bwd_ops,
            "loss": float(out["o"].loss.detach())}


def measure_case(name: str, model_type: str, kwargs: dict, shapes=SHAPES) -> dict:
    cfg = AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(0)
    extra = {"experts_implementation": "eager"} if model_type == "mixtral" else {}
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager",
                                             dtype=torch.float32, **extra)
    redraw_routers(model)
    hf = config_to_json_dict(model.config)
    check_roundtrip(model.config, hf)
    runs = [step(model, B, T, ck) for B, T in shapes for ck in (False, True)]
    return {"name": name, "model_type": model_type, "hf_config": hf,
            "params": int(sum(p.numel() for p in model.parameters())), "runs": runs}


HOW = (
    "FlopCounterMode (matmul-like ops only, 1 multiply-add = 2 FLOPs) around the forward "
    "`model(ids, labels=ids, use_cache=False)` (all T logits and the cross-entropy loss) and, "
    "apart, around `loss.backward()`; float32, eager attention, model.train(), dropout 0, "
    "random weights (seed 0; routers redrawn from N(0,1)). checkpointing: "
    "model.gradient_checkpointing_enable() (each decoder layer re-run in the backward)."
)


def main(argv=None) -> int:
    def show(c: dict) -> str:
        return " ".join(f"{r['batch']}x{r['seq']}{'ck' if r['checkpointing'] else ''}:"
                        f"{r['forward_flops']}/{r['backward_flops']}" for r in c["runs"])

    return run(argv, __doc__.splitlines()[0], DEFAULT_OUT, CASES, measure_case, show, HOW,
               extra={"shapes": SHAPES})


if __name__ == "__main__":
    sys.exit(main())
