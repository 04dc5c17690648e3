"""The symbolic interpreter's Mamba-2 operations (model/mamba2.py): the causal convolution and
its conv state, the chunked scan as transformers 5.24's torch path computes it, and the gated
RMSNorm (the convolution and the norm are gated DeltaNet's too, symbolic_deltanet.py).
SymbolicOps takes these as its methods; mamba2.py (interpret/) is the executor's side.

FLOPs follow the `transformers-torch` convention, FlopCounterMode's count on that path: the
convolution is aten.convolution over max(T, K_c) + K_c − 1 positions (padding K_c − 1, the
cache's window padded to K_c), each einsum of the scan a bmm, prefill padded to T_L = L·⌈T/L⌉
tokens in n_c = ⌈T/L⌉ chunks; decode's one step multiplies the state by C (a bmm). Under the
`fused` convention each stage's FLOPs are the kernels' instead (fused.py), picked per stage by
conventions.pick; the state's columns and dtype follow the workload's state cache."""

from __future__ import annotations

from ..model.conventions import conv_columns, pick, recurrent_dtype
from ..model.expr import Dim, Expr, formula
from . import fused
from .symbolic_base import Sym, SymbolicBase

# elementwise FLOPs per element of the scan's steps (a documented convention; FlopCounterMode
# counts none of them)
SSM_EW = {
    "dt": 5,  # + dt_bias, softplus (exp, +1, log), clamp
    "discretize": 1,  # x·Δ (and A·Δ per head)
    "decay": 3,  # segment sum (cumsum, mask), exp: L = exp(segsum(A·Δ))
    "mask": 1,  # M = G ⊙ L
    "combine": 3,  # Y_diag + Y_off + D·x
    "update": 4,  # S·e^{Δ·A} + Δ·x·Bᵀ
    "gated_norm": 9,  # silu(z) (4), y ⊙ silu(z), mean square and normalise (3), × γ
}


def _chunks(self: SymbolicBase) -> tuple[Dim, Dim]:
    """(n_c, T_L): chunks of L and the padded tokens of a prefill."""
    z = self.z
    n = -(-z.T // z.L.value)
    return z.sym("n_c", n), z.sym("T_L", n * z.L.value)


def conv_span(self: SymbolicBase, kernel: Dim) -> Dim:
    """The output positions aten.convolution computes for a causal conv of kernel K_c (the
    last T kept): the torch path's count (transformers' cache layout)."""
    z, K = self.z, kernel.value
    if self.wl.phase == "decode":  # [window K_c, new token] through the kernel: 2 outputs
        return Dim.const(2)
    if z.T >= K:  # T + K_c − 1 output positions (padding K_c − 1), the last T kept
        return Dim(z.T + K - 1, (Expr.sym("T") if z.poly else z.Tq.expr) + kernel.expr
                   + Expr.const(-1))
    return Dim.const(2 * K - 1)  # the cache pads the input to K_c first


def sym_conv1d(self: SymbolicBase, x: Sym, layer: int, role: str, name: str, channels: Dim,
               kernel: Dim, bias: bool) -> Sym:
    z = self.z
    K = kernel.value
    span = conv_span(self, kernel)
    params = channels * kernel + (channels if bias else 0)
    tokens = Dim.const(1) if self.wl.phase == "decode" else z.Tq
    flops = pick(self.wl, formula([2, z.B, channels, kernel, span]),
                 fused.conv(z.B, channels, kernel, tokens))
    out = self._rec(role, name, "conv1d", x, flops=flops,
                    params=(params.value, str(params.expr)), ew_extra=formula(
                        [z.B, z.Tq, channels]) if bias else (0, "0"),
                    note=f"depthwise, kernel K_c={K}, causal", operands=(
                        (z.B, channels, span), (channels, kernel)))
    cols = conv_columns(self.wl, K)
    self._rec("state.conv", "conv state", "state_cache",
              Sym((z.B, channels, kernel if cols == K else kernel + -1), self.wl.act),
              note=f"the last {'K_c' if cols == K else 'K_c − 1 (vLLM)'} inputs of each "
              "channel, per sequence")
    return out


def sym_ssd(self: SymbolicBase, x: Sym, dt: Sym, b: Sym, c: Sym, layer: int) -> Sym:
    z, act = self.z, self.wl.act
    B, Tq, H, P, N, L = z.B, z.Tq, z.Hs, z.Ds, z.Ns, z.L
    inner = x.dims[-1]
    one = Dim.const(1)

    def ew(key: str, *dims: Dim) -> tuple[int, str]:
        return formula([SSM_EW[key], *dims])

    self._rec("ssm.dt", "Δ = softplus(dt + b_dt)", "softplus", Sym((B, Tq, H), "fp32"),
              ew=SSM_EW["dt"], params=formula([H]), note="b_dt: one per head")
    self._rec("ssm.discretize", "x·Δ, A·Δ", "mul", Sym((B, Tq, inner), "fp32"),
              ew=SSM_EW["discretize"], ew_extra=formula([B, Tq, H]), params=formula([H * 2]),
              note="A = −exp(A_log) and the skip D: one each per head")
    state = (B, H, P, N)
    if self.wl.phase == "decode":
        self._rec("ssm.update", "S = S·e^{Δ·A} + Δ·x·Bᵀ", "mul", Sym(state, "fp32"),
                  ew=SSM_EW["update"], note="one step of the recurrence")
        self._rec("ssm.readout", "y = S·C", "matmul", Sym((B, H, P), "fp32"),
                  flops=formula([2, B, H, P, N]), operands=((B, H, P, N), (B, H, N, one)))
    else:
        nc, TL = _chunks(self)
        fz = fused.mamba2_prefill(B, Tq, L.value, H, z.G, P, N, z.poly)
        self._rec("ssm.scores", "G = C·Bᵀ (each chunk)", "matmul", Sym((B, nc, L, L, H), "fp32"),
                  flops=pick(self.wl, formula([2, B, TL, L, H, N]), fz["ssm.scores"]),
                  note=pick(self.wl, f"T padded to T_L = {TL.value}", "per group, no padding"),
                  operands=((B, nc, H, L, N), (B, nc, H, N, L)))
        self._rec("ssm.decay", "L = exp(segsum(A·Δ))", "exp", Sym((B, H, nc, L, L), "fp32"),
                  ew=SSM_EW["decay"])
        self._rec("ssm.mask", "M = G ⊙ L", "mul", Sym((B, nc, L, L, H), "fp32"),
                  ew=SSM_EW["mask"])
        self._rec("ssm.diag", "Y_diag = M·x", "matmul", Sym((B, nc, L, H, P), "fp32"),
                  flops=pick(self.wl, formula([2, B, TL, L, H, P]), fz["ssm.diag"]),
                  operands=((B, nc, H, L, L), (B, nc, H, L, P)))
        self._rec("ssm.chunk_states", "chunk states = (B ⊙ decay)ᵀ·x", "matmul",
                  Sym((B, nc, H, P, N), "fp32"),
                  flops=pick(self.wl, formula([2, B, TL, H, P, N]), fz["ssm.chunk_states"]),
                  ew_extra=formula([2, B, TL, H, N]),
                  operands=((B, nc, H, P, L), (B, nc, H, L, N)))
        nc1 = nc + 1
        self._rec("ssm.pass", "states passed between chunks", "matmul",
                  Sym((B, nc1, H, P, N), "fp32"),
                  flops=pick(self.wl, formula([2, B, nc1, nc1, H, P, N]), fz["ssm.pass"]),
                  ew_extra=formula([3, B, H, nc1, nc1]),
                  operands=((B, H, nc1, nc1), (B, H, nc1, P * N)))
        self._rec("ssm.off", "Y_off = C·states", "matmul", Sym((B, nc, L, H, P), "fp32"),
                  flops=pick(self.wl, formula([2, B, TL, H, N, P]), fz["ssm.off"]),
                  ew_extra=formula([B, TL, H, P]),
                  operands=((B, nc, H, L, N), (B, nc, H, N, P)))
    y = self._rec("ssm.combine", "y = Y_diag + Y_off + D·x" if self.wl.phase == "prefill"
                  else "y = y + D·x", "add", Sym((B, Tq, inner), act),
                  ew=SSM_EW["combine"])
    sdt = recurrent_dtype(self.wl)
    self._rec("state.ssm", "recurrent state", "state_cache", Sym(state, sdt),
              note=f"S of each head: D_s × N_s, in {sdt} (" + (
                  "vLLM's cache)" if self.wl.state_cache == "vllm" else "transformers' scan)"))
    return y


def sym_gated_norm(self: SymbolicBase, y: Sym, gate: Sym, role: str, name: str, gamma: Dim,
                   groups: Dim, gate_first: bool) -> Sym:
    note = (f"RMSNorm of y ⊙ silu(z) over each of {groups.symbol}={groups.value} groups, γ"
            if gate_first else f"RMSNorm over each head's {gamma.symbol}, γ shared by the "
            "heads, then ⊙ silu(z)")
    return self._rec(role, name, "rmsnorm", y, ew=SSM_EW["gated_norm"], params=formula([gamma]),
                     note=note)
