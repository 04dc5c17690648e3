"""The symbolic interpreter's gated DeltaNet rule (model/gated_deltanet.py), as transformers
5.24's torch_chunk_gated_delta_rule computes it (the convolution and the gated norm are
symbolic_mamba2.py's). SymbolicOps takes it as a method; deltanet.py is the executor's side.

FLOPs follow the `transformers-torch` convention (FlopCounterMode on that path): q and k are
repeated to the H_v value heads, T padded to T_L = L·⌈T/L⌉; each chunk's k_β·kᵀ and q·kᵀ, the
reads of the state (k·S, q·S), the intra-chunk A·v and the state update kᵀ·v are matmuls; the
two triangular solves (torch.linalg.solve_triangular) have no FlopCounterMode formula: 0, noted.
Decode's one recurrent step is elementwise (products summed): no matmul FLOPs. Under the
`fused` convention each stage's FLOPs are flash-linear-attention's kernels' (fused.py), picked
per stage by conventions.pick."""

from __future__ import annotations

from ..model.conventions import pick, recurrent_dtype
from ..model.expr import formula
from . import fused
from .symbolic_base import Sym, SymbolicBase
from .symbolic_mamba2 import _chunks

# elementwise FLOPs per element (a documented convention; FlopCounterMode counts none)
GDN_EW = {
    "gates": 9,  # β = sigmoid(b) (4); g = −e^{A_log}·softplus(a + b_dt) (5)
    "qk_norm": 4,  # q and k: L2 norm (square, sum, rsqrt, multiply); q × 1/√D_qk
    "decay": 3,  # cumulative sum, pairwise difference, exp
    "update": 6,  # S·e^g, S·k summed (2), (v − ·)·β, S + k·δ (2)
    "readout": 2,  # S·q summed
}


def sym_delta_rule(self: SymbolicBase, q: Sym, k: Sym, v: Sym, b: Sym, a: Sym,
                   layer: int) -> Sym:
    z, act = self.z, self.wl.act
    B, Tq, H, Dk, Dv, L = z.B, z.Tq, z.Hv, z.Dqk, z.Dhv, z.L
    self._rec("gdn.gates", "β = σ(b), g = −e^{A_log}·softplus(a + b_dt)", "sigmoid",
              Sym((B, Tq, H), "fp32"), ew=GDN_EW["gates"] + int(self.m.gdn_neg_eigval),
              params=formula([2, H]), note="A_log and b_dt: one each per value head" + (
                  "; β × 2 (negative eigenvalues)" if self.m.gdn_neg_eigval else ""))
    self._rec("gdn.qk_norm", "q, k: L2 norm (q × 1/√D_qk)", "l2norm",
              Sym((B, H, Tq, Dk), "fp32"), ew=GDN_EW["qk_norm"] * 2,
              note=f"q and k repeated to the H_v={H.value} value heads")
    state = (B, H, Dk, Dv)
    if self.wl.phase == "decode":
        fd = fused.deltanet_decode(B, H, Dk, Dv)
        self._rec("gdn.update", "S = S·e^g + k·((v − Sᵀk)·β)ᵀ", "mul", Sym(state, "fp32"),
                  ew=GDN_EW["update"], flops=pick(self.wl, (0, "0"), fd["gdn.update"]),
                  note=pick(self.wl, "one step of the recurrence", "one step; Sᵀk a contraction"))
        self._rec("gdn.readout", "o = Sᵀ·q", "mul", Sym((B, H, Dv), "fp32"),
                  ew_extra=formula([GDN_EW["readout"], *state]),
                  flops=pick(self.wl, (0, "0"), fd["gdn.readout"]),
                  note=pick(self.wl, "products summed: no matmul", "Sᵀq a contraction"))
    else:
        nc, TL = _chunks(self)
        chunk = (B, H, nc, L)
        fz = fused.deltanet_prefill(B, Tq, L.value, H, Dk, Dv, z.poly)
        self._rec("gdn.decay", "pairwise decay e^{G_i − G_j}", "exp",
                  Sym((*chunk, L), "fp32"), ew=GDN_EW["decay"])
        self._rec("gdn.ut", "k_β·kᵀ ⊙ decay (each chunk)", "matmul", Sym((*chunk, L), "fp32"),
                  flops=pick(self.wl, formula([2, B, H, TL, L, Dk]), fz["gdn.ut"]), ew=1,
                  ew_extra=formula([B, H, TL, Dk + Dv]),
                  note=pick(self.wl, f"T padded to T_L = {TL.value}", "16-blocks on and below "
                            "the diagonal, no padding") + "; k_β = k·β, v_β = v·β",
                  operands=((*chunk, Dk), (B, H, nc, Dk, L)))
        self._rec("gdn.scores", "q·kᵀ ⊙ decay (each chunk)", "matmul", Sym((*chunk, L), "fp32"),
                  flops=pick(self.wl, formula([2, B, H, TL, L, Dk]), fz["gdn.scores"]), ew=1,
                  operands=((*chunk, Dk), (B, H, nc, Dk, L)))
        self._rec("gdn.solve", "u = T⁻¹·v_β, w = T⁻¹·(k_β·e^G)", "solve",
                  Sym((*chunk, Dv), "fp32"), ew_extra=formula([B, H, TL, Dk]),
                  flops=pick(self.wl, (0, "0"), fz["gdn.solve"]),
                  note=pick(self.wl, "two unit-triangular solves: no FlopCounterMode formula, 0 "
                            "counted", "(I + A)⁻¹ by 16-blocks, then w and u by A"))
        self._rec("gdn.v_new", "v_new = u − w·S (each chunk)", "matmul", Sym((*chunk, Dv), "fp32"),
                  flops=pick(self.wl, formula([2, B, H, TL, Dk, Dv]), fz["gdn.v_new"]), ew=1,
                  operands=((*chunk, Dk), (B, H, nc, Dk, Dv)))
        self._rec("gdn.inter", "q·S (each chunk)", "matmul", Sym((*chunk, Dv), "fp32"),
                  flops=pick(self.wl, formula([2, B, H, TL, Dk, Dv]), fz["gdn.inter"]),
                  operands=((*chunk, Dk), (B, H, nc, Dk, Dv)))
        self._rec("gdn.intra", "o = q·S + A·v_new (each chunk)", "matmul",
                  Sym((*chunk, Dv), "fp32"),
                  flops=pick(self.wl, formula([2, B, H, TL, L, Dv]), fz["gdn.intra"]), ew=1,
                  operands=((*chunk, L), (*chunk, Dv)))
        self._rec("gdn.state", "S = S·e^{g_L} + kᵀ·v_new (each chunk)", "matmul",
                  Sym((B, H, nc, Dk, Dv), "fp32"),
                  flops=pick(self.wl, formula([2, B, H, TL, Dk, Dv]), fz["gdn.state"]), ew=2,
                  operands=((B, H, nc, Dk, L), (*chunk, Dv)))
    o = self._rec("gdn.out", "o: merge heads", "reshape", Sym((B, Tq, H * Dv), act))
    sdt = recurrent_dtype(self.wl)
    self._rec("state.delta", "recurrent state", "state_cache", Sym(state, sdt),
              note=f"S of each value head: D_qk × D_hv, in {sdt} (" + (
                  "vLLM's cache)" if self.wl.state_cache == "vllm" else "transformers' rule)"))
    return o



