"""FP8 training (`train --fp8 MODE`): which GEMMs run in fp8, the extra weight and activation
copies each recipe keeps and their bytes, and the fp8 peak the GEMMs run at.

In every mode the GEMMs of the layers' linear projections (q, k, v or qkv, attention out, FFN
gate/up/down, routed and shared experts) run in fp8; the LM head, the router and the attention
core stay in bf16 (TE's and torchao's recipes leave the output layer and SDPA out; DeepSeek-V3
§3.3.1 keeps "the embedding module, the output head, MoE gating modules, normalization
operators, and attention operators" in higher precision). The fp32 master weights and the
optimizer states are unchanged. Per mode (P_fp8: the parameters of the fp8 GEMMs on the rank;
X: each fp8 GEMM's input elements kept for its backward):

  te-delayed     Transformer Engine DelayedScaling (transformer_engine/common/recipe:
                 amax_history_len 1024): the fp8 weight and its transpose cached across the
                 micro-batches of a step (2·P_fp8 bytes), the inputs saved in fp8 (1·X instead
                 of 2·X), the amax histories (1024 × 3 fp32 per GEMM, counted);
  te-current     Float8CurrentScaling: as te-delayed without the histories;
  te-block       Float8BlockScaling (1×128 activation and 128×128 weight blocks, fp32 scales):
                 te-current's bytes + 4/128 per fp8 activation element and 4/128² per weight;
  mxfp8          MXFP8BlockScaling (Blackwell: 1×32 blocks, E8M0 scales): rowwise and
                 columnwise fp8 copies of weights and inputs (2·P_fp8, 2·X), + 1/32 B each;
  torchao-tensor torchao Float8Linear, tensorwise dynamic scaling (torchao/float8/
                 float8_linear.py): the bf16 inputs are saved (re-cast in the backward), the
                 fp8 weight cast is transient (1·P of the running block); with FSDP2 the
                 all-gather moves fp8 (enable_fsdp_float8_all_gather: the gathered blocks at
                 1 B a parameter instead of 2);
  torchao-row    rowwise scaling (fp32 scale per row): as torchao-tensor without the fp8
                 all-gather;
  deepseek       DeepSeek-V3's fine-grained fp8 (arXiv:2412.19437 §3.3): 1×128 activation tiles
                 and 128×128 weight blocks, the linears' inputs cached in fp8 (1·X + 4/128·X
                 scales instead of 2·X).
Time: the fp8 GEMMs at the GPU's fp8 peak, the rest at bf16's: the run's compute dtype becomes
fp8 and the bf16 work's efficiencies scale by peak_bf16/peak_fp8 (MFU is then of the fp8
peak). A GPU without an fp8 peak, and mxfp8 on one without Blackwell's fp4 tensor cores, exit 2
naming --fp8.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..inputs.hardware import GPU
from ..model.config import ShapecalcError
from ..model.stage import Stage
from ..model.suggest import not_one_of
from .time import TrainPerf

MODES = ("te-delayed", "te-current", "te-block", "mxfp8", "torchao-tensor", "torchao-row",
         "deepseek")
FP8_ROLES = ("attn.q", "attn.k", "attn.v", "attn.qkv", "attn.out", "ffn.gate", "ffn.up",
             "ffn.down", "moe.experts.gate", "moe.experts.up", "moe.experts.down",
             "moe.shared.gate", "moe.shared.up", "moe.shared.down")
# (weight copies B/param, saved input B/element instead of 2, scale B/element)
COPIES: dict[str, tuple[float, float, float]] = {
    "te-delayed": (2, 1, 0), "te-current": (2, 1, 0), "te-block": (2, 1, 4 / 128),
    "mxfp8": (2, 2, 1 / 32), "torchao-tensor": (0, 2, 0), "torchao-row": (0, 2, 0),
    "deepseek": (0, 1, 4 / 128)}


def check_fp8(mode: str, gpu: GPU | None) -> None:
    if mode not in MODES:
        raise not_one_of("fp8", mode, MODES)
    if gpu is None:
        return
    if gpu.peak("fp8") is None:
        raise ShapecalcError("fp8", f"{gpu.name} has no fp8 tensor cores (no fp8 peak in its "
                             "profile): train it in bf16")
    if mode == "mxfp8" and gpu.peak("fp4") is None:
        raise ShapecalcError("fp8", f"mxfp8 needs Blackwell's block-scaled tensor cores; "
                             f"{gpu.name} has none (use te-current or te-block)")


def fp8_flops(stages: list[Stage]) -> tuple[int, int]:
    """(fp8 GEMM FLOPs, all GEMM FLOPs) of one forward, the attention core excluded."""
    fp8 = sum(s.flops * s.repeat for s in stages if s.role in FP8_ROLES)
    gemm = sum(s.flops * s.repeat for s in stages if s.flops and s.role not in
               ("attn.scores", "attn.values"))
    return fp8, gemm


def fp8_perf(perf: TrainPerf, gpu: GPU, stages: list[Stage]) -> TrainPerf:
    """The step-time terms at the fp8 peak: the GEMMs' efficiency blends fp8 and bf16 work."""
    bf16, fp8p = gpu.peak("bf16"), gpu.peak("fp8")
    assert bf16 and fp8p
    f8, total = fp8_flops(stages)
    r = bf16 / fp8p
    share = (f8 + (total - f8) / r) / total if total else 1.0  # fp8-peak seconds per FLOP
    return replace(perf, gemm_efficiency=perf.gemm_efficiency / share,
                   attention_efficiency=perf.attention_efficiency * r) if share else perf


def fp8_memory(mode: str, stages: list[Stage], kinds_per_stage: list[list[int]], tp: int,
               n: int, fp8_params: list[int], kept: bool, gathered_blocks: list[int]
               ) -> list[int]:
    """Extra bytes per pipeline stage one rank keeps for fp8 (negative where fp8 copies replace
    bf16 ones): cached weight copies, the saved inputs' change (`kept`: the layers keep their
    linears' inputs, i.e. not under full recompute), the scales; torchao-tensor's fp8
    all-gather halves FSDP's gathered blocks (`gathered_blocks`: their bf16 parameters)."""
    weight_b, input_b, scale_b = COPIES[mode]
    per_kind: dict[int | None, int] = {}
    for s in stages:
        if s.group == "block" and s.role in FP8_ROLES and s.flops:
            rows = 1
            for d in s.shape[:-1]:
                rows *= d
            width = s.flops // (2 * s.shape[-1] * rows)  # K: the input's width
            per_token = rows // (s.shape[0] * s.shape[1])  # k for routed experts
            per_kind[s.kind] = per_kind.get(s.kind, 0) + width * per_token * n // tp
    out = []
    for kc, params, gathered in zip(kinds_per_stage, fp8_params, gathered_blocks,
                                    strict=True):
        x = sum(c * per_kind.get(k, 0) for k, c in enumerate(kc)) if kept else 0
        extra = int(weight_b * params + (input_b - 2) * x + scale_b * x)
        if mode == "torchao-tensor":
            extra -= gathered  # 1 B a gathered parameter instead of 2
        out.append(extra)
    return out


def describe(mode: str) -> dict[str, Any]:
    w, x, sc = COPIES[mode]
    return {"mode": mode, "gemms": list(FP8_ROLES), "weight_copy_bytes_per_param": w,
            "saved_input_bytes_per_element": x, "scale_bytes_per_element": sc}
