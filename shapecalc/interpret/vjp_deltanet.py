"""Gated DeltaNet's backward rule (model/gated_deltanet.py): what autograd runs over transformers
5.24's torch_chunk_gated_delta_rule, counted for the train planner; the NumPy executor's
vector-Jacobian product of the chunked rule follows (its convolution and gated norm are
vjp_mamba2.py's).

Backward FLOPs (FlopCounterMode over `loss.backward()`), per value head and chunk of L:
  - k_β·kᵀ, q·kᵀ and the intra-chunk A·v_new: both operands take a gradient, 2× the forward;
  - the two unit-triangular solves (no forward count): torch's solve_triangular backward solves
    again (no formula) and forms the matrix's gradient −dX·Xᵀ, a bmm: 2·L²·D_hv and 2·L²·D_qk;
  - the reads of the state, w·S and q·S: the first chunk reads the zero initial state (a constant):
    only w's and q's gradients there, 2× the forward less one chunk's;
  - the state update kᵀ·v_new: the last chunk's new state is read by nothing (a training step keeps
    no final state): 2× the forward less two of one chunk's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..model.expr import Dim, formula
from ..model.stage import Stage
from .backward_counts import Counts, Keep, Saves, combine, dim, dims_of
from .vjp_mamba2 import rank_grad
from .vjp_rules import rule

if TYPE_CHECKING:  # the VJPs load NumPy and the executor's helpers when they run
    import numpy as np

    from .vjp import Ctx

MIXER = "gated_deltanet"


def _layer(st: list[Stage], i: int, role: str) -> Stage | None:
    """The stage of `role` in st[i]'s layer (the nearest either side within its run)."""
    lo = i
    while lo > 0 and st[lo - 1].group == "block" and st[lo - 1].role != "residual":
        lo -= 1
    hi = i
    while hi + 1 < len(st) and st[hi + 1].role != "residual":
        hi += 1
    return next((x for x in st[lo: hi + 1] if x.role == role), None)


def saved(s: Stage, st: list[Stage], i: int, act: str) -> Saves | None:
    """What autograd saves at stage s (st[i]) of a gated DeltaNet layer over transformers 5.24's
    torch path (causal_conv1d_fn's fallback, torch_chunk_gated_delta_rule, the gated RMSNorm),
    measured by tests/torch_reference/measure_train_mixers.py; act: the activations' dtype. Only
    what stays to the backward: the last chunk's state update is read by nothing and freed with
    its operands; a product with the zero initial state keeps the state alone."""
    r, f32 = s.role, "fp32"
    if not r.startswith("gdn.") or s.op == "linear":
        return None
    d = dims_of(s)
    fused = _layer(st, i, "gdn.qkvz") is not None  # Qwen3-Next: q, k, v concatenated
    if r == "gdn.conv":
        into = (Keep("input (q, k, v concatenated)", None, (d[0], d[1], d[2]), act) if fused
                else Keep("input (a view of the in projection's output)", "gdn.qkv", d, act))
        return Saves([into], Keep("", "conv.out", dims_of(s, 0), act))
    if r == "gdn.conv.act":
        conv = _layer(st, i, "gdn.conv")
        assert conv is not None
        return Saves([Keep("conv output (SiLU's input)", "conv.out", dims_of(conv, 0), act)],
                     None)
    if r == "gdn.gates":  # β = σ(b) keeps its output; g: e^{A_log}, a + b_dt, softplus, −e^A
        per_head = (d[-1],)
        return Saves([Keep("β = σ(b)", None, d, act), Keep("e^{A_log}", None, per_head, f32),
                      Keep("a + b_dt", None, d, f32), Keep("softplus", None, d, f32),
                      Keep("−e^{A_log}", None, per_head, f32)], None)
    if r == "gdn.qk_norm":  # q and k: fp32 contiguous copies and their L2 norms' rsqrt
        row = (*d[:-1], ("1", 1))
        return Saves([Keep("q in fp32", None, d, f32), Keep("q: rsqrt", None, row, f32),
                      Keep("k in fp32", None, d, f32), Keep("k: rsqrt", None, row, f32)], None)
    solve, ut = _layer(st, i, "gdn.solve"), _layer(st, i, "gdn.ut")
    if solve is None or ut is None:
        return None
    B, H, nc, L, Dv = dims_of(solve)
    Dk = dims_of(ut, 0)[-1]
    TL = ("T_L", nc[1] * L[1])
    ck, cv, cl = (B, H, nc, L, Dk), (B, H, nc, L, Dv), (B, H, nc, L)
    many = nc[1] > 1
    keeps = {
        "gdn.decay": [Keep("β padded", None, (B, H, TL), f32),
                      Keep("v padded", None, (B, H, TL, Dv), f32),
                      Keep("k padded", None, (B, H, TL, Dk), f32),
                      Keep("upper mask", None, (L, L), "bool"),
                      Keep("pairwise decay", None, d, f32)],
        "gdn.ut": [Keep("k_β (matmul operand)", None, ck, f32), Keep("k_β·kᵀ", None, d, f32)],
        "gdn.scores": [Keep("q padded", None, ck, f32), Keep("q·kᵀ", None, d, f32),
                       Keep("e^G (for k_β)", None, cl, f32)],
        "gdn.solve": [Keep("T (the system)", None, (B, H, nc, L, L), f32),
                      Keep("u = T⁻¹·v_β", None, cv, f32), Keep("w = T⁻¹·k_β·e^G", None, ck, f32)],
        "gdn.v_new": [Keep("e^G (for q)", None, cl, f32), Keep("e^{G_L − G}", None, cl, f32),
                      Keep("e^{G_L}", None, (B, H, nc), f32),
                      Keep("zero initial state", None, (B, H, Dk, Dv), f32)]
        + ([Keep("states of chunks 2..n_c", None, (B, H, ("n_c-1", nc[1] - 1), Dk, Dv), f32)]
           if many else []),
        "gdn.inter": [Keep("q ⊙ e^G (matmul operand)", None, ck, f32)] if many else [],
        "gdn.intra": [Keep("A = q·kᵀ ⊙ decay", None, (B, H, nc, L, L), f32),
                      Keep("v_new (each chunk)", None, cv, f32)],
        "gdn.state": [Keep("k ⊙ e^{G_L − G} (matmul operand)", None, ck, f32)] if many else [],
    }
    if r in keeps:
        return Saves(keeps[r], None)
    if r == "gdn.out":  # o merged, back in the activations' dtype
        return Saves([], Keep("", "o", d, act))
    if r == "gdn.norm":  # RMSNorm(o) per value head in fp32, γ·(·) in act, ⊙ silu(z) in fp32
        heads = (d[0], d[1], H, ("1", 1))
        if act == f32:
            o = Keep("o (a view)", "o", d, act)
            z = (Keep("z (a copy of its split)", None, d, act) if fused
                 else Keep("z (a view of its projection)", "gdn.z", d, act))
        else:
            o, z = Keep("o in fp32", None, d, f32), Keep("z in fp32", None, d, f32)
        return Saves([o, Keep("rsqrt", None, heads, f32), Keep("normalised", None, d, act), z,
                      Keep("silu(z)", None, d, f32), Keep("γ·normalised", None, d, act)],
                     Keep("", None, d, act))
    return None


def backward_counts(s: Stage, st: list[Stage], i: int) -> Counts | None:
    if s.role == "gdn.solve":
        B, H, nc, L, Dv = (dim(a, b) for a, b in zip(s.dims, s.shape, strict=True))
        ut = next(x for x in reversed(st[:i]) if x.role == "gdn.ut")
        Dk = dim(ut.operand_dims[0][-1], ut.operands[0][-1])
        TL = Dim.of("T_L", nc.value * L.value)
        n, f = formula([2, B, H, TL, L, Dk + Dv])
        return Counts(n, f, 0, "0", "dT = −dX·Xᵀ for u and for w (each solve's bmm)")
    if s.role in ("gdn.v_new", "gdn.inter", "gdn.state"):
        a = [dim(x, n) for x, n in zip(s.operand_dims[0], s.operands[0], strict=True)]
        B, H = a[0], a[1]
        if s.role == "gdn.state":  # [B,H,n_c,D_qk,L] × [B,H,n_c,L,D_hv]
            Dk, L = a[3], a[4]
        else:  # [B,H,n_c,L,D_qk] × [B,H,n_c,D_qk,D_hv]
            L, Dk = a[3], a[4]
        Dv = dim(s.operand_dims[1][-1], s.operands[1][-1])
        one, f1 = formula([2, B, H, L, Dk, Dv])  # one chunk's forward
        less = 2 if s.role == "gdn.state" else 1
        n, f = combine((2, s.flops, s.flops_formula), (-less, one, f1))
        note = ("the last chunk's state is read by nothing: no backward" if less == 2 else
                "the first chunk reads the zero initial state: one operand's gradient")
        return Counts(n, f, 0, "0", note)
    return None


# -- the executor's vector-Jacobian product (interpret/deltanet.py's delta_rule) ------------------
def _mm(c: Ctx, role: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b over [R·B, …] rows, booked as one rank's dX FLOPs of the stage `role`."""
    import numpy as np

    y = np.matmul(a, b)
    c.dx[c.stage(role)] += 2 * y.size * a.shape[-1] // c.p
    return y


def _l2_grad(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """Through y = x / √(Σx² + 1e-6)."""
    import numpy as np

    r = 1 / np.sqrt((x * x).sum(axis=-1, keepdims=True) + 1e-6)
    return r * dy - x * r**3 * (dy * x).sum(axis=-1, keepdims=True)


def _chunked_grad(c: Ctx, q: np.ndarray, k: np.ndarray, v: np.ndarray, beta: np.ndarray,
                  g: np.ndarray, L: int, do: np.ndarray) -> list[np.ndarray]:
    """deltanet.chunked's reverse (its names), matmul by matmul as autograd runs it: the gradients
    of q, k, v, β and g from the output's."""
    import numpy as np

    from .deltanet import _pairwise_decay

    B, H, T, Dk = k.shape
    pad = (L - T % L) % L

    def chunks(x: np.ndarray) -> np.ndarray:
        x = np.pad(x, ((0, 0), (0, 0), (0, pad)) + ((0, 0),) * (x.ndim - 3))
        return x.reshape(B, H, -1, L, *x.shape[3:])

    v_beta, k_beta = v * beta[..., None], k * beta[..., None]
    q, k, k_beta, v_beta, g, do = (chunks(x) for x in (q, k, k_beta, v_beta, g, do))
    nc = g.shape[2]
    G = np.cumsum(g, axis=-1)
    decay = _pairwise_decay(G)
    KK, QK = k_beta @ k.swapaxes(-1, -2), q @ k.swapaxes(-1, -2)
    intra = QK * decay
    eG = np.exp(G)
    Tm = np.tril(KK * decay, -1) + np.eye(L)
    u, w = np.linalg.solve(Tm, v_beta), np.linalg.solve(Tm, k_beta * eG[..., None])
    qd = q * eG[..., None]
    e2 = np.exp(G[..., -1:] - G)
    kd = k * e2[..., None]
    cL = np.exp(G[..., -1])  # [B,H,c]
    S = [np.zeros((B, H, Dk, v.shape[-1]))]
    v_new = np.empty_like(u)
    for i in range(nc):
        v_new[:, :, i] = u[:, :, i] - w[:, :, i] @ S[i]
        S.append(S[i] * cL[:, :, i, None, None] + kd[:, :, i].swapaxes(-1, -2) @ v_new[:, :, i])
    du, dw, dintra, dqd, dkd = (np.zeros_like(x) for x in (u, w, intra, qd, kd))
    dcL = np.zeros_like(cL)
    dS = np.zeros_like(S[0])
    for i in reversed(range(nc)):
        dvn = np.zeros_like(v_new[:, :, i])
        dSi = np.zeros_like(dS)
        if i < nc - 1:  # the last chunk's new state is read by nothing
            dkd[:, :, i] = _mm(c, "gdn.state", v_new[:, :, i], dS.swapaxes(-1, -2))
            dvn += _mm(c, "gdn.state", kd[:, :, i], dS)
            dcL[:, :, i] = (dS * S[i]).sum(axis=(-1, -2))
            dSi += dS * cL[:, :, i, None, None]
        o = do[:, :, i]
        dintra[:, :, i] = _mm(c, "gdn.intra", o, v_new[:, :, i].swapaxes(-1, -2))
        dvn += _mm(c, "gdn.intra", intra[:, :, i].swapaxes(-1, -2), o)
        dqd[:, :, i] = _mm(c, "gdn.inter", o, S[i].swapaxes(-1, -2))
        du[:, :, i] = dvn
        dw[:, :, i] = -_mm(c, "gdn.v_new", dvn, S[i].swapaxes(-1, -2))
        if i:  # the first chunk reads the zero initial state: a constant
            dSi += _mm(c, "gdn.inter", qd[:, :, i].swapaxes(-1, -2), o)
            dSi -= _mm(c, "gdn.v_new", w[:, :, i].swapaxes(-1, -2), dvn)
        dS = dSi
    # the two unit-triangular solves: dB = T⁻ᵀ·dX, dT = −dB·Xᵀ (strictly lower)
    TmT = Tm.swapaxes(-1, -2)
    dv_beta, ddec = np.linalg.solve(TmT, du), np.linalg.solve(TmT, dw)
    dT = -_mm(c, "gdn.solve", dv_beta, u.swapaxes(-1, -2))
    dT -= _mm(c, "gdn.solve", ddec, w.swapaxes(-1, -2))
    dut = np.tril(dT, -1)
    dk_beta = ddec * eG[..., None]
    deG = (ddec * k_beta).sum(axis=-1) + (dqd * q).sum(axis=-1)
    dKK, dQK = dut * decay, dintra * decay
    dd = (dut * KK + dintra * QK) * decay
    dk_beta += _mm(c, "gdn.ut", dKK, k)
    dk = _mm(c, "gdn.ut", dKK.swapaxes(-1, -2), k_beta)
    dq = _mm(c, "gdn.scores", dQK, k)
    dk += _mm(c, "gdn.scores", dQK.swapaxes(-1, -2), q)
    dq += dqd * eG[..., None]
    dk += dkd * e2[..., None]
    de2 = (dkd * k).sum(axis=-1) * e2
    dG = deG * eG + dd.sum(axis=-1) - dd.sum(axis=-2) - de2
    dG[..., -1] += de2.sum(axis=-1) + dcL * cL
    dg = np.cumsum(dG[..., ::-1], axis=-1)[..., ::-1]

    def unchunk(x: np.ndarray) -> np.ndarray:
        return x.reshape(B, H, -1, *x.shape[4:])[:, :, :T]

    dq, dk, dk_beta, dv_beta, dg = (unchunk(x) for x in (dq, dk, dk_beta, dv_beta, dg))
    k0, v0 = unchunk(k), v
    dk += dk_beta * beta[..., None]
    dbeta = (dk_beta * k0).sum(axis=-1) + (dv_beta * v0).sum(axis=-1)
    return [dq, dk, dv_beta * beta[..., None], dbeta, dg]


@rule("delta_rule", inputs=5)
def delta_rule(c: Ctx, dys: list[Any]) -> list[Any]:
    """The gates, the q/k norms and heads, then the chunked rule's reverse (_chunked_grad)."""
    import numpy as np

    from .deltanet import _l2
    from .mamba2 import per_rank

    q, k, v, b, a = c.s["ins"]
    m, layer = c.m, c.e.layer
    Dk, Dv, L = m.gdn_qk_dim or 0, m.gdn_v_dim or 0, int(m.scan_chunk or 0)
    R, B, T = q.shape[:3]
    RB, H, Hk, full = R * B, v.shape[-1] // Dv, q.shape[-1] // Dk, m.gdn_v_heads or 0
    A_log = per_rank(c.w.get((layer, "gdn.A"), (full,)), R, B)
    dt_bias = per_rank(c.w.get((layer, "gdn.dt", "b"), (full,), base=1.0), R, B)
    beta = 1 / (1 + np.exp(-b.reshape(RB, T, H)))
    z = a.reshape(RB, T, H) + dt_bias
    g = -np.exp(A_log) * np.logaddexp(0, z)

    def heads(x: np.ndarray, n: int, d: int) -> np.ndarray:
        return np.repeat(x.reshape(RB, T, n, d), H // n, axis=2).transpose(0, 2, 1, 3)

    def unheads(dx: np.ndarray, n: int, d: int) -> np.ndarray:
        return dx.transpose(0, 2, 1, 3).reshape(RB, T, n, H // n, d).sum(axis=3).reshape(
            R, B, T, n * d)

    qr, kr = heads(q, Hk, Dk), heads(k, Hk, Dk)
    scale = Dk**-0.5
    do = dys[0].reshape(RB, T, H, Dv).transpose(0, 2, 1, 3)
    dqh, dkh, dvh, dbh, dgh = _chunked_grad(c, _l2(qr) * scale, _l2(kr), heads(v, H, Dv),
                                            beta.transpose(0, 2, 1), g.transpose(0, 2, 1), L, do)
    dg, dbeta = dgh.transpose(0, 2, 1), dbh.transpose(0, 2, 1)
    dz = dg * -np.exp(A_log) / (1 + np.exp(-z))
    rank_grad(c, (layer, "gdn.A"), (dg * g).sum(axis=1))
    rank_grad(c, (layer, "gdn.dt", "b"), dz.sum(axis=1))
    return [unheads(_l2_grad(qr, dqh * scale), Hk, Dk), unheads(_l2_grad(kr, dkh), Hk, Dk),
            unheads(dvh, H, Dv), (dbeta * beta * (1 - beta)).reshape(b.shape),
            dz.reshape(a.shape)]
