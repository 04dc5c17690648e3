"""The symbolic interpreter's Kimi Delta Attention rule (model/kda.py), as transformers 5.24's
chunk_kimi_delta_attention computes it on its torch path (the convolution is
symbolic_mamba2.py's). SymbolicOps takes it as a method; kda.py (interpret/) is the executor's
side.

FLOPs follow the `transformers-torch` convention (FlopCounterMode on that path). T is padded to
T_L = L·⌈T/L⌉. The forget gate is per channel, so the pairwise decay is [L, L, D_k] per chunk,
and the two [L, L] matrices (k_β·k and q·k, each ⊙ decay) are products summed over D_k:
elementwise, no matmul. So is the forward substitution that inverts I + A. The matmuls are
A·v_β and A·(k_β·e^G) once, then per chunk (q·e^G)·S, w·S, A_qk·v_new and the state update
(k·e^{G_L−G})ᵀ·v_new. Decode's one recurrent step is elementwise: no matmul FLOPs."""

from __future__ import annotations

from ..model.expr import formula
from .symbolic_base import Sym, SymbolicBase
from .symbolic_mamba2 import _chunks

# elementwise FLOPs per element (a documented convention; FlopCounterMode counts none)
KDA_EW = {
    "gate": 6,  # f + b_dt, softplus (exp, +1, log), × −e^{A_log}
    "bounded": 7,  # f + b_dt, × e^{A_log}, sigmoid (4), × bound
    "beta": 4,  # β = sigmoid(b)
    "qk_norm": 4,  # q and k: L2 norm (square, sum, rsqrt, multiply); q × 1/√D_k
    "decay": 3,  # cumulative sum, pairwise difference, exp (per channel)
    "pair": 3,  # k_β·k·decay (or q·k·decay) per channel, summed over D_k
    "update": 6,  # S·e^g, S·k summed (2), (v − ·)·β, S + k·δ (2)
    "readout": 2,  # S·q summed
}


_GATE = {False: "g = −e^{A_log}·softplus(f + b_dt), β = σ(b)",
         True: "g = bound·σ(e^{A_log}·(f + b_dt)), β = σ(b)"}


def sym_kda(self: SymbolicBase, q: Sym, k: Sym, v: Sym, f: Sym, b: Sym, layer: int) -> Sym:
    z, act = self.z, self.wl.act
    B, Tq, H, Dk, L = z.B, z.Tq, z.Hv, z.Dqk, z.L
    bound = self.m.kda_gate_bound
    self._rec("kda.gates", _GATE[bound is not None], "softplus" if bound is None else "sigmoid",
              Sym((B, Tq, H, Dk), "fp32"), ew=KDA_EW["gate" if bound is None else "bounded"],
              ew_extra=formula([KDA_EW["beta"], B, Tq, H]), params=formula([H * Dk + H]),
              note="b_dt: one per channel (H·D_k); A_log: one per head")
    self._rec("kda.qk_norm", "q, k: L2 norm (q × 1/√D_k)", "l2norm", Sym((B, H, Tq, Dk), "fp32"),
              ew=KDA_EW["qk_norm"] * 2)
    state = (B, H, Dk, Dk)
    if self.wl.phase == "decode":
        self._rec("kda.update", "S = diag(e^g)·S + k·((v − Sᵀk)·β)ᵀ", "mul", Sym(state, "fp32"),
                  ew=KDA_EW["update"], note="one step of the recurrence")
        self._rec("kda.readout", "o = Sᵀ·q", "mul", Sym((B, H, Dk), "fp32"),
                  ew_extra=formula([KDA_EW["readout"], *state]),
                  note="products summed: no matmul")
    else:
        nc, TL = _chunks(self)
        chunk = (B, H, nc, L)
        self._rec("kda.decay", "pairwise decay e^{G_i − G_j} per channel", "exp",
                  Sym((*chunk, L, Dk), "fp32"), ew=KDA_EW["decay"],
                  note=f"T padded to T_L = {TL.value}")
        self._rec("kda.ut", "A = −Σ_d k_β·k·decay (each chunk)", "mul", Sym((*chunk, L), "fp32"),
                  ew_extra=formula([B, H, TL, Dk * (L * KDA_EW["pair"] + 2)]),
                  note="products summed over D_k: no matmul; k_β = k·β, v_β = v·β")
        self._rec("kda.solve", "(I + A)⁻¹ by forward substitution", "solve",
                  Sym((*chunk, L), "fp32"), ew_extra=formula([2, *chunk, L, L]),
                  note="row by row, products summed: no matmul")
        self._rec("kda.u", "u = A·v_β (each chunk)", "matmul", Sym((*chunk, Dk), "fp32"),
                  flops=formula([2, B, H, TL, L, Dk]), operands=((*chunk, L), (*chunk, Dk)))
        self._rec("kda.w", "w = A·(k_β·e^G) (each chunk)", "matmul", Sym((*chunk, Dk), "fp32"),
                  flops=formula([2, B, H, TL, L, Dk]), ew_extra=formula([2, B, H, TL, Dk]),
                  operands=((*chunk, L), (*chunk, Dk)))
        self._rec("kda.scores", "A_qk = Σ_d q·k·decay (each chunk)", "mul",
                  Sym((*chunk, L), "fp32"), ew_extra=formula([KDA_EW["pair"], *chunk, L, Dk]),
                  note="products summed over D_k: no matmul")
        self._rec("kda.inter", "(q·e^G)·S (each chunk)", "matmul", Sym((*chunk, Dk), "fp32"),
                  flops=formula([2, B, H, TL, Dk, Dk]), ew_extra=formula([2, B, H, TL, Dk]),
                  operands=((*chunk, Dk), (B, H, nc, Dk, Dk)))
        self._rec("kda.v_new", "v_new = u − w·S (each chunk)", "matmul", Sym((*chunk, Dk), "fp32"),
                  flops=formula([2, B, H, TL, Dk, Dk]), ew=1,
                  operands=((*chunk, Dk), (B, H, nc, Dk, Dk)))
        self._rec("kda.intra", "o = (q·e^G)·S + A_qk·v_new (each chunk)", "matmul",
                  Sym((*chunk, Dk), "fp32"), flops=formula([2, B, H, TL, L, Dk]), ew=1,
                  operands=((*chunk, L), (*chunk, Dk)))
        self._rec("kda.state", "S = diag(e^{G_L})·S + (k·e^{G_L−G})ᵀ·v_new (each chunk)",
                  "matmul", Sym((B, H, nc, Dk, Dk), "fp32"), flops=formula([2, B, H, TL, Dk, Dk]),
                  ew=2, ew_extra=formula([3, B, H, TL, Dk]),
                  operands=((B, H, nc, Dk, L), (*chunk, Dk)))
    o = self._rec("kda.o", "o: merge heads", "reshape", Sym((B, Tq, H * Dk), act))
    self._rec("state.delta", "recurrent state", "state_cache", Sym(state, "fp32"),
              note="S of each head: D_k × D_k, in fp32 (transformers' rule)")
    return o
