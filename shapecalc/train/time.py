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
  exposed communication (ring collectives, bytes as the ledgers count them, at the intra-node
    link or, for a group spanning nodes, at the per-GPU network bandwidth, × link_efficiency,
    plus collective_latency_s each):
    - TP/SP all-gathers and reduce-scatters: on the critical path (each feeds the next GEMM);
    - CP ring passes: overlap the layer's attention compute, only the excess is exposed;
    - EP all-to-alls and PP boundary sends: on the critical path;
    - DP gradient reduce-scatter (or all-reduce) and the weights' all-gather: overlap the last
      micro-batch's backward and the next step's first forward, all but the last bucket
      (Megatron's 40M-parameter buckets); under ZeRO-3 the per-layer all-gathers overlap the
      whole step's compute.
  pipeline: the slowest stage sets the pace; 1F1B with m micro-batches and v interleaved
    virtual stages per rank runs (m + (p−1)/v) micro-batch slots: the bubble is
    (p−1)/(v·m + p−1) of the step (v = 1: (p−1)/(m+p−1)).
Parallel groups are laid out as Megatron orders them (tp innermost, then cp, then dp with ep
inside it, then pp): a group of size g and stride r stays in one node when g·r ≤ GPUS_PER_NODE.

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

from dataclasses import dataclass, fields, replace
from typing import Any

from ..inputs.hardware import GPU
from ..inputs.numbers import each_once, parse_number
from ..interpret.symbolic import stages as symbolic_stages
from ..model.config import ModelConfig, ShapecalcError, Workload, ceil_div
from ..model.parallel import stage_kind_counts
from ..model.plan import layer_plan
from ..model.stage import ATTN_SCORE_ROLES, FLASH_SKIP_ROLES, Stage
from ..plan.perf_defaults import PARAMS
from .backward import NO_GRAD_ROLES, BackwardStage, backward_stages, recompute_stages
from .ledgers import cp_ledger, tp_ledger
from .saved import ATTENTION

GPUS_PER_NODE = 8  # an HGX/DGX node: NVLink inside, the network between nodes
BUCKET_PARAMS = 40_000_000  # Megatron DDP's gradient bucket: the last one cannot overlap
SECONDS_PER_DAY = 86_400


# (gemm_efficiency, attention_efficiency) fitted per GPU on tests/data/train_mfu.json, each the
# grid point (0.01 apart) of least mean squared log error of the published figure it is checked
# on (tests/test_train_time.py re-runs the fit): an H100 at 700 W does not hold its boost clock
# in dense bf16 GEMMs and reaches a smaller fraction of its peak than an A100. A100-40GB is the
# same chip at the same clocks as the 80GB. Other GPUs take the fit over all rows (TrainPerf's
# defaults).
FITTED = {"H100-SXM": (0.59, 0.40), "A100-80GB": (0.66, 0.57), "A100-40GB": (0.66, 0.57)}


@dataclass(frozen=True)
class TrainPerf:
    # fitted on every row of tests/data/train_mfu.json (tests/test_train_time.py)
    gemm_efficiency: float = 0.64  # fraction of dense peak a training GEMM reaches
    attention_efficiency: float = 0.37  # the attention core's kernels, forward and backward
    # the serving model's calibrated terms (plan/perf_defaults.py)
    memory_efficiency: float = PARAMS["memory_efficiency"]
    link_efficiency: float = PARAMS["link_efficiency"]
    collective_latency_s: float = PARAMS["allreduce_latency_s"]
    # the cluster: bytes/s per GPU per direction between nodes (400 Gb/s InfiniBand or RoCE per
    # GPU, as DGX H100 and Llama 3's clusters have)
    net_bandwidth: float = 50e9

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not (isinstance(v, (int, float)) and v == v and 0 < v < float("inf")):
                raise ShapecalcError(f"perf.{f.name}", f"must be a finite number > 0, got {v}")
            if f.name.endswith("efficiency") and v > 1:
                raise ShapecalcError(f"perf.{f.name}", f"must be in (0, 1], got {v}")
        if self.net_bandwidth < 1:  # a typo (no network is that slow), as GPU profiles check
            raise ShapecalcError("perf.net_bandwidth", f"{self.net_bandwidth:g} is below 1 a "
                                 "second; give it in bytes/s (e.g. 50e9)")


NAMES = tuple(f.name for f in fields(TrainPerf))


def perf_for(gpu: GPU, sets: list[str] | None = None) -> TrainPerf:
    """The GPU's fitted efficiencies (else the all-rows fit), then `NAME=VALUE` overrides."""
    out = TrainPerf()
    if gpu.name in FITTED:
        g, a = FITTED[gpu.name]
        out = replace(out, gemm_efficiency=g, attention_efficiency=a)
    each_once(sets, "perf")
    for item in sets or []:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or key not in NAMES:
            raise ShapecalcError("perf", f"expected NAME=VALUE with NAME one of {', '.join(NAMES)}"
                                 f", got {item!r}")
        out = replace(out, **{key: parse_number(text, f"perf.{key}")})
    return out


class Work:
    """FLOPs and memory-bound bytes of one layer (or the embedding, or the head), forward,
    backward and recompute, on the whole model's width (÷ tp·cp per rank)."""

    FIELDS = ("gemm_fwd", "gemm_bwd", "attn_fwd", "attn_bwd", "mem_fwd", "mem_bwd")
    __slots__ = FIELDS

    def __init__(self) -> None:
        self.gemm_fwd = self.gemm_bwd = self.attn_fwd = self.attn_bwd = 0
        self.mem_fwd = self.mem_bwd = 0  # the backward's include the recompute

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
            if s.role in ATTN_SCORE_ROLES:
                x.attn_fwd += s.flops
            else:
                x.gemm_fwd += s.flops
        if _memory_bound(s, flash, fused):
            x.mem_fwd += 2 * s.bytes
            x.mem_bwd += 3 * s.bytes
    # the backward's matmuls, then the forward's re-run inside it: both are backward time
    done: list[Stage | BackwardStage] = [*backward_stages(st), *recompute_stages(st, recompute)]
    for b in done:
        x = w(b)
        if b.role in ATTN_SCORE_ROLES:
            x.attn_bwd += b.flops
        else:  # what the kernels run: not FlopCounterMode's convention-only count
            x.gemm_bwd += b.flops - getattr(b, "convention_only_flops", 0)
        if isinstance(b, Stage) and _memory_bound(b, flash, fused):
            x.mem_bwd += 2 * b.bytes
    for k, f in (extra_gemm or {}).items():  # a framework's own recompute (per-op SAC)
        w_k = out.setdefault(k, Work())
        w_k.gemm_bwd += f
    return out


def _bandwidth(gpu: GPU, perf: TrainPerf, size: int, stride: int) -> float:
    """A group's bandwidth per rank: the NVLink inside a node, the network across nodes."""
    bw = gpu.link_bandwidth if size * stride <= GPUS_PER_NODE else perf.net_bandwidth
    return bw * perf.link_efficiency


def step_time(model: ModelConfig, wl: Workload, gpu: GPU, perf: TrainPerf, *, cp: int, dp: int,
              accum: int, virtual: int, zero: int, recompute: str, attention: str,
              act_width: int, stage_params: list[int], dp_bytes: list[int],
              ep_bytes_per_layer: int, extra_gemm: dict[Any, int] | None = None,
              peak_dtype: str | None = None, fused: tuple[str, ...] = ()) -> dict[str, Any]:
    """The expected seconds of one step and its terms (see the module's doc); `peak_dtype`:
    the GEMMs' peak when it is not the activations' (fp8 training, train/fp8.py); `fused`:
    elementwise roles a framework's kernels fuse into their neighbours (train/efficiency.py)."""
    if attention not in ATTENTION:
        raise ShapecalcError("attention", f"unknown {attention!r}; known: {', '.join(ATTENTION)}")
    compute = peak_dtype or wl.compute
    peak = gpu.peak(compute)
    if peak is None:
        raise ShapecalcError("gpu", f"{gpu.name} has no {compute} peak")
    b, s, t, p, ep = wl.batch, wl.seq, wl.tp, wl.pp, wl.ep
    work = layer_work(model, wl, recompute, attention, extra_gemm, fused)
    plan = layer_plan(model)
    counts = stage_kind_counts(plan, p)
    ranks = t * cp  # a micro-batch's work is split over the tp·cp ranks of a stage
    bw_tp = _bandwidth(gpu, perf, t, 1)
    bw_cp = _bandwidth(gpu, perf, cp, t)
    bw_dp = _bandwidth(gpu, perf, dp, t * cp)
    bw_ep = _bandwidth(gpu, perf, ep, t * cp)
    bw_pp = _bandwidth(gpu, perf, p, t * cp * dp)
    lat = perf.collective_latency_s
    g_rate, a_rate = peak * perf.gemm_efficiency, peak * perf.attention_efficiency
    m_rate = gpu.hbm_bandwidth * perf.memory_efficiency
    again = recompute in ("full", "torch")  # a layer's forward collectives run again
    per_stage = []
    for i, kc in enumerate(counts):
        tot = [0] * 6
        keys: list[tuple[Any, int]] = [(k, c) for k, c in enumerate(kc) if c]
        keys += [("embedding", 1)] * (i == 0) + [("head", 1)] * (i == p - 1)
        layers = sum(kc)
        moe_layers = sum(c for k, c in enumerate(kc) if plan.kinds[k].ffn == "moe")
        for k, c in keys:
            if k in work:
                tot = [x + y for x, y in zip(tot, work[k].scaled(c), strict=True)]
        gf, gb, af, ab, mf, mb = (x / ranks for x in tot)
        fwd = gf / g_rate + af / a_rate + mf / m_rate
        bwd = gb / g_rate + ab / a_rate + mb / m_rate
        attn_layer = (af + ab) / a_rate / max(layers, 1)
        tp = tp_ledger(b, s // cp, model.d_model, t, layers, 1, act_width, i == 0, i == p - 1)
        # collectives: 8 a layer (+ the forward's 4 again), the embedding's 2, the head's 2 and
        # the loss's 3
        n_tp = (8 + 4 * again) * layers + 2 * (i == 0) + (2 + 3) * (i == p - 1)
        tp_bytes = tp["forward_bytes_per_micro_batch"] + tp["backward_bytes_per_micro_batch"] \
            + again * tp["forward_bytes_per_layer"] * layers
        tp_s = tp_bytes / bw_tp + n_tp * lat if t > 1 else 0.0
        cpl = cp_ledger(model, b, s, t, cp, 1, 1, wl.act, recompute)
        cp_layer = cpl["bytes_per_micro_batch"] / bw_cp + 3 * (cp - 1) * lat if cp > 1 else 0.0
        cp_s = max(0.0, cp_layer - attn_layer) * layers
        ep_s = (2 * ep_bytes_per_layer * moe_layers * (ep - 1) / ep / bw_ep
                + 4 * moe_layers * lat) if ep > 1 else 0.0  # forward and backward
        boundary = b * (s // cp) * model.d_model * act_width // t  # scatter/gather over tp
        pp_s = (2 * virtual * boundary / bw_pp + 2 * virtual * lat) if p > 1 else 0.0
        dp_s = dp_bytes[i] / bw_dp if dp * cp > 1 else 0.0
        window = (fwd + bwd) * (accum if zero == 3 else 1)
        last_bucket = dp_s * min(1.0, BUCKET_PARAMS / max(stage_params[i], 1))
        dp_exposed = max(0.0, dp_s - window) + last_bucket
        micro = fwd + bwd + tp_s + cp_s + ep_s + pp_s
        per_stage.append({"stage": i, "compute_forward_s": fwd, "compute_backward_s": bwd,
                          "gemm_s": (gf + gb) / g_rate, "attention_s": (af + ab) / a_rate,
                          "memory_bound_s": (mf + mb) / m_rate, "tp_s": tp_s, "cp_exposed_s": cp_s,
                          "ep_s": ep_s, "pp_s": pp_s, "micro_batch_s": micro,
                          "dp_s": dp_s, "dp_exposed_s": dp_exposed})
    slow = max(per_stage, key=lambda x: x["micro_batch_s"])
    slots = accum + (p - 1) / virtual
    pipeline = slots * slow["micro_batch_s"]
    dp_exposed = max(x["dp_exposed_s"] for x in per_stage)
    step = pipeline + dp_exposed
    return {"step_s": step, "pipeline_s": pipeline, "micro_batch_slots": slots,
            "bubble_s": (p - 1) / virtual * slow["micro_batch_s"],
            "bubble_fraction": (p - 1) / (virtual * accum + p - 1),
            "bubble_formula": "(p−1)/(v·m + p−1)", "virtual_stages": virtual,
            "slowest_stage": slow["stage"], "dp_exposed_s": dp_exposed,
            "peak_flops": peak, "compute_dtype": compute, "attention": attention,
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
