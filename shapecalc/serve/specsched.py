"""A replica that decodes speculatively (spec.py, draft.py): scheduler.py's engine, where each
decoding sequence's step emits its drawn 1 … k + 1 tokens.

As vLLM V1 schedules it (spec.py's doc): a decoder takes k + 1 tokens of the token budget and
holds the blocks of L + k + 1 slots during a step on L cached tokens (num_lookahead_tokens); the
accepted tokens stay cached (L grows by the tokens the step emits), the rejected drafts' slots
are reused. Simulated for one full-attention KV group at pp = 1 (the engine refuses the rest).

O(1) a step, as scheduler.py: when a sequence starts decoding its steps are known (its draws,
spec.Draws), so its block need at each step and its cache's growth are added into two arrays
indexed by step (NumPy slices, once a sequence) and its last step into `finish_at`; a preemption
takes its future entries out. A step reads Σ of each at its index; the fast-forward steps while
nothing can be admitted, each step's seconds affine in the cache (every part of the cost is).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..model.config import ShapecalcError
from .cost import IterationCost
from .decoders import Seq
from .draft import Draft, SpecCost, regime
from .scheduler import Replica, SchedulerConfig
from .spec import Draws, Spec
from .workload import Request


@dataclass(frozen=True)
class Speculation:
    """A deployment's speculative decoding: the settings and the draft."""

    spec: Spec
    draft: Draft


class SpecSeq(Seq):
    __slots__ = ("acc", "cache", "held", "held0")

    def __init__(self, req: Request):
        super().__init__(req)
        self.held0 = 0
        self.acc: Any = None
        self.cache: Any = None
        self.held: Any = None


def attach(sp: Speculation | None, wl: Any, cost: IterationCost, blocks: int, simple: bool,
           given: bool) -> tuple[SpecCost | None, int]:
    """The step cost with the draft, and the blocks left the target when the draft's weights
    and its KV (a token's bytes beside the target's in every block) share the memory."""
    if sp is None:
        return None, blocks
    if wl.pp > 1:
        raise ShapecalcError("spec-k", "speculative decoding is simulated at --pp 1")
    if not simple:
        raise ShapecalcError("spec-k", "speculative decoding is simulated for models of one "
                             "full-attention KV group (no sliding, chunked or stateful layers)")
    sc = SpecCost(cost, wl, sp.draft, sp.spec)
    if given:  # --kv-blocks: the blocks the target gets
        return sc, blocks
    bs = wl.block_size
    t, d = sc.target_kv_per_token, sc.draft_kv_per_token
    free = blocks * bs * t - sc.draft_weight_bytes
    return sc, max(0, free // (t + d) // bs)


class SpecReplica(Replica):
    def __init__(self, cost: IterationCost, sc: SpecCost, cfg: SchedulerConfig,
                 on_finish: Callable[[Seq], None] | None, trace: bool, draws: Draws):
        super().__init__(cost, cfg, on_finish, trace)
        self.sc, self.q = sc, sc.k + 1
        self.draws = draws
        self.NB = np.zeros(1024, np.int64)  # blocks the decoders need at each step
        self.D = np.zeros(1024, np.int64)  # tokens their caches grow by after each step
        self.csum = 0  # Σ L over the decoders at the current step
        self.spec_tokens = self.spec_steps = 0  # drawn tokens and decoder steps (stats)

    def add(self, req: Request, now: float) -> Seq:
        if not self.running and not self.waiting:
            self.clock = max(self.clock, now)
        s = SpecSeq(req)
        self.waiting.append(s)
        return s

    def _needs(self, s: Any, i: int, sign: int) -> None:
        """Add (sign 1) or take out (−1) s's block needs from its step i on: at step i the
        blocks of L_i + k + 1 slots less those it held at step i − 1."""
        a, b, held = s.j0 + i, s.j0 + len(s.held), s.held
        prev = s.held0 if i == 0 else int(held[i - 1])
        nb = self.NB
        if sign > 0:
            nb[a:b] += held[i:]
            nb[a + 1:b] -= held[i:-1]
            nb[a] -= prev
        else:
            nb[a:b] -= held[i:]
            nb[a + 1:b] += held[i:-1]
            nb[a] += prev

    def _decode_start(self, s: Any) -> None:
        """s starts decoding at step j0 = s.j0 on L0 = s.L0 cached tokens: its steps are its
        next draws until they emit the R tokens it has left (the last one's cut)."""
        acc, before, total = self.draws.take(s.req.output - s.gen)
        S, j0 = len(acc), s.j0
        if j0 + S + 1 >= len(self.NB):
            n = max(2 * len(self.NB), j0 + S + 2)
            self.NB = np.concatenate((self.NB, np.zeros(n - len(self.NB), np.int64)))
            self.D = np.concatenate((self.D, np.zeros(n - len(self.D), np.int64)))
        s.acc = acc
        s.cache = before + s.L0  # L during each step
        s.held = (s.cache + (self.q + self.cfg.block_size - 1)) // self.cfg.block_size - self.pb
        s.held0 = s.blocks
        self._needs(s, 0, 1)
        self.D[j0: j0 + S - 1] += s.acc[:-1]
        s.last_iter = j0 + S - 1
        self.finish_at.setdefault(s.last_iter, {})[s.req.id] = s
        self.n_dec += 1
        self.csum += s.L0
        self.spec_tokens += total
        self.spec_steps += S

    def _preempt(self, j: int) -> int:
        s: Any = self.running[next(reversed(self.running))]
        if s.req.id in self.prefilling:
            return super()._preempt(j)
        self.running.popitem()
        s.preemptions += 1
        self.preemptions += 1
        self.events.append((self.clock, "preempt", s.req.id))
        i, S = j - s.j0, len(s.acc)
        prev = s.held0 if i == 0 else int(s.held[i - 1])
        self.free += prev
        due = int(s.held[i]) - prev
        self._needs(s, i, -1)
        if i < S - 1:
            self.D[j: s.j0 + S - 1] -= s.acc[i: S - 1]
        L = int(s.cache[i])
        self.csum -= L
        self.spec_tokens -= int(s.acc[i:].sum())
        self.spec_steps -= S - i
        del self.finish_at[s.last_iter][s.req.id]
        self.n_dec -= 1
        s.gen += L - s.L0
        s.last = self.clock
        s.tokens = s.req.prompt + s.gen
        s.done = s.blocks = 0
        self.waiting.appendleft(s)
        return due

    def _room(self) -> int:
        """The token budget a step leaves prefills: a decoder takes its k + 1 (Replica's
        _blocked and _admit read it)."""
        return self.cfg.max_batched_tokens - self.n_dec * self.q

    def _stretch(self, until: float) -> int:
        if not self._blocked():
            return 0
        j, B = self.it, self.n_dec
        stop = min(self.finish_at)
        lin = self.sc.lin(B)
        clock, free, x, i = self.clock, self.free, self.csum, 0
        nb, dd, durs = self.NB, self.D, self.durs
        while j + i < stop and clock < until:
            need = int(nb[j + i])
            if need > free:
                break
            free -= need
            d = 0.0
            for c, dc, m, dm, k in lin:
                d += max(c + dc * x, m + dm * x) + k
            durs.append(d)
            clock += d
            x += int(dd[j + i])
            i += 1
        if i:
            self.toks.extend([B] * i)
            self.ptoks.extend([0] * i)  # why.py reads them beside durs (--find-gpus)
            self.log.append((self.clock, clock - self.clock, self.total - free,
                             len(self.waiting), len(self.running)))
            self.clock, self.free = clock, free
            self.it += i
            self.csum = x
        return i

    def step(self, first: bool = True) -> None:  # decode-first only (vLLM's), so no `first`
        bs, j = self.cfg.block_size, self.it
        need = int(self.NB[j]) if j < len(self.NB) else 0
        while need > self.free:
            need -= self._preempt(j)
        self.free -= need
        budget = self._room()
        chunks = n = sq = ctx = 0
        done: list[Any] = []
        plan: list[tuple[int, int, int]] = []

        def take(s: Any, k: int) -> None:
            nonlocal chunks, n, sq, ctx
            c = s.c0 = s.done
            chunks += 1
            n += k
            sq += k * k + 2 * c * k
            ctx += c
            s.done += k
            if self.trace:
                plan.append((s.req.id, c, k))
            if s.done == s.tokens:
                done.append(s)

        self._admit(budget, take)  # a simple layout (attach): the plain step's admission
        decodes = self.n_dec
        if not chunks and not decodes:
            if self.running:
                self._preempt(j)
            return
        d = self.sc.seconds(chunks, n, sq, ctx, decodes, self.csum)
        t0, end = self.clock, self.clock + d
        self.log.append((t0, d, self.total - self.free, len(self.waiting), len(self.running)))
        self.durs.append(d)
        self.toks.append(decodes)
        self.ptoks.append(n)
        if self.trace:
            self.schedule.append({"iteration": j, "start_s": t0, "seconds": d, "prefill": plan,
                                  "decodes": decodes, "cache": self.csum,
                                  "free_blocks": self.free})
        self.clock = end
        if self.pb and not self.prefix_ready and any(
                s.done >= self.pb * bs for s in self.prefilling.values()):
            self.prefix_ready = True
        if j < len(self.D):
            self.csum += int(self.D[j])
        ends: list[Any] = list(self.finish_at.pop(j, {}).values())
        for s in ends:
            L = int(s.cache[-1])
            self.free += int(s.held[-1])
            self.csum -= L
            self.n_dec -= 1
            del self.running[s.req.id]
            s.gen = s.req.output
            self._end(s, end)
        for s in done:
            del self.prefilling[s.req.id]
            s.gen += 1
            if s.gen == 1:
                s.first = end
            else:
                self.gaps.append(end - s.last)
            s.last = end
            if s.gen == s.req.output:
                self.free += s.blocks
                del self.running[s.req.id]
                self._end(s, end)
                continue
            s.L0, s.j0 = s.tokens, j + 1
            self._decode_start(s)
        self.it += 1


def replicas(sc: SpecCost, cost: IterationCost, cfg: SchedulerConfig, n: int,
             on_finish: Callable[[Seq], None], trace: bool, reqs: list[Request]
             ) -> list[Replica]:
    """n speculative replicas drawing from one seeded stream (spec.Draws)."""
    bs, pb = cfg.block_size, cfg.shared_prefix // cfg.block_size
    for r in reqs:  # its last verify holds the slots of k + 1 tokens past its cache
        slots = r.prompt + r.output - 1 + sc.k + 1
        if -(-slots // bs) - pb > cfg.num_blocks - pb:
            raise ShapecalcError("prompt-tokens", f"request {r.id}: {r.prompt} prompt + "
                                 f"{r.output} output tokens and {sc.k} draft slots exceed the "
                                 f"KV cache of a replica ({cfg.num_blocks:,} blocks of {bs})")
    draws = Draws(sc.spec)
    return [SpecReplica(cost, sc, cfg, on_finish, trace, draws) for _ in range(n)]


def doc(sc: SpecCost, reps: list[Replica], sat: dict[str, Any], prompt: int) -> dict[str, Any]:
    """`speculative` in --json: the settings, the draft's memory, the simulated tokens a step,
    and the step at every batch size (powers of 2 up to the decode-only ceiling) on `prompt`
    cached tokens: plain decode against speculation, ITL (a step), TPOT (a step / the tokens it
    emits), tokens/s and the regime of the verify."""
    toks = sum(getattr(r, "spec_tokens", 0) for r in reps)
    steps = sum(getattr(r, "spec_steps", 0) for r in reps)
    e = sc.spec.expected
    rows = []
    b, top = 1, max(1, int(sat["max_decode_batch"]))
    while True:
        plain = sc.t.decode(b, prompt)
        parts = sc.parts(0, 0, 0, 0, b, b * prompt)
        step = sc.seconds(0, 0, 0, 0, b, b * prompt)
        rows.append({"batch": b, "itl_s": plain, "spec_itl_s": step, "tpot_s": plain,
                     "spec_tpot_s": step / e, "tokens_per_s": b / plain,
                     "spec_tokens_per_s": b * e / step, "speedup": plain * e / step,
                     "regime": regime(parts)})
        if b >= top:
            break
        b = min(2 * b, top)
    dec = [t for r in reps for t in r.toks if t]
    mean_b = sum(dec) / len(dec) if dec else 0.0
    b = max(1, round(mean_b))
    parts = sc.parts(0, 0, 0, 0, b, b * prompt)
    speedup = sc.t.decode(b, prompt) * e / sc.seconds(0, 0, 0, 0, b, b * prompt)
    return {**sc.spec.doc(), "draft_model": sc.d.model.name,
            "mean_decode_batch": mean_b, "regime": regime(parts),
            "speedup_at_mean_batch": speedup,
            "draft_weight_bytes_per_rank": sc.draft_weight_bytes,
            "draft_kv_bytes_per_token_per_rank": sc.draft_kv_per_token,
            "simulated_tokens_per_step": toks / steps if steps else None,
            "context_tokens": prompt, "by_batch": rows}
