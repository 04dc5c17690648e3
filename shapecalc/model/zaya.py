"""ZAYA's channel-mixer and residual mechanisms, as transformers 5.24's modeling_zaya.py computes
them (its attention is CCA, cca.py): the router (ZayaRouter, ZayaRouterMLP), the residual
scaling of every branch (ZayaResidualScaling) and the scaled embeddings.

The router projects each token down to D_rt, adds the previous layer's router state × a learned
scale (every layer but the first: its "EDA", what ZAYA passes between layers), RMS-norms it,
runs two GELU layers and scores E + 1 classes: the last is a skip expert that computes nothing
(chosen only when its balancing bias, a buffer at −1, lets it win: never at initialisation). The
top 1 expert's output is × its softmax weight.
"""

from __future__ import annotations

from typing import Any

from .config import ModelConfig
from .ops import Ops
from .plan import LayerSpec
from .sizes import Sizes


def zaya_router(ops: Ops, m: ModelConfig, spec: LayerSpec, z: Sizes, h: Any) -> Any:
    r = ops.linear(h, "moe.router.down", "router down-projection", z.D, z.Drt, True,
                   "replicated")  # [B,T,D_rt]
    r = ops.depth_carry(r, "moe.router.eda", "router state + previous layer's × scale",
                        spec.router_eda)  # [B,T,D_rt]
    r = ops.norm(r, "moe.router.norm", "router norm", z.Drt, "rmsnorm")  # [B,T,D_rt]
    for i in (1, 2):
        r = ops.linear(r, f"moe.router.fc{i}", f"router fc{i}", z.Drt, z.Drt, True,
                       "replicated")  # [B,T,D_rt]
        r = ops.activation(r, "moe.router.act", "router activation", "gelu")  # [B,T,D_rt]
    return ops.linear(r, "moe.router", "router scores (E experts + skip)", z.Drt, z.E + 1,
                      False, "replicated")  # [B,T,E+1]


def residual(ops: Ops, m: ModelConfig, x: Any, y: Any) -> Any:
    """x + y, or ZAYA's scaled residual: (y + b_y)·s_y + (x + b_x)·s_x."""
    if m.residual_scaling:
        return ops.scaled_residual(x, y, "residual", "scaled residual")  # [B,T,D]
    return ops.add(x, y, "residual", "residual")  # [B,T,D]
