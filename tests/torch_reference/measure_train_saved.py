#!/usr/bin/env python3
"""Measure what autograd saves for the backward of one training step of tiny Hugging Face causal
LMs (torch.autograd.graph.saved_tensors_hooks) and write ``tests/data/train_saved_reference.json``.

Run manually (tests read the JSON; `tests/test_train_saved.py` re-measures a few cases live through
``measure_case`` when torch is installed):

    pip install torch==2.13.0+cpu transformers==5.24.0
    python tests/torch_reference/measure_train_saved.py [--out PATH]

The models, shapes and step are measure_train.py's (its CASES, SHAPES, routers redrawn), each run
in float32 and in bfloat16 (the model's dtype: weights and activations), with attn_implementation
"eager" and "sdpa" (on CPU torch runs SDPA's flash kernel, `_scaled_dot_product_flash_attention_
for_cpu`: it saves q, k, v, the output and an fp32 logsumexp [B,H,T], no [T,T] tensor), and
without and with ``model.gradient_checkpointing_enable()`` (torch.utils.checkpoint, non-reentrant,
per decoder layer).

How a run is measured (``saved_run``):
  - a pack hook around ``model(ids, labels=ids, use_cache=False)`` (the forward and the loss)
    records every tensor autograd saves: its storage (untyped_storage data_ptr and nbytes: views of
    one storage are counted once, at the storage's size), shape, dtype, grad_fn and the module
    that ran. Parameters (their storages) are told apart and not counted.
  - with checkpointing, torch's checkpoint packs, inside each layer, into its own hooks (the outer
    hook sees none of it) and saves the layer's tensor arguments through a Function of its own
    (the outer hook sees those: the layer inputs). The layer's keyword arguments (transformers
    passes the attention mask, RoPE's cos and sin and position ids so) are held by the
    checkpoint's closure, not saved: recorded apart as `held`.
  - resident: the bytes of the saved and held storages still alive after the forward; peak: the
    most of them alive at any node of the backward (a pre- and a post-hook on every node of the
    graph), counting also what each checkpointed layer saves when it is recomputed (a pack hook
    wrapped around torch.utils.checkpoint's recomputation hook); peak_recompute: the most alive
    from the first recomputation on (the head's and the loss's tensors are freed by then: what a
    layer's recomputation adds to the layer inputs still held). Liveness is read through
    StorageWeakRef, so the measurement holds no storage alive. Gradients are not counted.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.utils.checkpoint as ckpt
from torch.multiprocessing.reductions import StorageWeakRef
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.modeling_layers import GradientCheckpointingLayer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check_roundtrip, config_to_json_dict, run
from measure_train import CASES, SHAPES, V, redraw_routers

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO_ROOT, "tests", "data", "train_saved_reference.json")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
ATTENTION = {"eager": "eager", "flash": "sdpa"}


class Tracker:
    """Storages that hold saved tensors, by weak reference: bytes alive now, and the peak."""

    def __init__(self, params: set[int]):
        self.params = params
        self.refs: list[tuple[int, int, StorageWeakRef]] = []
        self.peak = 0
        self.recomputing = False  # set once a checkpointed layer is first recomputed
        self.peak_recompute = 0

    def track(self, t: torch.Tensor) -> tuple[int, int]:
        s = t.untyped_storage()
        key = (s.data_ptr(), s.nbytes())
        if key[0] not in self.params:
            self.refs.append((*key, StorageWeakRef(s)))
        return key

    def alive(self) -> int:
        live = {(p, n) for p, n, ref in self.refs if not ref.expired()}
        return sum(n for _, n in live)

    def sample(self, *_: object) -> None:
        now = self.alive()
        self.peak = max(self.peak, now)
        if self.recomputing:
            self.peak_recompute = max(self.peak_recompute, now)


def _meta(t: torch.Tensor, where: str, fn: str) -> dict:
    return {"module": where, "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
            "grad_fn": fn}


def saved_run(model, B: int, T: int, checkpointing: bool, keep_tensors: bool,
              all_alive: bool = True) -> dict:
    """One step's saved tensors, resident and peak bytes (see the module's doc). all_alive
    False: a saved tensor may be freed before the forward ends (a graph branch the loss never
    reads, as the delta rule's last state update: resident counts what stays)."""
    model.zero_grad(set_to_none=True)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    track = Tracker(params)
    stack: list[str] = []
    handles = []
    for name, mod in model.named_modules():
        handles.append(mod.register_forward_pre_hook(lambda m, a, n=name: stack.append(n)))
        handles.append(mod.register_forward_hook(lambda m, a, o: (stack.pop(), None)[1]))
    saved: dict[tuple[int, int], dict] = {}
    param_saves: dict[int, int] = {}
    packs = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal packs
        packs += 1
        key = track.track(t)
        if key[0] in params:
            param_saves[key[0]] = key[1]
        elif key not in saved:
            fn = t.grad_fn.name() if t.grad_fn is not None else (
                "leaf" if t.requires_grad else "no_grad")
            saved[key] = {**_meta(t, stack[-1] if stack else "", fn), "bytes": key[1]}
        return t

    held: dict[tuple[int, int], dict] = {}
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    originals = [getattr(m, "_gradient_checkpointing_func", None) for m in layers]

    def holder(f, m):
        def wrapped(fn, *args, **kw):  # what the checkpoint's closure keeps: fn's keywords
            for k, v in fn.keywords.items():
                for x in (v if isinstance(v, tuple) else (v,)):
                    if torch.is_tensor(x):
                        key = track.track(x)
                        held.setdefault(key, {**_meta(x, k, "held"), "bytes": key[1]})
            return f(fn, *args, **kw)
        return wrapped

    recompute_cls = ckpt._recomputation_hook

    class Recompute(recompute_cls):  # records what a recomputed layer saves
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            inner = self.pack_hook

            def pack_hook(x):  # sampled here too: a node frees what it unpacked before its
                track.recomputing = True  # post-hook runs, and the recomputation is the peak
                track.track(x)
                track.sample()
                return inner(x)
            self.pack_hook = pack_hook

    if checkpointing:
        for m, f in zip(layers, originals, strict=True):
            m._gradient_checkpointing_func = holder(f, m)
        ckpt._recomputation_hook = Recompute
    g = torch.Generator().manual_seed(B * 1000 + T)
    ids = torch.randint(0, V, (B, T), generator=g)
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = model(ids, labels=ids, use_cache=False).loss
        for h in handles:
            h.remove()
        resident = track.alive()
        nodes, todo = set(), [loss.grad_fn]
        while todo:
            n = todo.pop()
            if n is None or n in nodes:
                continue
            nodes.add(n)
            n.register_prehook(track.sample)
            n.register_hook(track.sample)
            todo.extend(f for f, _ in n.next_functions)
        track.peak = resident
        loss.backward()
    finally:
        ckpt._recomputation_hook = recompute_cls
        for m, f in zip(layers, originals, strict=True):
            if f is not None:
                m._gradient_checkpointing_func = f
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing, missing
    held = {k: v for k, v in held.items() if k not in saved}
    out = {"batch": B, "seq": T, "checkpointing": checkpointing,
           "saved_bytes": sum(x["bytes"] for x in saved.values()),
           "held_bytes": sum(x["bytes"] for x in held.values()),
           "resident_bytes": resident, "peak_bytes": track.peak,
           "peak_recompute_bytes": track.peak_recompute,
           "param_tensors_saved": len(param_saves), "packs": packs}
    if all_alive:  # all alive after the forward
        assert resident == out["saved_bytes"] + out["held_bytes"], out
    if keep_tensors:  # the first layer's and everything outside the layers (layers are alike)
        def first(x: dict) -> bool:
            parts = x["module"].split(".")
            return not any(p.isdigit() and p != "0" for p in parts)
        out["tensors"] = [x for x in saved.values() if first(x)]
        out["held"] = list(held.values())
    return out


def measure_case(name: str, model_type: str, kwargs: dict, shapes=SHAPES,
                 dtypes=tuple(DTYPES), attentions=tuple(ATTENTION)) -> dict:
    cfg = AutoConfig.for_model(model_type, **kwargs)
    runs, hf = [], None
    for dt in dtypes:
        for attn in attentions:
            torch.manual_seed(0)
            extra = {"experts_implementation": "eager"} if model_type == "mixtral" else {}
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation=ATTENTION[attn],
                                                     dtype=DTYPES[dt], **extra)
            redraw_routers(model)
            model.train()
            if hf is None:
                hf = config_to_json_dict(model.config)
                check_roundtrip(model.config, hf)
                hf["dtype"] = "float32"  # the same config whichever dtype ran first
            for ck in (False, True):
                if ck:
                    model.gradient_checkpointing_enable()
                else:
                    model.gradient_checkpointing_disable()
                for i, (B, T) in enumerate(shapes):
                    r = saved_run(model, B, T, ck, keep_tensors=i == 0)
                    runs.append({"dtype": dt, "attention": attn, **r})
    return {"name": name, "model_type": model_type, "hf_config": hf, "runs": runs}


HOW = (
    "torch.autograd.graph.saved_tensors_hooks around the forward and loss `model(ids, labels=ids, "
    "use_cache=False)` of a tiny model (measure_train.py's cases; random weights, model.train(), "
    "dropout 0), in float32 and bfloat16 (dtype of the model), attn_implementation eager and sdpa "
    "('flash': the CPU flash kernel), without and with gradient_checkpointing_enable() "
    "(non-reentrant). saved_bytes: the distinct storages (data_ptr, nbytes) of the packed tensors "
    "that are not parameters, each at its storage's size. held_bytes: tensors the checkpoint's "
    "closure keeps (a layer's keyword arguments), not among the saved. resident_bytes: saved + "
    "held alive after the forward; peak_bytes: the most alive at any backward node, with what the "
    "checkpoint's recomputation saves; peak_recompute_bytes: the same from the first "
    "recomputation on (0 without checkpointing). tensors (first (B,T) only): the first layer's "
    "saved tensors "
    "and those outside the layers."
)


def main(argv=None) -> int:
    def show(c: dict) -> str:
        r = [x for x in c["runs"] if (x["batch"], x["seq"]) == SHAPES[0]]
        return " ".join(f"{x['dtype']}/{x['attention']}{'/ck' if x['checkpointing'] else ''}:"
                        f"{x['saved_bytes']}" for x in r)

    return run(argv, __doc__.splitlines()[0], DEFAULT_OUT, CASES, measure_case, show, HOW,
               extra={"shapes": SHAPES})


if __name__ == "__main__":
    sys.exit(main())
