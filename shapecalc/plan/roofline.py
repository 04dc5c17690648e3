"""Memory and roofline times over NumPy grids (sweep): the closed form evaluated at every point,
then memory.py's formulas for each (tp, pp) in the grid."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..costs.closed import INT64_LIMIT, ClosedForm
from ..costs.grid import ARRAYS, distinct, evaluate
from ..costs.totals import Totals
from ..inputs.hardware import GPU
from .memory import memory, phase_terms, times, workspace_tokens
from .options import PlanOptions
from .perf import DECODE_COLUMNS, expected_decode, expected_prefill, perf_params


def _rows(src: Mapping[str, np.ndarray], sel: np.ndarray) -> Totals:
    """`src`'s columns at the points `sel`, each gathered when first read: memory() reads a few
    of the ~50 totals (gathering all of them at each (tp, pp) was ~8% of a --gpu sweep)."""
    out = Totals()
    out.formulas = {k: (lambda _, k=k: src[k][sel]) for k in src}
    return out


def plan_arrays(
    cf: ClosedForm,
    gpu: GPU,
    opts: PlanOptions,
    B: np.ndarray,
    T: np.ndarray,
    P: np.ndarray,
    S: np.ndarray,
    wbits: np.ndarray,
    kvbits: np.ndarray,
    actbits: np.ndarray,
    peak: np.ndarray,
    with_times: bool = True,
    ep: int = 1,
    bound: tuple[int, int, int] | None = None,
) -> dict[str, np.ndarray]:
    """Memory per rank (exact integers), and roofline times (floats; NaN where the GPU has no
    peak for the compute dtype or decode at T is outside the model's positions) at each point."""
    n = B.size
    if n and int(B.max()) * int(T.max()) >= INT64_LIMIT:  # B·T (tokens) past int64: Python ints
        B, T = B.astype(object), T.astype(object)
    pre = evaluate(cf, B, T, 0, P, S, wbits, kvbits, actbits, bound=bound)
    dtype = pre["params"].dtype
    key = f"workspace_{opts.attention}_bytes_per_rank"
    if opts.max_batched_tokens is None:
        ws = pre[key]
    else:
        tokens = workspace_tokens(cf, opts, B, T, ARRAYS)
        ws = evaluate(cf, np.ones_like(B), tokens, 0, P, S, wbits, kvbits, actbits,
                      workspace=True)[key]
        ws = ws.astype(dtype)
    act = 2 * ws
    out: dict[str, np.ndarray] = {}
    P64, S64 = P.astype(np.int64), S.astype(np.int64)
    wide = int(S64.max(initial=0)) + 1  # each (tp, pp) as one integer: a 1-D unique
    for p, s in (divmod(int(k), wide) for k in distinct(P64 * wide + S64)):
        sel = np.flatnonzero((P == p) & (S == s))
        part = memory(cf, gpu, opts, int(p), int(s), _rows(pre, sel),
                      act[sel], wbits[sel], kvbits[sel], sel.size, dtype, ARRAYS, ep)
        for k, v in part.items():
            if k not in out:
                out[k] = np.zeros(n, dtype=v.dtype)
            out[k][sel] = v
    if not with_times:
        return out
    limit = cf.seq_limit("decode")
    ok = np.ones(n, dtype=bool) if limit is None else (T <= limit)
    # decode where T has one (every T: views of the grid, and its arrays as they are)
    idx = slice(None) if ok.all() else np.flatnonzero(ok)
    some = bool(ok.any())
    if some:
        d = evaluate(cf, B[idx], T[idx], 1, P[idx], S[idx], wbits[idx], kvbits[idx], actbits[idx],
                     bound=bound)
        terms = phase_terms(cf, gpu, opts, d, peak[idx], B[idx], wbits[idx], ARRAYS, ep)
    dc, dm, dl = (_at_decode(terms[i] if some else None, idx, n, np.nan) for i in range(3))
    gpus = ARRAYS.floats(P) * ARRAYS.floats(S)
    out.update(times(opts, B, T, gpus, phase_terms(cf, gpu, opts, pre, peak, B * T, wbits,
                                                   ARRAYS, ep), (dc, dm, dl), ARRAYS))
    # the calibrated expectation (plan/perf.py) beside the bound; decode where there is one
    pp = perf_params(gpu, opts.perf)
    serving = ARRAYS.floats(np.maximum(P, ep)) * ARRAYS.floats(S)
    out.update(expected_prefill(cf, gpu, pp, pre, peak, B * T, wbits, ARRAYS, ep, S))
    part = expected_decode(cf, gpu, pp, d, peak[idx], B[idx], serving[idx], wbits[idx],
                           ARRAYS, ep, S[idx]) if some else {}
    for k in DECODE_COLUMNS:  # (the dominant term's labels kept where every T has a decode)
        out[k] = _at_decode(part.get(k), idx, n, None if k.endswith("dominant") else np.nan)
    return out


def _at_decode(v: np.ndarray | None, idx: np.ndarray | slice, n: int, fill: float | None
               ) -> np.ndarray:
    """Decode values at the points `idx` (of n) that have a decode, `fill` at the others."""
    if v is not None and isinstance(idx, slice):
        return v
    out = np.full(n, fill, dtype=object if fill is None else float)
    if v is not None:
        out[idx] = v
    return out
