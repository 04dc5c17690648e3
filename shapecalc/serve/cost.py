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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..costs.closed import ClosedForm
from ..costs.scalar import SCALARS
from ..inputs.hardware import GPU
from ..model.config import DTYPE_BITS, ShapecalcError, Workload
from ..plan.perf import PerfParams, step_seconds, step_terms

# the totals of a step that depend on its tokens (the rest are per-rank constants)
VARYING = ("flops", "flops_per_rank", "causal_flops", "causal_flops_per_rank",
           "kv_cache_bytes_per_rank", "ring_bytes_per_rank_total", "boundary_bytes_total")
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

    def __init__(self, cf: ClosedForm, gpu: GPU, pp: PerfParams, wl: Workload, peak: float):
        self.cf, self.gpu, self.pp, self.peak = cf, gpu, pp, peak
        self.ep = wl.ep
        self.wbits = DTYPE_BITS[wl.dtype]
        model = cf.model
        if {"mamba2", "gated_deltanet", "short_conv", "cca"} & set(model.mixers):
            raise ShapecalcError("model", f"{model.name}: serve does not simulate stateful "
                                 "token mixers (mamba2, gated_deltanet, short_conv, cca) yet")
        if len(cf.intervals("prefill")) > 1 or len(cf.intervals("decode")) > 1:
            raise ShapecalcError("model", f"{model.name}: serve simulates models whose attention "
                                 "has one regime; sliding-window or chunked attention layers are "
                                 "not simulated yet")
        dts = (wl.dtype, wl.kv, wl.act)
        p, s = wl.tp, wl.pp

        def at(b: int, t: int, phase: str) -> dict[str, Any]:
            return cf.at(b, t, phase, p, s, *dts)

        pre = {t: (at(1, t, "prefill"), at(2, t, "prefill")) for t in (1, 2, 3, 4)}
        dec = {t: (at(1, t, "decode"), at(2, t, "decode")) for t in (1, 2, 3)}
        self.const = {k: pre[1][0][k] for k in CONSTANT}
        self.coeffs: dict[str, Coeffs] = {}
        for k in VARYING:
            seq = {t: b[k] - a[k] for t, (a, b) in pre.items()}  # S(T): one sequence's share
            step = {a[k] - (b[k] - a[k]) for a, b in pre.values()}  # 2·v(1) − v(2): per step
            d = {t: b[k] - a[k] for t, (a, b) in dec.items()}
            dstep = {a[k] - (b[k] - a[k]) for a, b in dec.values()}
            s1, d1_, d2_ = seq[1], seq[2] - seq[1], seq[3] - 2 * seq[2] + seq[1]
            # 2·S(T) = k0 + k1·T + k2·T², from S(T) = s1 + Δ(T−1) + Δ²(T−1)(T−2)/2
            c = Coeffs(k0=2 * s1 - 2 * d1_ + 2 * d2_, k1=2 * d1_ - 3 * d2_, k2=d2_,
                       d0=d[1] - (d[2] - d[1]), d1=d[2] - d[1], read=0, step=step.pop())
            if (step or dstep != {c.step} or 2 * seq[4] != c.k0 + 4 * c.k1 + 16 * c.k2
                    or d[3] != c.d0 + 3 * c.d1):
                raise ShapecalcError("model", f"{model.name}: {k} is not quadratic in the "
                                     "prompt and affine in the cache; serve cannot simulate it")
            self.coeffs[k] = c
        kv = self.coeffs["kv_cache_bytes_per_rank"]
        self.coeffs["kv_cache_bytes_per_rank"] = Coeffs(kv.k0, kv.k1, kv.k2, kv.d0, kv.d1,
                                                        read=kv.d1, step=kv.step)

    def totals(self, chunks: int, n: int, sq: int, ctx: int, decodes: int, cache: int
               ) -> dict[str, Any]:
        """The step's totals: `chunks` prefill chunks of Σn = n tokens, Σ(n² + 2cn) = sq,
        Σc = ctx cached tokens under them; `decodes` sequences on Σ L = cache cached tokens."""
        tot = dict(self.const)
        for k, c in self.coeffs.items():
            twice = c.k0 * chunks + c.k1 * n + c.k2 * sq
            assert twice % 2 == 0, k
            tot[k] = (c.step + twice // 2 + c.read * ctx
                      + c.d0 * decodes + c.d1 * cache)
        return tot

    def terms(self, chunks: int, n: int, sq: int, ctx: int, decodes: int, cache: int
              ) -> tuple[float, float, float, float]:
        """perf.step_terms of the step: (compute, memory, communication, overhead)."""
        tot = self.totals(chunks, n, sq, ctx, decodes, cache)
        t = step_terms(self.cf, self.gpu, self.pp, tot, self.peak, n + decodes, self.wbits,
                       SCALARS, self.ep, decode=chunks == 0)
        return float(t[0]), float(t[1]), float(t[2]), float(t[3])

    def seconds(self, chunks: int, n: int, sq: int, ctx: int, decodes: int, cache: int) -> float:
        return float(step_seconds(self.terms(chunks, n, sq, ctx, decodes, cache), SCALARS))

    def prefill(self, B: int, T: int) -> float:
        """B prompts of T tokens in one step."""
        return self.seconds(B, B * T, B * T * T, 0, 0, 0)

    def decode(self, B: int, L: int) -> float:
        """B sequences decoding one token each on L cached tokens."""
        return self.seconds(0, 0, 0, 0, B, B * L)
