"""Expert parallelism with data-parallel attention, as SGLang (--enable-dp-attention with
--moe-a2a-backend deepep) and vLLM (--data-parallel-size with --enable-expert-parallel) run it.

A replica of max(tp, ep)·pp GPUs: attention (and the dense layers) run in dp = ep/tp replicas of
tp GPUs, each with its own batch, scheduler and KV pool (serve: one Replica each); the routed
experts spread over the ep GPUs, (E + N)/ep whole experts a GPU (N: EPLB's redundant copies,
deepseek-ai/EPLB). Each MoE layer dispatches every token to its k experts' GPUs and combines the
k outputs back: two all-to-alls over the ep ranks (topology.ep_exchange_s: DeepEP's normal
mode sends a token once to each other node its experts sit in and forwards it over NVLink there,
its low-latency mode sends every copy over RDMA), whose bytes are exact: a GPU sends its tp-th
share of its rank's tokens,
    dispatch = tokens · k · (D + 4·⌈D/128⌉)   fp8 values with an fp32 scale a 128 (DeepEP:
               "FP8 dispatching, and BF16 combining", deepseek-ai/DeepEP README; vLLM's
               DEEPEP_QUANT_BLOCK_SIZE = 128, fused_moe/deepep_ht_prepare_finalize.py)
    combine  = tokens · k · D · act bytes     (bf16)
Every attention rank is taken to run the same mix (each GPU's experts serve dp ranks' tokens, as
many as the rank's): a mean field, not a lockstep of dp schedulers. The busiest expert GPU's
share × ep is the imbalance factor f (1: balanced): its expert GEMMs and its all-to-all bytes
are f × the mean, and the step waits for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..inputs.numbers import bounded_int, parse_number
from ..lean import dataclass
from ..model.config import DTYPE_BITS, ModelConfig, ShapecalcError, Workload, bytes_of, check
from ..model.suggest import not_one_of
from .topology import EP_MODES, Topology, ep_exchange_s

# DeepEP's two, and SGLang's --deepep-mode auto: normal for a step with prefill, low-latency
# for a pure decode step (sglang python/sglang/srt/layers/moe/utils.py, DeepEPMode.resolve:
# "if is_extend_in_batch: return DeepEPMode.NORMAL else: return DeepEPMode.LOW_LATENCY")
MODES = (*EP_MODES, "auto")
SCALE_BLOCK = 128  # elements per fp8 scale (DeepEP, vLLM's DEEPEP_QUANT_BLOCK_SIZE)
SCALE_BYTES = 4  # an fp32 scale


@dataclass(frozen=True)
class EPPlan:
    """How the ep ranks exchange and balance (the degrees are the workload's tp and ep)."""

    mode: str = "normal"
    imbalance: float = 1.0
    redundant: int = 0


def attention_ranks(wl: Workload, tp: int | None = None) -> int:
    """dp: the attention ranks of a replica, ep / tp (1 without ep; `tp`: another degree)."""
    return max(1, wl.ep // (tp or wl.tp))


def ep_plan(model: ModelConfig, wl: Workload, mode: str | None = None,
            imbalance: str | float | None = None, redundant: int | None = None) -> EPPlan | None:
    """The EP plan of a run, checked as trace checks ep (with EPLB: ep divides E + N); None
    without ep > 1, where --ep-mode, --ep-imbalance and --redundant-experts are refused."""
    if wl.ep <= 1:
        for flag, v in (("ep-mode", mode), ("ep-imbalance", imbalance),
                        ("redundant-experts", redundant)):
            if v is not None:
                raise ShapecalcError(flag, "applies to expert parallelism: give --ep > 1")
        return None
    n = 0 if redundant is None else redundant
    if n < 0:
        raise ShapecalcError("redundant-experts", f"must be ≥ 0, got {n}")
    if n and not model.moe:
        raise ShapecalcError("redundant-experts", "applies to Mixture-of-Experts models")
    check(model, wl, n)  # a dense model: "ep: expert parallelism needs a MoE model"
    E = model.n_experts or 0
    # past E·(ep − 1) each GPU would hold more copies than all E experts (and 10¹² blamed the GPU)
    bounded_int(n, "redundant-experts", 0, E * (wl.ep - 1), "(each GPU holding all "
                f"{E} experts at ep={wl.ep})")
    m = "normal" if mode is None else mode  # `--ep-mode ''` is refused, not the default
    if m not in MODES:
        raise not_one_of("ep-mode", m, MODES)
    f = 1.0 if imbalance is None else (parse_number(imbalance, "ep-imbalance")
                                       if isinstance(imbalance, str) else float(imbalance))
    if not 1 <= f <= wl.ep:
        raise ShapecalcError("ep-imbalance", f"the busiest rank's share × ep is in [1, ep = "
                             f"{wl.ep}], got {f:g}")
    return EPPlan(m, f, n)


def exchange_bytes(tokens: int, model: ModelConfig, act: str) -> tuple[int, int]:
    """(dispatch, combine) bytes one GPU sends in one MoE layer for `tokens` tokens."""
    k, D = model.experts_per_token or 0, model.d_model
    scales = SCALE_BYTES * -(-D // SCALE_BLOCK)
    return tokens * k * (D + scales), tokens * k * bytes_of(D, DTYPE_BITS[act])


def moe_layers(model: ModelConfig) -> int:
    return (model.ffn_types or ("moe",) * model.n_layers).count("moe")


def exchange_s(topo: Topology, plan: EPPlan, wl: Workload, tokens: Any, model: ModelConfig,
               layers: float, decode: bool = False) -> float:
    """Seconds of a step's dispatches and combines on the busiest GPU: `tokens` its rank's
    tokens (its tp GPUs share them), `layers` the MoE layers of the stage; `decode`: a step
    without prefill (auto runs it low-latency)."""
    share = -(-int(tokens) // wl.tp)
    if share == 0:
        return 0.0
    k = model.experts_per_token or 0
    d, c = (b // (share * k) for b in exchange_bytes(share, model, wl.act))  # a copy's bytes
    f = plan.imbalance
    mode = plan.mode if plan.mode != "auto" else "low-latency" if decode else "normal"
    return layers * (ep_exchange_s(topo, f * share, k, d, wl.ep, mode)
                     + ep_exchange_s(topo, f * share, k, c, wl.ep, mode))


def imbalance_flops(tot: Mapping[str, Any], tokens: Any, model: ModelConfig, plan: EPPlan) -> Any:
    """The routed-expert FLOPs the busiest GPU does beyond the mean, as step_flops counts a
    rank's step (× dp/ep): (f − 1) · 2 · tokens · k · expert_params / E, a GEMM's 2 per weight."""
    if plan.imbalance == 1:
        return 0
    E, k = model.n_experts or 1, model.experts_per_token or 0
    return (plan.imbalance - 1) * 2 * tokens * k * tot["expert_params"] / E


def copies_bytes(tot: Mapping[str, Any], model: ModelConfig, plan: EPPlan, ep: int,
                 share: float) -> int:
    """Bytes a GPU holds beyond fit's E/ep of the experts' weights: (E + N)/ep whole experts
    (of the `share` of the layers its stage holds)."""
    if not plan.redundant:
        return 0
    E = model.n_experts or 1
    full = tot["expert_weight_bytes"]
    held = full * (E + plan.redundant) // (E * ep)
    return int((held - full // ep) * share)
