"""The NumPy interpreter's Mamba-2 operations (model/mamba2.py): the causal convolution with its
conv state, the scan, the gated RMSNorm. NumericOps takes these as its methods.

The scan runs the chunked form (transformers 5.24's torch_forward: pad T to whole chunks of L,
the intra-chunk "attention" G = C·Bᵀ ⊙ L, chunk states, their pass between chunks, the
off-diagonal C·states) and, beside it in float64, the plain recurrence S_t = e^{Δ_t·A}·S_{t−1}
+ Δ_t·x_t·B_tᵀ, y_t = S_t·C_t + D·x_t: the stage carries how far the two differ (verify checks
it), which proves the chunked algebra."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..model.conventions import conv_columns, pick, recurrent_dtype
from ..model.expr import Dim
from . import fused
from .short_conv import ONE_FORM, one_form_err
from .storage import measure
from .symbolic_mamba2 import SSM_EW

if TYPE_CHECKING:
    from .numeric_base import NumericBase

EPS = 1e-5  # NemotronH's layer_norm_epsilon (the gated norm's)


def _pads(self: NumericBase) -> np.ndarray | None:
    """[1,B,T,1] zero at left-padding tokens (transformers zeroes their states), or None."""
    return None if self.valid.all() else self.valid[None, :, :, None]


def conv1d(self: NumericBase, x: np.ndarray, layer: int, role: str, name: str, channels: Any,
           kernel: Any, bias: bool) -> np.ndarray:
    K = int(self.m.conv_kernel or 0)
    R, B, T, C = x.shape
    idx = _rank_channels(self, role, R)  # [R, C]: each rank's channels of the full conv
    w = self.w.get((layer, role, "w"), (_conv_width(self, role), K))[idx]  # [R, C, K]
    params = w[0].size
    pads = _pads(self)
    if pads is not None and not self.decoding:
        x = x * pads
    key = (layer, "conv")
    if self.decoding:  # the window of K_c past inputs, then the new one: 2 outputs, the last kept
        seq = np.concatenate([self.cache.states[key], x], axis=2)
        span = seq
    else:
        seq, span = _prefill_span(x, K)
    win = np.lib.stride_tricks.sliding_window_view(span, K, axis=2)  # [R,B,outs,C,K]
    out = np.einsum("rbock,rck->rboc", win, w)
    flops = pick(self.wl, 2 * out[0].size * K,  # fused: causal_conv1d's one output a token
                 2 * B * C * K * T)
    y = out[:, :, : seq.shape[2] if not self.decoding else None][:, :, -T:]
    steps_err = None if self.decoding or role not in ONE_FORM else one_form_err(
        y, seq[:, :, -K:], x, w)
    ew = 0
    if bias:
        b = self.w.get((layer, role, "b"), (_conv_width(self, role),))[idx][:, None, None]
        y = y + b
        params, ew = params + b[0].size, y[0].size
    if pads is not None and not self.decoding:
        y = y * pads
    y = np.ascontiguousarray(y, dtype=self.dt)
    self.cache.states[key] = seq[:, :, -K:].copy()
    self._rec(role, name, "conv1d", y, flops=flops, ew=ew, params=params,
              operands=((B, C, win.shape[2]), (C, K)))
    if steps_err is not None:
        self.stages[-1].extra["conv_steps_rel_err"] = steps_err
    cols = conv_columns(self.wl, K)  # vLLM keeps K_c − 1 of the K_c inputs
    held = self.cache.states[key][:, :, K - cols:].transpose(0, 1, 3, 2)  # [R,B,C,K], as kept
    self._rec("state.conv", "conv state", "state_cache", held,
              nbytes=measure(held[0], self.wl.act))
    return y


def _prefill_span(x: np.ndarray, K: int) -> tuple[np.ndarray, np.ndarray]:
    """(seq, span) of a prefill's x [R,B,T,C]: the cache pads a short prompt to K_c (seq, whose
    last K_c the cache keeps); the convolution pads K_c − 1 on each side (span)."""
    R, B, T, C = x.shape
    seq = np.concatenate([np.zeros((R, B, max(0, K - T), C), x.dtype), x], axis=2)
    span = np.concatenate([np.zeros((R, B, K - 1, C), x.dtype), seq,
                           np.zeros((R, B, K - 1, C), x.dtype)], axis=2)
    return seq, span


def _conv_parts(self: NumericBase, role: str) -> list[int]:
    """The conv's channels by part: Mamba-2's x, B, C; gated DeltaNet's q, k, v; the short
    conv's D; Mamba-1's x."""
    m = self.m
    if role == "conv.conv":
        return [m.d_model]
    if role == "mamba.conv":  # Mamba-1: the D_i channels of x
        return [m.mamba_inner]
    if role == "ssm.conv":
        gn = m.ssm_groups * (m.ssm_state or 0)
        return [m.ssm_inner, gn, gn]
    kd = (m.gdn_qk_heads or 0) * (m.gdn_qk_dim or 0)
    return [kd, kd, (m.gdn_v_heads or 0) * (m.gdn_v_dim or 0)]


def _conv_width(self: NumericBase, role: str) -> int:
    return sum(_conv_parts(self, role))


def _rank_channels(self: NumericBase, role: str, R: int) -> np.ndarray:
    """[R, C/R]: rank r's channels, its heads of each part (vLLM's split)."""
    parts = _conv_parts(self, role)
    offs = np.cumsum([0, *parts[:-1]])
    return np.stack([np.concatenate([o + r * (n // R) + np.arange(n // R)
                                     for o, n in zip(offs, parts, strict=True)])
                     for r in range(R)])


def per_rank(a: np.ndarray, R: int, B: int) -> np.ndarray:
    """A per-head parameter [H] → [R·B, 1, H/R]: each rank's heads, for each of its B rows
    (the ranks run as a batch of R·B sequences, rank-major)."""
    return np.repeat(a.reshape(R, -1), B, axis=0)[:, None, :]


def _segsum(a: np.ndarray) -> np.ndarray:
    """[..., n] → [..., n, n]: Σ_{j<k≤i} a_k on and below the diagonal, −∞ above (as
    transformers' segment_sum: a cumulative sum of masked copies, no differences)."""
    n = a.shape[-1]
    x = np.where(np.tril(np.ones((n, n), bool), -1), np.repeat(a[..., None], n, axis=-1), 0.0)
    return np.where(np.tril(np.ones((n, n), bool)), np.cumsum(x, axis=-2), -np.inf)


def chunked(x: np.ndarray, dt: np.ndarray, A: np.ndarray, Bm: np.ndarray, Cm: np.ndarray,
            D: np.ndarray, L: int) -> tuple[np.ndarray, np.ndarray, list[tuple[str, Any, int]]]:
    """The chunked scan of x [B,T,H,P] (Δ [B,T,H], B and C [B,T,H,N]; A and D [B,1,H]) from a
    zero state: (y [B,T,H,P], final state [B,H,P,N], each einsum's (role, output, FLOPs))."""
    Bsz, T, H, P = x.shape
    pad = (L - T % L) % L
    D_res = D[..., None] * np.pad(x, ((0, 0), (0, pad), (0, 0), (0, 0)))
    x = x * dt[..., None]
    A = A * dt

    def chunks(t: np.ndarray) -> np.ndarray:
        t = np.pad(t, ((0, 0), (0, pad)) + ((0, 0),) * (t.ndim - 2))
        return t.reshape(Bsz, -1, L, *t.shape[2:])

    x, A, Bm, Cm = chunks(x), chunks(A), chunks(Bm), chunks(Cm)
    A = A.transpose(0, 3, 1, 2)  # [B,H,c,L]
    A_cum = np.cumsum(A, axis=-1)
    out: list[tuple[str, Any, int]] = []

    def ein(role: str, spec: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        y = np.einsum(spec, a, b)
        ins, o = spec.split("->")
        contracted = {ch for ch in ins.replace(",", "") if ch not in o}
        size = {ch: n for part, arr in zip(ins.split(","), (a, b), strict=True)
                for ch, n in zip(part, arr.shape, strict=True)}
        out.append((role, y, 2 * y.size * int(np.prod([size[c] for c in contracted]))))
        return y

    Lm = np.exp(_segsum(A))  # [B,H,c,L,L]
    G = ein("ssm.scores", "bclhn,bcshn->bclsh", Cm, Bm)
    M = G * Lm.transpose(0, 2, 3, 4, 1)
    Y_diag = ein("ssm.diag", "bclsh,bcshp->bclhp", M, x)
    decay_states = np.exp(A_cum[..., -1:] - A_cum)
    B_decay = Bm * decay_states.transpose(0, 2, 3, 1)[..., None]
    states = ein("ssm.chunk_states", "bclhn,bclhp->bchpn", B_decay, x)
    states = np.concatenate([np.zeros_like(states[:, :1]), states], axis=1)
    decay_chunk = np.exp(_segsum(np.pad(A_cum[..., -1], ((0, 0), (0, 0), (1, 0)))))
    new = ein("ssm.pass", "bzch,bzhpn->bchpn", decay_chunk.transpose(0, 3, 2, 1), states)
    states, final = new[:, :-1], new[:, -1]
    C_states = ein("ssm.off", "bclhn,bchpn->bclhp", Cm, states)
    Y_off = C_states * np.exp(A_cum).transpose(0, 2, 3, 1)[..., None]
    y = (Y_diag + Y_off).reshape(Bsz, -1, H, P) + D_res
    out += [("ssm.decay", Lm, 0), ("ssm.mask", M, 0), ("ssm.off.scaled", Y_off, 0),
            ("ssm.B_decay", B_decay, 0), ("ssm.pass.decay", decay_chunk, 0)]
    return y[:, :T], final, out


def recurrent(x: np.ndarray, dt: np.ndarray, A: np.ndarray, Bm: np.ndarray, Cm: np.ndarray,
              D: np.ndarray, S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The plain recurrence, one token at a time, from state S [B,H,P,N]."""
    ys = []
    for t in range(x.shape[1]):
        S = S * np.exp(dt[:, t] * A[:, 0])[..., None, None] + (
            dt[:, t, :, None, None] * x[:, t, :, :, None] * Bm[:, t, :, None, :])
        ys.append(np.einsum("bhpn,bhn->bhp", S, Cm[:, t]) + D[:, 0, :, None] * x[:, t])
    return np.stack(ys, axis=1), S


def ssd(self: NumericBase, x: np.ndarray, dt: np.ndarray, b: np.ndarray, c: np.ndarray,
        layer: int) -> np.ndarray:
    m = self.m
    P, N = m.ssm_head_dim or 0, m.ssm_state or 0
    f = np.float64 if self.dt == np.float64 else np.float32  # transformers' scan: fp32
    R, B, T = x.shape[:3]  # the ranks run as one batch of R·B rows: each its own heads
    H, Gr = x.shape[-1] // P, b.shape[-1] // N  # heads and groups of one rank
    full = m.ssm_heads or 0
    bias = per_rank(self.w.get((layer, "ssm.dt", "b"), (full,)), R, B)
    A_log = per_rank(self.w.get((layer, "ssm.A"), (full,)), R, B)
    D = per_rank(self.w.get((layer, "ssm.D"), (full,), base=1.0), R, B).astype(f)
    RB = R * B

    def rec(role: str, name: str, op: str, a: np.ndarray, **kw: Any) -> None:
        """A stage of [R·B, …] arrays, recorded per rank ([R, B, …]; FLOPs and ew of one)."""
        for k in ("flops", "ew"):
            kw[k] = kw.get(k, 0) // R
        self._rec(role, name, op, a.reshape(R, B, *a.shape[1:]), dtype="fp32", **kw)

    delta: np.ndarray = np.logaddexp(0, (dt.reshape(RB, T, H) + bias).astype(f))  # softplus
    rec("ssm.dt", "Δ = softplus(dt + b_dt)", "softplus", delta, ew=SSM_EW["dt"] * delta.size,
        params=H)
    A = -np.exp(A_log.astype(f))
    xs: np.ndarray = x.reshape(RB, T, H, P).astype(f)
    rep = H // Gr  # each group's B and C serve H_s/G heads
    Bm = np.repeat(b.reshape(RB, T, Gr, N).astype(f), rep, axis=2)
    Cm = np.repeat(c.reshape(RB, T, Gr, N).astype(f), rep, axis=2)
    xd = xs * delta[..., None]
    rec("ssm.discretize", "x·Δ, A·Δ", "mul", xd.reshape(RB, T, H * P),
        ew=xd.size + delta.size, params=2 * H)
    key = (layer, "ssm")
    if self.decoding:
        S = self.cache.states[key]
        S = S * np.exp(delta[:, 0] * A[:, 0])[..., None, None] + (
            delta[:, 0, :, None, None] * xs[:, 0, :, :, None] * Bm[:, 0, :, None, :])
        rec("ssm.update", "S = S·e^{Δ·A} + Δ·x·Bᵀ", "mul", S, ew=SSM_EW["update"] * S.size)
        yr = np.einsum("bhpn,bhn->bhp", S, Cm[:, 0])
        rec("ssm.readout", "y = S·C", "matmul", yr, flops=2 * yr.size * N,
            operands=((B, H, P, N), (B, H, N, 1)))
        y = (yr + D[:, 0, :, None] * xs[:, 0])[:, None]
    else:
        L = int(m.scan_chunk or 0)
        y, S, parts = chunked(xs, delta, A, Bm, Cm, D, L)
        got = {role: (arr, fl) for role, arr, fl in parts}
        ds = [Dim.const(n) for n in (RB, T, H, Gr, P, N)]  # the kernels' counts, these sizes
        fz = fused.mamba2_prefill(ds[0], ds[1], L, ds[2], ds[3], ds[4], ds[5], False)
        ew_of = {"ssm.chunk_states": 2 * got["ssm.B_decay"][0].size,
                 "ssm.pass": 3 * got["ssm.pass.decay"][0].size,
                 "ssm.off": got["ssm.off.scaled"][0].size}
        _, nc, _, _, _ = got["ssm.chunk_states"][0].shape
        n1 = nc + 1
        operands = {  # each einsum as the bmm it becomes: batch dims, then [m, k] × [k, n]
            "ssm.scores": ((B, nc, H, L, N), (B, nc, H, N, L)),
            "ssm.diag": ((B, nc, H, L, L), (B, nc, H, L, P)),
            "ssm.chunk_states": ((B, nc, H, P, L), (B, nc, H, L, N)),
            "ssm.pass": ((B, H, n1, n1), (B, H, n1, P * N)),
            "ssm.off": ((B, nc, H, L, N), (B, nc, H, N, P))}
        names = {"ssm.scores": "G = C·Bᵀ (each chunk)", "ssm.diag": "Y_diag = M·x",
                 "ssm.chunk_states": "chunk states = (B ⊙ decay)ᵀ·x",
                 "ssm.pass": "states passed between chunks", "ssm.off": "Y_off = C·states"}
        for role in ("ssm.scores", "ssm.decay", "ssm.mask", "ssm.diag", "ssm.chunk_states",
                     "ssm.pass", "ssm.off"):
            arr, fl = got[role]
            if role == "ssm.decay":
                rec(role, "L = exp(segsum(A·Δ))", "exp", arr, ew=SSM_EW["decay"] * arr.size)
            elif role == "ssm.mask":
                rec(role, "M = G ⊙ L", "mul", arr, ew=arr.size)
            else:
                rec(role, names[role], "matmul", arr, flops=pick(self.wl, fl, fz[role][0]),
                    ew=ew_of.get(role, 0),
                    operands=operands[role])
        # the same scan, in float64, as the chunked form and as the recurrence
        a64 = [a.astype(np.float64) for a in (xs, delta, A, Bm, Cm, D)]
        y64, S64, _ = chunked(a64[0], a64[1], a64[2], a64[3], a64[4], a64[5], L)
        yr, Sr = recurrent(a64[0], a64[1], a64[2], a64[3], a64[4], a64[5],
                           np.zeros((RB, H, P, N)))
        err = max(float(np.abs(y64 - yr).max() / max(np.abs(yr).max(), 1e-300)),
                  float(np.abs(S64 - Sr).max() / max(np.abs(Sr).max(), 1e-300)))
        self.stages[-1].extra["scan_recurrence_rel_err"] = err
    self.cache.states[key] = S
    out = y.reshape(R, B, T, H * P).astype(self.dt)
    self._rec("ssm.combine", "y = Y_diag + Y_off + D·x" if not self.decoding else
              "y = y + D·x", "add", out, ew=SSM_EW["combine"] * out[0].size)
    held, sdt = S.reshape(R, B, H, P, N), recurrent_dtype(self.wl)
    self._rec("state.ssm", "recurrent state", "state_cache", held,
              nbytes=measure(held[0], sdt), dtype=sdt)
    return out


def gated_norm(self: NumericBase, y: np.ndarray, gate: np.ndarray, role: str, name: str,
               gamma: Any, groups: Any, gate_first: bool) -> np.ndarray:
    m = self.m
    R, shape = y.shape[0], y.shape
    # one group's width: Mamba-2's I/G (γ over I, each rank its slice), or gated DeltaNet's
    # value head D_hv (one γ of D_hv, every rank a copy)
    size = m.ssm_inner // m.ssm_groups if gate_first else (m.gdn_v_dim or 0)
    silu = gate / (1 + np.exp(-gate))
    h = y * silu if gate_first else y
    h = h.reshape(*shape[:-1], shape[-1] // size, size)
    h = h / np.sqrt((h * h).mean(axis=-1, keepdims=True) + self.dt(EPS))
    if gate_first:
        g = self.w.get((self._layer, role, "γ"), (m.ssm_inner,), base=1.0).reshape(R, 1, 1, -1)
        out = h.reshape(shape) * g
    else:
        g = self.w.get((self._layer, role, "γ"), (size,), base=1.0)[None]
        out = (h * g).reshape(shape) * silu
    return self._rec(role, name, "rmsnorm", out.astype(self.dt),
                     ew=SSM_EW["gated_norm"] * out[0].size, params=g[0].size)
