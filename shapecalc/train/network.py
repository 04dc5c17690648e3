"""Where a training layout's collectives run and what they cost there, through plan/topology.py
(the one home of collective times): the groups placed in Megatron's rank order, each parallelism's
seconds per micro-batch or per step, the DP overlap policies, and the MoE terms.

Rank order (Megatron-Core's `RankGenerator`, order "tp-cp-ep-dp-pp": tp innermost, then cp,
then dp with ep inside it, pp outermost; megatron/core/parallel_state.py): a group's stride is
the product of the degrees inside it,
  tp: g = tp, stride 1        cp: g = cp, stride tp        ep: g = ep, stride tp·cp
  dp (dense gradients, over dp·cp as Megatron reduces them): g = dp·cp, stride tp
  the experts' dp (expert-data-parallel): g = dp·cp/ep, stride tp·ep (cp folded into dp)
  pp: neighbours tp·cp·dp GPUs apart.
TP stays inside the scale-up domain (tp·1 ≤ D, else refused naming --tp); the others take the
hierarchical form when they span domains (topology.py). Bytes are each rank's whole buffer, as
topology.py counts them:
  TP/SP: per layer 2 all-gathers and 2 reduce-scatters of [s/cp, b, h] forward, as many
    backward (+ the forward's again under full/torch recompute); the first stage's embedding
    reduce-scatter (and its gradient's all-gather), the last stage's head all-gather (and its
    reduce-scatter) and the loss's 3 fp32 all-reduces of [s/cp, b] (train/ledgers.py's count).
  CP: per layer 2·(cp−1) sends of one K or V chunk forward (ring attention), twice that backward,
    and the forward's again when the core is recomputed; each over the ring's slowest hop.
  EP: per MoE layer, dispatch and combine forward and their gradients backward: four all-to-alls
    of the rank's T·k·D activations (moe_imbalance × for the busiest rank).
  PP: per micro-batch 2·v sends of [s/cp, b, h/tp] (activation forward, gradient backward),
    at the slowest hop between neighbouring stages: the network once the stages span domains.
  DP: ZeRO 0 all-reduces the gradients; 1 and 2 reduce-scatter them and all-gather the updated
    weights; 3 all-gathers the weights in the forward and again in the backward, and
    reduce-scatters the gradients (train/ledgers.py's dp_ledger, here as times).

DP overlap (`--dp-overlap`): the fraction f of the overlappable DP time (all but the last bucket,
up to the window of compute it runs under) that is hidden: exposed = dp − f·max(0, min(window,
dp) − last bucket). A number in [0, 1], or a named policy (DP_OVERLAP, each framework's default).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..inputs.hardware import GPU
from ..inputs.numbers import parse_number
from ..model.config import ShapecalcError
from ..plan.topology import (
    Topology,
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
    send_s,
    span,
    topology,
)

# the share of the overlappable DP communication each framework hides by default
DP_OVERLAP = {
    # Megatron-Bridge / NeMo's MegatronStrategy set overlap_grad_reduce and overlap_param_gather
    # (Megatron-Core's DistributedDataParallelConfig has them False by default: say 0 for it)
    "megatron": 1.0,
    # FSDP2 (torchtitan): the reduce-scatter of one layer's gradients runs under the next layer's
    # backward, the prefetched all-gather under the previous layer's forward
    "torchtitan": 1.0,
    # torch DistributedDataParallel: bucketed all-reduces (bucket_cap_mb) launched from autograd
    # hooks during the backward (transformers' Trainer, llm-foundry's FSDP)
    "hf": 1.0,
    # DeepSpeed's zero_optimization.overlap_comm defaults to false: the reduction waits
    "deepspeed": 0.0,
    "none": 0.0,
}
DEFAULT_POLICY = "megatron"  # today's model; --framework (another branch) picks its own


def dp_overlap(text: str | None, default: str = DEFAULT_POLICY) -> tuple[float, str]:
    """(fraction, its name) from --dp-overlap: a policy name or a number in [0, 1]."""
    if text is None:
        return DP_OVERLAP[default], default
    key = text.strip().lower()
    if key in DP_OVERLAP:
        return DP_OVERLAP[key], key
    try:
        f = parse_number(text, "dp-overlap")
    except ShapecalcError:
        raise ShapecalcError("dp-overlap", f"{text!r}: give a fraction in [0, 1] or one of "
                             f"{', '.join(DP_OVERLAP)}") from None
    if not 0 <= f <= 1:
        raise ShapecalcError("dp-overlap", f"must be in [0, 1], not {text}")
    return f, f"{f:g}"


def train_topology(gpu: GPU, efficiency: float, net_bandwidth: float | None) -> Topology:
    """The profile's topology at the collectives' efficiency; `net_bandwidth` (--perf) overrides
    its scale-out bandwidth. The links' per-step latencies are left to the step model's
    collective_latency_s, one a collective (the serving model's calibrated α for a whole
    all-reduce, on which the training efficiencies were fitted): not counted twice."""
    topo = replace(topology(gpu, efficiency), up_lat=0.0, out_lat=0.0)
    if net_bandwidth is not None:
        topo = replace(topo, out_bw=net_bandwidth * efficiency)
    return topo


def check_layout(topo: Topology, tp: int, cp: int, dp: int, pp: int, ep: int) -> None:
    """Every group of the layout placed in Megatron's order, or a one-line refusal naming the
    flag whose group the topology cannot place."""
    gpus = tp * cp * dp * pp
    if tp > topo.domain:
        raise ShapecalcError("tp", f"tp={tp} exceeds the scale-up domain of {topo.domain} GPUs: "
                             "tensor parallelism runs over the scale-up link")
    if gpus > topo.gpus_per_node and gpus % topo.gpus_per_node:
        raise ShapecalcError("gpus", f"tp·cp·pp·dp = {gpus} GPUs span nodes of "
                             f"{topo.gpus_per_node} but do not fill them")
    for flag, g, r in (("cp", cp, tp), ("dp", dp * cp, tp), ("ep", ep, tp * cp),
                       ("pp", pp, tp * cp * dp)):
        try:
            span(topo, g, r)
        except ShapecalcError as e:
            raise ShapecalcError(flag, e.reason) from None


def _across(topo: Topology, g: int, r: int) -> bool:
    return g > 1 and span(topo, g, r)[1] > 1


def tp_s(topo: Topology, sbh_bytes: int, sb_fp32: int, t: int, layers: int, first: bool,
         last: bool, again: bool) -> float:
    """TP/SP collectives of one micro-batch on a rank of a stage (module doc)."""
    if t <= 1:
        return 0.0
    one = all_gather_s(topo, sbh_bytes, t)
    n = (8 + 4 * again) * layers + 2 * first + 2 * last
    return n * one + 3 * last * all_reduce_s(topo, sb_fp32, t)


def cp_s(topo: Topology, chunk: int, t: int, cp: int, layers: int, recompute: bool) -> float:
    """Ring attention's sends of one micro-batch (before the overlap with attention)."""
    if cp <= 1:
        return 0.0
    one = send_s(topo, chunk, _across(topo, cp, t))
    return (2 + 4 + 2 * recompute) * (cp - 1) * one * layers


def ep_s(topo: Topology, a2a_bytes: int, ep: int, stride: int, moe_layers: int,
         imbalance: float) -> float:
    """EP all-to-alls of one micro-batch: per MoE layer dispatch + combine forward (a2a_bytes
    both, alltoall_bytes) and their gradients backward; the busiest rank moves imbalance ×."""
    if ep <= 1 or not moe_layers:
        return 0.0
    return 4 * moe_layers * all_to_all_s(topo, imbalance * a2a_bytes / 2, ep, stride)


def pp_s(topo: Topology, boundary: int, pp: int, stride: int, virtual: int) -> float:
    """Per micro-batch: the activation sent forward and its gradient back, v times (one a
    model chunk), over the link between neighbouring stages."""
    if pp <= 1:
        return 0.0
    return 2 * virtual * send_s(topo, boundary, _across(topo, pp, stride))


def dp_s(topo: Topology, dense: int, experts: int, per: dict[str, int], zero: int, dpc: int,
         t: int, ep: int) -> float:
    """The DP collectives of one step on a rank holding `dense` + `experts` parameters (bytes
    per parameter of each term in `per`), over dp·cp ranks (the experts' over dp·cp/ep)."""
    def one(term: str, reduce: bool = False) -> float:
        b = per[term]
        f = all_reduce_s if reduce else all_gather_s
        return f(topo, dense * b, dpc, t) + (f(topo, experts * b, dpc // ep, t * ep)
                                            if experts else 0.0)

    if zero == 0:
        return one("gradients", reduce=True)
    weights = one("weights")
    return one("gradients") + weights * (2 if zero == 3 else 1)


def dp_exposed(dp_time: float, window: float, last_bucket: float, overlap: float) -> float:
    """The DP time not hidden under the compute window (module doc); numbers or numpy arrays."""
    import numpy as np  # the search's grids; a plain train run keeps NumPy off its start-up

    return dp_time - overlap * np.maximum(0.0, np.minimum(window, dp_time) - last_bucket)


def moe_terms(model: Any, tokens: int, width: int, ep: int, half_rows: float) -> tuple[int, float]:
    """(permutation bytes, grouped-GEMM row efficiency) of one MoE layer for a rank's `tokens`.

    Token permutation (Megatron's MoEAlltoAllTokenDispatcher: permute before the dispatch,
    unpermute after the combine): each reads and writes the rank's T·k·D activations, forward,
    and their gradients again backward: 8·T·k·D·width bytes at the HBM. Grouped GEMM: each local
    expert multiplies m_e = T·k·ep/E rows (the tokens its ep ranks route to it, balanced); a GEMM
    of m rows reaches m/(m + half) of the large-GEMM efficiency (the serving model's
    gemm_half_tokens, plan/perf_defaults.py)."""
    k, e = model.experts_per_token or 0, model.n_experts or 0
    if not k or not e:
        return 0, 1.0
    moved = tokens * k * model.d_model * width
    rows = tokens * k * ep / e
    return 8 * moved, rows / (rows + half_rows)
