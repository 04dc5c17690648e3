"""Ledgers of a training step's communication: bytes one rank sends, per layer and per step.

TP with sequence parallelism (Megatron, Korthikanti et al. 2022): each layer's forward runs two
all-gathers and two reduce-scatters of the [s,b,h] activation in place of two all-reduces, its
backward the same again; a rank sends (t−1)·⌈s·b·h/t⌉ elements in each. Beyond the layers, the
vocab-parallel embedding and loss (Megatron's design, Shoeybi et al. 2019 §3):
  - the embedding table is split by vocabulary rows: each rank looks up the ids it holds and the
    partial [s,b,h] is summed by a reduce-scatter (with sequence parallelism; an all-reduce
    without), whose gradient in the backward is an all-gather of the same size;
  - the LM head's input [s,b,h] is all-gathered in the forward, its gradient reduce-scattered;
  - the vocab-parallel cross-entropy never gathers the [s,b,V] logits: it all-reduces three
    [s,b] fp32 vectors (each token's max logit, its sum of exps, its target's logit); its
    gradient (softmax − one-hot) is local.
CP (ring attention, Liu et al. 2023; Megatron's context parallelism): each rank holds T/cp of the
sequence as two load-balanced causal chunks; per layer the forward passes its K and V chunk
[b, T/cp, H_kv·Dh/t] around the ring (cp−1) times, the backward passes K and V again and the
partial dK and dV, so twice the forward.
EP (ep_ledger) and DP (dp_ledger, ZeRO's reduce-scatters and all-gathers): below.
All in ring collectives: an all-reduce is a reduce-scatter then an all-gather.
"""

from __future__ import annotations

from typing import Any

from ..model.config import ModelConfig, Workload, ceil_div, nbytes
from ..model.parallel import alltoall_bytes, stage_kind_counts
from ..model.plan import layer_plan
from .memory import PRECISIONS

LOSS_ALLREDUCES = 3  # max logit, sum of exps, target logit: [s,b] fp32 each


def ring(elements: int, g: int, width: int) -> int:
    """Bytes one rank sends in one ring reduce-scatter or all-gather of `elements` over g ranks:
    (g−1) chunks of ⌈elements/g⌉."""
    return (g - 1) * ceil_div(elements, g) * width if g > 1 else 0


def tp_ledger(b: int, s: int, h: int, t: int, layers: int, accum: int, width: int,
              first: bool, last: bool) -> dict[str, Any]:
    """The TP (sequence-parallel) ledger of one rank of a pipeline stage holding `layers` layers
    (`first`: the embedding, `last`: the LM head and loss) over `accum` micro-batches; `s` is
    the rank's sequence (T/cp under context parallelism)."""
    one = ring(s * b * h, t, width)
    per_layer = 4 * one  # 2 all-gathers + 2 reduce-scatters
    emb = one if first else 0  # forward reduce-scatter; backward all-gather, the same size
    head = one if last else 0  # forward all-gather; backward reduce-scatter
    loss = LOSS_ALLREDUCES * 2 * ring(s * b, t, 4) if last else 0  # fp32 all-reduces, forward
    fwd = per_layer * layers + emb + head + loss
    bwd = per_layer * layers + emb + head
    return {"degree": t, "sequence_parallel": t > 1, "collective_bytes": one,
            "forward_bytes_per_layer": per_layer, "backward_bytes_per_layer": per_layer,
            "embedding_forward_bytes": emb, "embedding_backward_bytes": emb,
            "head_forward_bytes": head, "head_backward_bytes": head,
            "loss_forward_bytes": loss, "loss_backward_bytes": 0,
            "forward_bytes_per_micro_batch": fwd, "backward_bytes_per_micro_batch": bwd,
            "bytes_per_step": (fwd + bwd) * accum,
            "note": "per rank of the stage: its layers; the vocab-parallel embedding (first "
            "stage), the LM head's input and the vocab-parallel loss (last stage)"}


def cp_ledger(model: ModelConfig, b: int, seq: int, t: int, cp: int, layers: int, accum: int,
              act: str, recompute: str) -> dict[str, Any]:
    """Ring attention: per layer (cp−1) passes of the rank's K and V chunks forward, K, V and
    dK, dV backward (twice the forward), and the forward's again when the attention core is
    recomputed (selective, full or torch)."""
    kv_heads = max(model.kv_heads // t, 1)  # a rank's KV heads (replicated below one per rank)
    chunk = nbytes(b * (seq // cp) * kv_heads * model.dh, act)  # one of K or V
    fwd = 2 * (cp - 1) * chunk
    bwd = 2 * fwd
    again = fwd if recompute != "none" else 0
    per_layer = fwd + bwd + again
    return {"degree": cp, "chunk_bytes": chunk if cp > 1 else 0,
            "tokens_per_rank": seq // cp,
            "forward_bytes_per_layer": fwd, "backward_bytes_per_layer": bwd,
            "recompute_bytes_per_layer": again, "bytes_per_micro_batch": per_layer * layers,
            "bytes_per_step": per_layer * layers * accum,
            "note": "ring attention: (cp−1) passes of K and V forward; K, V, dK, dV backward; "
            "load-balanced causal chunks"}


def ep_ledger(model: ModelConfig, wl: Workload, stage: int, accum: int, act: str, cp: int = 1
               ) -> dict[str, Any]:
    """Expert parallelism in training: each MoE layer's dispatch and combine all-to-alls of
    B·T·k·D activations in the forward, and their gradients (the same sizes) in the backward,
    counted as if every token went off-rank (the expected share is (ep−1)/ep of it). A rank
    dispatches its own tokens: B·T/cp of them, split over tp by sequence parallelism."""
    plan = layer_plan(model)
    counts = stage_kind_counts(plan, wl.pp)[stage]
    moe = sum(c for k, c in zip(plan.kinds, counts, strict=True) if k.ffn == "moe")
    tokens = ceil_div(wl.batch * (wl.seq // cp), wl.tp)
    a2a = alltoall_bytes(1, tokens, model, act) if wl.ep > 1 else 0
    return {"degree": wl.ep, "moe_layers": moe, "forward_bytes_per_layer": a2a,
            "backward_bytes_per_layer": a2a, "bytes_per_step": 2 * a2a * moe * accum,
            "expected_bytes_per_step": 2 * a2a * moe * accum * (wl.ep - 1) / wl.ep}


def dp_ledger(dense: int, experts: int, precision: str, zero: int, dp: int, ep: int
               ) -> dict[str, Any]:
    """Bytes one rank sends per step over the data-parallel group (ring collectives, each p−1
    steps of one ⌈size/dp⌉ chunk): ZeRO 0 all-reduces the gradients; 1 and 2 reduce-scatter
    them and all-gather the updated weights; 3 all-gathers the weights in the forward and again
    in the backward, and reduce-scatters the gradients. With ep > 1 the experts' part runs over
    dp/ep ranks."""
    per = {x.name: x.bytes_per_param for x in PRECISIONS[precision]}

    def one(term: str) -> int:  # one reduce-scatter or all-gather of a term's bytes
        return ring(dense * per[term], dp, 1) + ring(experts * per[term], dp // ep, 1)

    grads, weights = one("gradients"), one("weights")
    if zero == 0:
        parts = {"gradient_allreduce": 2 * grads}  # a reduce-scatter, then an all-gather
    elif zero in (1, 2):
        parts = {"gradient_reduce_scatter": grads, "weight_allgather": weights}
    else:
        parts = {"gradient_reduce_scatter": grads, "weight_allgather_forward": weights,
                 "weight_allgather_backward": weights}
    return {"degree": dp, "zero": zero, "bytes_per_step": sum(parts.values()), **parts,
            "note": "ring collectives over dp ranks, ⌈size/dp⌉ chunks"
            + ("; the routed experts' over their dp/ep ranks" if ep > 1 else "")}

