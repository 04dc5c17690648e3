"""The expected time of one scheduler iteration, for its exact mix, in O(1).

An iteration holds prefill chunks (n tokens of a sequence whose first c tokens are cached) and
decode sequences (one token on a cache of L tokens). Within one attention regime the closed form's
totals are polynomials: per sequence, a prefill of T tokens costs S(T) = a + b·T + k·T² of each
total (FLOPs, KV bytes, all-reduce and boundary bytes), a decode on L cached tokens d0 + d1·L,
and a step adds a constant. So a chunk costs S(c+n) − S(c) + S(0) (its tokens' share of the whole
prefill: for c = 0 exactly the prefill of n tokens), i.e.

    2·chunk = k0 + k1·n + k2·(n² + 2·c·n)        (integers; S read off by forward differences)

plus the KV bytes of its c cached tokens read back, at decode's per-token rate; and the decodes
cost n_d·d0 + d1·ΣL. The coefficients are read off `ClosedForm.at` (never re-typed), the sums are
kept by the scheduler, and the step's time is perf.step_terms/step_seconds on those totals: the
same function fit's expected times come from, so a static batch reproduces fit exactly.

Sliding, chunked and scanned layers (basis.py): each total adds Σ_e c_e·b_e to those forms, of
known functions b_e that are 0 below their cut, so a step also passes, per function, Σ over its
chunks of b_e(c+n) − b_e(c) (`pex`), over its decoders of b_e(L) (`dex`) and over its chunks'
cached tokens b_e(c) (`rex`, the KV read back). A stateful mixer's state bytes (read and
written once a step) are one more total, a constant a sequence.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..costs.closed import ClosedForm
from ..costs.scalar import SCALARS
from ..inputs.hardware import GPU
from ..lean import dataclass
from ..model.config import DTYPE_BITS, ShapecalcError, Workload
from ..model.conventions import has_convention
from ..model.parallel import kv_groups, pp_layers
from ..model.plan import Chunk, layer_plan
from ..plan.ep import EPPlan, attention_ranks, exchange_s, imbalance_flops, moe_layers
from ..plan.perf import PerfParams, step_seconds, step_terms
from ..plan.topology import boundary_bandwidth, link_rates, topology
from .basis import Basis, points, solve, value
from .pipeline import round_terms

# the totals of a step that depend on its tokens (the rest are per-rank constants)
VARYING = ("flops", "flops_per_rank", "causal_flops", "causal_flops_per_rank",
           "kv_cache_bytes_per_rank", "ring_bytes_per_rank_total", "boundary_bytes_total")
NONE: tuple[int, ...] = ()
RECALL = 1 << 15  # steps' terms kept, then forgotten (~550 bytes each: under 20 MB)
CONSTANT = ("params_per_rank", "embed_params_per_rank", "tp", "allreduce_per_layer",
            "expert_params_per_rank", "expert_params", "params", "weight_bytes_per_rank",
            "embed_weight_bytes_per_rank", "expert_weight_bytes_per_rank", "expert_weight_bytes")


@dataclass(frozen=True)
class Coeffs:
    """Of one total: 2·prefill-chunk = k0 + k1·n + k2·(n² + 2cn); decode = d0 + d1·L a sequence;
    `read` bytes per cached token a chunk reads back (KV only); `step` a constant per step."""

    k0: int
    k1: int
    k2: int
    d0: int
    d1: int
    read: int
    step: int


class IterationCost:
    """Expected seconds of an iteration from its sums (see the module doc)."""

    def __init__(self, cf: ClosedForm, gpu: GPU, pp: PerfParams, wl: Workload, peak: float,
                 ep: EPPlan | None = None, load: tuple[float, float, bool] | None = None):
        self.cf, self.gpu, self.pp, self.peak = cf, gpu, pp, peak
        # an engine's terms under load (engines.py): seconds a step, a sequence in it, and
        # attention as its own kernel; None: today's step
        self.load = load
        self.ep = wl.ep
        # pipeline (pipeline.py): the stages, the fullest one's share of the layers, the link
        self.stages = wl.pp
        self.share = max(pp_layers(cf.model.n_layers, wl.pp)) / cf.model.n_layers
        self.topo = topology(gpu, pp.link_efficiency)
        self.link = boundary_bandwidth(self.topo, wl.tp, wl.pp)
        # expert parallelism (plan/ep.py): dp attention ranks, each a scheduler of these costs
        self.plan, self.wl = ep, wl
        self.moe_layers = moe_layers(cf.model) * self.share
        self.wbits = DTYPE_BITS[wl.dtype]
        model = cf.model
        stateful = has_convention(model.mixers)  # a stateful mixer: a state slot a sequence
        self.pbasis, self.dbasis = bases(cf)
        # the first 4 prompt lengths past a short convolution's kernel (T < K pads the conv)
        t0 = 1 + max((c for c in cf._cuts("prefill")[0] if c <= 8), default=0)
        dts = (wl.dtype, wl.kv, wl.act)
        p, s = wl.tp, wl.pp

        def at(b: int, t: int, phase: str) -> Mapping[str, Any]:
            return cf.at(b, t, phase, p, s, *dts)

        # (within a learned position table: requests never pass it, check_requests)
        plim, dlim = cf.seq_limit("prefill") or 1 << 62, cf.seq_limit("decode") or 1 << 62
        ptimes = sorted(t for t in {t0, t0 + 1, t0 + 2, t0 + 3, t0 + 4, t0 + 9}
                        | {t for b in self.pbasis for t in points(b)} if t <= plim)
        dtimes = sorted(t for t in {1, 2, 3, 4, 9} | {t for b in self.dbasis for t in points(b)}
                        if t <= dlim)
        pre = {t: (at(1, t, "prefill"), at(2, t, "prefill")) for t in ptimes}
        dec = {t: (at(1, t, "decode"), at(2, t, "decode")) for t in dtimes}
        self.const = {k: pre[t0][0][k] for k in CONSTANT}
        self.coeffs: dict[str, Coeffs] = {}
        self.pcoef: dict[str, list[int]] = {}  # twice the prefill functions' coefficients
        self.dcoef: dict[str, list[int]] = {}
        self.varying = VARYING + (("state_cache_bytes_per_rank",) if stateful else ())
        name = model.name
        for k in self.varying:
            seq = {t: b[k] - a[k] for t, (a, b) in pre.items()}  # S(T): one sequence's share
            step = {a[k] - (b[k] - a[k]) for a, b in pre.values()}  # 2·v(1) − v(2): per step
            d = {t: b[k] - a[k] for t, (a, b) in dec.items()}
            dstep = {a[k] - (b[k] - a[k]) for a, b in dec.values()}
            s0, d1_ = seq[t0], seq[t0 + 1] - seq[t0]
            d2_ = seq[t0 + 2] - 2 * seq[t0 + 1] + s0
            # 2·S(T) = k0 + k1·T + k2·T², from S(T) = S(t0) + Δ(T−t0) + Δ²(T−t0)(T−t0−1)/2
            c = Coeffs(k0=2 * s0 - 2 * d1_ * t0 + d2_ * t0 * (t0 + 1),
                       k1=2 * d1_ - d2_ * (2 * t0 + 1), k2=d2_,
                       d0=d[1] - (d[2] - d[1]), d1=d[2] - d[1], read=0, step=step.pop())
            if (step or dstep != {c.step} or 2 * seq[t0 + 3] != c.k0 + (t0 + 3) * c.k1
                    + (t0 + 3) ** 2 * c.k2 or d[3] != c.d0 + 3 * c.d1):
                raise ShapecalcError("model", f"{name}: {k} is not quadratic in the "
                                     "prompt and affine in the cache; serve cannot simulate it")
            self.coeffs[k] = c
            self.pcoef[k] = solve(name, k, self.pbasis, {t: 2 * v for t, v in seq.items()},
                                  [(t, c.k0 + c.k1 * t + c.k2 * t * t) for t in seq])
            self.dcoef[k] = solve(name, k, self.dbasis, d, [(t, c.d0 + c.d1 * t) for t in d])
        kv = self.coeffs["kv_cache_bytes_per_rank"]
        self.coeffs["kv_cache_bytes_per_rank"] = Coeffs(kv.k0, kv.k1, kv.k2, kv.d0, kv.d1,
                                                        read=kv.d1, step=kv.step)
        self.rcoef = self.dcoef["kv_cache_bytes_per_rank"]
        # the nonzero coefficients, (function, coefficient), for totals()
        self.pterms = {k: [(e, a) for e, a in enumerate(v) if a] for k, v in self.pcoef.items()}
        self.dterms = {k: [(e, a) for e, a in enumerate(v) if a] for k, v in self.dcoef.items()}
        self.windowed = bool(self.pbasis or self.dbasis)
        # per step, the same every step (the same floats, computed once): the links of this tp
        # and pp, and the all-to-all's seconds by the rank's tokens (plan/ep.py)
        self.rates = link_rates(self.topo, self.const["tp"], self.stages)
        self.exchanges: dict[tuple[Any, bool], float] = {}
        self.recall: dict[tuple[Any, ...], tuple[float, float, float, float]] = {}
        self.dp = attention_ranks(wl) if ep is not None else 1
        self.rows = [(k, c.step, c.k0, c.k1, c.k2, c.read, c.d0, c.d1)
                     for k, c in self.coeffs.items()]

    def totals(self, chunks: int, n: int, sq: int, ctx: int, decodes: int, cache: int,
               pex: tuple[int, ...] = NONE, dex: tuple[int, ...] = NONE,
               rex: tuple[int, ...] = NONE) -> dict[str, Any]:
        """The step's totals: `chunks` prefill chunks of Σn = n tokens, Σ(n² + 2cn) = sq,
        Σc = ctx cached tokens under them; `decodes` sequences on Σ L = cache cached tokens;
        pex, dex, rex: the sums of the window, chunk and scan functions (module doc)."""
        tot = dict(self.const)
        if not (pex or dex or rex):  # one regime (the same integers, fewer lookups)
            for k, step, k0, k1, k2, read, d0, d1 in self.rows:
                twice = k0 * chunks + k1 * n + k2 * sq
                assert twice % 2 == 0, k
                tot[k] = step + twice // 2 + read * ctx + d0 * decodes + d1 * cache
            return tot
        for k, c in self.coeffs.items():
            twice = c.k0 * chunks + c.k1 * n + c.k2 * sq
            if pex:
                for e, a in self.pterms[k]:
                    twice += a * pex[e]
            assert twice % 2 == 0, k
            tot[k] = (c.step + twice // 2 + c.read * ctx
                      + c.d0 * decodes + c.d1 * cache)
            if dex:
                for e, a in self.dterms[k]:
                    tot[k] += a * dex[e]
        if rex:
            for e, a in enumerate(self.rcoef):
                tot["kv_cache_bytes_per_rank"] += a * rex[e]
        return tot

    def terms(self, chunks: int, n: int, sq: int, ctx: int, decodes: int, cache: int,
              pex: tuple[int, ...] = NONE, dex: tuple[int, ...] = NONE,
              rex: tuple[int, ...] = NONE) -> tuple[float, float, float, float]:
        """perf.step_terms of the step: (compute, memory, communication, overhead)."""
        # a step's mix recurs: fixed lengths, lone decoders on a rank, a prefill pool's prompts
        # (a pure function of its arguments, so a recalled value is the same float)
        key = (chunks, n, sq, ctx, decodes, cache, pex, dex, rex)
        t = self.recall.get(key)
        if t is None:
            if len(self.recall) >= RECALL:
                self.recall.clear()
            t = self.recall[key] = self._terms(chunks, n, sq, ctx, decodes, cache, pex, dex, rex)
        return t

    def _terms(self, chunks: int, n: int, sq: int, ctx: int, decodes: int, cache: int,
               pex: tuple[int, ...], dex: tuple[int, ...], rex: tuple[int, ...]
               ) -> tuple[float, float, float, float]:
        tot = self.totals(chunks, n, sq, ctx, decodes, cache, pex, dex, rex)
        tokens: Any = n + decodes
        m = min(self.stages, chunks + decodes)
        if m > 1:  # a round of m micro-batches in flight: one average micro-batch's totals
            for k in self.varying:
                step = self.coeffs[k].step
                tot[k] = step + (tot[k] - step) / m
            tokens = tokens / m
        plan, dp = self.plan, self.dp
        if plan is not None:
            tot["causal_flops"] = tot["causal_flops"] + imbalance_flops(tot, tokens,
                                                                        self.cf.model, plan)
        t = step_terms(self.cf, self.gpu, self.pp, tot, self.peak, tokens, self.wbits,
                       SCALARS, self.ep, decode=chunks == 0, stages=self.stages, dp=dp,
                       rates=self.rates)
        if plan is not None:
            x = self.exchanges.get((tokens, chunks == 0))
            if x is None:
                x = self.exchanges[tokens, chunks == 0] = exchange_s(
                    self.topo, plan, self.wl, tokens, self.cf.model, self.moe_layers, chunks == 0)
            t = (t[0], t[1], t[2] + x, t[3])
        if self.load is not None:
            t = loaded(t, self.load, chunks + decodes, tot["kv_cache_bytes_per_rank"]
                       / (self.gpu.hbm_bandwidth * self.pp.attention_efficiency))
        if self.stages > 1:
            t = round_terms(t, tot["boundary_bytes_total"] / self.link, max(m, 1), self.share)
        return float(t[0]), float(t[1]), float(t[2]), float(t[3])

    def seconds(self, chunks: int, n: int, sq: int, ctx: int, decodes: int, cache: int,
                pex: tuple[int, ...] = NONE, dex: tuple[int, ...] = NONE,
                rex: tuple[int, ...] = NONE) -> float:
        return float(step_seconds(self.terms(chunks, n, sq, ctx, decodes, cache, pex, dex, rex),
                                  SCALARS))

    def prefill(self, B: int, T: int) -> float:
        """B prompts of T tokens in one step."""
        pex = tuple(B * value(b, T) for b in self.pbasis) if self.pbasis else NONE
        return self.seconds(B, B * T, B * T * T, 0, 0, 0, pex,
                            (0,) * len(self.dbasis) if self.dbasis else NONE)

    def decode(self, B: int, L: int) -> float:
        """B sequences decoding one token each on L cached tokens."""
        dex = tuple(B * value(b, L) for b in self.dbasis) if self.dbasis else NONE
        return self.seconds(0, 0, 0, 0, B, B * L, (0,) * len(self.pbasis) if self.pbasis
                            else NONE, dex)


def loaded(t: tuple[Any, Any, Any, Any], load: tuple[float, float, bool], seqs: Any,
           kv_s: Any) -> tuple[Any, Any, Any, Any]:
    """The step's terms under an engine's load terms (engines.py): its attention as a kernel
    of its own, max(GEMMs, weights) + KV = max(compute + KV, memory) (memory holds the KV
    already), so each term stays affine in the cache; step_overhead_s + sequence_overhead_s a
    sequence (the prefill chunks and decodes in the step) added to the overhead."""
    c, m, comm, over = t
    step, per_seq, separate = load
    return (c + kv_s if separate else c), m, comm, over + step + per_seq * seqs


def bases(cf: ClosedForm) -> tuple[list[Basis], list[Basis]]:
    """The prefill and decode functions of the model's windows, chunks and scans."""
    pre: list[Basis] = []
    dec: list[Basis] = []
    for reach, _ in kv_groups(layer_plan(cf.model)):
        if isinstance(reach, Chunk):
            pre += [("chunk_sq", reach.size), ("chunk_lin", reach.size)]
            dec.append(("dec_chunk", reach.size))
        elif reach is not None:
            pre += [("slide_sq", reach), ("slide_lin", reach)]
            dec.append(("dec_slide", reach))
    for q in sorted(cf._cuts("prefill")[1] - {r.size for r, _ in kv_groups(layer_plan(cf.model))
                                             if isinstance(r, Chunk)}):
        pre += [("scan", q), ("scan_t", q), ("scan_sq", q)]
    return pre, dec
