"""Gated DeltaNet's token mixer (Qwen3-Next, Qwen3.5), part of the one forward definition, as
transformers 5.24's Qwen3NextGatedDeltaNet computes it on its torch path.

Symbols: H_qk query/key heads of width D_qk, H_v value heads of width D_hv (each q/k head
serves H_v/H_qk of them), K_c the convolution's kernel, L the chunk of the chunked rule. The
convolution turns D_conv = 2·H_qk·D_qk + H_v·D_hv channels (q, k and v). Its cache is a state of
fixed size: the conv window [D_conv, K_c] and one [D_qk, D_hv] state per value head.
"""

from __future__ import annotations

from typing import Any

from .config import ModelConfig
from .ops import Ops
from .sizes import Sizes


def gated_deltanet_mixer(ops: Ops, m: ModelConfig, z: Sizes, h: Any, layer: int) -> Any:
    kd, vd = z.Hqk * z.Dqk, z.Hv * z.Dhv  # key_dim (q and k each), value_dim (v and z each)
    conv = kd * 2 + vd  # D_conv = 2·H_qk·D_qk + H_v·D_hv
    if m.gdn_fused_proj:  # Qwen3-Next's in_proj_qkvz interleaves q, k, v, z per q/k head: a
        # permutation of the columns, the same counts
        qkvz = ops.linear(h, "gdn.qkvz", "in projection (q, k, v, z)", z.D,  # [B,T,D_conv+H_v·D_hv]
                          conv + vd, False, "column")
        ba = ops.linear(h, "gdn.ba", "in projection (b, a)", z.D, z.Hv * 2, False,  # [B,T,2·H_v]
                        "column")
        qkv, gate = ops.split(qkvz, [conv, vd])  # [B,T,D_conv] [B,T,H_v·D_hv]
        b, a = ops.split(ba, [z.Hv, z.Hv])  # [B,T,H_v] [B,T,H_v]
    else:  # Qwen3.5: one projection each
        qkv = ops.linear(h, "gdn.qkv", "in projection (q, k, v)", z.D, conv, False,  # [B,T,D_conv]
                         "column")
        gate = ops.linear(h, "gdn.z", "in projection (z)", z.D, vd, False,  # [B,T,H_v·D_hv]
                          "column")
        b = ops.linear(h, "gdn.b", "in projection (b)", z.D, z.Hv, False, "column")  # [B,T,H_v]
        a = ops.linear(h, "gdn.a", "in projection (a)", z.D, z.Hv, False, "column")  # [B,T,H_v]
    qkv = ops.conv1d(qkv, layer, "gdn.conv", "causal conv1d", conv, z.Kc, False)  # [B,T,D_conv]
    qkv = ops.activation(qkv, "gdn.conv.act", "conv activation", "silu")  # [B,T,D_conv]
    q, k, v = ops.split(qkv, [kd, kd, vd])  # [B,T,H_qk·D_qk] ×2, [B,T,H_v·D_hv]
    # β = σ(b), g = −e^{A_log}·softplus(a + b_dt); per value head:
    # S_t = e^{g_t}·S_{t−1} + β_t·k_t·(v_t − S_{t−1}ᵀ·k_t·e^{g_t})ᵀ, o_t = S_tᵀ·q_t/√D_qk
    o = ops.delta_rule(q, k, v, b, a, layer)  # [B,T,H_v·D_hv]
    o = ops.gated_norm(o, gate, "gdn.norm", "gated RMSNorm", z.Dhv, z.Hv, False)  # [B,T,H_v·D_hv]
    return ops.linear(o, "gdn.out", "out projection", vd, z.D, False, "row")  # [B,T,D]
