"""The time of one training step on the rank group, and what follows from it: MFU, HFU,
tokens/s, tokens/day, days and GPU-hours to train on N tokens. The one home of these formulas.

A model of how GPUs run a step, per rank of each pipeline stage, per micro-batch:
  compute  = GEMM FLOPs / (peak × gemm_efficiency)
           + attention-core FLOPs (QKᵀ, A·V) / (peak × attention_efficiency)
           + memory-bound bytes / (HBM × memory_efficiency)
    FLOPs are the exact counts of train/backward.py (forward, backward dX and dW, recompute),
    of one tensor- and context-parallel rank (÷ tp·cp); a FlashAttention kernel does the causal
    lower triangle (as plan/perf.py times prefill), an eager one the whole [T,T]. Memory-bound
    work is each elementwise stage (norms, activations, RoPE, residual adds; eager attention's
    scale, mask and softmax, which FlashAttention fuses into its kernel): it reads one tensor
    and writes one in the forward (2 × its bytes), reads two and writes one in the backward.
           + the routed experts' grouped GEMMs / (peak × gemm_efficiency × grouped_gemm_efficiency
             × their rows' efficiency / moe_imbalance) + token permutation bytes / HBM
             (train/network.py's moe_terms)
  exposed communication (each collective priced by plan/topology.py where its ranks sit, at
    link_efficiency of the scale-up link or the scale-out network, the links' latencies, plus
    collective_latency_s each for its launch; train/network.py places the groups):
    - TP/SP all-gathers and reduce-scatters: on the critical path (each feeds the next GEMM);
    - CP ring passes: overlap the layer's attention compute, only the excess is exposed;
    - EP all-to-alls and PP boundary sends: on the critical path;
    - DP gradient reduce-scatter (or all-reduce) and the weights' all-gather: overlap the last
      micro-batch's backward and the next step's first forward, all but the last bucket
      (Megatron's 40M-parameter buckets), to the share dp_overlap (network.py's policies);
      under ZeRO-3 the per-layer all-gathers overlap the whole step's compute.
  pipeline: the slowest stage sets the pace; 1F1B with m micro-batches and v interleaved
    virtual stages per rank runs (m + (p−1)/v) micro-batch slots: the bubble is
    (p−1)/(v·m + p−1) of the step (v = 1: (p−1)/(m+p−1)).
Parallel groups are laid out as Megatron orders them (tp innermost, then cp, then dp with ep
inside it, then pp; train/network.py).

MFU (PaLM, Chowdhery et al. 2022, Appendix B): the step's model FLOPs (forward + backward,
without recompute) / (GPUs × dense peak × step time); HFU counts the recompute too. Attention's
FLOPs in both follow the workload's attention_flops (full [T,T]: PaLM's 12·L·H·Q·T; causal:
the lower triangle).

Fitted on published figures (tests/data/train_mfu.json, tests/test_train_time.py): the two
compute efficiencies, per GPU (FITTED; TrainPerf's defaults for other GPUs); the rest are the
serving model's calibrated terms (plan/perf_defaults.py) and the cluster's network. Left out:
the optimizer step, data loading, failures and restarts, checkpoint saving, stragglers and the
loss computation's memory traffic.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from ..inputs.hardware import GPU
from ..inputs.numbers import named_numbers
from ..interpret.symbolic import stages as symbolic_stages
from ..lean import dataclass
from ..model.config import ModelConfig, ShapecalcError, Workload, ceil_div
from ..model.parallel import alltoall_bytes, stage_kind_counts
from ..model.plan import layer_plan
from ..model.stage import ATTN_SCORE_ROLES, EXPERT_ROLES, FLASH_SKIP_ROLES, Stage
from ..plan.perf_defaults import PARAMS
from .backward import NO_GRAD_ROLES, BackwardStage, backward_stages, recompute_stages
from .ledgers import cp_ledger
from .network import (
    check_layout,
    cp_s,
    dp_exposed,
    dp_s,
    ep_s,
    moe_terms,
    pp_s,
    tp_s,
    train_topology,
)
from .saved import ATTENTION

BUCKET_PARAMS = 40_000_000  # Megatron DDP's gradient bucket: the last one cannot overlap
SECONDS_PER_DAY = 86_400


# (gemm_efficiency, attention_efficiency) fitted per GPU on tests/data/train_mfu.json, each the
# grid point (0.01 apart) of least mean squared log error of the published figure it is checked
# on (tests/test_train_time.py re-runs the fit): an H100 at 700 W does not hold its boost clock
# in dense bf16 GEMMs and reaches a smaller fraction of its peak than an A100. A100-40GB is the
# same chip at the same clocks as the 80GB. Other GPUs take the fit over all rows (TrainPerf's
# defaults).
FITTED = {"H100-SXM": (0.59, 0.40), "A100-80GB": (0.67, 0.35), "A100-40GB": (0.67, 0.35)}


@dataclass(frozen=True)
class TrainPerf:
    # fitted on every row of tests/data/train_mfu.json (tests/test_train_time.py)
    gemm_efficiency: float = 0.64  # fraction of dense peak a training GEMM reaches
    attention_efficiency: float = 0.37  # the attention core's kernels, forward and backward
    # the serving model's calibrated terms (plan/perf_defaults.py)
    memory_efficiency: float = PARAMS["memory_efficiency"]
    link_efficiency: float = PARAMS["link_efficiency"]
    collective_latency_s: float = PARAMS["allreduce_latency_s"]
    # the scale-out network's bytes/s per GPU per direction; None: the GPU profile's
    # scale_out_bandwidth (perf_for fills it in), a number overrides it
    net_bandwidth: float | None = None
    # the share of the overlappable DP time hidden (train/network.py's DP_OVERLAP policies)
    dp_overlap: float = 1.0
    # MoE: the grouped GEMMs' efficiency relative to a dense GEMM's (beyond their rows'), and
    # the busiest expert rank's tokens over the mean (1: balanced, as Megatron-Bridge's
    # benchmarks force)
    grouped_gemm_efficiency: float = 1.0
    moe_imbalance: float = 1.0

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None and f.name == "net_bandwidth":
                continue
            if f.name == "dp_overlap":
                if not (isinstance(v, (int, float)) and 0 <= v <= 1):
                    raise ShapecalcError("perf.dp_overlap", f"must be in [0, 1], got {v}")
                continue
            if not (isinstance(v, (int, float)) and v == v and 0 < v < float("inf")):
                raise ShapecalcError(f"perf.{f.name}", f"must be a finite number > 0, got {v}")
            if f.name.endswith("efficiency") and v > 1:
                raise ShapecalcError(f"perf.{f.name}", f"must be in (0, 1], got {v}")
        if self.net_bandwidth is not None and self.net_bandwidth < 1:  # a typo, as profiles
            raise ShapecalcError("perf.net_bandwidth", f"{self.net_bandwidth:g} is below 1 a "
                                 "second; give it in bytes/s (e.g. 50e9)")
        if not 1 <= self.moe_imbalance <= 1e3:  # the busiest rank holds at least the mean
            raise ShapecalcError("perf.moe_imbalance", f"must be in [1, 1000], got "
                                 f"{self.moe_imbalance}")


NAMES = tuple(f.name for f in fields(TrainPerf))


def perf_for(gpu: GPU, sets: list[str] | None = None) -> TrainPerf:
    """The GPU's fitted efficiencies (else the all-rows fit), then `NAME=VALUE` overrides."""
    out = TrainPerf(net_bandwidth=gpu.scale_out_bandwidth)
    if gpu.name in FITTED:
        g, a = FITTED[gpu.name]
        out = replace(out, gemm_efficiency=g, attention_efficiency=a)
    for key, v, _ in named_numbers(sets, "perf", NAMES):
        out = replace(out, **{key: v})
    return out


class Work:
    """FLOPs and memory-bound bytes of one layer (or the embedding, or the head), forward,
    backward and recompute, on the whole model's width (÷ tp·cp per rank); the routed experts'
    GEMMs apart (grouped GEMMs, timed at their own efficiency)."""

    FIELDS = ("gemm_fwd", "gemm_bwd", "attn_fwd", "attn_bwd", "mem_fwd", "mem_bwd", "exp_fwd",
              "exp_bwd", "ad_fwd", "ad_bwd")
    __slots__ = FIELDS

    def __init__(self) -> None:
        self.gemm_fwd = self.gemm_bwd = self.attn_fwd = self.attn_bwd = 0
        self.mem_fwd = self.mem_bwd = 0  # the backward's include the recompute
        self.exp_fwd = self.exp_bwd = 0
        self.ad_fwd = self.ad_bwd = 0  # LoRA's r-wide adapter GEMMs (train/lora_time.py)

    def add(self, role: str, side: str, flops: int) -> None:
        """A stage's FLOPs on `side` (fwd, bwd) of the efficiency they are timed at: attention,
        the routed experts' grouped GEMMs, or dense GEMMs."""
        cls = "attn" if role in ATTN_SCORE_ROLES else "exp" if role in EXPERT_ROLES else "gemm"
        key = f"{cls}_{side}"
        setattr(self, key, getattr(self, key) + flops)

    def scaled(self, n: int) -> list[int]:
        return [getattr(self, k) * n for k in self.FIELDS]


def _key(s: Any) -> Any:
    return s.kind if s.group == "block" else s.group


def _memory_bound(s: Stage, flash: bool, fused: tuple[str, ...] = ()) -> bool:
    return (s.elementwise_flops > 0 and not s.flops and s.role not in NO_GRAD_ROLES
            and not (flash and s.role in FLASH_SKIP_ROLES) and s.role not in fused) \
        or s.op == "embed"


def layer_work(model: ModelConfig, wl: Workload, recompute: str, attention: str,
               extra_gemm: dict[Any, int] | None = None, fused: tuple[str, ...] = ()
               ) -> dict[Any, Work]:
    """Work per layer kind (and for 'embedding' and 'head') of one micro-batch, as the kernel
    runs it: FlashAttention's causal lower triangle, or eager's whole [T,T]."""
    flash = attention == "flash"
    st = symbolic_stages(model, wl.model_copy(
        update={"attention_flops": "causal" if flash else "full"}), 1)
    out: dict[Any, Work] = {}

    def w(s: Any) -> Work:
        return out.setdefault(_key(s), Work())

    for s in st:
        x = w(s)
        if s.flops:
            x.add(s.role, "fwd", s.flops)
        if _memory_bound(s, flash, fused):
            x.mem_fwd += 2 * s.bytes
            x.mem_bwd += 3 * s.bytes
    # the backward's matmuls, then the forward's re-run inside it: both are backward time
    done: list[Stage | BackwardStage] = [*backward_stages(st), *recompute_stages(st, recompute)]
    for b in done:
        x = w(b)
        run = b.flops - getattr(b, "convention_only_flops", 0)  # not FlopCounterMode's extra
        x.add(b.role, "bwd", b.flops if b.role in ATTN_SCORE_ROLES else run)
        if isinstance(b, Stage) and _memory_bound(b, flash, fused):
            x.mem_bwd += 2 * b.bytes
    for k, f in (extra_gemm or {}).items():  # a framework's own recompute (per-op SAC)
        w_k = out.setdefault(k, Work())
        w_k.gemm_bwd += f
    return out


class Layout:
    """What every stage of one layout shares: the rates, the topology, the work per layer kind
    (a layout class computes it once; train/search.py reuses it over its grid)."""

    def __init__(self, model: ModelConfig, wl: Workload, gpu: GPU, perf: TrainPerf, *, cp: int,
                 dp: int, recompute: str, attention: str, act_width: int,
                 work: dict[Any, Work] | None = None, extra_gemm: dict[Any, int] | None = None,
                 peak_dtype: str | None = None, fused: tuple[str, ...] = (),
                 adapter_eff: float = 1.0) -> None:
        """`adapter_eff`: LoRA's r-wide GEMMs' share of the GEMM rate (train/lora_time.py);
        `peak_dtype`: the GEMMs' peak when it is not the activations' (fp8 training,
        train/fp8.py); `fused`: elementwise roles a framework's kernels fuse into their
        neighbours (train/efficiency.py); `extra_gemm`: a framework's own recompute FLOPs."""
        if attention not in ATTENTION:
            raise ShapecalcError("attention", f"unknown {attention!r}; known: "
                                 f"{', '.join(ATTENTION)}")
        self.compute = peak_dtype or wl.compute
        peak = gpu.peak(self.compute)
        if peak is None:
            raise ShapecalcError("gpu", f"{gpu.name} has no {self.compute} peak")
        self.model, self.wl, self.perf, self.peak = model, wl, perf, peak
        self.cp, self.dp, self.recompute, self.width = cp, dp, recompute, act_width
        self.adapter_eff = adapter_eff
        self.topo = train_topology(gpu, perf.link_efficiency, perf.net_bandwidth)
        check_layout(self.topo, wl.tp, cp, dp, wl.pp, wl.ep)
        self.work = work if work is not None else layer_work(model, wl, recompute, attention,
                                                             extra_gemm, fused)
        self.plan = layer_plan(model)
        self.rates = (peak * perf.gemm_efficiency, peak * perf.attention_efficiency,
                      gpu.hbm_bandwidth * perf.memory_efficiency)
        tokens = ceil_div(wl.batch * (wl.seq // cp), wl.tp)  # a rank's, as ep_ledger counts
        self.permute, self.rows_eff = moe_terms(model, tokens, act_width, wl.ep,
                                                PARAMS["gemm_half_tokens"])

    def stage(self, i: int, kc: list[int], first: bool, last: bool) -> dict[str, Any]:
        """One micro-batch on a rank of stage i (holding kc layers of each kind): its compute and
        the collectives on its critical path, without the pipeline sends."""
        wl, model, perf, topo = self.wl, self.model, self.perf, self.topo
        b, s, t, cp, ep = wl.batch, wl.seq, wl.tp, self.cp, wl.ep
        g_rate, a_rate, m_rate = self.rates
        e_rate = g_rate * perf.grouped_gemm_efficiency * self.rows_eff / perf.moe_imbalance
        tot = [0] * len(Work.FIELDS)
        keys: list[tuple[Any, int]] = [(k, c) for k, c in enumerate(kc) if c]
        keys += [("embedding", 1)] * first + [("head", 1)] * last
        layers = sum(kc)
        moe_layers = sum(c for k, c in enumerate(kc) if self.plan.kinds[k].ffn == "moe")
        for k, c in keys:
            if k in self.work:
                tot = [x + y for x, y in zip(tot, self.work[k].scaled(c), strict=True)]
        ranks = t * cp  # a micro-batch's work is split over the tp·cp ranks of a stage
        gf, gb, af, ab, mf, mb, ef, eb, adf, adb = (x / ranks for x in tot)
        perm = self.permute * moe_layers / m_rate
        ad_rate = g_rate * self.adapter_eff
        fwd = gf / g_rate + af / a_rate + mf / m_rate + ef / e_rate + perm / 2 + adf / ad_rate
        bwd = gb / g_rate + ab / a_rate + mb / m_rate + eb / e_rate + perm / 2 + adb / ad_rate
        lat = perf.collective_latency_s  # each collective's launch, beside the links' latency
        again = self.recompute in ("full", "torch")  # a layer's forward collectives run again
        sbh = b * (s // cp) * model.d_model * self.width
        n_tp = ((8 + 4 * again) * layers + 2 * first + (2 + 3) * last) * (t > 1)
        tp = tp_s(topo, sbh, b * (s // cp) * 4, t, layers, first, last, again) + n_tp * lat
        attn_layer = (af + ab) / a_rate / max(layers, 1)
        chunk = cp_ledger(model, b, s, t, cp, 1, 1, wl.act, self.recompute)["chunk_bytes"]
        ring = cp_s(topo, chunk, t, cp, 1, self.recompute != "none")
        cp_layer = ring + 3 * (cp - 1) * lat if cp > 1 else 0.0
        cp_x = max(0.0, cp_layer - attn_layer) * layers
        a2a = alltoall_bytes(1, ceil_div(b * (s // cp), t), model, wl.act) if ep > 1 else 0
        ep_x = ep_s(topo, a2a, ep, t * cp, moe_layers, perf.moe_imbalance) \
            + 4 * moe_layers * lat * (ep > 1)
        return {"stage": i, "compute_forward_s": fwd, "compute_backward_s": bwd,
                "gemm_s": (gf + gb) / g_rate + (adf + adb) / ad_rate,
                "attention_s": (af + ab) / a_rate,
                "memory_bound_s": (mf + mb) / m_rate, "expert_gemm_s": (ef + eb) / e_rate,
                "permute_s": perm, "tp_s": tp, "cp_exposed_s": cp_x, "ep_s": ep_x}

    def boundary_s(self, virtual: int) -> float:
        """The pipeline sends of one micro-batch (scattered over tp, as Megatron sends them)."""
        wl = self.wl
        bnd = wl.batch * (wl.seq // self.cp) * self.model.d_model * self.width // wl.tp
        return pp_s(self.topo, bnd, wl.pp, wl.tp * self.cp * self.dp, virtual) \
            + 2 * virtual * self.perf.collective_latency_s * (wl.pp > 1)

    def dp_s(self, dense: int, experts: int, per_param: dict[str, int], zero: int) -> float:
        wl = self.wl
        return dp_s(self.topo, dense, experts, per_param, zero, self.dp * self.cp, wl.tp, wl.ep)


def pace(micro: Any, window: Any, dp_time: Any, params: Any, accum: Any, p: int, virtual: Any,
         overlap: float) -> tuple[Any, Any, Any]:
    """(slots, each stage's exposed DP time, the step) from each stage's micro-batch seconds,
    compute window, DP seconds and parameters: the stages on the last axis, scalars or numpy
    arrays over a grid before it (train/search.py). Slots: 1F1B's m + (p−1)/v; the step: slots ×
    the slowest stage's micro-batch + the worst stage's exposed DP time (network.py's overlap;
    the last bucket is BUCKET_PARAMS of the stage's parameters)."""
    import numpy as np  # here, not at import: `train` without --gpu never steps
    slots = accum + (p - 1) / virtual
    last_bucket = dp_time * np.minimum(1.0, BUCKET_PARAMS / np.maximum(params, 1))
    exposed = dp_exposed(dp_time, window, last_bucket, overlap)
    return slots, exposed, slots * np.max(micro, axis=-1) + np.max(exposed, axis=-1)


def step_time(model: ModelConfig, wl: Workload, gpu: GPU, perf: TrainPerf, *, cp: int, dp: int,
              accum: int, virtual: int, zero: int, recompute: str, attention: str,
              act_width: int, placed: list[tuple[int, int]], per_param: dict[str, int],
              layout: Layout | None = None, extra_gemm: dict[Any, int] | None = None,
              peak_dtype: str | None = None, fused: tuple[str, ...] = ()) -> dict[str, Any]:
    """The expected seconds of one step and its terms (see the module's doc and Layout's)."""
    import numpy as np
    lay = layout or Layout(model, wl, gpu, perf, cp=cp, dp=dp, recompute=recompute,
                           attention=attention, act_width=act_width, extra_gemm=extra_gemm,
                           peak_dtype=peak_dtype, fused=fused)
    p = wl.pp
    counts = stage_kind_counts(lay.plan, p)
    per_stage, memo = [], {}
    pp_time = lay.boundary_s(virtual)
    for i, kc in enumerate(counts):
        key = (tuple(kc), i == 0, i == p - 1)
        if key not in memo:
            memo[key] = lay.stage(i, kc, i == 0, i == p - 1)
        x = {**memo[key], "stage": i, "pp_s": pp_time}
        x["micro_batch_s"] = (x["compute_forward_s"] + x["compute_backward_s"] + x["tp_s"]
                              + x["cp_exposed_s"] + x["ep_s"] + pp_time)
        x["dp_s"] = lay.dp_s(*placed[i], per_param, zero) if dp * cp > 1 else 0.0
        per_stage.append(x)
    micro = np.array([x["micro_batch_s"] for x in per_stage])
    dp_time = np.array([x["dp_s"] for x in per_stage])
    window = np.array([x["compute_forward_s"] + x["compute_backward_s"] for x in per_stage]) \
        * (accum if zero == 3 else 1)
    params = np.array([d + e for d, e in placed], dtype=float)
    slots, exposed, step = pace(micro, window, dp_time, params, accum, p, virtual,
                                perf.dp_overlap)
    for x, e in zip(per_stage, exposed, strict=True):
        x["dp_exposed_s"] = float(e)
    slow = max(per_stage, key=lambda x: x["micro_batch_s"])
    return {"step_s": float(step), "pipeline_s": float(slots) * slow["micro_batch_s"],
            "micro_batch_slots": float(slots),
            "bubble_s": (p - 1) / virtual * slow["micro_batch_s"],
            "bubble_fraction": (p - 1) / (virtual * accum + p - 1),
            "bubble_formula": "(p−1)/(v·m + p−1)", "virtual_stages": virtual,
            "slowest_stage": slow["stage"], "dp_exposed_s": float(np.max(exposed)),
            "peak_flops": lay.peak, "compute_dtype": lay.compute, "attention": attention,
            "per_stage": per_stage}


def rates(step_s: float, gpus: int, peak: float, model_flops: int, hardware_flops: int,
          tokens_per_step: int, train_tokens: int | None) -> dict[str, Any]:
    """MFU, HFU, achieved TFLOP/s per GPU, tokens/s and /day, and the time to train (null
    where extreme --perf terms make the step time overflow)."""
    keys = ("mfu", "hfu", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "tokens_per_s",
            "tokens_per_s_per_gpu", "tokens_per_day", "steps", "days", "gpu_hours")
    if not 0 < step_s < float("inf"):
        return {**dict.fromkeys(keys), "model_flops_per_step": model_flops,
                "hardware_flops_per_step": hardware_flops, "train_tokens": train_tokens}
    tps = tokens_per_step / step_s
    out: dict[str, Any] = {
        "mfu": model_flops / (gpus * peak * step_s),
        "hfu": hardware_flops / (gpus * peak * step_s),
        "model_tflops_per_gpu": model_flops / gpus / step_s / 1e12,
        "hardware_tflops_per_gpu": hardware_flops / gpus / step_s / 1e12,
        "model_flops_per_step": model_flops, "hardware_flops_per_step": hardware_flops,
        "tokens_per_s": tps, "tokens_per_s_per_gpu": tps / gpus,
        "tokens_per_day": tps * SECONDS_PER_DAY,
        "train_tokens": train_tokens, "steps": None, "days": None, "gpu_hours": None}
    if train_tokens is not None:
        seconds = train_tokens / tps
        out.update(steps=ceil_div(train_tokens, tokens_per_step), days=seconds / SECONDS_PER_DAY,
                   gpu_hours=seconds * gpus / 3600)
    return out
