"""The NumPy interpreter's Kimi Delta Attention rule (model/kda.py; its convolution is
mamba2.py's). NumericOps takes it as a method.

Prefill runs the chunked form as transformers 5.24's chunk_kimi_delta_attention does: chunks of
L, the per-channel pairwise decay, A = −tril(Σ_d k_β·k·decay, −1) turned into (I + A)⁻¹-like
weights by the same row-by-row forward substitution, then the chunks in order against the
state; beside it, in float64, the plain recurrence (one token at a time). The stage carries how
far they differ (verify checks it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .deltanet import _l2
from .mamba2 import per_rank
from .symbolic_kda import _GATE, KDA_EW

if TYPE_CHECKING:
    from .numeric_base import NumericBase

NAMES = {"kda.decay": ("pairwise decay e^{G_i − G_j} per channel", "exp"),
         "kda.ut": ("A = −Σ_d k_β·k·decay (each chunk)", "mul"),
         "kda.solve": ("(I + A)⁻¹ by forward substitution", "solve"),
         "kda.u": ("u = A·v_β (each chunk)", "matmul"),
         "kda.w": ("w = A·(k_β·e^G) (each chunk)", "matmul"),
         "kda.scores": ("A_qk = Σ_d q·k·decay (each chunk)", "mul"),
         "kda.inter": ("(q·e^G)·S (each chunk)", "matmul"),
         "kda.v_new": ("v_new = u − w·S (each chunk)", "matmul"),
         "kda.intra": ("o = (q·e^G)·S + A_qk·v_new (each chunk)", "matmul"),
         "kda.state": ("S = diag(e^{G_L})·S + (k·e^{G_L−G})ᵀ·v_new (each chunk)", "matmul")}


def _pairwise_decay(G: np.ndarray) -> np.ndarray:
    """[..., L, D] cumulative log-decays → [..., L, L, D]: e^{G_i − G_j} per channel on and
    below the diagonal, 0 above (transformers masks to −∞ before the exp)."""
    L = G.shape[-2]
    upper = np.triu(np.ones((L, L), bool), 1)[..., None]
    return np.exp(np.where(upper, -np.inf, G[..., :, None, :] - G[..., None, :, :]))


def chunked(q: np.ndarray, k: np.ndarray, v: np.ndarray, beta: np.ndarray, g: np.ndarray,
            L: int) -> tuple[np.ndarray, np.ndarray, dict[str, tuple[np.ndarray, int, int]]]:
    """q, k, v [B,H,T,D] (q, k normed, q scaled), β [B,H,T], g [B,H,T,D], from a zero state:
    (o [B,H,T,D], final state [B,H,D,D], each step's (output, FLOPs, ew))."""
    B, H, T, D = k.shape
    pad = (L - T % L) % L

    def chunks(x: np.ndarray) -> np.ndarray:
        x = np.pad(x, ((0, 0), (0, 0), (0, pad)) + ((0, 0),) * (x.ndim - 3))
        return x.reshape(B, H, -1, L, *x.shape[3:])

    k_beta, v_beta = k * beta[..., None], v * beta[..., None]
    q, k, v_beta, k_beta, g = (chunks(x) for x in (q, k, v_beta, k_beta, g))
    nc = g.shape[2]
    G = np.cumsum(g, axis=-2)  # [B,H,n_c,L,D]
    upper = np.triu(np.ones((L, L), bool), 1)
    decay = _pairwise_decay(G)
    A = np.where(np.triu(np.ones((L, L), bool)), 0.0,
                 -(k_beta[..., :, None, :] * k[..., None, :, :] * decay).sum(-1))
    ut = A.copy()
    for i in range(1, L):  # transformers' loop: row i from the rows above it
        row, sub = A[..., i, :i].copy(), A[..., :i, :i].copy()
        A[..., i, :i] = row + (row[..., None] * sub).sum(-2)
    A = A + np.eye(L)
    u = A @ v_beta
    w = A @ (k_beta * np.exp(G))
    Aqk = np.where(upper, 0.0, (q[..., :, None, :] * k[..., None, :, :] * decay).sum(-1))
    S = np.zeros((B, H, D, v.shape[-1]))
    inter, v_new, out = (np.empty((B, H, nc, L, v.shape[-1])) for _ in range(3))
    states = np.empty((B, H, nc, D, v.shape[-1]))
    for i in range(nc):
        Gi = G[:, :, i]
        inter[:, :, i] = (q[:, :, i] * np.exp(Gi)) @ S
        v_new[:, :, i] = u[:, :, i] - w[:, :, i] @ S
        out[:, :, i] = inter[:, :, i] + Aqk[:, :, i] @ v_new[:, :, i]
        S = S * np.exp(Gi[:, :, -1])[..., None] + (
            k[:, :, i] * np.exp(Gi[:, :, -1:] - Gi)).swapaxes(-1, -2) @ v_new[:, :, i]
        states[:, :, i] = S
    n = B * H * nc * L  # (token, head) rows of the padded chunks
    mm = 2 * n * D  # one [L, ·]·[·, D] or [·, D]·[D, D] matmul per row: × L or × D
    parts = {
        "kda.decay": (decay, 0, KDA_EW["decay"] * decay.size),
        "kda.ut": (ut, 0, KDA_EW["pair"] * ut.size * D + 2 * n * D),
        "kda.solve": (A, 0, 2 * A.size * L),
        "kda.u": (u, mm * L, 0),
        "kda.w": (w, mm * L, 2 * n * D),
        "kda.scores": (Aqk, 0, KDA_EW["pair"] * Aqk.size * D),
        "kda.inter": (inter, mm * D, 2 * n * D),
        "kda.v_new": (v_new, mm * D, v_new.size),
        "kda.intra": (out, mm * L, out.size),
        "kda.state": (states, mm * D, 2 * states.size + 3 * n * D),
    }
    return out.reshape(B, H, -1, v.shape[-1])[:, :, :T], S, parts


def recurrent(q: np.ndarray, k: np.ndarray, v: np.ndarray, beta: np.ndarray, g: np.ndarray,
              S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The plain recurrence, one token at a time, from state S [B,H,D,D]."""
    outs = []
    for t in range(q.shape[2]):
        S = S * np.exp(g[:, :, t])[..., None]
        kt = k[:, :, t]
        delta = (v[:, :, t] - (S * kt[..., None]).sum(-2)) * beta[:, :, t, None]
        S = S + kt[..., None] * delta[..., None, :]
        outs.append((S * q[:, :, t, :, None]).sum(-2))
    return np.stack(outs, axis=2), S


def kda(self: NumericBase, q: np.ndarray, k: np.ndarray, v: np.ndarray, f: np.ndarray,
        b: np.ndarray, layer: int) -> np.ndarray:
    m = self.m
    D = m.gdn_qk_dim or 0
    fl = np.float64 if self.dt == np.float64 else np.float32  # transformers' rule: fp32
    R, B, T = q.shape[:3]  # the ranks run as one batch of R·B rows: each its own heads
    RB, H = R * B, q.shape[-1] // D  # one rank's heads
    full = m.gdn_v_heads or 0
    A_log = np.repeat(per_rank(self.w.get((layer, "kda.A"), (full,)), R, B), D, axis=-1)
    dt_bias = per_rank(self.w.get((layer, "kda.dt", "b"), (full * D,), base=1.0), R, B)

    def rec(role: str, name: str, op: str, x: np.ndarray, **kw: Any) -> None:
        """A stage of [R·B, …] arrays, recorded per rank ([R, B, …]; FLOPs and ew of one)."""
        for key in ("flops", "ew"):
            kw[key] = kw.get(key, 0) // R
        self._rec(role, name, op, x.reshape(R, B, *x.shape[1:]).astype(fl), dtype="fp32", **kw)

    bb: np.ndarray = b.reshape(RB, T, H).astype(fl)
    beta = 1 / (1 + np.exp(-bb))
    x = f.reshape(RB, T, H * D).astype(fl) + dt_bias
    bound = m.kda_gate_bound
    if bound is None:  # Kimi-Linear: −e^{A_log}·softplus
        g = -np.exp(A_log.astype(fl)) * np.logaddexp(0, x)
    else:  # Ling 3.0's safe gate: log-decays in (bound, 0)
        g = fl(bound) / (1 + np.exp(-np.exp(A_log.astype(fl)) * x))
    g = g.reshape(RB, T, H, D)
    rec("kda.gates", _GATE[bound is not None], "softplus" if bound is None else "sigmoid", g,
        ew=KDA_EW["gate" if bound is None else "bounded"] * g.size + KDA_EW["beta"] * beta.size,
        params=H * D + H)

    def heads(x: np.ndarray) -> np.ndarray:  # [R,B,T,H·D] → [R·B,H,T,D]
        return x.reshape(RB, T, H, D).transpose(0, 2, 1, 3)

    qh = _l2(heads(q.astype(fl))) * fl(D**-0.5)
    kh, vh = _l2(heads(k.astype(fl))), heads(v.astype(fl))
    rec("kda.qk_norm", "q, k: L2 norm (q × 1/√D_k)", "l2norm", qh,
        ew=KDA_EW["qk_norm"] * 2 * qh.size)
    bh, gh = beta.transpose(0, 2, 1), g.transpose(0, 2, 1, 3)  # [R·B,H,T], [R·B,H,T,D]
    key = (layer, "delta")
    if self.decoding:
        S = self.cache.states[key] * np.exp(gh[:, :, 0])[..., None]
        kt = kh[:, :, 0]
        delta = (vh[:, :, 0] - (S * kt[..., None]).sum(-2)) * bh[:, :, 0, None]
        S = S + kt[..., None] * delta[..., None, :]
        rec("kda.update", "S = diag(e^g)·S + k·((v − Sᵀk)·β)ᵀ", "mul", S,
            ew=KDA_EW["update"] * S.size)
        o = (S * qh[:, :, 0, :, None]).sum(-2)
        rec("kda.readout", "o = Sᵀ·q", "mul", o, ew=KDA_EW["readout"] * S.size)
        o = o[:, :, None]
    else:
        L = int(m.scan_chunk or 0)
        o, S, parts = chunked(qh, kh, vh, bh, gh, L)
        nc = parts["kda.state"][0].shape[2]
        c = (B, H, nc, L)
        operands = {"kda.u": ((*c, L), (*c, D)), "kda.w": ((*c, L), (*c, D)),
                    "kda.inter": ((*c, D), (B, H, nc, D, D)),
                    "kda.v_new": ((*c, D), (B, H, nc, D, D)),
                    "kda.intra": ((*c, L), (*c, D)), "kda.state": ((B, H, nc, D, L), (*c, D))}
        for role, (name, op) in NAMES.items():
            arr, fc, ew = parts[role]
            rec(role, name, op, arr, flops=fc, ew=ew, operands=operands.get(role, ()))
        a64 = [x.astype(np.float64) for x in (qh, kh, vh, bh, gh)]
        o64, S64, _ = chunked(a64[0], a64[1], a64[2], a64[3], a64[4], L)
        orr, Sr = recurrent(a64[0], a64[1], a64[2], a64[3], a64[4], np.zeros((RB, H, D, D)))
        err = max(float(np.abs(o64 - orr).max() / max(np.abs(orr).max(), 1e-300)),
                  float(np.abs(S64 - Sr).max() / max(np.abs(Sr).max(), 1e-300)))
        self.stages[-1].extra["scan_recurrence_rel_err"] = err
    self.cache.states[key] = S.astype(fl)
    y = o.transpose(0, 2, 1, 3).reshape(R, B, T, H * D).astype(self.dt)
    self._rec("kda.o", "o: merge heads", "reshape", y)
    held = S.reshape(R, B, H, D, D).astype(fl)
    self._rec("state.delta", "recurrent state", "state_cache", held, nbytes=held[0].size * 4,
              dtype="fp32")
    return y
