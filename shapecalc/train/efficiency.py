"""Efficiency that follows the hardware and the shapes (train --framework other than hf): the
step-time model's GEMM and attention efficiencies for one run, from physical terms per GPU.

  GEMM       e_gemm × f(M)·f(N)·f(K), f(x) = x/(x + gemm_half_dim), for each [M,K]×[K,N] GEMM
             on one rank (the serving model's M/(M + M½) form, plan/perf.py's step_terms, in
             each dimension: a GEMM short of rows, columns or depth cannot fill the GPU's tiles
             and pipelines): a dense layer's GEMMs have the micro-batch's b·T/cp rows, a routed
             expert's the tokens it receives, b·T/cp·k·ep/E (balanced routing); tensor
             parallelism splits N of the column-parallel GEMMs and K of the row-parallel ones
             (attention out, FFN down); the run's efficiency is the FLOP-weighted harmonic mean
             over its GEMMs (what their times add to).
  attention  e_attn × T/(T + attention_half_seq): FlashAttention's tiles over a short sequence
             leave the GPU part idle (its forward and backward at T = 512 reach a fraction of
             what they reach at 8K).
  clocks     a power limit below the part's TDP lowers the sustained clock: compute rates ×
             (P/TDP)^(1/3) (dynamic power ∝ f·V², V ∝ f), e.g. an H100 SXM at 500 W of 700:
             ×0.894. The 96 GB HBM2e H100 is a profile override (--set-gpu hbm_bandwidth=2.4e12
             memory_bytes=96GiB); the power is --power-limit 500.
  passes     how many times eager kernels move each elementwise stage's bytes: the time model
             counts one read and one write per stage (a fused kernel: TE's norms and
             activations, torch.compile's Inductor, llm-foundry's fused LayerNorm and GELU);
             torchtitan's 2024 eager RMSNorm (torchtitan/models/norms.py, the Llama reference's:
             self._norm(x.float()).type_as(x) * self.weight, _norm = x * torch.rsqrt(
             x.pow(2).mean(-1, keepdim=True) + eps)) runs as separate fp32 kernels and its RoPE
             through complex fp32 views: PASSES = 3 stated; --compile (torch.compile): 1.

e_gemm and e_attn are fitted per GPU on the shared training records (train/calibrate_train.py,
`shapecalc calibrate-train --check` prints measured/predicted); gemm_half_rows and
attention_half_seq once for all GPUs; fusion and the power law are stated, not fitted.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..inputs.hardware import GPU
from ..model.config import ModelConfig, ShapecalcError, Workload
from ..model.stage import ATTN_SCORE_ROLES, EXPERT_ROLES, Stage
from .time import TrainPerf

# (e_gemm, e_attn) per GPU chip, fitted by `shapecalc calibrate-train` on
# tests/data/training-measurements.json (tests/test_train_calibrate.py re-runs the fit)
# (0.95 and 0.30 are the grid's bounds: calibrate_train.G_RANGE, A_RANGE)
FITTED = {"H100-SXM": (0.62, 0.30), "A100-80GB": (0.95, 0.30)}
CHIP = {"A100-40GB": "A100-80GB"}  # the same chip and clocks
SHAPE = {"gemm_half_dim": 512.0, "attention_half_seq": 2048.0}  # fitted once, all GPUs
# the datasheets' board power (NVIDIA H100 datasheet: SXM "Up to 700W"; A100 SXM 400 W)
TDP_W = {"H100-SXM": 700.0, "A100-80GB": 400.0, "A100-40GB": 400.0}
# eager passes over each elementwise stage's bytes (stated; see the module's doc)
PASSES = {"torchtitan": 3.0}
ROW_PARALLEL = ("attn.out", "ffn.down", "moe.experts.down", "moe.shared.down")
REPLICATED = ("moe.router",)
# elementwise stages a framework's kernels fold into a neighbour (their traffic is not timed):
# Megatron's FusedScaleMaskSoftmax (megatron/core/fusions/fused_softmax.py:
# ScaledUpperTriangMaskedSoftmax) scales, masks and softmaxes eager attention's [T,T] in one
# kernel (the softmax's read and write stay)
FUSED_ROLES = {"megatron": ("attn.scale", "attn.mask")}


def gemm_dims(s: Stage, model: ModelConfig, wl: Workload, cp: int) -> tuple[float, float, float]:
    """(M, N, K) of one GEMM stage on one rank."""
    rows = 1
    for d in s.shape[:-1]:
        rows *= d
    n_out = s.shape[-1]
    k = s.flops / (2 * rows * n_out)
    m = rows / cp
    if s.role in EXPERT_ROLES and model.n_experts:  # the tokens one local expert receives
        m = rows / cp * wl.ep / model.n_experts
    if s.role in REPLICATED:
        return m, n_out, k
    if s.role in ROW_PARALLEL:
        return m, n_out, k / wl.tp
    return m, n_out / wl.tp, k


def gemm_fraction(stages: list[Stage], model: ModelConfig, wl: Workload, cp: int,
                  half: float) -> float:
    """The FLOP-weighted harmonic mean of f(M)·f(N)·f(K) over the run's GEMMs."""
    total = slow = 0.0
    for s in stages:
        if s.flops and s.role not in ATTN_SCORE_ROLES:
            f = s.flops * s.repeat
            eff = 1.0
            for x in gemm_dims(s, model, wl, cp):
                eff *= x / (x + half)
            total += f
            slow += f / eff
    return total / slow if slow else 1.0


def clock_factor(gpu: GPU, watts: float) -> float:
    """(power limit / TDP)^(1/3), at most 1: the sustained clock under a lower power cap."""
    tdp = TDP_W.get(gpu.name)
    if tdp is None:
        raise ShapecalcError("power-limit", f"{gpu.name} has no stated TDP to scale from "
                             f"(known: {', '.join(TDP_W)})")
    if watts > tdp:  # a cap above the board power changes nothing: said, not clamped silently
        raise ShapecalcError("power-limit", f"{watts:g} W is above {gpu.name}'s {tdp:g} W TDP; "
                             f"a cap at or below it lowers the clock (leave it out for the TDP)")
    return float((watts / tdp) ** (1 / 3))


def run_perf(base: TrainPerf, gpu: GPU, framework: str, model: ModelConfig, wl: Workload,
             stages: list[Stage], cp: int, *, power_w: float | None = None,
             compile_: bool = False, fitted: dict[str, tuple[float, float]] | None = None,
             shape: dict[str, float] | None = None) -> tuple[TrainPerf, dict[str, Any]]:
    """The run's TrainPerf (its efficiencies from the physical terms) and how they were made."""
    chip = CHIP.get(gpu.name, gpu.name)
    table = fitted if fitted is not None else FITTED
    sh = shape or SHAPE
    e_g, e_a = table.get(chip, (base.gemm_efficiency, base.attention_efficiency))
    clock = 1.0 if power_w is None else clock_factor(gpu, power_w)
    g = gemm_fraction(stages, model, wl, cp, sh["gemm_half_dim"])
    t = wl.seq / cp
    a = t / (t + sh["attention_half_seq"])
    passes = 1.0 if compile_ else PASSES.get(framework, 1.0)
    perf = replace(base, gemm_efficiency=min(1.0, e_g * g * clock),
                   attention_efficiency=min(1.0, e_a * a * clock),
                   memory_efficiency=base.memory_efficiency / passes)
    return perf, {"chip": chip, "e_gemm": e_g, "e_attn": e_a, "gemm_size_factor": g,
                  "attention_seq_factor": a, "clock_factor": clock, "elementwise_passes": passes,
                  "fitted_on": "the shared training records" if chip in table else "defaults",
                  **sh}
