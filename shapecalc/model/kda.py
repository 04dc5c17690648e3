"""Kimi Delta Attention's token mixer (Kimi-Linear), part of the one forward definition, as
transformers 5.24's KimiLinearDeltaAttention computes it on its torch path.

KDA is the delta rule with a forget gate per channel rather than per head: g [B,T,H,D_k].
Its sizes are gated DeltaNet's fields with H_qk = H_v (H heads) and D_qk = D_hv (D_k wide): q, k
and v have H·D_k channels each. The convolution turns D_conv = 3·H·D_k channels; the forget
gate and the output gate are low-rank (D → D_k → H·D_k). Its cache is a state of fixed size:
the conv window [D_conv, K_c] and one [D_k, D_k] state per head.
"""

from __future__ import annotations

from typing import Any

from .config import ModelConfig
from .ops import Ops
from .sizes import Sizes


def kda_mixer(ops: Ops, m: ModelConfig, z: Sizes, h: Any, layer: int) -> Any:
    kd = z.Hv * z.Dqk  # H·D_k: q, k and v each
    # q_proj, k_proj and v_proj side by side (transformers concatenates them before the conv):
    # one matrix of their columns, the same counts
    qkv = ops.linear(h, "kda.qkv", "in projection (q, k, v)", z.D, kd * 3, False,  # [B,T,3·H·D_k]
                     "column")
    f = _gate(ops, m, z, h, "f", "forget gate")  # [B,T,H·D_k]
    b = ops.linear(h, "kda.b", "β projection (b)", z.D, z.Hv, False, "column")  # [B,T,H]
    qkv = ops.conv1d(qkv, layer, "kda.conv", "causal conv1d", kd * 3, z.Kc,  # [B,T,3·H·D_k]
                     False)
    qkv = ops.activation(qkv, "kda.conv.act", "conv activation", "silu")  # [B,T,3·H·D_k]
    q, k, v = ops.split(qkv, [kd, kd, kd])  # [B,T,H·D_k] ×3
    # g = −e^{A_log}·softplus(f + b_dt) (or bound·σ(e^{A_log}·(f + b_dt))) per channel, β = σ(b);
    # per head, diag(e^{g_t}) on the
    # state's key rows: S_t = diag(e^{g_t})·S_{t−1} + β_t·k_t·(v_t − (diag(e^{g_t})S_{t−1})ᵀk_t)ᵀ,
    # o_t = S_tᵀ·q_t/√D_k
    o = ops.kda(q, k, v, f, b, layer)  # [B,T,H·D_k]
    gate = _gate(ops, m, z, h, "g", "output gate")  # [B,T,H·D_k]
    o = ops.split_heads(o, "kda.heads", "o", z.Hv, z.Dqk)  # [B,H,T,D_k]
    o = ops.norm(o, "kda.norm", "output RMSNorm", z.Dqk, "rmsnorm")  # [B,H,T,D_k], γ of D_k
    o = ops.merge_heads(o, "kda.merge", "merge heads")  # [B,T,H·D_k]
    gate = ops.activation(gate, "kda.gate.act", "output gate", "sigmoid")  # [B,T,H·D_k]
    o = ops.mul(o, gate, "kda.gate.mul", "o ⊙ gate")  # [B,T,H·D_k]
    return ops.linear(o, "kda.out", "out projection", kd, z.D, False, "row")  # [B,T,D]


def _gate(ops: Ops, m: ModelConfig, z: Sizes, h: Any, g: str, name: str) -> Any:
    """A gate's projection to H·D_k: low-rank through D_k (Kimi-Linear's f_a·f_b, g_a·g_b; the
    down-projection replicated under TP) or one matrix (Ling 3.0's f_proj, g_proj)."""
    kd = z.Hv * z.Dqk
    if not m.kda_low_rank:
        return ops.linear(h, f"kda.{g}", name, z.D, kd, False, "column")  # [B,T,H·D_k]
    a = ops.linear(h, f"kda.{g}_a", f"{name} down ({g}_a)", z.D, z.Dqk, False,  # [B,T,D_k]
                   "replicated")
    return ops.linear(a, f"kda.{g}_b", f"{name} up ({g}_b)", z.Dqk, kd, False,  # [B,T,H·D_k]
                      "column")
