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

from typing import TYPE_CHECKING, Any

from ..interpret.symbolic import stages as symbolic_stages
from ..model.config import (
    DTYPE_BITS,
    MLA_DEFAULT,
    ModelConfig,
    ShapecalcError,
    Workload,
    act_width,
    check,
)
from ..model.conventions import FUSED
from ..model.parallel import (
    ep_rank_expert_params,
    kv_heads_per_rank,
    split_elements_per_token,
    stage_params,
)
from ..model.plan import layer_plan
from ..model.quantization import DTYPE_FORMATS, Quantization
from .poly import FIT_DTYPES, measure
from .regime import Regime
from .scalar import SCALARS
from .totals import Totals, nbytes, totals

if TYPE_CHECKING:
    from ..model.quant_tensors import WeightSums

INT64_LIMIT = 2**62  # leave a factor 2 of headroom under 2⁶³ for the last addition
INTERVALS_KEPT = 1 << 16  # ClosedForm.interval's memo (a sweep asks it for every distinct T)


class ClosedForm:
    """Closed-form totals of one model under fixed logits / attention-FLOPs / mask switches."""

    def __init__(
        self,
        model: ModelConfig,
        logits: str = "all",
        attention_flops: str = "full",
        padding_mask: bool = False,
        block_size: int = 16,
        mla_form: str | None = None,
        weights: Quantization | None = None,
        mixers: tuple[str | None, str | None, str | None] = (None, None, None),
        selection: str = "eager",
    ):
        self.model = model
        self.selection = selection  # DSA models: eager or sparse (Workload.selection)
        # the stateful mixers' conventions: (mixer_flops, state_cache, state_dtype)
        self.mixers = mixers
        if mixers[0] == FUSED and "gated_deltanet" in model.mixers:
            raise ShapecalcError("mixer_flops", "fused: fla's triangular inverse is cubic in a "
                                 "chunk's last 16-block, and the closed form (fit, sweep, "
                                 "compare) holds polynomials of degree 2 in T; trace and verify "
                                 "count it")
        # the weights' format (quant.weight_format): None is params × bits at each point's dtype
        self.weights = weights
        self._sums: dict[int, WeightSums] = {}
        self.logits = logits
        self.attention_flops = attention_flops
        self.padding_mask = padding_mask
        self.block_size = block_size
        self.mla_form = mla_form  # MLA models: the cache and decode form (None: absorbed)
        self.mla = mla_form or MLA_DEFAULT
        self._fits: dict[tuple[str, int, int], Regime] = {}  # (phase, p, lo): one regime
        self._intervals: dict[tuple[str, int], tuple[int, int | None]] = {}  # (phase, t)

    # -- fitting -------------------------------------------------------------------------------
    def workload(self, batch: int, seq: int, phase: str, tp: int, **dt: str) -> Workload:
        return Workload(
            batch=batch, seq=seq, phase=phase, tp=tp, logits=self.logits,  # type: ignore[arg-type]
            attention_flops=self.attention_flops,  # type: ignore[arg-type]
            padding_mask=self.padding_mask, block_size=self.block_size,
            mla_form=self.mla_form, selection=self.selection, **dict(zip(  # type: ignore[arg-type]
                ("mixer_flops", "state_cache", "state_dtype"), self.mixers, strict=True)), **dt,
        )

    def seq_limit(self, phase: str) -> int | None:
        """The largest T `check` accepts (a learned position table), else None."""
        m = self.model
        if m.positions == "learned" and m.max_positions is not None:
            return m.max_positions - (1 if phase == "decode" else 0)
        return None

    def _cuts(self, phase: str) -> tuple[set[int], set[int]]:
        """The last T of a regime: each window W of the layer plan cuts at T = W (prefill: the
        window mask appears past it; decode: T+1 keys reach W); and each chunk size C at every
        multiple of C (prefill: the last chunk restarts past it; decode: at every j·C − 1, the
        new token opens a chunk). Returns (cuts, chunk sizes)."""
        kinds = layer_plan(self.model).kinds
        cuts = {w if phase == "prefill" else w - 1
                for w in (k.window for k in kinds)
                if w is not None and (w > 1 or phase == "prefill")}
        chunks = {k.chunk for k in kinds if k.chunk is not None}
        m = self.model
        if m.index_topk is not None:  # DSA: min(K_sel, keys) selected, a window's cut
            cuts.add(m.index_topk if phase == "prefill" else m.index_topk - 1)
        if m.block_sparse:  # ⌈T′/S_blk⌉ blocks, a query's place in its block; K_blk·S_blk
            chunks.add(m.index_block_size)  # type: ignore[arg-type]
            reach = m.index_topk_blocks * m.index_block_size  # type: ignore[operator]
            cuts.add(reach if phase == "prefill" else reach - 1)
        if {"mamba2", "gated_deltanet", "parallel", "kda"} & set(m.mixers) and phase == "prefill":
            # ⌈T/L⌉ chunks; max(T, K_c) conv inputs
            chunks.add(m.scan_chunk)  # type: ignore[arg-type]
            cuts.add(m.conv_kernel)  # type: ignore[arg-type]
        if {"short_conv", "mamba1"} & set(m.mixers) and phase == "prefill":  # no chunk: max(T,
            # K_c) conv inputs
            cuts.add(m.conv_kernel)  # type: ignore[arg-type]
        return cuts, chunks

    def _ratios(self) -> set[int]:
        """DeepSeek-V4's compression ratios (m′, m): entries close every m′ tokens."""
        return {r for r in (self.model.compress_ratio_hca, self.model.compress_ratio_csa)
                if r is not None}

    def interval(self, phase: str, t: int) -> tuple[int, int | None]:
        """The range [lo, hi] of T holding T = t within which the stage list keeps one structure
        (hi None: unbounded; a learned position table bounds it); kept (a grid, and each grid
        of a planner's loop, looks up the same T again; at most INTERVALS_KEPT, then afresh)."""
        key = (phase, t)
        if key not in self._intervals:
            if len(self._intervals) >= INTERVALS_KEPT:
                self._intervals.clear()
            self._intervals[key] = self._interval(phase, t)
        return self._intervals[key]

    def _interval(self, phase: str, t: int) -> tuple[int, int | None]:
        cuts, chunks = self._cuts(phase)
        lo = max((c for c in cuts if c < t), default=0) + 1
        his = [c for c in cuts if c >= t]
        off = 0 if phase == "prefill" else -1
        periods = [(C, off) for C in chunks]
        for r in self._ratios():  # ⌊(T + decode)/m′⌋ entries: a cut at each j·m′ − 1
            periods.append((r, off - 1))  # (prefill), j·m′ − 2 (decode)
            if phase == "decode":  # and the one step that closes a window, T = j·m′ − 1
                periods.append((r, off))
        for C, o in periods:  # the periodic cuts j·C + o, j ≥ 1
            if (j := (t - 1 - o) // C) >= 1:
                lo = max(lo, j * C + o + 1)
            his.append(max(1, -(-(t - o) // C)) * C + o)
        hi = min(his, default=None)
        limit = self.seq_limit(phase)
        return lo, (limit if hi is None else min(hi, limit)) if limit is not None else hi

    def intervals(self, phase: str, upto: int | None = None) -> list[tuple[int, int | None]]:
        """The regimes' ranges of T in order, up to the one holding `upto` (default: all; with
        chunked layers, which repeat without end, the first two periods past every other cut)."""
        cuts, chunks = self._cuts(phase)
        chunks = chunks | self._ratios()  # periodic too (interval)
        if upto is None and chunks:
            upto = max(cuts, default=0) + 2 * max(chunks) + 1
        hi_limit = self.seq_limit(phase)
        out: list[tuple[int, int | None]] = []
        t = 1
        while hi_limit is None or t <= hi_limit:
            lo, hi = self.interval(phase, t)
            out.append((lo, hi))
            if hi is None or (upto is not None and hi >= upto):
                break
            t = hi + 1
        return out

    def regimes(self, phase: str, p: int) -> list[Regime]:
        """The regimes of `intervals(phase)`, fitted."""
        return [self._regime_for(phase, p, lo) for lo, _ in self.intervals(phase)]

    def _fit(self, phase: str, p: int, lo: int, hi: int | None) -> Regime:
        """One run of the pipeline in poly mode, at a point inside the regime, gives every
        number of the regime as a polynomial in B and T."""
        wl = self.workload(1, lo, phase, p, **FIT_DTYPES)
        plan = layer_plan(self.model)
        polys, tags = measure(symbolic_stages(self.model, wl, p, poly=True), plan)
        # (measure's attn_causal: the QKᵀ and A·V FLOPs a causal kernel does, the lower
        # triangle, whatever the counting convention: times are planned on them)
        return Regime(lo, hi, polys, tags, phase == "decode")

    # -- per-model constants -------------------------------------------------------------------
    def _kv_bytes(self, xp: Any, n: int, dtype: Any, bits: dict[str, Any], layers: int | None,
                  reach: Any, apart_only: bool = False) -> Any:
        """A token's cache bytes per point: its KV-dtype elements, and (dots3) its indexer
        keys in their own dtype; `apart_only`: those keys only."""
        p = 1
        lat, apart = split_elements_per_token(self.model, p, layers, self.mla, reach)
        out = xp.zeros(n, dtype=dtype) if apart_only else nbytes(lat, "kv", bits)
        if apart:
            out = out + nbytes(apart, self.model.index_cache_dtype or "kv", bits)
        return out

    def kv_heads_per_rank(self, p: int) -> int:
        return kv_heads_per_rank(self.model, p)

    def stage_params(self, p: int, s: int, ep: int = 1) -> list[int]:
        """Parameters per rank of each pipeline stage (TP degree p, s stages, routed experts
        split over ep ranks), as `parallel.stage_params` places them."""
        r = self._regime_for("prefill", p, 1).polys
        plan = layer_plan(self.model)
        per_layer = [r[f"kind_params.{k}"].at(1, 1) for k in range(len(plan.kinds))]
        if ep > 1:  # whole experts, E/ep a rank, in place of each expert's Dff_e/p slice
            full = self._regime_for("prefill", 1, 1).polys
            per_layer = [v - (sl := r[f"kind_expert_params.{k}"].at(1, 1))
                         + ep_rank_expert_params(sl, full[f"kind_expert_params.{k}"].at(1, 1), ep)
                         for k, v in enumerate(per_layer)]
        emb, head, embed = (r[k].at(1, 1) for k in ("emb_params", "head_params", "embed_params"))
        return stage_params(plan, s, per_layer, emb, head, embed, self.model.tie_embeddings)

    def weight_sums(self, p: int) -> WeightSums:
        """One rank's weight bytes under the format, tensor by tensor (quant.weight_sums)."""
        assert self.weights is not None
        if p not in self._sums:
            from ..model.quant_tensors import weight_sums  # a weight format's tensors only

            self._regime_for("prefill", p, 1)  # the tp rules first
            st = symbolic_stages(self.model, self.workload(1, 1, "prefill", p), p)
            self._sums[p] = weight_sums(self.model, st, self.weights, p)
        return self._sums[p]

    def stage_weight_bytes(self, p: int, s: int, ep: int = 1) -> list[int]:
        """One rank's weight bytes on each pipeline stage under the format."""
        from ..model.quant_tensors import stage_weight_bytes

        return stage_weight_bytes(self.model, self.weight_sums(p), self.weight_sums(1), s, ep)

    # -- evaluation ----------------------------------------------------------------------------
    def at(self, batch: int, seq: int, phase: str, tp: int, pp: int = 1, dtype: str = "bf16",
           kv_dtype: str | None = None, act_dtype: str | None = None, causal: bool = True
           ) -> Totals:
        """Totals at one point, in Python ints (exact at any size; no NumPy); `causal=False`
        leaves out the causal kernel's FLOPs (memory alone: fewer totals to evaluate)."""
        if min(batch, seq, tp, pp) < 1:
            raise ShapecalcError("grid", "batch, seq, tp and pp must be ≥ 1")
        for d in (dtype, kv_dtype, act_dtype):
            if d is not None and d not in DTYPE_BITS:
                raise ShapecalcError(
                    "dtype", f"unknown dtype {d!r}; known: {', '.join(DTYPE_BITS)}")
        plain_only(self, dtype, kv_dtype, act_dtype)
        act = act_dtype or act_width(dtype)
        bits = {"w": DTYPE_BITS[dtype], "kv": DTYPE_BITS[kv_dtype or act],
                "act": DTYPE_BITS[act]}
        rank = self._regime_for(phase, tp, seq)  # tp rules first
        full = self._regime_for(phase, 1, seq)
        return self.compute(full, rank, tp, batch, seq, pp, bits, None, SCALARS, causal)

    def _regime_for(self, phase: str, p: int, t: int) -> Regime:
        """The regime holding T = t, fitted once (the tp rules checked first)."""
        if not any(k[:2] == (phase, p) for k in self._fits):
            check(self.model, self.workload(1, 1, phase, p))  # tp rules, pp aside
        limit = self.seq_limit(phase)
        if limit is not None and t > limit:
            raise ShapecalcError(
                "seq", f"{t} is beyond the learned position table (largest {phase} seq: {limit})"
            )
        lo, hi = self.interval(phase, t)
        key = (phase, p, lo)
        if key not in self._fits:
            self._fits[key] = self._fit(phase, p, lo, hi)
        return self._fits[key]

    def compute(self, full: Regime, rank: Regime, p: int, B: Any, T: Any, S: Any,
                bits: dict[str, Any], dtype: Any, xp: Any, causal: bool = True,
                runs: tuple[Any, Any] | None = None, workspace: bool = False
                ) -> Totals:
        """Every total of the points of one regime (full: p = 1; rank: one of p ranks), over
        arrays (xp = grid.ARRAYS) or at one point (xp = SCALARS), each computed when first read
        (totals.py). `runs` (arrays): the first point of each run of points with the same (B,
        T), and each point's run (or the length of every run): the polynomials, of B and T
        alone, are evaluated once a run. `workspace`: the two activation workspaces alone (a
        planner sizes them at other tokens than its T)."""
        return totals(self, full, rank, p, B, T, S, bits, dtype, xp, causal, runs, workspace)


def plain_only(cf: ClosedForm, dtype: Any, kv: Any, act: Any) -> None:
    """A weight format (mxfp4, nvfp4, nf4) is not bits per element: its weights need the closed
    form made for it (plan/cases.closed_form_for), and no cache or activation has one."""
    for name, d in (("kv_dtype", kv), ("act_dtype", act), ("dtype", dtype)):
        if isinstance(d, str) and d in DTYPE_FORMATS and (name != "dtype" or cf.weights is None):
            raise ShapecalcError(name, f"{d} is a weight format with block scales, not bits per "
                                 "element: evaluate it with plan.cases.closed_form_for")
