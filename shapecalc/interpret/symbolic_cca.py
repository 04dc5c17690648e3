"""The symbolic interpreter's CCA operations (model/cca.py): the q/k residuals, the two causal
convs with their window, the delayed value with its state, the per-head k scale. SymbolicOps
takes these as its methods; cca.py (interpret/) is the executor's side.

FLOPs follow FlopCounterMode on transformers 5.24's torch path (ZayaCCAProjection): the input is
padded by K_q = K_d + K_g − 2 tokens (prefill) or follows the K_q cached ones (decode), so the
depthwise aten.convolution has T + K_g − 1 outputs in prefill and K_g in decode,
2·B·C·K_d·(T + K_g − 1), and the grouped one 2·B·T·C·Dh·K_g (C = (H + H_kv)·Dh, Dh input
channels a group). A prefill projects a zero token for the first delayed value: 2·B·D·H_kv·Dh/2.
modeling_zaya.py has no fused kernel, so the `fused` convention counts the same (conventions.pick
with both formulas equal); the state is transformers' (vLLM's state cache is refused for CCA)."""

from __future__ import annotations

from ..model.conventions import pick
from ..model.expr import Dim, formula
from .symbolic_base import ELEMENTWISE, Sym, SymbolicBase, _total

CCA_EW = {"residual": 3}  # per q element: + the repeated k, × ½, and its part of the group mean


def sym_cca_residual(self: SymbolicBase, q: Sym, k: Sym, role: str, name: str
                     ) -> tuple[Sym, Sym]:
    self._rec(role, name, "cca_residual", q, ew=CCA_EW["residual"],
              note="q_r = (q + repeat(k))/2; k_r = mean of q_r over each KV head's group")
    return q, k


def sym_cca_conv(self: SymbolicBase, x: Sym, layer: int, role: str, name: str, channels: Dim
                 ) -> Sym:
    z, wl = self.z, self.wl
    B, T, C, Kd, Kg, Kq = z.B, z.Tq, channels, z.Kd, z.Kg, z.Kq
    span = Kg if wl.phase == "decode" else T + Kg + -1  # the depthwise conv's outputs
    dw = pick(wl, formula([2, B, C, Kd, span]), formula([2, B, C, Kd, span]))
    self._rec(role, f"{name}: depthwise", "conv1d", self._act(B, span, C), flops=dw,
              params=_total(C * Kd + C), ew_extra=formula([B, span, C]),
              note=f"kernel K_d={Kd.value}, over the input padded by K_q={Kq.value} tokens",
              operands=((B, C, span), (C, Kd)))
    gr = pick(wl, formula([2, B, T, C, z.Dh, Kg]), formula([2, B, T, C, z.Dh, Kg]))
    out = self._rec("cca.conv_grouped", f"{name}: grouped by head", "conv1d", x, flops=gr,
                    params=_total(C * z.Dh * Kg + C), ew_extra=formula([B, T, C]),
                    note=f"kernel K_g={Kg.value}, Dh channels a group (H + H_kv groups)",
                    operands=((B, C, T), (C, z.Dh, Kg)))
    self._rec("state.conv", "conv state", "state_cache", self._act(B, C, Kq),
              note="the last K_q q/k inputs of each channel, per sequence")
    return out


def sym_delay(self: SymbolicBase, x: Sym, layer: int, role: str, name: str) -> Sym:
    z = self.z
    B, w = z.B, x.dims[-1]
    flops = (0, "0")
    if self.wl.phase == "prefill":  # v_proj_delayed of a zero token: the first one's
        flops = formula([2, B, z.D, w])
    out = self._rec(role, name, "shift", x, flops=flops,
                    note="x[t−1]; the first: v_proj_delayed(0) in prefill, the state in decode")
    self._rec("state.delay", "delayed-value state", "state_cache", self._act(B, w),
              note="the last token's delayed v projection, per sequence")
    return out


def sym_head_scale(self: SymbolicBase, x: Sym, role: str, name: str, heads: Dim) -> Sym:
    return self._rec(role, name, "scale", x, ew=ELEMENTWISE["mul"], params=_total(heads),
                     note="a learned scalar per KV head (ZayaQKNorm.temp)")
