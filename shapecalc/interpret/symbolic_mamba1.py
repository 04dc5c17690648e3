"""The symbolic interpreter's Mamba-1 scan (model/mamba1.py; its convolution is Mamba-2's,
symbolic_mamba2.py). SymbolicOps takes it as a method; mamba1.py (interpret/) is the executor's
side.

FLOPs follow the `transformers-torch` convention, FlopCounterMode's count on transformers 5.24's
mamba_selective_scan: Δ, e^{Δ·A} and Δ·B·x are elementwise over the whole prompt, then one step
per token, whose readout S_t·C_t is a bmm [B, D_i, N_s] × [B, N_s, 1]: 2·B·T·D_i·N_s in prefill
(no chunks, no padding), 2·B·D_i·N_s in decode (mamba_selective_state_update)."""

from __future__ import annotations

from ..model.expr import Dim, formula
from .symbolic_base import Sym, SymbolicBase

# elementwise FLOPs per element of the scan's steps (a documented convention; FlopCounterMode
# counts none of them)
MAMBA1_EW = {
    "dt": 5,  # + b_dt, softplus (exp, +1, log), and its cast
    "discretize": 4,  # A·Δ, exp; Δ·B, ·x
    "update": 2,  # e^{Δ·A}⊙S + Δ·B·x
    "skip": 2,  # y + D⊙x
}


def sym_selective_scan(self: SymbolicBase, x: Sym, dt: Sym, b: Sym, c: Sym, layer: int) -> Sym:
    z, act = self.z, self.wl.act
    B, Tq, Di, N = z.B, z.Tq, z.Di, z.Ns
    one = Dim.const(1)
    self._rec("mamba.dt", "Δ = softplus(dt + b_dt)", "softplus", Sym((B, Tq, Di), "fp32"),
              ew=MAMBA1_EW["dt"], params=formula([Di]), note="b_dt: dt_proj's bias, per channel")
    self._rec("mamba.discretize", "e^{Δ·A}, Δ·B·x", "exp", Sym((B, Tq, Di, N), "fp32"),
              ew=MAMBA1_EW["discretize"], params=formula([Di * (N + 1)]),
              note="A = −exp(A_log) [D_i, N_s] and the skip D [D_i]")
    self._rec("mamba.scan", "S_t = e^{Δ_t·A}⊙S_{t−1} + Δ_t·x_t·B_tᵀ", "mul",
              Sym((B, Tq, Di, N), "fp32"), ew=MAMBA1_EW["update"],
              note="one step per token" if self.wl.phase == "prefill" else "one step")
    self._rec("mamba.readout", "y_t = S_t·C_t", "matmul", Sym((B, Tq, Di), act),
              flops=formula([2, B, Tq, Di, N]), note="a bmm per token",
              operands=((B, Di, N), (B, N, one)))
    y = self._rec("mamba.skip", "y = y + D⊙x", "add", Sym((B, Tq, Di), act),
                  ew=MAMBA1_EW["skip"])
    self._rec("state.ssm", "recurrent state", "state_cache", Sym((B, Di, N), "fp32"),
              note="S of each channel: N_s, in fp32 (transformers' scan)")
    return y
