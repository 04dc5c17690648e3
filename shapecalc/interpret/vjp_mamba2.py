"""Mamba-2's backward rule (model/mamba2.py): what autograd runs over transformers 5.24's torch path
(NemotronHMamba2Mixer.torch_forward), counted for the train planner; the NumPy executor's
vector-Jacobian products of its operations follow.

Backward FLOPs (FlopCounterMode over `loss.backward()`): the projections are linear layers (dX and
dW, train/backward.py's rule); every einsum of the chunked scan becomes a bmm whose two operands
both take a gradient (the zero initial state is concatenated to the chunk states, so the pass
between chunks is a full product): 2× its forward, the generic rule. The depthwise convolution is
this file's: aten.convolution_backward computes the input gradient (a convolution of the forward's
size) and the weight gradient, which FlopCounterMode counts as a dense convolution over C_conv
input channels (torch's conv_backward_flop ignores the groups): C_conv × the forward's FLOPs,
where the arithmetic is 1×: the excess is booked apart (`convention_only_flops`), and the train
planner's time leaves it out. The convolution is gated DeltaNet's too (vjp_deltanet.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..model.stage import Stage
from .backward_counts import Counts, Keep, Saves, dim, dims_of, times
from .vjp_rules import rule

if TYPE_CHECKING:  # the VJPs load NumPy and the executor's helpers when they run
    import numpy as np

    from .vjp import Ctx

MIXER = "mamba2"


def backward_counts(s: Stage, st: list[Stage], i: int) -> Counts | None:
    """The conv's backward (both mixers'); None for every other stage (the generic rule)."""
    if s.op != "conv1d":
        return None
    C = dim(s.operand_dims[1][0], s.operands[1][0])  # the conv's channels, one rank's
    return Counts(s.flops, s.flops_formula, *times(C, s.flops, s.flops_formula),
                  "dX: a convolution of the forward's size; dW: FlopCounterMode counts the "
                  "depthwise conv's weight gradient as a dense one over its C_conv channels "
                  f"(the kernel's arithmetic is 1×: {s.flops:,})", (C.value - 1) * s.flops)


def _find(st: list[Stage], i: int, role: str) -> Stage:
    """The layer's stage of `role` (the nearest before st[i], or st[i] itself)."""
    return next(x for x in reversed(st[: i + 1]) if x.role == role)


def saved(s: Stage, st: list[Stage], i: int, act: str) -> Saves | None:
    """What autograd saves at stage s (st[i]) of a Mamba-2 layer over transformers 5.24's torch
    path (torch_forward's causal_conv1d_fn and mamba2_chunk_scan fallbacks, NemotronHRMSNormGated),
    measured by tests/torch_reference/measure_train_mixers.py; act: the activations' dtype. The
    scan runs in fp32; each einsum's bmm keeps its two operands (copies where the layout moves,
    views where it does not); a segment sum keeps its two [n,n] bool masks."""
    f32, r, d = "fp32", s.role, dims_of(s)
    if r == "ssm.conv":  # the conv's input: the in projection's output, transposed (a view)
        return Saves([Keep("input (a view of the in projection's output)", "ssm.in", d, act)],
                     Keep("", "conv.out", dims_of(s, 0), act))
    if r == "ssm.conv.act":  # SiLU keeps its input: the conv's whole output, T + K_c − 1 long
        conv = _find(st, i, "ssm.conv")
        return Saves([Keep("conv output (SiLU's input)", "conv.out", dims_of(conv, 0), act)],
                     Keep("", "conv.act", d, act))
    if r == "ssm.dt":  # softplus keeps its input, the clamp its own
        return Saves([Keep("dt + b_dt", None, d, act), Keep("softplus output", None, d, act)],
                     None)
    if not r.startswith("ssm.") or r in ("ssm.in", "ssm.out"):
        return None
    sc = _find(st, i, "ssm.scores") if r != "ssm.discretize" else None
    B, H = dims_of(st[i])[0], dims_of(_find(st, i, "ssm.dt"))[-1]
    if r == "ssm.discretize":  # x·Δ and A·Δ: in fp32 views of Δ and x, in bf16 fp32 copies
        dt = dims_of(_find(st, i, "ssm.dt"))
        heads = (H,)
        own = [Keep("e^{A_log}", None, heads, f32), Keep("A = −e^{A_log}", None, heads, f32)]
        if act == f32:
            own += [Keep("Δ (×x)", "dt", dt, f32), Keep("x (a view of the conv activation)",
                                                          "conv.act", dims_of(_find(
                                                              st, i, "ssm.conv.act")), f32)]
        else:
            own += [Keep("Δ in fp32 (×x)", None, (*dt, ("1", 1)), f32),
                    Keep("x in fp32", None, d, f32), Keep("Δ in fp32 (×A)", None, dt, f32)]
        return Saves(own, None)
    assert sc is not None
    _, nc, L = dims_of(sc)[:3]
    cb = dims_of(sc, 0)  # [B, n_c, H_s, L, N_s]
    TL = ("T_L", nc[1] * L[1])
    inner = dims_of(_find(st, i, "ssm.discretize"))[-1]
    mask = ((L[0], L[1]), (L[0], L[1]))
    keeps: list[Keep] | None = None
    if r == "ssm.scores":
        keeps = [Keep("D·x: x padded to T_L", None, (B, TL, inner), f32),
                 Keep("C (bmm operand)", None, cb, f32), Keep("B (bmm operand)", None, cb, f32)]
    elif r == "ssm.decay":
        keeps = [Keep("segment-sum mask", None, mask, "bool"),
                 Keep("segment-sum mask (diagonal)", None, mask, "bool"),
                 Keep("L = exp(segsum)", None, d, f32)]
    elif r == "ssm.mask":
        keeps = [Keep("G = C·Bᵀ", None, d, f32)]
    elif r == "ssm.diag":  # one chunk: x·Δ's bmm layout is a view of it; more: copies
        keeps = [Keep("x·Δ, padded", "xdt" if nc[1] == 1 else None, (B, TL, inner), f32),
                 Keep("M (bmm operand)", None, dims_of(_find(st, i, "ssm.mask")), f32)]
    elif r == "ssm.chunk_states":
        keeps = [Keep("decay states", None, (B, H, nc, L), f32),
                 Keep("B, padded", None, cb, f32), Keep("B ⊙ decay (bmm operand)", None, cb, f32),
                 Keep("x·Δ", "xdt" if nc[1] == 1 else None, (B, TL, inner), f32)]
    if r == "ssm.pass":
        n1 = dims_of(s, 0)[2]
        keeps = [Keep("segment-sum mask", None, (n1, n1), "bool"),
                 Keep("segment-sum mask (diagonal)", None, (n1, n1), "bool"),
                 Keep("chunk decay", None, dims_of(s, 0), f32),
                 Keep("states (bmm operand)", None, dims_of(s, 1), f32)]
        return Saves(keeps, Keep("", "new states", d, f32))
    if r == "ssm.off":
        passed = dims_of(_find(st, i, "ssm.pass"))  # [B, n_c+1, H_s, D_s, N_s]
        keeps = [Keep("e^{A_cum}", None, (B, H, nc, L), f32),
                 Keep("states (a view of the passed states)", "new states", passed, f32)
                 if nc[1] == 1 else Keep("states (bmm operand)", None,
                                         (passed[0], nc, *passed[2:]), f32),
                 Keep("C (bmm operand)", None, cb, f32), Keep("C·states", None, d, f32)]
    if r == "ssm.combine":  # y + D·x: T_L long, fp32
        return Saves([], Keep("", "y", (B, TL, inner), f32))
    if r == "ssm.norm":  # y ⊙ silu(z) in fp32, per group, × γ (fp32: the scan's dtype)
        gate = (Keep("z (a view of the in projection's output)", "ssm.in", d, act)
                if act == f32 else Keep("z in fp32", None, d, f32))
        width = _find(st, i, "ssm.conv").operands[1][0]  # I + 2·G·N_s
        groups = (d[0], d[1], ("G", (width - inner[1]) // (2 * cb[-1][1])), ("1", 1))
        keeps = [gate, Keep("y (a view of the scan's output)", "y", (B, TL, inner), f32),
                 Keep("silu(z)", None, d, f32), Keep("y ⊙ silu(z)", None, d, f32),
                 Keep("rsqrt", None, groups, f32), Keep("normalised", None, d, f32)]
        return Saves(keeps, Keep("", None, d, act))  # the out projection reads it (bf16: a cast)
    return Saves(keeps, None) if keeps is not None else None


# -- the executor's vector-Jacobian products (interpret/mamba2.py's operations) -------------------
def book(c: Ctx, role: str, spec: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """einsum(spec, a, b) over [R·B, …] rows, booked as one rank's dX FLOPs of the stage `role`
    (2 × its output × the contracted sizes, as the forward's einsum is counted)."""
    import numpy as np

    y = np.einsum(spec, a, b)
    ins, out = spec.split("->")
    size = {ch: n for part, arr in zip(ins.split(","), (a, b), strict=True)
            for ch, n in zip(part, arr.shape, strict=True)}
    k = int(np.prod([size[ch] for ch in set(ins.replace(",", "")) - set(out)]))
    c.dx[c.stage(role)] += 2 * y.size * k // c.p
    return y


def rank_grad(c: Ctx, key: tuple, g: np.ndarray) -> None:
    """A per-head parameter's gradient from [R·B, H/R] rows (mamba2.per_rank, reversed)."""
    full = c.grads.of(key)
    full += g.reshape(c.p, -1, g.shape[-1]).sum(axis=1).reshape(full.shape)


@rule("conv1d", inputs=1)
def conv1d(c: Ctx, dys: list[Any]) -> list[Any]:
    """y_t = Σ_k w_k·x_{t+k−K_c+1} (+ b), zero before the sequence: the input's gradient is the
    same correlation with the kernel reversed, the kernel's the windows × dY."""
    import numpy as np

    from .mamba2 import _conv_width, _rank_channels

    (x,) = c.s["ins"]
    layer, role, dy = c.e.layer, c.e.args[2], dys[0]
    K = int(c.m.conv_kernel or 0)
    R, B, T, C = x.shape
    idx = _rank_channels(c.ops, role, R)
    full = _conv_width(c.ops, role)
    w = c.w.get((layer, role, "w"), (full, K))[idx]  # [R, C, K]
    lead = max(0, K - T)  # the cache's padding of a short prompt (mamba2.conv1d)
    seq = np.concatenate([np.zeros((R, B, lead, C)), x], axis=2)
    span = np.pad(seq, ((0, 0), (0, 0), (K - 1, K - 1), (0, 0)))
    outs = seq.shape[2] + K - 1
    dout = np.zeros((R, B, outs, C))
    dout[:, :, seq.shape[2] - T: seq.shape[2]] = dy
    dspan = np.zeros_like(span)
    for k in range(K):  # out_o = Σ_k span_{o+k}·w_k
        dspan[:, :, k: k + outs] += dout * w[:, None, None, :, k]
    win = np.lib.stride_tricks.sliding_window_view(span, K, axis=2)  # [R,B,outs,C,K]
    dw = np.einsum("rbock,rboc->rck", win, dout)
    n = 2 * dout[0].size * K  # one rank's input gradient: the forward's size
    st = c.stage(role)
    c.dx[st] += n
    c.dw[st] += C * n  # FlopCounterMode's count of the depthwise weight gradient (module doc)
    G = c.grads.of((layer, role, "w"))
    c.grads.add((layer, role, "w"), dw[0], w[0].shape)
    np.add.at(G, idx, dw)
    if c.e.args[6]:  # the bias
        np.add.at(c.grads.of((layer, role, "b")), idx, dy.sum(axis=(1, 2)))
    return [dspan[:, :, K - 1 + lead: K - 1 + lead + T]]


def _silu_grad(g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    sg = 1 / (1 + np.exp(-g))
    return g * sg, sg * (1 + g * (1 - sg))


def _rms_grad(dn: np.ndarray, n: np.ndarray, h: np.ndarray) -> np.ndarray:
    import numpy as np

    from .mamba2 import EPS

    r = 1 / np.sqrt((h * h).mean(axis=-1, keepdims=True) + EPS)
    return r * (dn - n * (dn * n).mean(axis=-1, keepdims=True))


@rule("gated_norm", inputs=2)
def gated_norm(c: Ctx, dys: list[Any]) -> list[Any]:
    """Mamba-2's RMSNorm(y ⊙ silu(z)) per group × γ, or gated DeltaNet's RMSNorm(y) per value
    head × γ ⊙ silu(z) (interpret/mamba2.gated_norm)."""
    import numpy as np

    from .mamba2 import EPS

    y, gate = c.s["ins"]
    first, dout, m = c.e.args[6], dys[0], c.m
    key = (c.e.layer, c.e.args[2], "γ")
    R, shape = y.shape[0], y.shape
    size = m.ssm_inner // m.ssm_groups if first else (m.gdn_v_dim or 0)
    silu, dsilu = _silu_grad(gate)
    h = (y * silu if first else y).reshape(*shape[:-1], -1, size)
    n = h / np.sqrt((h * h).mean(axis=-1, keepdims=True) + EPS)
    if first:
        g = c.w.get(key, (m.ssm_inner,), base=1.0).reshape(R, 1, 1, -1)
        c.grads.of(key)[...] += (dout * n.reshape(shape)).sum(axis=(1, 2)).reshape(-1)
        dh = _rms_grad((dout * g).reshape(h.shape), n, h).reshape(shape)
        return [dh * silu, dh * y * dsilu]
    g = c.w.get(key, (size,), base=1.0)
    ng = (n * g).reshape(shape)
    dng = (dout * silu).reshape(h.shape)
    c.grads.of(key)[...] += (dng * n).sum(axis=(0, 1, 2, 3))
    return [_rms_grad(dng * g, n, h).reshape(shape), dout * ng * dsilu]


def segsum_grad(d: np.ndarray) -> np.ndarray:
    """[..., n, n] → [..., n]: the gradient through _segsum (s_ij = Σ_{j<k≤i} a_k, i ≥ j):
    a_k gathers d_ij over i ≥ k > j."""
    import numpy as np

    n = d.shape[-1]
    d = np.where(np.tril(np.ones((n, n), bool)), d, 0.0)
    left = np.cumsum(d, axis=-1) - d  # Σ_{j<k} d_ij, as [.., i, k]
    return np.where(np.tril(np.ones((n, n), bool)), left, 0.0).sum(axis=-2)


@rule("ssd", inputs=4)
def ssd(c: Ctx, dys: list[Any]) -> list[Any]:
    """The chunked scan's reverse, einsum by einsum as autograd runs it over torch_forward
    (mamba2.chunked), each product's two gradients booked to its stage; then Δ = softplus(dt +
    b_dt), A = −e^{A_log}, the groups' B and C, and D·x."""
    import numpy as np

    from .mamba2 import _segsum, per_rank

    x, dt, b, cc = c.s["ins"]
    m, layer = c.m, c.e.layer
    P, N, L = m.ssm_head_dim or 0, m.ssm_state or 0, int(m.scan_chunk or 0)
    R, Bsz, T = x.shape[:3]
    H, Gr, RB, full = x.shape[-1] // P, b.shape[-1] // N, R * Bsz, m.ssm_heads or 0
    bias = per_rank(c.w.get((layer, "ssm.dt", "b"), (full,)), R, Bsz)
    A_log = per_rank(c.w.get((layer, "ssm.A"), (full,)), R, Bsz)
    D = per_rank(c.w.get((layer, "ssm.D"), (full,), base=1.0), R, Bsz)
    u = dt.reshape(RB, T, H) + bias
    delta = np.logaddexp(0, u)
    A = -np.exp(A_log)
    xs = x.reshape(RB, T, H, P)
    rep = H // Gr
    Bm = np.repeat(b.reshape(RB, T, Gr, N), rep, axis=2)
    Cm = np.repeat(cc.reshape(RB, T, Gr, N), rep, axis=2)
    pad = (L - T % L) % L

    def chunks(t: np.ndarray) -> np.ndarray:
        t = np.pad(t, ((0, 0), (0, pad)) + ((0, 0),) * (t.ndim - 2))
        return t.reshape(RB, -1, L, *t.shape[2:])

    # the forward again (what autograd saved)
    xd, Bc, Cc = chunks(xs * delta[..., None]), chunks(Bm), chunks(Cm)
    Ac = chunks(A * delta).transpose(0, 3, 1, 2)  # [RB,H,c,L]
    A_cum = np.cumsum(Ac, axis=-1)
    Lm = np.exp(_segsum(Ac))
    Lt = Lm.transpose(0, 2, 3, 4, 1)
    G = np.einsum("bclhn,bcshn->bclsh", Cc, Bc)
    M = G * Lt
    ds = np.exp(A_cum[..., -1:] - A_cum)  # decay_states [RB,H,c,L]
    dst = ds.transpose(0, 2, 3, 1)[..., None]
    B_decay = Bc * dst
    chunk_st = np.einsum("bclhn,bclhp->bchpn", B_decay, xd)
    states = np.concatenate([np.zeros_like(chunk_st[:, :1]), chunk_st], axis=1)
    Apad = np.pad(A_cum[..., -1], ((0, 0), (0, 0), (1, 0)))
    dc = np.exp(_segsum(Apad))  # decay_chunk [RB,H,c+1,c+1]
    dct = dc.transpose(0, 3, 2, 1)
    new = np.einsum("bzch,bzhpn->bchpn", dct, states)
    prev = new[:, :-1]
    C_st = np.einsum("bclhn,bchpn->bclhp", Cc, prev)
    E = np.exp(A_cum).transpose(0, 2, 3, 1)[..., None]
    # the backward
    dy = np.pad(dys[0].reshape(RB, T, H, P), ((0, 0), (0, pad), (0, 0), (0, 0)))
    dD = (dy[:, :T] * xs).sum(axis=(1, 3))
    dxs = dy[:, :T] * D[..., None]
    dY = dy.reshape(RB, -1, L, H, P)
    dC_st = dY * E
    dA_cum = (dY * C_st).sum(axis=-1).transpose(0, 3, 1, 2) * np.exp(A_cum)
    dCc = book(c, "ssm.off", "bclhp,bchpn->bclhn", dC_st, prev)
    dprev = book(c, "ssm.off", "bclhn,bclhp->bchpn", Cc, dC_st)
    dnew = np.concatenate([dprev, np.zeros_like(dprev[:, :1])], axis=1)  # the final: unread
    ddct = book(c, "ssm.pass", "bchpn,bzhpn->bzch", dnew, states)
    dstates = book(c, "ssm.pass", "bzch,bchpn->bzhpn", dct, dnew)
    dApad = segsum_grad(ddct.transpose(0, 3, 2, 1) * dc)
    dA_cum[..., -1] += dApad[..., 1:]
    dchunk = dstates[:, 1:]
    dB_decay = book(c, "ssm.chunk_states", "bchpn,bclhp->bclhn", dchunk, xd)
    dxd = book(c, "ssm.chunk_states", "bclhn,bchpn->bclhp", B_decay, dchunk)
    dBc = dB_decay * dst
    dds = (dB_decay * Bc).sum(axis=-1).transpose(0, 3, 1, 2) * ds
    dA_cum[..., -1] += dds.sum(axis=-1)
    dA_cum -= dds
    dM = book(c, "ssm.diag", "bclhp,bcshp->bclsh", dY, xd)
    dxd += book(c, "ssm.diag", "bclsh,bclhp->bcshp", M, dY)
    dG = dM * Lt
    dAc = segsum_grad((dM * G).transpose(0, 4, 1, 2, 3) * Lm)
    dCc += book(c, "ssm.scores", "bclsh,bcshn->bclhn", dG, Bc)
    dBc += book(c, "ssm.scores", "bclsh,bclhn->bcshn", dG, Cc)
    dAc += np.cumsum(dA_cum[..., ::-1], axis=-1)[..., ::-1]

    def unchunk(t: np.ndarray) -> np.ndarray:
        return t.reshape(RB, -1, *t.shape[3:])[:, :T]

    dAd = unchunk(dAc.transpose(0, 2, 3, 1))  # [RB,T,H]
    dxd_t = unchunk(dxd)
    dxs += dxd_t * delta[..., None]
    ddelta = (dxd_t * xs).sum(axis=-1) + dAd * A
    dA = (dAd * delta).sum(axis=1)
    du = ddelta / (1 + np.exp(-u))
    rank_grad(c, (layer, "ssm.dt", "b"), du.sum(axis=1))
    rank_grad(c, (layer, "ssm.A"), dA * A[:, 0])
    rank_grad(c, (layer, "ssm.D"), dD)

    def groups(t: np.ndarray) -> np.ndarray:
        return unchunk(t).reshape(RB, T, Gr, rep, N).sum(axis=3).reshape(R, Bsz, T, Gr * N)

    return [dxs.reshape(x.shape), du.reshape(dt.shape), groups(dBc), groups(dCc)]
