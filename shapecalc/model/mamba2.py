"""Mamba-2's token mixer (state-space duality), part of the one forward definition, as
transformers 5.24's NemotronHMamba2Mixer computes it on its torch path.

Symbols: H_s heads of width D_s (the inner width I = H_s·D_s), G groups sharing one B and one
C, N_s the state of each head channel, K_c the convolution's kernel, L the scan's chunk. The
convolution turns D_conv = I + 2·G·N_s channels (x, B and C). Its cache is a state of fixed
size: the conv window [D_conv, K_c] and the recurrent state [H_s, D_s, N_s] per sequence.
"""

from __future__ import annotations

from typing import Any

from .config import ModelConfig
from .ops import Ops
from .sizes import Sizes


def mamba2_mixer(ops: Ops, m: ModelConfig, z: Sizes, h: Any, layer: int) -> Any:
    inner = z.Hs * z.Ds  # I = H_s·D_s
    gn = z.G * z.Ns  # B and C: one N_s-vector per group and token
    conv = inner + gn * 2  # D_conv = I + 2·G·N_s
    if m.ssm_in_multiplier is not None:  # Falcon-H1
        h = ops.scale(h, "ssm.in_scale", "SSM in multiplier", m.ssm_in_multiplier,
                      f"{m.ssm_in_multiplier:g}")
    zxbcdt = ops.linear(h, "ssm.in", "in projection (z, x, B, C, dt)", z.D,  # [B,T,2I+2GN_s+H_s]
                        inner + conv + z.Hs, False, "column")
    gate, xbc, dt = ops.split(zxbcdt, [inner, conv, z.Hs])  # [B,T,I] [B,T,D_conv] [B,T,H_s]
    if m.ssm_multipliers is not None:  # Falcon-H1's μP vector: each part × its factor
        gate, xbc, dt = _mup(ops, m.ssm_multipliers, gate, xbc, dt, [inner, gn, gn])
    xbc = ops.conv1d(xbc, layer, "ssm.conv", "causal conv1d", conv, z.Kc,  # [B,T,D_conv]
                     m.conv_bias)
    xbc = ops.activation(xbc, "ssm.conv.act", "conv activation", "silu")  # [B,T,D_conv]
    x, b, c = ops.split(xbc, [inner, gn, gn])  # [B,T,I] [B,T,G·N_s] [B,T,G·N_s]
    # S_t = e^{Δ_t·A}·S_{t−1} + Δ_t·x_t·B_tᵀ, y_t = S_t·C_t + D·x_t, Δ_t = softplus(dt_t + b_dt)
    y = ops.ssd(x, dt, b, c, layer)  # [B,T,I]
    if m.ssm_gated_norm:
        y = ops.gated_norm(y, gate, "ssm.norm", "gated RMSNorm", inner, z.G, True)  # [B,T,I]
    else:  # Falcon-H1 without mamba_rms_norm: y ⊙ silu(z)
        y = ops.mul(y, ops.activation(gate, "ssm.gate.act", "gate activation", "silu"),  # [B,T,I]
                    "ssm.gate.mul", "y ⊙ silu(z)")
    return ops.linear(y, "ssm.out", "out projection", inner, z.D, False, "row")  # [B,T,D]


def _mup(ops: Ops, f: tuple[float, ...], gate: Any, xbc: Any, dt: Any, parts: list[Any]
         ) -> tuple[Any, Any, Any]:
    """z, x‖B‖C and dt, each part × its μP factor (x, B and C apart, then side by side)."""
    def times(t: Any, k: int, part: str) -> Any:
        return ops.scale(t, "ssm.mup", f"μP × {part}", f[k], f"{f[k]:g}")

    x, b, c = ops.split(xbc, parts)  # [B,T,I] [B,T,G·N_s] [B,T,G·N_s]
    xbc = ops.concat([times(x, 1, "x"), times(b, 2, "B"), times(c, 3, "C")],  # [B,T,D_conv]
                     "ssm.mup.concat", "x ‖ B ‖ C")
    return times(gate, 0, "z"), xbc, times(dt, 4, "dt")
