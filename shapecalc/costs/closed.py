"""Totals in closed form, read off the stage pipeline and evaluated over whole NumPy grids.

Why it is exact. Within a *regime* — one phase, tensor-parallel degree p and side of each layer
kind's window — every number a stage records is a polynomial in B and T that the stage list at
2×3 points fixes by forward differences (poly.py): no solving, no fractions, nothing about the model
typed twice. Bytes are not read off: they are `⌈elements·bits/8⌉` of an element count, per tensor,
exactly as the trace rounds them; dtypes are then free per point.

Why it is fast and still exact. A grid is split by (phase, p, regime); each part evaluates its
few polynomials with int64 arithmetic when a bound proves every intermediate < 2⁶³ (the absolute
coefficients at the largest B and T of the grid), else with object arrays of Python ints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..interpret.symbolic import stages as symbolic_stages
from ..model.config import DTYPE_BITS, ModelConfig, ShapecalcError, Workload, bytes_of, check
from ..model.parallel import (
    kv_elements_per_token,
    kv_groups,
    kv_heads_per_rank,
    paged_blocks,
    ring_allreduce_bytes,
    stage_params,
)
from ..model.plan import layer_plan
from .poly import FIT_DTYPES, Poly, measure

BITS: dict[str, int] = {**DTYPE_BITS, "int64": 64}
INT64_LIMIT = 2**62  # leave a factor 2 of headroom under 2⁶³ for the last addition


@dataclass(frozen=True)
class Regime:
    """T in [lo, hi] (hi None: unbounded) for one (phase, p): every number a Poly."""

    lo: int
    hi: int | None
    polys: dict[str, Poly]
    tags: dict[str, Any]

    def majorant(self) -> Regime:
        return Regime(self.lo, self.hi, {k: v.majorant() for k, v in self.polys.items()},
                      self.tags)


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
        """Ranges of T within which the stage list keeps one structure: each window W of the
        layer plan cuts at T = W (prefill: the window mask appears past it; decode: T+1 keys
        reach W)."""
        hi = self.seq_limit(phase)
        cuts = sorted({w if phase == "prefill" else w - 1
                       for w in (k.window for k in layer_plan(self.model).kinds)
                       if w is not None and (w > 1 or phase == "prefill")})
        out: list[tuple[int, int | None]] = []
        los = [1, *(c + 1 for c in cuts)]
        tops: list[int | None] = [*cuts, None]
        for lo, top in zip(los, tops, strict=True):
            top = top if hi is None else (hi if top is None else min(top, hi))
            if top is None or lo <= top:
                out.append((lo, top))
        return out

    def regimes(self, phase: str, p: int) -> list[Regime]:
        key = (phase, p)
        if key not in self._fits:
            check(self.model, self.workload(1, 1, phase, p))  # tp rules, pp aside
            self._fits[key] = [self._fit(phase, p, lo, hi) for lo, hi in self.intervals(phase)]
        return self._fits[key]

    def _fit(self, phase: str, p: int, lo: int, hi: int | None) -> Regime:
        """One run of the pipeline in poly mode, at a point inside the regime, gives every
        number of the regime as a polynomial in B and T."""
        wl = self.workload(1, lo, phase, p, **FIT_DTYPES)
        polys, tags = measure(symbolic_stages(self.model, wl, p, poly=True),
                              layer_plan(self.model))
        return Regime(lo, hi, polys, tags)

    # -- per-model constants -------------------------------------------------------------------
    def kv_heads_per_rank(self, p: int) -> int:
        return kv_heads_per_rank(self.model, p)

    def stage_params(self, p: int, s: int) -> list[int]:
        """Parameters per rank of each pipeline stage (TP degree p, s stages), as
        `parallel.stage_params` places them."""
        r = self.regimes("prefill", p)[0].polys
        plan = layer_plan(self.model)
        per_layer = [r[f"kind_params.{k}"].at(1, 1) for k in range(len(plan.kinds))]
        emb, head, embed = (r[k].at(1, 1) for k in ("emb_params", "head_params", "embed_params"))
        return stage_params(plan, s, per_layer, emb, head, embed, self.model.tie_embeddings)

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
            fm, rm = full.majorant(), regime.majorant()
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
        out["kv_cache_tokens"] = ev(full, "kv_tokens")
        out["kv_cache_bytes_per_token"] = _nbytes(
            np.full(n, kv_elements_per_token(m), dtype=dtype), "kv", bits)
        # paged: each group of layers that share a window has its own blocks
        blocks = np.zeros(n, dtype=dtype)
        paged = np.zeros(n, dtype=dtype)
        for g, (_, layers) in enumerate(kv_groups(layer_plan(m))):
            b_g = paged_blocks(B, ev(full, f"group_tokens.{g}"), self.block_size)
            out[f"kv_cache_blocks@{g}"] = b_g
            blocks = blocks + b_g
            per_token = _nbytes(np.full(n, kv_elements_per_token(m, 1, layers), dtype=dtype),
                                "kv", bits)
            paged = paged + b_g * self.block_size * per_token
        out["kv_cache_blocks"] = blocks
        out["kv_cache_paged_bytes"] = paged
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
        ring = ring_allreduce_bytes(one, p) if p > 1 else np.zeros(n, dtype=dtype)
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


def _nbytes(elems: np.ndarray, cls: str, bits: dict[str, np.ndarray]) -> np.ndarray:
    """⌈elements·bits/8⌉ per point; `cls` is a dtype class or a fixed dtype's name."""
    return bytes_of(elems, bits[cls] if cls in bits else BITS[cls])


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
