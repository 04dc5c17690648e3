"""Mamba-1's token mixer (the selective scan), part of the one forward definition, as
transformers 5.24's JambaMambaMixer computes it on its torch path.

Symbols: D_i = e·D the inner width (each channel its own state), N_s the state of each channel,
R_dt the rank of the Δ projection, K_c the convolution's kernel. The convolution turns the D_i
channels of x. Its cache is a state of fixed size: the conv window [D_i, K_c] and the recurrent
state [D_i, N_s] per sequence.
"""

from __future__ import annotations

from typing import Any

from .config import ModelConfig
from .ops import Ops
from .sizes import Sizes


def mamba1_mixer(ops: Ops, m: ModelConfig, z: Sizes, h: Any, layer: int) -> Any:
    inner, bias = z.Di, m.mamba_proj_bias
    xz = ops.linear(h, "mamba.in", "in projection (x, z)", z.D, inner * 2, bias,  # [B,T,2·D_i]
                    "column")
    x, gate = ops.split(xz, [inner, inner])  # [B,T,D_i] [B,T,D_i]
    x = ops.conv1d(x, layer, "mamba.conv", "causal conv1d", inner, z.Kc, m.conv_bias)  # [B,T,D_i]
    x = ops.activation(x, "mamba.conv.act", "conv activation", "silu")  # [B,T,D_i]
    dbc = ops.linear(x, "mamba.x", "x projection (Δ, B, C)", inner,  # [B,T,R_dt+2·N_s]
                     z.Rdt + z.Ns * 2, False, "column")
    dt, b, c = ops.split(dbc, [z.Rdt, z.Ns, z.Ns])  # [B,T,R_dt] [B,T,N_s] [B,T,N_s]
    if m.mamba_bcdt_norm:  # Jamba: an RMSNorm on each of Δ, B and C
        dt = ops.norm(dt, "mamba.dt_norm", "Δ RMSNorm", z.Rdt, "rmsnorm")  # [B,T,R_dt]
        b = ops.norm(b, "mamba.b_norm", "B RMSNorm", z.Ns, "rmsnorm")  # [B,T,N_s]
        c = ops.norm(c, "mamba.c_norm", "C RMSNorm", z.Ns, "rmsnorm")  # [B,T,N_s]
    # dt_proj's weight only (Jamba: dt_proj.weight @ Δ); its bias b_dt is added in the scan
    dt = ops.linear(dt, "mamba.dt", "Δ projection", z.Rdt, inner, False, "column")  # [B,T,D_i]
    # S_t = e^{Δ_t·A}⊙S_{t−1} + Δ_t·x_t·B_tᵀ, y_t = S_t·C_t + D⊙x_t, Δ = softplus(dt + b_dt)
    y = ops.selective_scan(x, dt, b, c, layer)  # [B,T,D_i]
    g = ops.activation(gate, "mamba.gate.act", "gate activation", "silu")  # [B,T,D_i]
    y = ops.mul(y, g, "mamba.gate.mul", "y ⊙ silu(z)")  # [B,T,D_i]
    return ops.linear(y, "mamba.out", "out projection", inner, z.D, bias, "row")  # [B,T,D]
