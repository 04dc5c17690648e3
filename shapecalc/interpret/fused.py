"""The `fused` FLOPs convention (model/conventions.py): what the GPU kernels of the stateful
mixers compute, derived from their source. The one home of these counts; the symbolic rules
print them, the executor records them from its arrays' sizes (verify compares the two).

How a kernel's work is counted: each product its tl.dot (or tl.sum of products) computes over
the real tokens, 1 multiply-add = 2 FLOPs. No padding of T: a chunk holds l = min(L, what is
left) tokens (T = q·L + l_last). A block the kernel multiplies whole counts whole, though a mask
zeroes part of it afterwards; a block its loop skips counts nothing. Lanes past the last token
(masked loads) count nothing. The elementwise work stays listed apart, as in transformers-torch.

mamba_ssm's mamba_chunk_scan_combined (ops/triton/ssd_combined.py, _mamba_chunk_scan_combined_fwd):
- _bmm_chunk_fwd (ssd_bmm.py): C·Bᵀ per chunk **per group** (not per head), the whole l×l
  block (causal=False): 2·B·G·N_s·Σl².
- _chunk_scan_fwd (ssd_chunk_scan.py, IS_CAUSAL): its loop stops at the diagonal (K_MAX), so
  (C·Bᵀ ⊙ decay·Δ)·x counts the causal pairs i ≥ j: 2·B·H_s·D_s·Σl(l+1)/2; and C·states for
  every token: 2·B·T·H_s·N_s·D_s.
- _chunk_state_fwd (ssd_chunk_state.py): (B ⊙ decay·Δ)ᵀ·x over the chunk's tokens:
  2·B·T·H_s·D_s·N_s.
- _state_passing_fwd (ssd_state_passing.py): states = e^{A_c}·states + new, elementwise: 0.
- decode, selective_state_update (selective_state_update.py): out = Σ_n state·C (tl.sum):
  2·B·H_s·D_s·N_s, as transformers' bmm.
flash-linear-attention's chunk_gated_delta_rule (ops/gated_delta_rule/chunk.py, chunk_fwd.py;
chunk size BT = 64 = L, sub-blocks of BC = 16; every product per value head, k shared by
H_v/H_qk of them), per chunk of l tokens in 16-blocks s_0 … s_{m−1}:
- chunk_gated_delta_rule_fwd_kkt_solve_kernel: β·k·kᵀ over the 16-blocks on and below the
  diagonal (each block whole): (l² + Σ_a s_a²)/2 pairs of D_qk products (P_kk);
  the inverse (I + A)⁻¹: each diagonal block by forward substitution, C(s,3) products of
  nonzero entries, then the block merges Ai_ab = −Ai_aa·Σ_{b≤c<a} A_ac·Ai_cb, a tl.dot each
  (M_inv = Σ_a C(s_a,3) + Σ_{a>b} s_a·s_b·(s_a + Σ_{b≤c<a} s_c)).
- recompute_w_u_fwd (wy_fast.py): w = A·(k·β·e^g), u = A·(v·β), the whole l×l A: l²·(D_qk+D_hv).
- chunk_gated_delta_rule_fwd_h (common/chunk_delta_h.py): v_new = u − w·S and S += kᵀ·v_new for
  every token: 2·B·H_v·T·D_qk·D_hv each.
- chunk_fwd_o (common/chunk_o.py): q·S (every token), q·kᵀ and A·v_new over the whole l×l
  block (masked after): 2·B·H_v·(T·D_qk·D_hv + Σl²·D_qk + Σl²·D_hv).
- decode, fused_recurrent_gated_delta_rule (fused_recurrent.py): Sᵀ·k and Sᵀ·q (tl.sum):
  2·B·H_v·D_qk·D_hv each (transformers' torch step: elementwise, 0).
The causal conv (causal_conv1d_fn; fla's ShortConvolution): one output per token, no padded
positions: 2·B·D_conv·K_c·T (decode, causal_conv1d_update: 2·B·D_conv·K_c).

For the mixers other files add (their rules call these; the counts are here already):
- Mamba-1, mamba_ssm's selective_scan_fn (csrc/selective_scan/selective_scan_fwd_kernel.cuh):
  per channel and state the scan h = e^{Δ·A}·h + Δ·B·u is elementwise (a parallel prefix scan),
  and out += h·C sums over N_s: 2·B·T·I·N_s; decode (selective_state_update) 2·B·I·N_s. As
  transformers' torch loop (a bmm per token), so only the conv differs there.
- KDA, fla's chunk_kda (ops/kda/chunk_fwd.py, chunk_intra.py, chunk_intra_token_parallel.py,
  wy_fast.py; gla/chunk.py's chunk_gla_fwd_o_gk; chunks of 32 or 64 in 16-blocks): the
  per-channel gate keeps q·kᵀ and k·kᵀ from being whole-block dots on the diagonal: the
  token-parallel kernel sums over D_k for each pair j ≤ i of a 16-block (tl.sum), the fused
  inter kernel takes the blocks below the diagonal whole (tl.dot): together the causal pairs,
  Σl(l+1)/2, for each of Aqk and Akk: 4·B·H·D_k·Σl(l+1)/2; the inverse as fla's gated delta
  rule (M_inv), w and u by the whole A (Σl²·(D_k+D_v)); v_new, the state update and q·S
  2·B·H·T·D_k·D_v each; Aqk·v_new the whole block (masked after): 2·B·H·Σl²·D_v; decode two
  contractions of the state, 2·B·H·D_k·D_v each.
"""

from __future__ import annotations

from fractions import Fraction

from ..model.expr import Dim, Expr, formula

BC = 16  # fla's sub-block of a chunk (chunk_gated_delta_rule_fwd_intra: BC = 16)

Count = tuple[int, str]


def _scale(d: Dim, c: Fraction) -> Dim:
    return Dim(int(d.value * c), d.expr * Expr.const(c))


def _named(d: Dim, name: str, poly: bool) -> Dim:
    """A sum printed as one symbol (in poly mode: its polynomial in T)."""
    return d if poly else Dim.of(name, d.value)


def _split(n: Dim, size: int) -> tuple[int, Dim]:
    """n = q·size + r with 1 ≤ r ≤ size: (q, r), r a polynomial in n's symbols."""
    q = (n.value - 1) // size
    return q, n + (-q * size)


def _choose3(s: Dim) -> Dim:
    return _scale(s * (s + -1) * (s + -2), Fraction(1, 6))


def chunk_sums(T: Dim, L: int, poly: bool) -> dict[str, Dim]:
    """Σl², Σl(l+1)/2 over the chunks, and fla's P_kk and M_inv (model docstring)."""
    q, last = _split(T, L)
    sq = last * last + q * L * L
    tri = _scale(last * last + last, Fraction(1, 2)) + q * (L * (L + 1) // 2)
    full_blocks = [Dim.const(min(BC, L - i)) for i in range(0, L, BC)]
    qb, s = _split(last, BC)
    pkk_full, inv_full = _fla_chunk(Dim.const(L), full_blocks)
    pkk, inv = _fla_chunk(last, [Dim.const(BC)] * qb + [s])
    return {"sq": _named(sq, "Σl²", poly), "tri": _named(tri, "Σl(l+1)/2", poly),
            "pkk": _named(pkk + pkk_full * q, "P_kk", poly),
            "inv": _named(inv + inv_full * q, "M_inv", poly)}


def _fla_chunk(length: Dim, blocks: list[Dim]) -> tuple[Dim, Dim]:
    """One chunk of `length` tokens in 16-blocks: (pairs k·kᵀ computes, the inverse's
    multiply-adds)."""
    sq = Dim.const(0)
    inv = Dim.const(0)
    for a, sa in enumerate(blocks):
        sq = sq + sa * sa
        inv = inv + _choose3(sa)
        for b in range(a):
            inner = sa
            for c in range(b, a):
                inner = inner + blocks[c]
            inv = inv + sa * blocks[b] * inner
    return _scale(length * length + sq, Fraction(1, 2)), inv


def mamba2_prefill(B: Dim, T: Dim, L: int, H: Dim, G: Dim, P: Dim, N: Dim,
                   poly: bool) -> dict[str, Count]:
    """Each role's FLOPs in mamba_chunk_scan_combined."""
    s = chunk_sums(T, L, poly)
    return {"ssm.scores": formula([2, B, G, N, s["sq"]]),
            "ssm.diag": formula([2, B, H, P, s["tri"]]),
            "ssm.chunk_states": formula([2, B, T, H, P, N]),
            "ssm.pass": (0, "0"),
            "ssm.off": formula([2, B, T, H, N, P])}


def deltanet_prefill(B: Dim, T: Dim, L: int, H: Dim, Dk: Dim, Dv: Dim,
                     poly: bool) -> dict[str, Count]:
    """Each role's FLOPs in chunk_gated_delta_rule (H: the value heads)."""
    s = chunk_sums(T, L, poly)
    return {"gdn.ut": formula([2, B, H, Dk, s["pkk"]]),
            "gdn.solve": formula([2, B, H, s["inv"] + s["sq"] * (Dk + Dv)]),
            "gdn.scores": formula([2, B, H, s["sq"], Dk]),
            "gdn.v_new": formula([2, B, H, T, Dk, Dv]),
            "gdn.inter": formula([2, B, H, T, Dk, Dv]),
            "gdn.intra": formula([2, B, H, s["sq"], Dv]),
            "gdn.state": formula([2, B, H, T, Dk, Dv])}


def deltanet_decode(B: Dim, H: Dim, Dk: Dim, Dv: Dim) -> dict[str, Count]:
    """fused_recurrent_gated_delta_rule's two contractions of the state."""
    return {"gdn.update": formula([2, B, H, Dk, Dv]), "gdn.readout": formula([2, B, H, Dk, Dv])}


def conv(B: Dim, channels: Dim, kernel: Dim, T: Dim) -> Count:
    """causal_conv1d: one output per token (T in prefill, 1 in decode)."""
    return formula([2, B, channels, kernel, T])


def mamba1_scan(B: Dim, T: Dim, inner: Dim, N: Dim) -> Count:
    """selective_scan_fn's out = Σ_n h·C (T tokens; decode: T = 1)."""
    return formula([2, B, T, inner, N])


def kda_prefill(B: Dim, T: Dim, L: int, H: Dim, Dk: Dim, Dv: Dim,
                poly: bool) -> dict[str, Count]:
    """Each part's FLOPs in chunk_kda (H: the heads the gates and values have)."""
    s = chunk_sums(T, L, poly)
    return {"intra": formula([4, B, H, Dk, s["tri"]]),  # Aqk and Akk, the causal pairs
            "solve": formula([2, B, H, s["inv"] + s["sq"] * (Dk + Dv)]),  # (I+A)⁻¹; w, u
            "v_new": formula([2, B, H, T, Dk, Dv]), "state": formula([2, B, H, T, Dk, Dv]),
            "inter": formula([2, B, H, T, Dk, Dv]),  # (q ⊙ e^g)·S
            "attend": formula([2, B, H, s["sq"], Dv])}  # Aqk·v_new, the whole block


def kda_decode(B: Dim, H: Dim, Dk: Dim, Dv: Dim) -> dict[str, Count]:
    """fused_recurrent_kda's two contractions of the state (Sᵀk, Sᵀq)."""
    return {"update": formula([2, B, H, Dk, Dv]), "readout": formula([2, B, H, Dk, Dv])}
