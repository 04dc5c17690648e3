"""LFM2's gated short convolution, a token mixer of the one forward definition, as transformers
5.24's Lfm2ShortConv computes it on its torch path.

in_proj turns each token into three D-vectors B, C and x; B ⊙ x goes through a causal depthwise
convolution of kernel K_c (conv_L_cache) over the D channels, and C gates its output. It has one
form (no chunked algebra): its cache is the conv window [D, K_c] per sequence, nothing else.
Under tensor parallelism each rank holds D/p channels of each part (vLLM's ShortConv: a merged
column-parallel in_proj, out_proj row-parallel).
"""

from __future__ import annotations

from typing import Any

from .config import ModelConfig
from .ops import Ops
from .sizes import Sizes


def short_conv_mixer(ops: Ops, m: ModelConfig, z: Sizes, h: Any, layer: int) -> Any:
    d = z.Dsc  # the channels of one rank: D, or D/p
    bcx = ops.linear(h, "conv.in", "in projection (B, C, x)", z.D, d * 3,  # [B,T,3D]
                     m.conv_bias, "column")
    b, c, x = ops.split(bcx, [d, d, d])  # [B,T,D] ×3
    bx = ops.mul(b, x, "conv.bx", "B ⊙ x")  # [B,T,D]
    y = ops.conv1d(bx, layer, "conv.conv", "causal conv1d", d, z.Kc, m.conv_bias)  # [B,T,D]
    y = ops.mul(c, y, "conv.cy", "C ⊙ conv")  # [B,T,D]
    return ops.linear(y, "conv.out", "out projection", d, z.D, m.conv_bias, "row")  # [B,T,D]
