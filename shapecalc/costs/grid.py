"""The closed form over whole NumPy grids (sweep, and fit's searches over many points).

A grid is split by (phase, p, regime); each part evaluates its polynomials with int64 arithmetic
when a bound proves every intermediate < 2⁶³ (the absolute coefficients at the largest B and T of
the grid), else with object arrays of Python ints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..model.config import DTYPE_BITS, ShapecalcError
from ..model.quantization import DTYPE_FORMATS
from .closed import INT64_LIMIT, ClosedForm, Regime, plain_only
from .scalar import BOUNDS, SCALARS
from .totals import Totals


class Arrays:
    """NumPy as the namespace `ClosedForm.compute` and planning take (see scalar.Scalars)."""

    nan = np.nan
    full = staticmethod(np.full)
    zeros = staticmethod(np.zeros)
    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)
    where = staticmethod(np.where)
    isnan = staticmethod(np.isnan)

    @staticmethod
    def floats(a: Any) -> np.ndarray:
        return np.asarray(a, dtype=np.float64) if a.dtype != object else a.astype(np.float64)

    @staticmethod
    def bound(compute: np.ndarray, memory: np.ndarray, comm: np.ndarray) -> np.ndarray:
        """Which term is largest: the phase is compute-, memory- or communication-bound."""
        return largest_of((compute, memory, comm), BOUNDS)


ARRAYS = Arrays()


class Labelled(np.ndarray):
    """An object array of a few labels that keeps each point's index into `labels` (a writer
    formats each label once); a view of it keeps none."""

    codes: np.ndarray | None = None
    labels: tuple[Any, ...] = ()

    def __array_finalize__(self, obj: Any) -> None:
        self.codes = None


def largest_of(terms: tuple[Any, ...], names: tuple[str, ...]) -> Labelled:
    """The name of the largest term at each point (never a NaN one); None where the first is
    NaN (no estimate)."""
    # argmax term by term (the first largest, as np.argmax): a third of the time of stacking
    # the terms and an argmax across them; a NaN compares false, and fmax passes it over
    first = np.asarray(terms[0], dtype=float)
    best = first.copy()
    codes = np.zeros(best.shape, dtype=np.intp)
    for i, t in enumerate(terms[1:], 1):
        t = np.asarray(t, dtype=float)
        codes[t > best] = i
        np.fmax(best, t, out=best)
    codes[np.isnan(first)] = len(names)
    labels = (*names, None)
    out = np.array(labels, dtype=object)[codes].view(Labelled)
    out.codes, out.labels = codes, labels
    return out


def evaluate(
    cf: ClosedForm,
    batch: Any,
    seq: Any,
    phase: Any,
    tp: Any,
    pp: Any = 1,
    dtype: Any = "bf16",
    kv_dtype: Any = None,
    act_dtype: Any = None,
    workspace: bool = False,
    bound: tuple[int, int, int] | None = None,
) -> Totals:
    """Totals at every point; arguments broadcast against each other (scalars or 1-D).

    Dtypes are names, or bits per element as integers (what `DTYPE_BITS` maps a name to);
    kv_dtype and act_dtype default to dtype. Points sorted by phase and tp (outermost) are
    evaluated as slices, without gathering.
    Returns int64 arrays when provably exact, else object arrays of Python ints, each computed
    when first read and read-only (totals.py); `workspace`: the activation workspaces alone.
    `bound`: (B, T, pp) at least the largest of a grid these points are a part of (a sweep's
    chunk): int64 is proven there first, once for the whole grid.
    """
    arrs = np.broadcast_arrays(
        np.asarray(batch), np.asarray(seq), np.asarray(phase), np.asarray(tp), np.asarray(pp),
        np.asarray(dtype), np.asarray(dtype if kv_dtype is None else kv_dtype),
        np.asarray(dtype if act_dtype is None else act_dtype),
    )
    B, T, ph, P, S, dt, kv, act = (np.ravel(a) for a in arrs)
    plain_only(cf, _format_name(dt), _format_name(kv), _format_name(act))
    n = B.size
    # (S is the total pp, handed back read-only: a copy, never the caller's array)
    B, T, P = (x.astype(np.int64, copy=False) for x in (B, T, P))
    S = S.astype(np.int64)
    if n and (B.min() < 1 or T.min() < 1 or P.min() < 1 or S.min() < 1):
        raise ShapecalcError("grid", "batch, seq, tp and pp must be ≥ 1")
    bits = {name: _bits(a) for name, a in (("w", dt), ("kv", kv), ("act", act))}
    phase_is_decode = _phase_codes(ph)
    groups = _groups(cf, phase_is_decode, P, T)
    big = _needs_objects(cf, groups, B, T, S, bound)
    dtype_out = object if big else np.int64
    if big:
        B, T, P, S = (x.astype(object) for x in (B, T, P, S))
        bits = {k: v.astype(object) for k, v in bits.items()}
    parts = []
    for (phase_name, p), regime, idx in groups:
        full = cf._regime_for(phase_name, 1, regime.lo)
        Bi, Ti = B[idx], T[idx]
        parts.append((cf.compute(
            full, regime, p, Bi, Ti, S[idx],
            {k: v[idx] for k, v in bits.items()}, dtype_out, ARRAYS,
            runs=None if big else _runs(Bi, Ti), workspace=workspace,
        ), idx))
    if len(parts) == 1 and isinstance(parts[0][1], slice) and parts[0][1] == slice(0, n):
        # all the points: the arrays as they are
        return _whole(parts[0][0], n, dtype_out)
    return scattered(n, parts, dtype_out)


def _whole(part: Totals, n: int, dtype: Any) -> Totals:
    """One part's totals at all n points, read-only (a total is computed from others when
    first read: none may change under it), each a distinct array."""
    used: set[int] = set()

    def take(k: str) -> np.ndarray:
        v = part[k]
        if not (isinstance(v, np.ndarray) and v.shape == (n,) and v.dtype == dtype
                and id(v) not in used):
            v = np.broadcast_to(np.asarray(v, dtype=dtype), (n,)).copy()
        used.add(id(v))
        v.flags.writeable = False
        return v

    out = Totals()
    out.formulas = {k: (lambda _, k=k: take(k)) for k in part}
    return out


def scattered(n: int, parts: Sequence[tuple[Mapping[str, Any], Any]], dtype: Any = None
              ) -> Totals:
    """Totals at n points from parts, each over its points (indices or a slice), each total
    scattered when first read (read-only); `dtype` None: the parts' own (object where they
    differ)."""
    def one(k: str) -> np.ndarray:
        vals = [(part[k], idx) for part, idx in parts if k in part]
        kinds = {np.asarray(v).dtype for v, _ in vals}
        out = np.zeros(n, dtype=dtype or (kinds.pop() if len(kinds) == 1 else object))
        for v, idx in vals:
            out[idx] = v
        out.flags.writeable = False  # as evaluate's every total
        return out

    t = Totals()
    for part, _ in parts:
        for k in part:
            t.formulas.setdefault(k, lambda _, k=k: one(k))
    return t


def _groups(
    cf: ClosedForm, decode: np.ndarray, P: np.ndarray, T: np.ndarray
) -> list[tuple[tuple[str, int], Regime, np.ndarray | slice]]:
    """Indices of the points of each (phase, p, regime); the p=1 fit rides along."""
    out = []
    key = decode.astype(np.int64) * (int(P.max(initial=1)) + 1) + P
    one = bool(key.size) and bool(key.min() == key.max())  # a sweep chunk's: one (phase, tp)
    for k in key[:1] if one else distinct(key):
        sel = np.arange(key.size) if one else np.flatnonzero(key == k)
        is_dec, p = divmod(int(k), int(P.max(initial=1)) + 1)
        phase = "decode" if is_dec else "prefill"
        cf._regime_for(phase, p, 1)  # the tp rules
        t = T[sel]
        first, last = int(t.min()), int(t.max())
        hi = cf.interval(phase, first)[1]
        if hi is None or last <= hi:  # every T in the regime of the smallest: one part
            r = cf._regime_for(phase, p, int(t[0]))
            cf._regime_for(phase, 1, int(t[0]))
            out.append(((phase, p), r, _as_slice(sel)))
            continue
        # each point's regime, by its range of T: few distinct T in a grid, one look-up each
        uniq, inverse = np.unique(t, return_inverse=True)
        los = np.array([cf.interval(phase, int(x))[0] for x in uniq], dtype=np.int64)[inverse]
        for lo in distinct(los):
            m = los == lo
            r = cf._regime_for(phase, p, int(t[m][0]))  # raises the clear error past a limit
            cf._regime_for(phase, 1, int(t[m][0]))
            out.append(((phase, p), r, _as_slice(sel[m])))
    return out


def _needs_objects(cf: ClosedForm, groups: list, B: np.ndarray, T: np.ndarray,
                   S: np.ndarray, bound: tuple[int, int, int] | None = None) -> bool:
    """True when some value or intermediate of the grid could reach 2⁶²."""
    if not groups:
        return False
    b, t, s = int(B.max()), int(T.max()), int(S.max())
    for (phase, p), regime, _ in groups:
        # the (B, T, s) maxima at which int64 was proven enough, kept in the regime
        known = regime.memo.setdefault("int64_safe", [])
        if any(b <= b0 and t <= t0 and s <= s0 for b0, t0, s0 in known):
            continue  # a bound at larger B, T and s held (the bound is monotone in them)
        # first at the grid's bound, then at the next powers of 16: a sweep's chunks (B
        # growing chunk by chunk) prove it once or a few times, not once a chunk (each proof
        # is a pass over every polynomial)
        tries = [(_pow16(b), _pow16(t), _pow16(s)), (b, t, s)]
        if bound is not None and b <= bound[0] and t <= bound[1] and s <= bound[2]:
            tries.insert(0, bound)
        failed = regime.memo.setdefault("int64_unsafe", [])  # where it did not hold: nor above
        for at in tries:
            if any(at[0] >= b0 and at[1] >= t0 and at[2] >= s0 for b0, t0, s0 in failed):
                continue
            if _int64_safe(cf, phase, p, regime, *at):
                known.append(at)
                break
            failed.append(at)
        else:
            return True
    return False


def _runs(B: np.ndarray, T: np.ndarray) -> tuple[np.ndarray, np.ndarray | int] | None:
    """The first point of each run of equal (B, T) and each point's run (or the length of
    every run, where they are all one length), where the runs are long enough to pay (a
    sweep's pp, dtype and KV-dtype axes, innermost, repeat B and T)."""
    n = B.size
    if n < 256:
        return None
    new = run_starts(B, T)
    first = np.flatnonzero(new)
    if first.size * 4 > n:
        return None
    r = n // first.size
    if r * first.size == n and np.array_equal(first, np.arange(0, n, r)):
        return first, r  # runs of r each (a sweep's): spread by repeating, not gathering
    return first, np.cumsum(new, dtype=np.intp) - 1


def run_starts(*cols: np.ndarray) -> np.ndarray:
    """True where a run of points equal in every column begins (the first point always)."""
    new = np.empty(cols[0].size, dtype=bool)
    new[:1] = True
    np.not_equal(cols[0][1:], cols[0][:-1], out=new[1:])
    for c in cols[1:]:
        new[1:] |= c[1:] != c[:-1]
    return new


def _pow16(x: int) -> int:
    return 1 << -(-max(x - 1, 0).bit_length() // 4) * 4


def _int64_safe(cf: ClosedForm, phase: str, p: int, regime: Regime, b: int, t: int,
                s: int) -> bool:
    """Whether every value and intermediate stays below 2⁶² wherever B ≤ b, T ≤ t, pp ≤ s."""
    full = cf._regime_for(phase, 1, regime.lo)
    # every derived value is monotone in the polynomials' counts, so evaluating it exactly at
    # the largest B, T and s with all coefficients made positive (a majorant of the
    # numerators) and 64-bit dtypes bounds it, and every intermediate, on the whole grid
    fm, rm = full.majorant(), regime.majorant()
    wide = dict.fromkeys(("w", "kv", "act"), 64)
    # (a byte count's intermediate, elements·bits + 7, is at most 8× the bytes + 7); in
    # Python ints, exact at any size
    vals = cf.compute(fm, rm, p, b, t, s, wide, None, SCALARS)
    worst = 8 * max(vals.values()) + 7
    for r in (fm, rm):
        worst = max(worst, *(q.at(b, t) for q in r.polys.values()))
    return worst < INT64_LIMIT


def distinct(a: np.ndarray) -> np.ndarray:
    """np.unique(a), sorted: with counts asked, NumPy skips the masked-array test of its hash
    path, whose first call imports numpy.ma (~20 ms of a sweep's start)."""
    return np.unique(a, return_counts=True)[0]


def _as_slice(idx: np.ndarray) -> np.ndarray | slice:
    """A contiguous run of indices as a slice: a view instead of a gather and a scatter."""
    if idx.size and int(idx[-1]) - int(idx[0]) + 1 == idx.size:
        return slice(int(idx[0]), int(idx[-1]) + 1)
    return idx


def _bits(names: np.ndarray) -> np.ndarray:
    """Bits per element of each point: dtype names, or bit counts passed as integers."""
    if names.dtype.kind in "iu":
        return names.astype(np.int64, copy=False)
    out = np.zeros(names.size, dtype=np.int64)
    for name in np.unique(names):
        if str(name) not in DTYPE_BITS:
            raise ShapecalcError("dtype", f"unknown dtype {name!r}; known: {', '.join(DTYPE_BITS)}")
        out[names == name] = DTYPE_BITS[str(name)]
    return out


def _format_name(names: np.ndarray) -> str | None:
    """The first weight format (mxfp4, nvfp4, nf4) among dtype names, if any."""
    if names.dtype.kind in "iu":
        return None
    return next((str(x) for x in np.unique(names) if str(x) in DTYPE_FORMATS), None)


def _phase_codes(ph: np.ndarray) -> np.ndarray:
    if ph.dtype.kind in "iub":
        return ph.astype(bool)
    out = np.zeros(ph.size, dtype=bool)
    for name in np.unique(ph):
        if str(name) not in ("prefill", "decode"):
            raise ShapecalcError("phase", f"{name!r} is not one of 'prefill', 'decode'")
        out[ph == name] = str(name) == "decode"
    return out
