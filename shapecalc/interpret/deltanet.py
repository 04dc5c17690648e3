"""The NumPy interpreter's gated DeltaNet rule (model/gated_deltanet.py; its convolution and
gated norm are mamba2.py's). NumericOps takes it as a method.

Prefill runs the chunked form (transformers 5.24's torch_chunk_gated_delta_rule: chunks of L,
the unit-triangular system T = I + tril(k_β·kᵀ ⊙ decay, −1) solved for u and w, then the chunks
in order against the state) and, beside it in float64, the plain recurrence (one token at a
time); the stage carries how far they differ (verify checks it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..model.conventions import pick, recurrent_dtype
from ..model.expr import Dim
from . import fused
from .mamba2 import per_rank
from .storage import measure
from .symbolic_deltanet import GDN_EW

if TYPE_CHECKING:
    from .numeric_base import NumericBase

ROLES = ("gdn.decay", "gdn.ut", "gdn.scores", "gdn.solve", "gdn.v_new", "gdn.inter",
         "gdn.intra", "gdn.state")


def _l2(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x * x).sum(axis=-1, keepdims=True) + 1e-6)


def _pairwise_decay(G: np.ndarray) -> np.ndarray:
    """[..., L] cumulative log-decays → [..., L, L]: e^{G_i − G_j} on and below the diagonal,
    0 above (transformers masks to −∞ before the exp)."""
    L = G.shape[-1]
    return np.exp(np.where(np.triu(np.ones((L, L), bool), 1), -np.inf,
                           G[..., :, None] - G[..., None, :]))


def chunked(q: np.ndarray, k: np.ndarray, v: np.ndarray, beta: np.ndarray, g: np.ndarray,
            L: int) -> tuple[np.ndarray, np.ndarray, dict[str, tuple[np.ndarray, int, int]]]:
    """q, k [B,H,T,D_qk] (normed, q scaled), v [B,H,T,D_hv], β and g [B,H,T], from a zero
    state: (o [B,H,T,D_hv], final state [B,H,D_qk,D_hv], each step's (output, FLOPs, ew))."""
    B, H, T, Dk = k.shape
    Dv = v.shape[-1]
    pad = (L - T % L) % L

    def chunks(x: np.ndarray) -> np.ndarray:
        x = np.pad(x, ((0, 0), (0, 0), (0, pad)) + ((0, 0),) * (x.ndim - 3))
        return x.reshape(B, H, -1, L, *x.shape[3:])

    v_beta, k_beta = v * beta[..., None], k * beta[..., None]
    q, k, k_beta, v_beta, g = (chunks(x) for x in (q, k, k_beta, v_beta, g))
    nc = g.shape[2]
    G = np.cumsum(g, axis=-1)
    decay = _pairwise_decay(G)
    ut = (k_beta @ k.swapaxes(-1, -2)) * decay
    intra = (q @ k.swapaxes(-1, -2)) * decay
    decayed = k_beta * np.exp(G)[..., None]
    Tm = np.tril(ut, -1) + np.eye(L)  # unitriangular: the diagonal is taken as 1
    u, w = np.linalg.solve(Tm, v_beta), np.linalg.solve(Tm, decayed)
    q = q * np.exp(G)[..., None]
    k = k * np.exp(G[..., -1:] - G)[..., None]
    S = np.zeros((B, H, Dk, Dv))
    v_new, inter, out = (np.empty((B, H, nc, L, Dv)) for _ in range(3))
    states = np.empty((B, H, nc, Dk, Dv))
    for i in range(nc):
        v_new[:, :, i] = u[:, :, i] - w[:, :, i] @ S
        inter[:, :, i] = q[:, :, i] @ S
        out[:, :, i] = inter[:, :, i] + intra[:, :, i] @ v_new[:, :, i]
        S = S * np.exp(G[:, :, i, -1])[..., None, None] + k[:, :, i].swapaxes(-1, -2) @ v_new[
            :, :, i]
        states[:, :, i] = S
    n = B * H * nc * L  # (token, head) rows of the padded chunks
    parts = {
        "gdn.decay": (decay, 0, GDN_EW["decay"] * decay.size),
        "gdn.ut": (ut, 2 * ut.size * Dk, ut.size + n * (Dk + Dv)),
        "gdn.scores": (intra, 2 * intra.size * Dk, intra.size),
        "gdn.solve": (u, 0, n * Dk),
        "gdn.v_new": (v_new, 2 * v_new.size * Dk, v_new.size),
        "gdn.inter": (inter, 2 * inter.size * Dk, 0),
        "gdn.intra": (out, 2 * out.size * L, out.size),
        "gdn.state": (states, 2 * states.size * L, 2 * states.size),
    }
    return out.reshape(B, H, -1, Dv)[:, :, :T], S, parts


def recurrent(q: np.ndarray, k: np.ndarray, v: np.ndarray, beta: np.ndarray, g: np.ndarray,
              S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The plain recurrence, one token at a time, from state S [B,H,D_qk,D_hv]."""
    outs = []
    for t in range(q.shape[2]):
        S = S * np.exp(g[:, :, t])[..., None, None]
        kt = k[:, :, t]
        delta = (v[:, :, t] - (S * kt[..., None]).sum(-2)) * beta[:, :, t, None]
        S = S + kt[..., None] * delta[..., None, :]
        outs.append((S * q[:, :, t, :, None]).sum(-2))
    return np.stack(outs, axis=2), S


def delta_rule(self: NumericBase, q: np.ndarray, k: np.ndarray, v: np.ndarray, b: np.ndarray,
               a: np.ndarray, layer: int) -> np.ndarray:
    m = self.m
    Dk, Dv = m.gdn_qk_dim or 0, m.gdn_v_dim or 0
    f = np.float64 if self.dt == np.float64 else np.float32  # transformers' rule: fp32
    R, B, T = q.shape[:3]  # the ranks run as one batch of R·B rows: each its own heads
    RB, H, Hk = R * B, v.shape[-1] // Dv, q.shape[-1] // Dk  # one rank's value, q/k heads
    full = m.gdn_v_heads or 0
    A_log = per_rank(self.w.get((layer, "gdn.A"), (full,)), R, B)
    dt_bias = per_rank(self.w.get((layer, "gdn.dt", "b"), (full,), base=1.0), R, B)

    def rec(role: str, name: str, op: str, x: np.ndarray, **kw: Any) -> None:
        """A stage of [R·B, …] arrays, recorded per rank ([R, B, …]; FLOPs and ew of one)."""
        for key in ("flops", "ew"):
            kw[key] = kw.get(key, 0) // R
        self._rec(role, name, op, x.reshape(R, B, *x.shape[1:]).astype(f), dtype="fp32", **kw)

    bb: np.ndarray = b.reshape(RB, T, H).astype(f)
    beta = 1 / (1 + np.exp(-bb)) * (2 if m.gdn_neg_eigval else 1)  # OLMo-Hybrid: β ∈ (0, 2)
    g = -np.exp(A_log.astype(f)) * np.logaddexp(0, a.reshape(RB, T, H).astype(f) + dt_bias)
    rec("gdn.gates", "β = σ(b), g = −e^{A_log}·softplus(a + b_dt)", "sigmoid", g,
        ew=(GDN_EW["gates"] + int(m.gdn_neg_eigval)) * g.size, params=2 * H)

    def heads(x: np.ndarray, n: int, d: int) -> np.ndarray:  # [R,B,T,n·d] → [R·B,H,T,d]
        # each q/k head serves H_v/H_qk value heads (transformers' repeat_interleave)
        return np.repeat(x.reshape(RB, T, n, d), H // n, axis=2).transpose(0, 2, 1, 3)

    qh = _l2(heads(q.astype(f), Hk, Dk)) * f(Dk**-0.5)
    kh = _l2(heads(k.astype(f), Hk, Dk))
    vh = heads(v.astype(f), H, Dv)
    rec("gdn.qk_norm", "q, k: L2 norm (q × 1/√D_qk)", "l2norm", qh,
        ew=GDN_EW["qk_norm"] * 2 * qh.size)
    bh, gh = beta.transpose(0, 2, 1), g.transpose(0, 2, 1)  # [R·B,H,T]
    key = (layer, "delta")
    if self.decoding:
        S = self.cache.states[key] * np.exp(gh[:, :, 0])[..., None, None]
        kt = kh[:, :, 0]
        delta = (vh[:, :, 0] - (S * kt[..., None]).sum(-2)) * bh[:, :, 0, None]
        S = S + kt[..., None] * delta[..., None, :]
        fd = 2 * S.size  # fused: fla's recurrent kernel contracts S with k, then with q
        rec("gdn.update", "S = S·e^g + k·((v − Sᵀk)·β)ᵀ", "mul", S, ew=GDN_EW["update"] * S.size,
            flops=pick(self.wl, 0, fd))
        o = (S * qh[:, :, 0, :, None]).sum(-2)
        rec("gdn.readout", "o = Sᵀ·q", "mul", o, ew=GDN_EW["readout"] * S.size,
            flops=pick(self.wl, 0, fd))
        o = o[:, :, None]
    else:
        L = int(m.scan_chunk or 0)
        o, S, parts = chunked(qh, kh, vh, bh, gh, L)
        nc = parts["gdn.state"][0].shape[2]
        c = (B, H, nc, L)
        operands = {"gdn.ut": ((*c, Dk), (B, H, nc, Dk, L)),
                    "gdn.scores": ((*c, Dk), (B, H, nc, Dk, L)),
                    "gdn.v_new": ((*c, Dk), (B, H, nc, Dk, Dv)),
                    "gdn.inter": ((*c, Dk), (B, H, nc, Dk, Dv)),
                    "gdn.intra": ((*c, L), (*c, Dv)),
                    "gdn.state": ((B, H, nc, Dk, L), (*c, Dv))}
        names = {"gdn.decay": ("pairwise decay e^{G_i − G_j}", "exp"),
                 "gdn.ut": ("k_β·kᵀ ⊙ decay (each chunk)", "matmul"),
                 "gdn.scores": ("q·kᵀ ⊙ decay (each chunk)", "matmul"),
                 "gdn.solve": ("u = T⁻¹·v_β, w = T⁻¹·(k_β·e^G)", "solve"),
                 "gdn.v_new": ("v_new = u − w·S (each chunk)", "matmul"),
                 "gdn.inter": ("q·S (each chunk)", "matmul"),
                 "gdn.intra": ("o = q·S + A·v_new (each chunk)", "matmul"),
                 "gdn.state": ("S = S·e^{g_L} + kᵀ·v_new (each chunk)", "matmul")}
        ds = [Dim.const(n) for n in (RB, T, H, Dk, Dv)]  # the kernels' counts, these sizes
        fz = fused.deltanet_prefill(ds[0], ds[1], L, ds[2], ds[3], ds[4], False)
        for role in ROLES:
            arr, fl, ew = parts[role]
            fl = pick(self.wl, fl, fz[role][0] if role in fz else 0)
            rec(role, *names[role], arr, flops=fl, ew=ew, operands=operands.get(role, ()))
        a64 = [x.astype(np.float64) for x in (qh, kh, vh, bh, gh)]
        o64, S64, _ = chunked(a64[0], a64[1], a64[2], a64[3], a64[4], L)
        orr, Sr = recurrent(a64[0], a64[1], a64[2], a64[3], a64[4], np.zeros((RB, H, Dk, Dv)))
        err = max(float(np.abs(o64 - orr).max() / max(np.abs(orr).max(), 1e-300)),
                  float(np.abs(S64 - Sr).max() / max(np.abs(Sr).max(), 1e-300)))
        self.stages[-1].extra["scan_recurrence_rel_err"] = err
    self.cache.states[key] = S.astype(f)
    y = o.transpose(0, 2, 1, 3).reshape(R, B, T, H * Dv).astype(self.dt)
    self._rec("gdn.out", "o: merge heads", "reshape", y)
    held, sdt = S.reshape(R, B, H, Dk, Dv).astype(f), recurrent_dtype(self.wl)
    self._rec("state.delta", "recurrent state", "state_cache", held,
              nbytes=measure(held[0], sdt), dtype=sdt)
    return y
