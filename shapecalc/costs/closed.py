"""Totals in closed form, fitted from the stage pipeline and evaluated over whole NumPy grids.

Why it is exact. For one model and fixed structure — phase, tensor-parallel degree p, the logits,
attention-FLOPs and padding-mask switches, and which side of the sliding window T lies on — every
number a stage records is a polynomial in the batch B and the sequence T of degree ≤ 1 in B and
≤ 2 in T (elements of a tensor: a product of dims; FLOPs: 2·m·k·n; the causal half: T(T+1)/2 …).
So `symbolic.stages` is evaluated at 2×3 points (B, T) of each such *regime*, the six monomial
coefficients are solved for exactly (fractions), and the fit is checked at two further points;
nothing about the model is typed twice here. Bytes are not fitted: they are `⌈elements·bits/8⌉` of a
fitted element count, per tensor, exactly as the trace rounds them; dtypes are then free per point.

Why it is fast and still exact. A grid is split by (phase, p, regime); each part evaluates its
few polynomials with int64 arithmetic when a bound proves every intermediate < 2⁶³ (the absolute
coefficients at the largest B and T of the grid), else with object arrays of Python ints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Any

import numpy as np

from ..interpret.symbolic import stages as symbolic_stages
from ..model.config import DTYPE_BITS, ModelConfig, ShapecalcError, Workload, check
from ..model.parallel import pp_layers

# B^i·T^j, i ≤ 1, j ≤ 2
MONOMIALS: tuple[tuple[int, int], ...] = ((0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2))
BITS: dict[str, int] = {**DTYPE_BITS, "int64": 64}
INT64_LIMIT = 2**62  # leave a factor 2 of headroom under 2⁶³ for the last addition
# tensors that FlashAttention never materialises: the [B,H,Tq,Tk] scores and what acts on them,
# and the GQA repeat of K and V to every query head
FLASH_SKIPS = ("QKᵀ", "scale", "causal mask", "sliding-window mask", "padding mask", "softmax",
               "repeat k", "repeat v")
# The fitting workload gives weights, activations and KV cache three distinct dtypes, so a stage's
# dtype tells which of them its bytes follow ("w", "act", "kv"); any other dtype (token ids int64,
# RoPE angles fp32) is fixed and kept by name.
_FIT_DTYPES = {"dtype": "bf16", "act_dtype": "fp16", "kv_dtype": "int8"}
_CLASS_OF = {"bf16": "w", "fp16": "act", "int8": "kv"}


def _cls(dtype: str) -> str:
    return _CLASS_OF.get(dtype, dtype)


@dataclass(frozen=True)
class Poly:
    """Σ num[k]·B^i·T^j / den over MONOMIALS; the value is an integer wherever it is used."""

    num: tuple[int, ...]
    den: int = 1

    def at(self, b: int, t: int) -> int:
        s = sum(c * b**i * t**j for c, (i, j) in zip(self.num, MONOMIALS, strict=True) if c)
        q, r = divmod(s, self.den)
        assert r == 0, "closed form: a fitted count is not an integer"
        return q

    def eval(self, mono: dict[tuple[int, int], np.ndarray], n: int, dtype: Any) -> np.ndarray:
        out = np.zeros(n, dtype=dtype)
        for c, m in zip(self.num, MONOMIALS, strict=True):
            if c:
                out += c * mono[m] if m != (0, 0) else c
        return out // self.den if self.den != 1 else out

    @property
    def is_const(self) -> bool:
        return not any(self.num[1:])


def _solve(rows: list[list[Fraction]], rhs: list[Fraction]) -> list[Fraction]:
    """Gaussian elimination over the rationals (a tiny square system)."""
    n = len(rows)
    a = [[*r, v] for r, v in zip(rows, rhs, strict=True)]
    for col in range(n):
        piv = next(r for r in range(col, n) if a[r][col] != 0)
        a[col], a[piv] = a[piv], a[col]
        for r in range(n):
            if r != col and a[r][col] != 0:
                f = a[r][col] / a[col][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col], strict=True)]
    return [a[i][n] / a[i][i] for i in range(n)]


def fit_poly(samples: dict[tuple[int, int], int]) -> Poly:
    """The polynomial through `samples` {(B, T): value} on a 2 × k grid (k ≤ 3 T values)."""
    bs = sorted({b for b, _ in samples})
    ts = sorted({t for _, t in samples})
    monos = [(i, j) for i, j in MONOMIALS if i < len(bs) and j < len(ts)]
    pts = [(b, t) for b in bs for t in ts]
    rows = [[Fraction(b**i * t**j) for i, j in monos] for b, t in pts]
    coef = dict(zip(monos, _solve(rows, [Fraction(samples[p]) for p in pts]), strict=True))
    den = math.lcm(*(c.denominator for c in coef.values()))
    num = tuple(int(coef.get(m, 0) * den) for m in MONOMIALS)
    return Poly(num, den)


def _elements(shape: list[int]) -> int:
    n = 1
    for x in shape:
        n *= x
    return n


def measure(st: list[Any]) -> tuple[dict[str, int], dict[str, Any]]:
    """The numbers of one stage list that the totals are made of, and their (constant) tags."""
    num: dict[str, int] = {}
    tag: dict[str, Any] = {}

    def tot(key: str, pred: Any) -> int:
        return sum(getattr(s, key) * s.repeat for s in st if pred(s))

    num["params"] = tot("params", lambda s: True)
    num["flops"] = tot("flops", lambda s: True)
    num["ew"] = tot("elementwise_flops", lambda s: True)
    ids = [s for s in st if s.op == "input"]
    num["tq"] = ids[0].shape[1] if ids else 0
    kv = [s for s in st if s.op == "kv_cache"]
    num["kv_tokens"] = kv[0].shape[3] if kv else 0
    for k, s in enumerate(kv):
        num[f"kv.{k}"] = _elements(s.shape)
        tag[f"kv.{k}"] = (_cls(s.dtype), s.repeat)
    ar = [s for s in st if s.op == "allreduce" and s.group == "block"]
    num["ar_count"] = len(ar)
    num["ar"] = _elements(ar[0].shape) if ar else 0
    tag["ar"] = _cls(ar[0].dtype) if ar else "act"
    for name, pred in (
        ("emb_ar", lambda s: s.op == "allreduce" and s.group == "embedding"),
        ("gather", lambda s: s.op == "allgather"),
    ):
        hits = [s for s in st if pred(s)]
        for k, s in enumerate(hits):
            num[f"{name}.{k}"] = _elements(s.shape)
            tag[f"{name}.{k}"] = (_cls(s.dtype), s.repeat)
    num["block_params"] = sum(s.params for s in st if s.group == "block")
    num["emb_params"] = tot("params", lambda s: s.group == "embedding")
    num["head_params"] = tot("params", lambda s: s.group == "head")
    num["embed_params"] = tot("params", lambda s: s.op == "embed")
    for k, s in enumerate(st):
        num[f"act.{k}"] = _elements(s.shape)
        kind = "cache" if s.op in ("kv_cache", "kv_append") else (
            "flash_skip" if s.name in FLASH_SKIPS else "")
        tag[f"act.{k}"] = (_cls(s.dtype), kind)
    return num, tag


@dataclass(frozen=True)
class Regime:
    """T in [lo, hi] (hi None: unbounded) for one (phase, p): every number a Poly."""

    lo: int
    hi: int | None
    polys: dict[str, Poly]
    tags: dict[str, Any]


class ClosedForm:
    """Closed-form totals of one model under fixed logits / attention-FLOPs / mask switches."""

    def __init__(
        self,
        model: ModelConfig,
        logits: str = "all",
        attention_flops: str = "full",
        padding_mask: bool = False,
        block_size: int = 16,
    ):
        self.model = model
        self.logits = logits
        self.attention_flops = attention_flops
        self.padding_mask = padding_mask
        self.block_size = block_size
        self._fits: dict[tuple[str, int], list[Regime]] = {}

    # -- fitting -------------------------------------------------------------------------------
    def workload(self, batch: int, seq: int, phase: str, tp: int, **dt: str) -> Workload:
        return Workload(
            batch=batch, seq=seq, phase=phase, tp=tp, logits=self.logits,  # type: ignore[arg-type]
            attention_flops=self.attention_flops,  # type: ignore[arg-type]
            padding_mask=self.padding_mask, block_size=self.block_size, **dt,  # type: ignore[arg-type]
        )

    def seq_limit(self, phase: str) -> int | None:
        """The largest T `check` accepts (a learned position table), else None."""
        m = self.model
        if m.positions == "learned" and m.max_positions is not None:
            return m.max_positions - (1 if phase == "decode" else 0)
        return None

    def intervals(self, phase: str) -> list[tuple[int, int | None]]:
        """Ranges of T within which the stage list keeps one structure (sliding window)."""
        hi = self.seq_limit(phase)
        w = self.model.sliding_window
        cut = None if w is None else (w if phase == "prefill" else w - 1)
        out: list[tuple[int, int | None]] = []
        for lo, top in ((1, cut), (None if cut is None else cut + 1, None)):
            if lo is None:
                continue
            top = top if hi is None else (hi if top is None else min(top, hi))
            if top is None or lo <= top:
                out.append((lo, top))
        return out

    def _measure(self, b: int, t: int, phase: str, p: int) -> tuple[dict, dict]:
        wl = self.workload(b, t, phase, p, **_FIT_DTYPES)
        return measure(symbolic_stages(self.model, wl, p))

    def regimes(self, phase: str, p: int) -> list[Regime]:
        key = (phase, p)
        if key not in self._fits:
            check(self.model, self.workload(1, 1, phase, p))  # tp rules, pp aside
            self._fits[key] = [self._fit(phase, p, lo, hi) for lo, hi in self.intervals(phase)]
        return self._fits[key]

    def _fit(self, phase: str, p: int, lo: int, hi: int | None) -> Regime:
        ts = [t for t in (lo, lo + 1, lo + 2) if hi is None or t <= hi]
        samples: dict[tuple[int, int], dict[str, int]] = {}
        tags: dict[str, Any] | None = None
        for b in (1, 2):
            for t in ts:
                num, tg = self._measure(b, t, phase, p)
                if tags is None:
                    tags = tg
                elif tg != tags or num.keys() != samples[(1, ts[0])].keys():
                    raise AssertionError(f"closed form: stage list changes inside T∈[{lo},{hi}]")
                samples[(b, t)] = num
        assert tags is not None
        keys = samples[(1, ts[0])].keys()
        polys = {k: fit_poly({pt: v[k] for pt, v in samples.items()}) for k in keys}
        # check the fit away from its nodes
        for b, t in ((3, lo + 5), (7, lo + 37)):
            if hi is not None and t > hi:
                continue
            num, _ = self._measure(b, t, phase, p)
            bad = [k for k in keys if polys[k].at(b, t) != num[k]]
            if bad:
                raise AssertionError(f"closed form: {bad[0]} is not polynomial in B, T")
        return Regime(lo, hi, polys, tags)

    # -- per-model constants -------------------------------------------------------------------
    @cached_property
    def kv_per_token_elems(self) -> int:
        m = self.model
        return 2 * m.n_layers * m.kv_heads * m.dh

    def kv_heads_per_rank(self, p: int) -> int:
        return max(1, self.model.kv_heads // p)

    def stage_params(self, p: int, s: int) -> list[int]:
        """Parameters per rank of each pipeline stage (TP degree p, s stages), as vLLM places
        them: layers as `pp_layers`, embedding on the first, final norm and LM head on the last
        (and a second copy of a tied table there when s > 1)."""
        r = self.regimes("prefill", p)[0].polys
        per_layer, emb, head, embed = (
            r[k].at(1, 1) for k in ("block_params", "emb_params", "head_params", "embed_params")
        )
        tied = self.model.tie_embeddings and s > 1
        out = []
        for i, k in enumerate(pp_layers(self.model.n_layers, s)):
            x = k * per_layer + (emb if i == 0 else 0)
            x += (head + (embed if tied else 0)) if i == s - 1 else 0
            out.append(x)
        return out

    # -- evaluation ----------------------------------------------------------------------------
    def evaluate(
        self,
        batch: Any,
        seq: Any,
        phase: Any,
        tp: Any,
        pp: Any = 1,
        dtype: Any = "bf16",
        kv_dtype: Any = None,
        act_dtype: Any = None,
    ) -> dict[str, np.ndarray]:
        """Totals at every point; arguments broadcast against each other (scalars or 1-D).

        Dtypes are names, or bits per element as integers (what `DTYPE_BITS` maps a name to);
        kv_dtype and act_dtype default to dtype. Points sorted by phase and tp (outermost) are
        evaluated as slices, without gathering.
        Returns int64 arrays when provably exact, else object arrays of Python ints.
        """
        arrs = np.broadcast_arrays(
            np.asarray(batch), np.asarray(seq), np.asarray(phase), np.asarray(tp), np.asarray(pp),
            np.asarray(dtype), np.asarray(dtype if kv_dtype is None else kv_dtype),
            np.asarray(dtype if act_dtype is None else act_dtype),
        )
        B, T, ph, P, S, dt, kv, act = (np.ravel(a) for a in arrs)
        n = B.size
        B, T, P, S = (x.astype(np.int64) for x in (B, T, P, S))
        if n and (B.min() < 1 or T.min() < 1 or P.min() < 1 or S.min() < 1):
            raise ShapecalcError("grid", "batch, seq, tp and pp must be ≥ 1")
        bits = {name: _bits(a) for name, a in (("w", dt), ("kv", kv), ("act", act))}
        phase_is_decode = _phase_codes(ph)
        groups = self._groups(phase_is_decode, P, T)
        big = self._needs_objects(groups, B, T, S)
        dtype_out = object if big else np.int64
        if big:
            B, T, P, S = (x.astype(object) for x in (B, T, P, S))
            bits = {k: v.astype(object) for k, v in bits.items()}
        out: dict[str, np.ndarray] = {}
        for (phase_name, p), regime, idx in groups:
            full = self._regime_for(phase_name, 1, regime.lo)
            part = self._compute(
                full, regime, p, B[idx], T[idx], S[idx],
                {k: v[idx] for k, v in bits.items()}, dtype_out,
            )
            for k, v in part.items():
                if k not in out:
                    out[k] = np.zeros(n, dtype=dtype_out)
                out[k][idx] = v
        return out

    def _regime_for(self, phase: str, p: int, t: int) -> Regime:
        for r in self.regimes(phase, p):
            if r.lo <= t and (r.hi is None or t <= r.hi):
                return r
        limit = self.seq_limit(phase)
        raise ShapecalcError(
            "seq", f"{t} is beyond the learned position table (largest {phase} seq: {limit})"
        )

    def _groups(
        self, decode: np.ndarray, P: np.ndarray, T: np.ndarray
    ) -> list[tuple[tuple[str, int], Regime, np.ndarray | slice]]:
        """Indices of the points of each (phase, p, regime); the p=1 fit rides along."""
        out = []
        key = decode.astype(np.int64) * (int(P.max(initial=1)) + 1) + P
        for k in np.unique(key):
            sel = np.flatnonzero(key == k)
            is_dec, p = divmod(int(k), int(P.max(initial=1)) + 1)
            phase = "decode" if is_dec else "prefill"
            regs = self.regimes(phase, p)
            self.regimes(phase, 1)
            t = T[sel]
            covered = np.zeros(sel.size, dtype=bool)
            for r in regs:
                m = (t >= r.lo) if r.hi is None else ((t >= r.lo) & (t <= r.hi))
                covered |= m
                if m.any():
                    out.append(((phase, p), r, _as_slice(sel[m])))
            if not covered.all():
                bad = int(t[~covered][0])
                self._regime_for(phase, p, bad)  # raises the clear error
        return out

    def _needs_objects(self, groups: list, B: np.ndarray, T: np.ndarray, S: np.ndarray) -> bool:
        """True when some value or intermediate of the grid could reach 2⁶²."""
        if not groups:
            return False
        bc, tc, sc = (np.array([int(x.max())], dtype=object) for x in (B, T, S))
        wide = {k: np.array([64], dtype=object) for k in ("w", "kv", "act")}
        for (phase, p), regime, _ in groups:
            full = self._regime_for(phase, 1, regime.lo)
            # every derived value is monotone in the fitted counts, so evaluating it exactly at
            # the largest B, T and s with all coefficients made positive (a majorant of the
            # numerators) and 64-bit dtypes bounds it, and every intermediate, on the whole grid
            fm, rm = _majorant(full), _majorant(regime)
            # (a byte count's intermediate, elements·bits + 7, is at most 8× the bytes + 7)
            vals = self._compute(fm, rm, p, bc, tc, sc, wide, object)
            worst = 8 * max(int(v[0]) for v in vals.values()) + 7
            b, t = int(bc[0]), int(tc[0])
            for r in (fm, rm):
                worst = max(worst, *(q.at(b, t) for q in r.polys.values()))
            if worst >= INT64_LIMIT:
                return True
        return False

    def _compute(
        self,
        full: Regime,
        rank: Regime,
        p: int,
        B: np.ndarray,
        T: np.ndarray,
        S: np.ndarray,
        bits: dict[str, np.ndarray],
        dtype: Any,
    ) -> dict[str, np.ndarray]:
        m = self.model
        n = B.size
        mono = {(0, 1): T, (0, 2): T * T, (1, 0): B, (1, 1): B * T}
        mono[(1, 2)] = mono[(1, 1)] * T

        def ev(r: Regime, key: str) -> np.ndarray:
            return r.polys[key].eval(mono, n, dtype)

        def const(r: Regime, key: str) -> int:
            poly = r.polys[key]
            assert poly.is_const, key
            return poly.num[0] // poly.den

        def byte_sum(r: Regime, prefix: str) -> np.ndarray:
            total = np.zeros(n, dtype=dtype)
            for k, tg in r.tags.items():
                if k.startswith(prefix + "."):
                    cls, rep = tg
                    total = total + rep * _nbytes(ev(r, k), cls, bits)
            return total

        def largest(r: Regime, skip: tuple[str, ...] = ()) -> np.ndarray:
            best = np.zeros(n, dtype=dtype)
            seen = set()
            for k, tg in r.tags.items():
                if not k.startswith("act."):
                    continue
                cls, kind = tg
                sig = (r.polys[k], cls)
                if kind in skip or sig in seen:
                    continue
                seen.add(sig)
                best = np.maximum(best, _nbytes(ev(r, k), cls, bits))
            return best

        out: dict[str, np.ndarray] = {}
        params = const(full, "params")
        out["params"] = np.full(n, params, dtype=dtype)
        out["flops"] = ev(full, "flops")
        out["elementwise_flops"] = ev(full, "ew")
        out["weight_bytes"] = _nbytes(out["params"], "w", bits)
        out["kv_cache_bytes"] = byte_sum(full, "kv")
        tokens = ev(full, "kv_tokens")
        out["kv_cache_tokens"] = tokens
        per_token = _nbytes(np.full(n, self.kv_per_token_elems, dtype=dtype), "kv", bits)
        out["kv_cache_bytes_per_token"] = per_token
        blocks = B * ((tokens + (self.block_size - 1)) // self.block_size)
        out["kv_cache_blocks"] = blocks
        out["kv_cache_paged_bytes"] = blocks * self.block_size * per_token
        out["largest_activation_bytes"] = largest(full, ("cache",))  # the cache is apart
        # tensor parallel (one rank)
        out["tp"] = np.full(n, p, dtype=dtype)
        out["kv_heads_per_rank"] = np.full(n, self.kv_heads_per_rank(p), dtype=dtype)
        count = const(rank, "ar_count")
        one = _nbytes(ev(rank, "ar"), rank.tags["ar"], bits) if count else np.zeros(n, dtype)
        out["allreduce_per_layer"] = np.full(n, count, dtype=dtype)
        out["allreduce_bytes"] = one
        out["allreduce_bytes_per_layer"] = one * count
        out["allreduce_bytes_total"] = one * (count * m.n_layers)
        ring = 2 * (p - 1) * ((one + (p - 1)) // p) if p > 1 else np.zeros(n, dtype=dtype)
        out["ring_bytes_per_rank"] = ring
        out["ring_bytes_per_rank_total"] = ring * (count * m.n_layers)
        out["embedding_allreduce_bytes"] = byte_sum(rank, "emb_ar")
        out["logits_allgather_bytes"] = byte_sum(rank, "gather")
        params_rank = const(rank, "params")
        out["params_per_rank"] = np.full(n, params_rank, dtype=dtype)
        out["weight_bytes_per_rank"] = _nbytes(out["params_per_rank"], "w", bits)
        out["kv_cache_bytes_per_rank"] = byte_sum(rank, "kv")
        out["flops_per_rank"] = ev(rank, "flops")
        # the largest tensor a rank's step writes besides the KV cache itself, as traced (eager
        # attention) and as FlashAttention runs it (no scores, no repeated K/V)
        out["largest_activation_bytes_per_rank"] = largest(rank, ("cache",))
        out["workspace_flash_bytes_per_rank"] = largest(rank, ("cache", "flash_skip"))
        # pipeline: the residual stream [B, Tq, D] crosses each boundary
        boundary = _nbytes(B * ev(full, "tq") * m.d_model, "act", bits)
        out["pp"] = S
        out["boundary_bytes"] = np.where(S > 1, boundary, 0).astype(dtype)
        out["boundary_bytes_total"] = boundary * (S - 1)
        return out


def _majorant(r: Regime) -> Regime:
    polys = {k: Poly(tuple(abs(c) for c in v.num), 1) for k, v in r.polys.items()}
    return Regime(r.lo, r.hi, polys, r.tags)


def _nbytes(elems: np.ndarray, cls: str, bits: dict[str, np.ndarray]) -> np.ndarray:
    """⌈elements·bits/8⌉ per point; `cls` is a dtype class or a fixed dtype's name."""
    b = bits[cls] if cls in bits else BITS[cls]
    return (elems * b + 7) // 8


def _as_slice(idx: np.ndarray) -> np.ndarray | slice:
    """A contiguous run of indices as a slice: a view instead of a gather and a scatter."""
    if idx.size and int(idx[-1]) - int(idx[0]) + 1 == idx.size:
        return slice(int(idx[0]), int(idx[-1]) + 1)
    return idx


def _bits(names: np.ndarray) -> np.ndarray:
    """Bits per element of each point: dtype names, or bit counts passed as integers."""
    if names.dtype.kind in "iu":
        return names.astype(np.int64)
    out = np.zeros(names.size, dtype=np.int64)
    for name in np.unique(names):
        if str(name) not in DTYPE_BITS:
            raise ShapecalcError("dtype", f"unknown dtype {name!r}; known: {', '.join(DTYPE_BITS)}")
        out[names == name] = DTYPE_BITS[str(name)]
    return out


def _phase_codes(ph: np.ndarray) -> np.ndarray:
    if ph.dtype.kind in "iub":
        return ph.astype(bool)
    out = np.zeros(ph.size, dtype=bool)
    for name in np.unique(ph):
        if str(name) not in ("prefill", "decode"):
            raise ShapecalcError("phase", f"{name!r} is not one of 'prefill', 'decode'")
        out[ph == name] = str(name) == "decode"
    return out
