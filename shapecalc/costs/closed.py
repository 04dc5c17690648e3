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
    bytes_of,
    check,
)
from ..model.conventions import FUSED
from ..model.parallel import (
    active_params,
    entries,
    entry_elements,
    ep_rank_expert_params,
    kv_groups,
    kv_heads_per_rank,
    paged_blocks,
    residual_width,
    ring_allreduce_bytes,
    split_elements_per_token,
    stage_params,
)
from ..model.plan import Chunk, layer_plan
from ..model.quantization import DTYPE_FORMATS, Quantization
from .poly import FIT_DTYPES, measure
from .regime import Regime
from .scalar import SCALARS

if TYPE_CHECKING:
    from ..model.quant_tensors import WeightSums

BITS: dict[str, int] = {**DTYPE_BITS, "int64": 64}
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
        out = xp.zeros(n, dtype=dtype) if apart_only else _nbytes(
            xp.full(n, lat, dtype=dtype), "kv", bits)
        if apart:
            out = out + _nbytes(xp.full(n, apart, dtype=dtype),
                                self.model.index_cache_dtype or "kv", bits)
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
           ) -> dict[str, int]:
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
                ) -> dict[str, Any]:
        """Every total of the points of one regime (full: p = 1; rank: one of p ranks), over
        arrays (xp = grid.ARRAYS) or at one point (xp = SCALARS). `runs` (arrays): the first
        point of each run of points with the same (B, T), and each point's run (or the length of
        every run): the polynomials, of B and T alone, are evaluated once a run. `workspace`: the
        two activation workspaces alone (a planner sizes them at other tokens than its T)."""
        m = self.model
        n = getattr(B, "size", 1)
        Bm, Tm, nm = (B, T, n) if runs is None else (B[runs[0]], T[runs[0]], runs[0].size)
        mono = {(0, 1): Tm, (0, 2): Tm * Tm, (1, 0): Bm, (1, 1): Bm * Tm}
        mono[(1, 2)] = mono[(1, 1)] * Tm

        def spread(v: Any) -> Any:  # a run's value on each of its points
            if runs is None:
                return v
            return v.repeat(runs[1]) if isinstance(runs[1], int) else v.take(runs[1])

        def ev(r: Regime, key: str) -> Any:
            return spread(r.polys[key].eval(mono, nm, dtype, xp))

        def const(r: Regime, key: str) -> int:
            poly = r.polys[key]
            assert poly.is_const, key
            return poly.num[0] // poly.den

        def byte_sum(r: Regime, prefix: str) -> Any:
            total = xp.zeros(n, dtype=dtype)
            for k, cls, rep in r.tagged(prefix):
                total = total + rep * _nbytes(ev(r, k), cls, bits)
            return total

        def largest(r: Regime, skip: tuple[str, ...] = ()) -> Any:
            # each class's most elements first (⌈e·bits/8⌉ grows with e), fixed dtypes' bytes (None)
            most: dict[str | None, Any] = {}
            for k, c in r.activations(skip):
                e = r.polys[k].eval(mono, nm, dtype, xp)
                cls = c if c in bits else None
                if cls is None:
                    e = bytes_of(e, BITS[c])
                most[cls] = e if cls not in most else xp.maximum(most[cls], e)
            best = spread(most.pop(None)) if None in most else xp.zeros(n, dtype=dtype)
            for cls, e in most.items():
                assert cls is not None
                best = xp.maximum(best, bytes_of(spread(e), bits[cls]))
            return best

        def workspaces() -> dict[str, Any]:
            # a rank's largest tensor but its KV cache: eager, and FlashAttention's (no scores)
            return {"workspace_eager_bytes_per_rank": largest(rank, ("cache",)),
                    "workspace_flash_bytes_per_rank": largest(rank, ("cache", "flash_skip"))}

        if workspace:
            return workspaces()
        out: dict[str, Any] = {}
        params = const(full, "params")
        out["params"] = xp.full(n, params, dtype=dtype)
        experts = const(full, "expert_params")
        out["active_params"] = xp.full(n, active_params(params, experts, m), dtype=dtype)
        out["expert_params"] = xp.full(n, experts, dtype=dtype)
        out["flops"] = ev(full, "flops")
        out["elementwise_flops"] = ev(full, "ew")
        out["weight_bytes"] = _nbytes(out["params"], "w", bits)
        out["expert_weight_bytes"] = _nbytes(out["expert_params"], "w", bits)
        out["kv_cache_bytes"] = byte_sum(full, "kv")
        out["state_cache_bytes"] = byte_sum(full, "state")
        # the longest cache at each point: with chunked layers the longest kind can change
        # within a regime (a chunk restarts), so the groups' tokens are compared per point
        out["kv_cache_tokens"] = xp.zeros(n, dtype=dtype)
        for g in range(len(kv_groups(layer_plan(m)))):
            out["kv_cache_tokens"] = xp.maximum(out["kv_cache_tokens"],
                                                ev(full, f"group_tokens.{g}"))
        out["kv_cache_bytes_per_token"] = self._kv_bytes(xp, n, dtype, bits, None, "any")
        # paged: each group of layers that share a window has its own blocks
        blocks = xp.zeros(n, dtype=dtype)
        paged = xp.zeros(n, dtype=dtype)
        for g, (reach, layers) in enumerate(kv_groups(layer_plan(m))):
            b_g = paged_blocks(B, ev(full, f"group_tokens.{g}"), self.block_size)
            out[f"kv_cache_blocks@{g}"] = b_g
            # planning sizes a chunked group for its fullest chunk on the way to T: min(n, C)
            # tokens (the cache at exactly n tokens may hold fewer)
            out[f"kv_cache_peak_blocks@{g}"] = b_g if not isinstance(reach, Chunk) else (
                paged_blocks(B, xp.minimum(T + int(full.decode), reach.size), self.block_size))
            blocks = blocks + b_g
            lat, apart = split_elements_per_token(m, 1, layers, self.mla, reach)
            per_token = _nbytes(xp.full(n, lat, dtype=dtype), "kv", bits)
            paged = paged + b_g * self.block_size * per_token
            if apart:  # dots3's fp32 indexer keys, held apart from the blocks
                paged = paged + B * ev(full, f"group_tokens.{g}") * self._kv_bytes(
                    xp, n, dtype, bits, layers, reach, apart_only=True)
        out["kv_cache_blocks"] = blocks
        # DeepSeek-V4's compressed entries, contiguous beside the paged window
        paged = paged + B * _nbytes(entry_elements(m, T, "decode" if full.decode else "prefill"),
                                    "kv", bits)
        out["kv_cache_paged_bytes"] = paged
        out["largest_activation_bytes"] = largest(full, ("cache",))  # the cache is apart
        # tensor parallel (one rank)
        out["tp"] = xp.full(n, p, dtype=dtype)
        out["kv_heads_per_rank"] = xp.full(n, self.kv_heads_per_rank(p), dtype=dtype)
        count = const(rank, "ar_count")
        one = _nbytes(ev(rank, "ar"), rank.tags["ar"], bits) if count else xp.zeros(n, dtype)
        out["allreduce_per_layer"] = xp.full(n, count, dtype=dtype)
        out["allreduce_bytes"] = one
        out["allreduce_bytes_per_layer"] = one * count
        out["allreduce_bytes_total"] = one * const(rank, "ar_layers")
        ring = ring_allreduce_bytes(one, p) if p > 1 else xp.zeros(n, dtype=dtype)
        out["ring_bytes_per_rank"] = ring
        out["ring_bytes_per_rank_total"] = ring * const(rank, "ar_layers")
        out["embedding_allreduce_bytes"] = byte_sum(rank, "emb_ar")
        out["logits_allgather_bytes"] = byte_sum(rank, "gather")
        params_rank = const(rank, "params")
        out["params_per_rank"] = xp.full(n, params_rank, dtype=dtype)
        out["expert_params_per_rank"] = xp.full(n, const(rank, "expert_params"), dtype=dtype)
        # the token-embedding table a rank holds (vocab-parallel: V/p rows): a step gathers rows
        out["embed_params_per_rank"] = xp.full(n, const(rank, "embed_params"), dtype=dtype)
        out["weight_bytes_per_rank"] = _nbytes(out["params_per_rank"], "w", bits)
        out["expert_weight_bytes_per_rank"] = _nbytes(out["expert_params_per_rank"], "w", bits)
        out["embed_weight_bytes_per_rank"] = _nbytes(out["embed_params_per_rank"], "w", bits)
        if self.weights is not None:  # the checkpoint's bytes, scales included
            wf, wr = self.weight_sums(1), self.weight_sums(p)
            for key, v in (("weight_bytes", wf.total), ("expert_weight_bytes", wf.expert_total),
                           ("weight_bytes_per_rank", wr.total),
                           ("expert_weight_bytes_per_rank", wr.expert_total),
                           ("embed_weight_bytes_per_rank", wr.table)):
                out[key] = xp.full(n, v, dtype=dtype)
        out["kv_cache_bytes_per_rank"] = byte_sum(rank, "kv")
        out["state_cache_bytes_per_rank"] = byte_sum(rank, "state")
        # each layer kind's state (one rank): what a pipeline stage's layers hold (plan/memory)
        phase = "decode" if full.decode else "prefill"
        for kind, spec in enumerate(layer_plan(m).kinds):
            out[f"state_bytes@{kind}"] = byte_sum(rank, f"kind_state.{kind}")
            if spec.compress:  # one layer's compressed entries of the batch (DeepSeek-V4)
                width = m.dh + (m.csa_index_head_dim or 0) * (spec.attention == "csa")
                out[f"entry_bytes@{kind}"] = B * _nbytes(
                    entries(spec.compress, T, phase) * width, "kv", bits)
        out["flops_per_rank"] = ev(rank, "flops")
        # the work a causal attention kernel does: FLOPs with QKᵀ and A·V's lower triangle
        for key, r in (("causal_flops", full), ("causal_flops_per_rank", rank)) if causal else ():
            out[key] = spread(r.polys["flops"].eval(mono, nm, dtype, xp)
                              - r.polys["attn"].eval(mono, nm, dtype, xp)
                              + r.attn_causal().eval(mono, nm, dtype, xp))
        ws = workspaces()
        out["largest_activation_bytes_per_rank"] = ws["workspace_eager_bytes_per_rank"]
        out.update(ws)
        # pipeline: the residual stream [B, Tq, D] (n_hc·D: hyper-connections) crosses each one
        boundary = _nbytes(B * ev(full, "tq") * residual_width(m), "act", bits)
        out["pp"] = S
        out["boundary_bytes"] = boundary * (S > 1)
        out["boundary_bytes_total"] = boundary * (S - 1)
        return out


def plain_only(cf: ClosedForm, dtype: Any, kv: Any, act: Any) -> None:
    """A weight format (mxfp4, nvfp4, nf4) is not bits per element: its weights need the closed
    form made for it (plan/cases.closed_form_for), and no cache or activation has one."""
    for name, d in (("kv_dtype", kv), ("act_dtype", act), ("dtype", dtype)):
        if isinstance(d, str) and d in DTYPE_FORMATS and (name != "dtype" or cf.weights is None):
            raise ShapecalcError(name, f"{d} is a weight format with block scales, not bits per "
                                 "element: evaluate it with plan.cases.closed_form_for")


def _nbytes(elems: Any, cls: str, bits: dict[str, Any]) -> Any:
    """⌈elements·bits/8⌉ per point; `cls` is a dtype class or a fixed dtype's name."""
    return bytes_of(elems, bits[cls] if cls in bits else BITS[cls])
