"""Every total of one regime's points, each a formula computed when first read.

A caller reads a few of the ~45 totals (planning reads ~12 at prefill and ~9 at decode), so each
is computed on demand, once, from the others it needs: a --gpu sweep spent two thirds of its
closed-form time on totals nobody read. Iterating the totals (or `dict(...)`) computes them all,
in the order below.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..model.config import DTYPE_BITS, bytes_of
from ..model.parallel import (
    active_params,
    entries,
    entry_elements,
    kv_groups,
    kv_heads_per_rank,
    paged_blocks,
    residual_width,
    ring_allreduce_bytes,
    split_elements_per_token,
)
from ..model.plan import Chunk, layer_plan
from .regime import Regime

BITS: dict[str, int] = {**DTYPE_BITS, "int64": 64}


class Totals(Mapping[str, Any]):
    """Named totals, each computed by its formula, given the totals (others it needs), when
    first read, then kept (a formula holds no reference to its totals: no cycle keeps them
    alive past their last use)."""

    __slots__ = ("computed", "formulas")

    def __init__(self) -> None:
        self.formulas: dict[str, Callable[..., Any]] = {}
        self.computed: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        try:
            return self.computed[key]
        except KeyError:
            v = self.computed[key] = self.formulas[key](self)
            return v

    def __setitem__(self, key: str, value: Any) -> None:
        """A total known already (kept as computed)."""
        self.formulas[key] = _known
        self.computed[key] = value

    def __iter__(self) -> Iterator[str]:
        return iter(self.formulas)

    def __len__(self) -> int:
        return len(self.formulas)

    def __contains__(self, key: object) -> bool:
        return key in self.formulas


def _known(t: Totals) -> Any:  # a value set, never computed
    raise AssertionError("a total set is kept as computed")


def nbytes(elems: Any, cls: str, bits: dict[str, Any]) -> Any:
    """⌈elements·bits/8⌉ per point; `cls` is a dtype class or a fixed dtype's name."""
    return bytes_of(elems, bits[cls] if cls in bits else BITS[cls])


def totals(cf: Any, full: Regime, rank: Regime, p: int, B: Any, T: Any, S: Any,
           bits: dict[str, Any], dtype: Any, xp: Any, causal: bool = True,
           runs: tuple[Any, Any] | None = None, workspace: bool = False) -> Totals:
    """ClosedForm.compute's totals (its docstring says what the arguments are); `cf` is the
    ClosedForm (not imported: closed.py imports this)."""
    m = cf.model
    plan = layer_plan(m)
    n = getattr(B, "size", 1)
    Bm, Tm, nm = (B, T, n) if runs is None else (B[runs[0]], T[runs[0]], runs[0].size)
    mono = {(0, 1): Tm, (0, 2): Tm * Tm, (1, 0): Bm, (1, 1): Bm * Tm}
    mono[(1, 2)] = mono[(1, 1)] * Tm
    evs: dict[tuple[int, str], Any] = {}

    def spread(v: Any) -> Any:  # a run's value on each of its points
        if runs is None:
            return v
        return v.repeat(runs[1]) if isinstance(runs[1], int) else v.take(runs[1])

    def at_runs(r: Regime, key: str) -> Any:
        return r.polys[key].eval(mono, nm, dtype, xp)

    def runs_ev(r: Regime, key: str) -> Any:  # kept: several totals read a group's tokens
        if (id(r), key) not in evs:
            evs[id(r), key] = at_runs(r, key)
        return evs[id(r), key]

    def ev(r: Regime, key: str) -> Any:
        return spread(runs_ev(r, key))

    def const(r: Regime, key: str) -> int:
        poly = r.polys[key]
        assert poly.is_const, key
        return poly.num[0] // poly.den

    def byte_sum(r: Regime, prefix: str) -> Any:
        total = None
        for k, cls, rep in r.tagged(prefix):
            term = nbytes(ev(r, k), cls, bits)
            term = term if rep == 1 else term * rep
            total = term if total is None else total + term
        return xp.zeros(n, dtype=dtype) if total is None else total

    def largest(r: Regime, skip: tuple[str, ...] = ()) -> Any:
        # each class's most elements first (⌈e·bits/8⌉ grows with e), fixed dtypes' bytes (None)
        most: dict[str | None, Any] = {}
        for k, c in r.activations(skip):
            e = at_runs(r, k)
            cls = c if c in bits else None
            if cls is None:
                e = bytes_of(e, BITS[c])
            most[cls] = e if cls not in most else xp.maximum(most[cls], e)
        best = spread(most.pop(None)) if None in most else xp.zeros(n, dtype=dtype)
        for cls, e in most.items():
            assert cls is not None
            best = xp.maximum(best, bytes_of(spread(e), bits[cls]))
        return best

    out = Totals()
    f = out.formulas
    # a rank's largest tensor but its KV cache: eager, and FlashAttention's (no scores)
    workspaces = {"workspace_eager_bytes_per_rank": lambda t: largest(rank, ("cache",)),
                  "workspace_flash_bytes_per_rank": lambda t: largest(rank, ("cache",
                                                                             "flash_skip"))}
    if workspace:
        f.update(workspaces)
        return out
    params, experts = const(full, "params"), const(full, "expert_params")
    f["params"] = lambda t: xp.full(n, params, dtype=dtype)
    f["active_params"] = lambda t: xp.full(n, active_params(params, experts, m), dtype=dtype)
    f["expert_params"] = lambda t: xp.full(n, experts, dtype=dtype)
    f["flops"] = lambda t: ev(full, "flops")
    f["elementwise_flops"] = lambda t: ev(full, "ew")
    f["weight_bytes"] = lambda t: nbytes(t["params"], "w", bits)
    f["expert_weight_bytes"] = lambda t: nbytes(t["expert_params"], "w", bits)
    f["kv_cache_bytes"] = lambda t: byte_sum(full, "kv")
    f["state_cache_bytes"] = lambda t: byte_sum(full, "state")
    groups = kv_groups(plan)

    def tokens(t: Totals) -> Any:
        # the longest cache at each point: with chunked layers the longest kind can change
        # within a regime (a chunk restarts), so the groups' tokens are compared per point
        if not groups:
            return xp.zeros(n, dtype=dtype)
        most = runs_ev(full, "group_tokens.0")  # (a run's, then on each of its points)
        for g in range(1, len(groups)):
            most = xp.maximum(most, runs_ev(full, f"group_tokens.{g}"))
        return spread(most)

    f["kv_cache_tokens"] = tokens
    f["kv_cache_bytes_per_token"] = lambda t: cf._kv_bytes(xp, n, dtype, bits, None, "any")
    # paged: each group of layers that share a window has its own blocks
    for g, (reach, _) in enumerate(groups):
        f[f"kv_cache_blocks@{g}"] = lambda t, g=g: spread(paged_blocks(
            Bm, runs_ev(full, f"group_tokens.{g}"), cf.block_size))
        # planning sizes a chunked group for its fullest chunk on the way to T: min(n, C)
        # tokens (the cache at exactly n tokens may hold fewer)
        f[f"kv_cache_peak_blocks@{g}"] = (lambda t, g=g: t[f"kv_cache_blocks@{g}"]) if not (
            isinstance(reach, Chunk)) else (lambda t, size=reach.size: paged_blocks(
                B, xp.minimum(T + int(full.decode), size), cf.block_size))

    def blocks(t: Totals) -> Any:
        total = xp.zeros(n, dtype=dtype)
        for g in range(len(groups)):
            total = total + t[f"kv_cache_blocks@{g}"]
        return total

    def paged(t: Totals) -> Any:
        total = xp.zeros(n, dtype=dtype)
        for g, (reach, layers) in enumerate(groups):
            lat, apart = split_elements_per_token(m, 1, layers, cf.mla, reach)
            per_token = nbytes(lat, "kv", bits)
            total = total + t[f"kv_cache_blocks@{g}"] * cf.block_size * per_token
            if apart:  # dots3's fp32 indexer keys, held apart from the blocks
                total = total + B * ev(full, f"group_tokens.{g}") * cf._kv_bytes(
                    xp, n, dtype, bits, layers, reach, apart_only=True)
        if not any(k.compress for k in plan.kinds):
            return total
        # DeepSeek-V4's compressed entries, contiguous beside the paged window
        phase = "decode" if full.decode else "prefill"
        return total + B * nbytes(entry_elements(m, T, phase), "kv", bits)

    f["kv_cache_blocks"] = blocks
    f["kv_cache_paged_bytes"] = paged
    f["largest_activation_bytes"] = lambda t: largest(full, ("cache",))  # the cache is apart
    # tensor parallel (one rank)
    f["tp"] = lambda t: xp.full(n, p, dtype=dtype)
    f["kv_heads_per_rank"] = lambda t: xp.full(n, kv_heads_per_rank(m, p), dtype=dtype)
    count, ar_layers = const(rank, "ar_count"), const(rank, "ar_layers")
    f["allreduce_per_layer"] = lambda t: xp.full(n, count, dtype=dtype)
    f["allreduce_bytes"] = lambda t: nbytes(ev(rank, "ar"), rank.tags["ar"], bits) if count else (
        xp.zeros(n, dtype))
    f["allreduce_bytes_per_layer"] = lambda t: t["allreduce_bytes"] * count
    f["allreduce_bytes_total"] = lambda t: t["allreduce_bytes"] * ar_layers
    f["ring_bytes_per_rank"] = lambda t: ring_allreduce_bytes(t["allreduce_bytes"], p) if (
        p > 1) else xp.zeros(n, dtype=dtype)
    f["ring_bytes_per_rank_total"] = lambda t: t["ring_bytes_per_rank"] * ar_layers
    f["embedding_allreduce_bytes"] = lambda t: byte_sum(rank, "emb_ar")
    f["logits_allgather_bytes"] = lambda t: byte_sum(rank, "gather")
    for key, v in ((k, const(rank, k)) for k in ("params", "expert_params", "embed_params")):
        f[f"{key}_per_rank"] = lambda t, v=v: xp.full(n, v, dtype=dtype)
    # the token-embedding table a rank holds (vocab-parallel: V/p rows): a step gathers rows
    for key, of in (("weight_bytes", "params"), ("expert_weight_bytes", "expert_params"),
                    ("embed_weight_bytes", "embed_params")):
        f[f"{key}_per_rank"] = lambda t, of=of: nbytes(t[f"{of}_per_rank"], "w", bits)
    if cf.weights is not None:  # the checkpoint's bytes, scales included
        wf, wr = cf.weight_sums(1), cf.weight_sums(p)
        for key, v in (("weight_bytes", wf.total), ("expert_weight_bytes", wf.expert_total),
                       ("weight_bytes_per_rank", wr.total),
                       ("expert_weight_bytes_per_rank", wr.expert_total),
                       ("embed_weight_bytes_per_rank", wr.table)):
            f[key] = lambda t, v=v: xp.full(n, v, dtype=dtype)
    f["kv_cache_bytes_per_rank"] = lambda t: byte_sum(rank, "kv")
    f["state_cache_bytes_per_rank"] = lambda t: byte_sum(rank, "state")
    # each layer kind's state (one rank): what a pipeline stage's layers hold (plan/memory)
    phase = "decode" if full.decode else "prefill"
    for kind, spec in enumerate(plan.kinds):
        f[f"state_bytes@{kind}"] = lambda t, kind=kind: byte_sum(rank, f"kind_state.{kind}")
        if spec.compress:  # one layer's compressed entries of the batch (DeepSeek-V4)
            width = m.dh + (m.csa_index_head_dim or 0) * (spec.attention == "csa")
            f[f"entry_bytes@{kind}"] = lambda t, r=spec.compress, w=width: B * nbytes(
                entries(r, T, phase) * w, "kv", bits)
    f["flops_per_rank"] = lambda t: ev(rank, "flops")
    # the work a causal attention kernel does: FLOPs with QKᵀ and A·V's lower triangle
    for key, r in (("causal_flops", full), ("causal_flops_per_rank", rank)) if causal else ():
        f[key] = lambda t, r=r: spread(at_runs(r, "flops") - at_runs(r, "attn")
                                    + r.attn_causal().eval(mono, nm, dtype, xp))
    f["largest_activation_bytes_per_rank"] = lambda t: t["workspace_eager_bytes_per_rank"]
    f.update(workspaces)
    # pipeline: the residual stream [B, Tq, D] (n_hc·D: hyper-connections) crosses each one
    f["pp"] = lambda t: S

    @functools.cache
    def boundary() -> Any:  # one stage's bytes, for both totals
        return nbytes(spread(Bm * runs_ev(full, "tq") * residual_width(m)), "act", bits)

    f["boundary_bytes"] = lambda t: boundary() * (S > 1)
    f["boundary_bytes_total"] = lambda t: boundary() * (S - 1)
    return out
