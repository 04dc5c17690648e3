"""The activation memory of a training rank from the saved tensors (train/saved.py): resident and
peak bytes of one micro-batch under each recompute, per stage and tensor by tensor; see saved.py's
doc for the rules, recompute cases and the peak.

`saved_bytes(model, wl, recompute, attention, *, tp, layers, first, last)` is the stable entry
point (train/report.py's memory per rank; verify --train's comparison).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ..model.config import ModelConfig, Workload, ceil_div
from ..model.expr import Expr, expr_of, formula
from ..model.plan import layer_plan
from .backward import by_kind, check_recompute
from .saved import (
    CONVENTION,
    MEASURED,
    Dims,
    Saved,
    dim_factors,
    saved_tensors,
    tensor_bytes,
)

# what a rank keeps with tp > 1 and with cp > 1 (stated in `train`'s output)
TP_RULE = ("tensor parallelism with sequence parallelism (Megatron): inside the tensor-parallel "
           "region (q, k, v, scores, softmax, the FFN's Dff, the vocabulary) a rank keeps its "
           "heads' and columns' share (H/p, Dff/p, N_vocab/p); outside it (the residual stream, "
           "the norms, the linears' inputs, which SP saves as the sequence shard and gathers "
           "again in the backward) its ⌈T/p⌉ tokens; the token ids and RoPE tables are "
           "replicated")
CP_RULE = ("context parallelism: each rank keeps the saved tensors of its T/cp tokens (ring "
           "attention's flash kernels; the KV blocks passed around are transient; with eager "
           "attention the [T,T] tensors are counted as [T/cp,T/cp], an underestimate)")




def _sum(ts: list[Saved]) -> int:
    return sum(t.bytes for t in ts)


def _bytes_formula(ts: list[Saved]) -> str:
    """Σ bytes of the counted tensors as one polynomial in the seeds' symbols (each tensor's
    element count × its width)."""
    return _polynomial(tuple((t.formula, t.storage_bytes // t.elements) for t in ts
                             if t.bytes and t.elements))


@lru_cache(maxsize=4096)  # train --search asks it of the same layer at every pipeline split
def _polynomial(terms: tuple[tuple[str, int], ...]) -> str:
    e = Expr([])
    for formula_, width in terms:
        e = e + expr_of(formula_) * Expr.const(width)
    return "0" if e.is_zero() else str(e)


def held_tensors(model: ModelConfig, wl: Workload, attention: str) -> list[dict[str, Any]]:
    """What torch's checkpoint closure holds besides the saved tensors: transformers passes a
    layer's mask, cos, sin and position ids as keyword arguments (GPT-2: its mask positionally,
    so saved; its position ids are the embedding's, saved there)."""
    if model.norm != "rmsnorm":
        mask = attention == "eager"  # a positional argument: saved by the checkpoint
        return [_extra("attention mask (a layer argument)", (("B", wl.batch), ("1", 1),
                       ("T", wl.seq), ("T", wl.seq)), wl.act, saved=True)] if mask else []
    out = []
    if attention == "eager":
        out.append(_extra("attention mask", (("B", wl.batch), ("1", 1), ("T", wl.seq),
                                             ("T", wl.seq)), wl.act))
    if model.positions == "rope":
        cs = (("T", wl.seq), ("Dh", model.dh))
        out += [_extra("cos", cs, wl.act), _extra("sin", cs, wl.act)]
    out.append(_extra("position ids", (("1", 1), ("T", wl.seq)), "int64"))
    return out


def _extra(name: str, dims: Dims, dtype: str, saved: bool = False) -> dict[str, Any]:
    n, f = formula(dim_factors(dims))
    return {"name": name, "dims": [d for d, _ in dims], "shape": [v for _, v in dims],
            "dtype": dtype, "elements": n, "formula": str(f), "bytes": tensor_bytes(dtype, n),
            "saved": saved}


def saved_bytes(model: ModelConfig, wl: Workload, recompute: str = "none",
                attention: str = "eager", *, tp: int = 1, layers: range | None = None,
                first: bool = True, last: bool = True,
                every: list[Saved] | None = None) -> dict[str, Any]:
    """The activation memory of one micro-batch (B sequences of T tokens) on one rank: resident
    and peak bytes under `recompute`, per stage and tensor by tensor. By default the rank holds
    every layer, the embedding and the head; a pipeline stage passes its `layers` (indices) and
    whether it is the `first` (embedding, RoPE tables) or the `last` (final norm, LM head, loss);
    `every` is saved_tensors' walk when the caller has it (it does not depend on the stage).

    Returns: convention, attention, recompute, dtype, tp; `tensors` (each kept tensor, per
    occurrence of its stage, × repeat), `held` (torch: the checkpoint's closure), `per_stage`
    (bytes per occurrence and in all), `per_layer` (bytes one layer of each kind keeps, by kind),
    `per_layer_none` (the same without recompute), `layer_input_bytes`, `outside_bytes` (kept
    outside the layers), `head_bytes` (of which the head and loss), `held_bytes`,
    `resident_bytes`, `peak_bytes`, `params_saved` (parameters the backward reads: listed, never
    counted)."""
    check_recompute(recompute)
    if every is None:  # the walk of the whole model (a pipeline stage's caller walks it once)
        every = saved_tensors(model, wl, attention, tp)
    acts = [t for t in every if not t.param]
    kinds = by_kind(acts)
    none_layer = {k: _sum(ts) for k, ts in kinds.items()}
    core_layer = {k: _sum([t for t in ts if t.core]) for k, ts in kinds.items()}
    own_input = {k: _sum([t for t in ts if t.layer_input]) for k, ts in kinds.items()}
    outside = [t for t in acts if (t.group == "embedding" and first)
               or (t.group == "head" and last)]
    plan = layer_plan(model)
    held_idx = range(len(plan.kind_of)) if layers is None else layers
    width = tensor_bytes(wl.act, wl.batch * ceil_div(wl.seq, tp) * model.d_model)
    held: list[dict[str, Any]] = []
    if recompute in ("full", "torch"):
        # RoPE's tables are the layers' to recompute from: torch's checkpoint holds them (held)
        outside = [t for t in outside if t.role != "rope.angles"]
        kept_layer = dict.fromkeys(kinds, width)
        kept = outside
        if recompute == "torch" and len(held_idx):
            held = held_tensors(model, wl, attention)
    elif recompute == "selective":
        kept_layer = {k: none_layer[k] - core_layer[k] for k in kinds}
        kept = [t for t in acts if not t.core and (t.group == "block" or t in outside)]
    else:
        kept_layer = none_layer
        kept = [t for t in acts if t.group == "block" or t in outside]
    head = [t for t in outside if t.group == "head"]
    in_layers = sum(kept_layer[plan.kind_of[i]] for i in held_idx)
    held_bytes = sum(x["bytes"] for x in held)
    resident = _sum(outside) + in_layers + held_bytes
    peak = resident
    if recompute != "none":
        # going back through layer i: it holds its recomputed tensors, the inputs of the
        # layers before it (on this rank) are still held, the head's and the loss's are freed
        running = 0
        for i in held_idx:
            k = plan.kind_of[i]
            running += kept_layer[k]
            extra = core_layer[k] if recompute == "selective" else none_layer[k] - own_input[k]
            peak = max(peak, resident - _sum(head) - in_layers + running + extra)
    stages: dict[tuple[str, str, int | None], dict[str, Any]] = {}
    for t in kept:
        key = (t.stage, t.group, t.kind)
        e = stages.setdefault(key, {"stage": t.stage, "role": t.role, "group": t.group,
                                    "kind": t.kind, "repeat": t.repeat, "bytes": 0})
        e["bytes"] += t.bytes
    for e in stages.values():
        e["total_bytes"] = e["bytes"] * e["repeat"]
    return {
        "convention": CONVENTION, "measured_families": list(MEASURED), "attention": attention,
        "recompute": recompute, "dtype": wl.act, "tp": tp,
        "tensors": [t.as_dict() for t in kept],
        "held": held,
        "per_stage": list(stages.values()),
        "per_layer": {str(k): v for k, v in kept_layer.items()},
        "per_layer_none": {str(k): v for k, v in none_layer.items()},
        "per_layer_none_formula": {str(k): _bytes_formula(ts) for k, ts in kinds.items()},
        "layer_input_bytes": width,
        "outside_bytes": _sum(outside), "head_bytes": _sum(head), "held_bytes": held_bytes,
        "resident_bytes": resident, "peak_bytes": peak,
        "params_saved": [t.as_dict() for t in every if t.param],
    }


def pipeline_activations(model: ModelConfig, wl: Workload, recompute: str, attention: str,
                         tp: int, stage_layers: list[int]) -> list[dict[str, Any]]:
    """saved_bytes of one micro-batch on each pipeline stage (holding `stage_layers[i]`
    consecutive layers; the first holds the embedding, the last the head and the loss)."""
    out, start = [], 0
    every = saved_tensors(model, wl, attention, tp)
    for i, n in enumerate(stage_layers):
        out.append(saved_bytes(model, wl, recompute, attention, tp=tp,
                               layers=range(start, start + n), first=i == 0,
                               last=i == len(stage_layers) - 1, every=every))
        start += n
    return out


def megatron_difference(model: ModelConfig, exact_layer: int, megatron_layer: int,
                        attention: str, recompute: str = "none") -> str:
    """Why the exact count of one layer differs from Megatron's 34·s·b·h + 5·a·s²·b (a GPT
    layer in 16 bits: a 4h MLP, LayerNorm inputs, dropout masks, 2-byte scores and softmax and
    a 1-byte dropout mask per score)."""
    ratio = exact_layer / megatron_layer if megatron_layer else 0.0
    if recompute in ("full", "torch"):
        return (f"exact {exact_layer:,d} B per layer = Megatron's {megatron_layer:,d} B "
                f"({ratio:.2f}×): both keep each layer's input [s,b,h]; the exact count adds "
                "what stays outside the layers (embedding, head, loss"
                + (", the checkpoint's held arguments" if recompute == "torch" else "")
                + ") and the peak of the layer going back, which Megatron's form leaves out")
    parts = []
    if model.gated:
        parts.append(f"a gated FFN keeps four [s,b,Dff] tensors (Dff={model.d_ff}), Megatron "
                     "two of 4h and a mask")
    if model.norm == "rmsnorm":
        parts.append("each RMSNorm keeps x (an fp32 copy in bf16), x̂ and γ·x̂ and an fp32 rsqrt")
    if model.kv_heads < model.n_heads:
        parts.append(f"GQA (H_kv={model.kv_heads}): eager repeats k and v to all H heads, "
                     "flash keeps them at H_kv")
    parts.append("no dropout masks (p = 0)")
    if recompute == "selective":
        parts.append("both recompute the [T,T] tensors")
    elif attention == "flash":
        parts.append("flash attention keeps no [T,T] tensor (Megatron's 5·a·s²·b term) but "
                     "q, k, v, its output and an fp32 logsumexp")
    elif model.norm == "rmsnorm":
        parts.append("eager keeps the softmax in fp32 and, in bf16, its bf16 cast (6 bytes a "
                     "score, Megatron 5: scores 2, softmax 2, mask 1)")
    return (f"exact {exact_layer:,d} B per layer vs Megatron's {megatron_layer:,d} B "
            f"({ratio:.2f}×): " + "; ".join(parts))
