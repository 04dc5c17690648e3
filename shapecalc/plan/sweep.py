"""sweep: every point of a grid over batch, seq, tp, pp, dtypes and phase, in closed form.

A grid is evaluated chunk by chunk (`SweepGrid.chunks`, at most CHUNK_POINTS points each), so
memory stays bounded whatever its size; `sweep` evaluates one case's whole grid at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..costs.closed import ClosedForm
from ..costs.fields import SWEEP_COLUMNS
from ..costs.grid import evaluate, scattered
from ..costs.totals import Totals
from ..inputs.hardware import GPU
from ..model.config import (
    DTYPE_BITS,
    ShapecalcError,
    act_width,
    check,
    compute_width,
    make_workload,
)
from ..model.defaults import default_seq
from .cases import Case, case_fields, closed_form_for, valid
from .columns import FIT_COLUMNS, PRICE_COLUMNS
from .options import PlanOptions
from .roofline import plan_arrays

SWEEP_KEYS = SWEEP_COLUMNS  # the trace's numbers, declared in costs/fields.py
SWEEP_FIT_KEYS = tuple(k for k, _ in FIT_COLUMNS)  # with --gpu (plan/columns.py)
PRICE_KEYS = tuple(k for k, _ in PRICE_COLUMNS)  # with --gpu and --price
AXIS_KEYS = ("batch", "seq", "phase", "tp", "pp", "dtype", "kv_dtype", "act_dtype")

# Points evaluated (and written) together. Measured on llama2-70b grids: 32,768 takes ~2% less
# CPU than 16,384 with --gpu (fewer NumPy calls a point), 65,536 more (its temporaries leave
# the caches); the peak grows with the chunk (evaluation temporaries, and Python ints where
# values pass 2⁶²): ~77 and ~97 MiB at 16,384 and 32,768 points (~203 and ~215 MiB with --gpu
# on the benchmark grid, its plans kept for the other phase included), ~290 MiB at 65,536
# with ints beyond int64.
CHUNK_POINTS = 32_768
# The most points (the product of the axes, over all cases, before skipping) one sweep takes:
# streamed, memory does not grow with it, but 10⁸ rows are ~27 GB of CSV and minutes of work;
# beyond that an axis was almost certainly mistyped.
MAX_POINTS = 100_000_000
# A rich table (and its SVG/HTML export) holds every row: at most this many.
MAX_TABLE_ROWS = 10_000
# The plan columns (--gpu) kept for the other phase's rows, at most (their texts, which the
# writer keeps beside them, take about as much again): past it a later phase computes its own,
# so memory stays bounded on any grid (the 663,552-point benchmark grid keeps 48 MiB)
KEPT_PLAN_BYTES = 64 << 20


@dataclass
class SweepAxes:
    batch: list[int]
    seq: list[int]
    tp: list[int]
    pp: list[int]
    dtype: list[str]
    kv_dtype: list[str | None]  # None: follows dtype
    phase: list[str]


@dataclass
class SweepChunk:
    """Columns of one model's rows (arrays of equal length) and the points it skipped.

    `codes` holds the text columns (phase, dtypes) also as (codes, labels): column[i] is
    labels[codes[i]], which a writer can format once per label."""

    case: str
    model: str
    columns: Mapping[str, np.ndarray]
    skipped: dict[str, int]
    codes: dict[str, tuple[np.ndarray, tuple[str, ...]]] = field(default_factory=dict)
    # shared by the chunks of both phases that hold the same plan columns (the same arrays): a
    # writer keeps each such column's text there once (render/sweep.py)
    memo: dict[Any, Any] | None = None
    # runs of rows that only the innermost axes tell apart (kv dtype; dtype × kv dtype; pp ×
    # dtype × kv dtype), the rows a multiple of each: a column that is the same along them is
    # formatted once a run (the writer)
    periods: tuple[int, ...] = ()

    def __len__(self) -> int:
        return int(next(iter(self.columns.values())).size) if self.columns else 0


class SweepGrid:
    """One case's grid: its keys, rows and skipped points known up front; its points evaluated
    chunk by chunk, in the order of `sweep` (phase and tp outermost, kv dtype innermost)."""

    def __init__(self, case: Case, axes: SweepAxes, fixed: dict[str, Any],
                 gpu: GPU | None = None, opts: PlanOptions | None = None) -> None:
        model = case.model
        fields, _ = case_fields(case, fixed)
        axis_names = ("batch", "seq", "tp", "pp", "dtype", "kv_dtype", "phase")
        base = make_workload({k: v for k, v in fields.items() if k not in axis_names})
        pick = {k: ([make_workload({k: fields[k]}).model_dump()[k]] if k in case.given else v)
                for k, v in vars(axes).items()}
        self.case, self.model = case.label, model.name
        self.axes_seq = pick["seq"][0]  # the first T (a default T's note: cli/sweep.py)
        self.gpu, self.opts = gpu, (opts or PlanOptions()) if gpu is not None else opts
        self.points = 1  # the product of the axes, before skipping
        for v in pick.values():
            self.points *= len(v)
        skipped: dict[str, int] = {}
        one = base.model_copy(update={"seq": 1})  # seq limits are checked per phase below
        # what check refuses at tp = pp = 1 (a flag for another kind of model) is the
        # workload's error, said as it is: not every tp of the axis skipped as invalid
        check(model, one.model_copy(update={"dtype": pick["dtype"][0],
                                            "kv_dtype": pick["kv_dtype"][0]}))
        tps = [p for p in pick["tp"] if valid(model, one, tp=p)]
        pps = [s for s in pick["pp"] if s <= model.n_layers]
        n_other = (len(pick["batch"]) * len(pick["seq"]) * len(pick["dtype"])
                   * len(pick["kv_dtype"]) * len(pick["phase"]))
        if len(tps) < len(pick["tp"]):
            skipped["tp"] = (len(pick["tp"]) - len(tps)) * len(pick["pp"]) * n_other
        if len(pps) < len(pick["pp"]):
            skipped["pp"] = (len(pick["pp"]) - len(pps)) * len(tps) * n_other
        self.ep = base.ep
        self.dnames = list(pick["dtype"])
        # a closed form for each dtype's weights (their format: quant.weight_format); the
        # plain dtypes share one, as before
        self.cfs = [closed_form_for(model, base.model_copy(update={"dtype": d}))
                    for d in self.dnames]
        self.cf = cf = self.cfs[0]
        knames = list(pick["kv_dtype"])
        # one segment per phase (outermost): its seq axis without the seqs beyond the positions
        self.segments: list[tuple[int, np.ndarray]] = []
        n_seq_skipped = 0
        for ph in (0 if x == "prefill" else 1 for x in pick["phase"]):
            lim = cf.seq_limit("decode" if ph else "prefill")
            seqs = [t for t in pick["seq"] if lim is None or t <= lim]
            n_seq_skipped += len(pick["seq"]) - len(seqs)
            self.segments.append((ph, np.array(seqs, dtype=np.int64)))
        inner = (len(tps) * len(pick["batch"]) * len(pps) * len(self.dnames) * len(knames))
        if n_seq_skipped and inner:
            skipped["seq"] = n_seq_skipped * inner
        self.skipped = skipped
        self.tps = np.array(tps, dtype=np.int64)
        self.batches = np.array(pick["batch"], dtype=np.int64)
        self.pps = np.array(pps, dtype=np.int64)
        self.act_name = fields.get("act_dtype")
        # each dtype's activations (config.act_width unless --act-dtype) and GEMM dtype
        self.acts = [self.act_name or act_width(d) for d in self.dnames]
        self.kv_labels = tuple(dict.fromkeys(
            [*self.acts, *(k for k in knames if k is not None)]))
        kidx = {k: i for i, k in enumerate(self.kv_labels)}
        # the kv dtype name of each (dtype, kv dtype) pair: None follows the activations
        self.kv_of = np.array([[kidx[a if k is None else k] for k in knames]
                               for a in self.acts], dtype=np.int64).reshape(
                                   len(self.dnames), len(knames))
        self.abits = np.array([DTYPE_BITS[a] for a in self.acts], dtype=np.int64)
        self.dbits = np.array([DTYPE_BITS[d] for d in self.dnames], dtype=np.int64)
        self.kbits = np.array([DTYPE_BITS[k] for k in self.kv_labels], dtype=np.int64)
        # the axes of a phase's segment, seq (index 2) set per segment
        self.shape = [len(tps), len(pick["batch"]), 0, len(pps), len(self.dnames), len(knames)]
        self.rows = sum(self._seg_rows(seq) for _, seq in self.segments)
        # the grid's largest (B, T, pp): int64 proven there once, not chunk by chunk
        self.bound = (max(pick["batch"], default=1), max(pick["seq"], default=1),
                      max(pps, default=1))
        k, d, s = self.shape[5], self.shape[4], self.shape[3]
        self.inner = s * d * k
        self.periods = tuple(x for x in dict.fromkeys((k, d * k, s * d * k)) if x > 1)
        self.cf_fit = None
        self.cfs_fit = self.cfs
        # plans kept for the same rows of a later phase (chunks): popped when used
        self._plans: dict[Any, tuple[Mapping[str, np.ndarray], dict[Any, Any]]] = {}
        self._kept = 0  # bytes of the plans kept
        if gpu is not None:
            # serving computes the logits of the last position only (unless --logits says so)
            if "logits" not in fields:
                self.cfs_fit = [closed_form_for(model, base.model_copy(
                    update={"logits": "last", "dtype": d})) for d in self.dnames]
            self.cf_fit = self.cfs_fit[0]
        self.keys = ["case", "model", *AXIS_KEYS, *SWEEP_KEYS]
        if gpu is not None:
            self.keys += SWEEP_FIT_KEYS
            if self.opts is not None and self.opts.price is not None:
                self.keys += PRICE_KEYS

    def _seg_rows(self, seq: np.ndarray) -> int:
        n = 1
        for i, x in enumerate(self.shape):
            n *= seq.size if i == 2 else x
        return n

    def chunks(self, size: int | None = None) -> Iterator[SweepChunk]:
        """The rows in order, at most `size` a chunk (default CHUNK_POINTS)."""
        size = max(1, CHUNK_POINTS if size is None else size)
        if size >= self.rows:
            if self.rows:
                yield self._evaluate(0, self.rows)
            return
        if self.inner <= size:  # whole runs (every segment is a multiple of them)
            size -= size % self.inner
        # chunked within each phase's segment: a later phase's chunk at the same place in an
        # equal segment has the same (tp, batch, seq, pp, dtypes), so the same plan (below)
        start = 0
        for _, seq in self.segments:
            end = start + self._seg_rows(seq)
            per_tp = (end - start) // self.shape[0]  # a tp degree's rows (tp is outermost)
            if per_tp > size >= self.inner:
                # each degree's rows in near-equal chunks of whole runs: one degree a chunk, so
                # its points are evaluated as one part, none gathered and scattered (~2%)
                step = -(-(per_tp // self.inner) // -(-per_tp // size)) * self.inner
                for first in range(start, end, per_tp):
                    for lo in range(first, first + per_tp, step):
                        yield self._evaluate(lo, min(first + per_tp, lo + step))
            else:
                for lo in range(start, end, size):
                    yield self._evaluate(lo, min(end, lo + size))
            start = end

    def _indices(self, lo: int, hi: int) -> tuple[np.ndarray, ...]:
        """Phase codes and the axes' values of rows lo..hi."""
        parts = []
        start = 0
        for ph, seq in self.segments:
            n = self._seg_rows(seq)
            a, b = max(lo, start) - start, min(hi, start + n) - start
            if a < b and a % self.inner == b % self.inner == 0:  # whole runs of the inner axes
                m, r = (b - a) // self.inner, self.inner
                outer = [*self.shape[:2], seq.size]
                ti, bi, si = np.unravel_index(np.arange(a // r, b // r), outer)
                pi, di, ki = np.unravel_index(np.arange(r), self.shape[3:])
                parts.append((np.full(b - a, ph, dtype=np.int64), np.repeat(self.tps[ti], r),
                              np.repeat(self.batches[bi], r), np.repeat(seq[si], r),
                              np.tile(self.pps[pi], m), np.tile(di, m),
                              np.tile(self.kv_of[di, ki], m)))
            elif a < b:
                shape = [*self.shape[:2], seq.size, *self.shape[3:]]
                ti, bi, si, pi, di, ki = np.unravel_index(np.arange(a, b, dtype=np.int64), shape)
                parts.append((np.full(b - a, ph, dtype=np.int64), self.tps[ti], self.batches[bi],
                              seq[si], self.pps[pi], di, self.kv_of[di, ki]))
            start += n
        if len(parts) == 1:
            return parts[0]
        return tuple(np.concatenate(x) for x in zip(*parts, strict=True))

    def _plan_place(self, lo: int, hi: int) -> tuple[Any, bool, bool] | None:
        """Where rows lo..hi lie in their phase's segment, and whether an earlier segment (the
        plan is there: look it up) or a later one (keep it) has the same seq axis; None when
        they span two segments. The plan (--gpu) takes no phase: both phases' rows share it."""
        start = 0
        for i, (_, seq) in enumerate(self.segments):
            end = start + self._seg_rows(seq)
            if start <= lo and hi <= end:
                same = [np.array_equal(seq, s) for _, s in self.segments]
                return (lo - start, hi - start, seq.tobytes()), any(same[:i]), any(same[i + 1:])
            start = end
        return None

    def _evaluate(self, lo: int, hi: int) -> SweepChunk:
        ph, P, B, T, S, di, kvi = self._indices(lo, hi)
        dbits, kbits, abits = self.dbits[di], self.kbits[kvi], self.abits[di]
        res = _by_weights(self.cfs, di, lambda cf, i: evaluate(
            cf, B[i], T[i], ph[i], P[i], S[i], dbits[i], kbits[i], abits[i], bound=self.bound))
        phases = ("prefill", "decode")
        dn = np.array(self.dnames, dtype=object)
        kn = np.array(self.kv_labels, dtype=object)
        codes: dict[str, tuple[np.ndarray, tuple[str, ...]]] = {
            "phase": (ph, phases), "dtype": (di, tuple(self.dnames)),
            "kv_dtype": (kvi, self.kv_labels),
            "act_dtype": (di, tuple(self.acts)),
        }
        # the text columns as object arrays when first read (a writer reads their codes)
        cols = Totals()
        cols.formulas.update({
            "batch": lambda _: B, "seq": lambda _: T,
            "phase": lambda _: np.array(phases, dtype=object)[ph],
            "tp": lambda _: P, "pp": lambda _: S, "dtype": lambda _: dn[di],
            "kv_dtype": lambda _: kn[kvi],
            "act_dtype": lambda _: np.array(self.acts, dtype=object)[di],
        })
        for k in SWEEP_KEYS:
            cols[k] = res[k]
        memo: dict[Any, Any] | None = None
        if self.gpu is not None and self.cf_fit is not None:
            gpu, opts = self.gpu, self.opts or PlanOptions()
            # the peak FLOP/s of each dtype's compute dtype (NaN where the GPU has none)
            names = [opts.compute_dtype or compute_width(d, a)
                     for d, a in zip(self.dnames, self.acts, strict=True)]
            peaks = [gpu.peak(str(x)) for x in names]
            peak = np.array([np.nan if v is None else v for v in peaks], dtype=float)[di]
            place = self._plan_place(lo, hi)
            if place is not None and place[1] and place[0] in self._plans:
                plan, memo = self._plans.pop(place[0])
                self._kept -= _plan_bytes(plan)
            else:
                with np.errstate(over="ignore"):  # a time past 1.8e308 is inf, written null
                    plan = _by_weights(self.cfs_fit, di, lambda cf, i: plan_arrays(
                        cf, gpu, opts, B[i], T[i], P[i], S[i], dbits[i], kbits[i], abits[i],
                        peak[i], ep=self.ep, bound=self.bound))
            if place is not None and place[2]:  # kept: the columns written, their texts
                plan = {k: plan[k] for k in (*SWEEP_FIT_KEYS, *PRICE_KEYS) if k in plan}
                if self._kept + (size := _plan_bytes(plan)) <= KEPT_PLAN_BYTES:
                    memo = {"columns": frozenset(plan)} if memo is None else memo
                    self._plans[place[0]] = plan, memo
                    self._kept += size
            for k in SWEEP_FIT_KEYS:
                cols[k] = plan[k]
            if opts.price is not None:
                for k in PRICE_KEYS:
                    cols[k] = plan[k]
        aligned = lo % self.inner == 0 and (hi - lo) % self.inner == 0
        return SweepChunk(self.case, self.model, cols, self.skipped, codes, memo,
                          self.periods if aligned else ())


def _plan_bytes(cols: Mapping[str, np.ndarray]) -> int:
    """The bytes of a plan's arrays, each once (ttft_s is prefill_s's array)."""
    return sum({id(v): v.nbytes for v in cols.values()}.values())


def _by_weights(cfs: list[ClosedForm], di: np.ndarray,
                run: Callable[[ClosedForm, Any], Mapping[str, np.ndarray]]
                ) -> Mapping[str, np.ndarray]:
    """`run` on the points of each closed form (a dtype's weights, `di` each point's dtype),
    scattered back in order; all the points at once when every dtype shares one (plain)."""
    forms = list(dict.fromkeys(cfs))
    if len(forms) == 1:
        return run(forms[0], slice(None))
    parts = []
    for cf in forms:
        idx = np.flatnonzero(np.isin(di, [i for i, c in enumerate(cfs) if c is cf]))
        if idx.size:
            parts.append((run(cf, idx), idx))
    return scattered(di.size, parts)  # each column when read (object where dtypes differ)


def sweep(
    case: Case,
    axes: SweepAxes,
    fixed: dict[str, Any],
    gpu: GPU | None = None,
    opts: PlanOptions | None = None,
) -> SweepChunk:
    """All points of the grid for one case, evaluated at once. Points `check` refuses (tp not
    dividing the heads, pp > N, seq beyond a learned position table) are skipped and counted."""
    grid = SweepGrid(case, axes, fixed, gpu, opts)
    for chunk in grid.chunks(grid.rows):
        return chunk
    empty = {k: np.zeros(0, dtype=np.int64) for k in grid.keys[2:]}
    return SweepChunk(grid.case, grid.model, empty, grid.skipped)


REASONS = {"tp": "tp is not a valid degree for the model's heads / Dff",
           "pp": "pp exceeds the layers",
           "seq": "seq exceeds the learned position table"}


def sweep_grids(cases: list[Case], given: dict[str, list[Any]], phases: list[str] | None,
                fixed: dict[str, Any], gpu: GPU | None, opts: PlanOptions | None
                ) -> list[SweepGrid]:
    """One grid a case (what `shapecalc sweep` and the API's sweep run): an axis not given takes
    the case's [workload] value, else the default. Refuses a sweep beyond MAX_POINTS, or one
    with no valid point."""
    out = []
    for case in cases:
        fields0 = case_fields(case, fixed)[0]
        w0 = make_workload(fields0)
        seq0 = w0.seq if fields0.get("seq") is not None else default_seq(
            case.model, phases or [w0.phase])  # a T the model fits (model/defaults.py)
        axes = SweepAxes(
            batch=given.get("batch", [w0.batch]), seq=given.get("seq", [seq0]),
            tp=given.get("tp", [w0.tp]), pp=given.get("pp", [w0.pp]),
            dtype=given.get("dtype", [w0.dtype]),
            kv_dtype=given.get("kv_dtype", [w0.kv_dtype]),
            phase=phases or [w0.phase],
        )
        out.append(SweepGrid(case, axes, fixed, gpu, opts))
    points = sum(g.points for g in out)
    if points > MAX_POINTS:
        raise ShapecalcError("grid", f"{points:,} points, more than the {MAX_POINTS:,} a sweep "
                             "takes: narrow an axis")
    if not sum(g.rows for g in out):
        raise ShapecalcError("grid", "no valid point (" + "; ".join(skipped_notes(out)) + ")")
    return out


def skipped_notes(grids: list[SweepGrid]) -> list[str]:
    """What each grid skipped, and why: one line a reason."""
    return [f"{g.case}: skipped {count:,} point{'s' if count > 1 else ''} where {REASONS[what]}"
            for g in grids for what, count in g.skipped.items()]
