"""One replica's engine: vLLM's iteration-level scheduler over a paged KV cache.

Each iteration (vLLM V1, simplified where noted):
1. every decoding sequence gets one token; a sequence whose cache of L tokens fills its last
   block (L % block_size == 0) needs a new block. When the free blocks do not suffice, the
   lowest-priority running sequence (the last admitted) is preempted by recompute: its blocks
   are freed and it goes back to the head of the queue, to prefill its prompt and the tokens it
   had generated again;
2. the token budget left (max_num_batched_tokens − decodes) goes to sequences part-way through
   their prefill (chunked prefill), in admission order, then to waiting sequences, admitted only
   while fewer than max_num_seqs run and the blocks of their chunk are free (a prefill that
   cannot get its blocks takes the chunk they allow, and waits otherwise);
3. the step's time is cost.IterationCost for its exact mix; a prefill that completes emits its
   first token, every decode a token, at the end of the step.

Kept in O(1) per iteration however many sequences decode: Σ L grows by the number of decoders
each step; the sequences that need a block at step j are those whose (L0 − j0) ≡ −j (mod the
block size), counted per residue; each sequence's last step is known when its decode starts.

Fast-forward: while no prefill runs and no waiting sequence can be admitted (the queue is
empty, max_num_seqs run, or the head's blocks are not free), the steps until the next finish,
the next arrival or the next block shortage are pure decodes of the same B sequences on a cache
growing by B a step. perf's terms are affine in that cache (FLOPs and bytes are), so the first
step is perf.step_terms exactly and step i adds i× the difference to the second; each step is
still its own iteration (its time, tokens and blocks), at a few hundred nanoseconds.

Prefix caching (--shared-prefix N): every prompt starts with the same N tokens; their
⌊N/block_size⌋ full blocks are held once (pinned), and once a prefill has computed them a newly
admitted (or recomputed) sequence starts its prefill after them.

Every model (blocks.py, vLLM's hybrid KV cache manager): each KV group (full, sliding window W,
chunk C) and the mixers' states draw from one pool of units. A decoder on L tokens needs, each
step, a block in every group when L % block_size == 0 (counted per residue, as above) and frees
one of each sliding group when L ≡ W − 1 (mod block_size) once L ≥ W − 1 + (pinned + 1)·bs
(counted per residue among the decoders past that); a chunked group frees the chunk behind it
when L wraps at a multiple of C. The cost's window sums (cost.py: Σ max(0, L − (W − 1)) and
Σ ⌊L/C⌋ over the decoders) change form when a decoder reaches W − 1 or wraps at C. Each of those
is an event at a step known when the decode starts (`evs`, applied at the start of that step),
so a step stays O(1) and the fast-forward stops at the next event.

Engine profiles (engines.py, policies.py) change two rules: prefill-first (SGLang) runs a step of
prefills only while one can run, the decoders' clock (self.it) standing still; no-evict
(TensorRT-LLM) admits a request only when its whole prompt and output fit beside what the running
ones reserved. The default, vLLM's, is the above.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from ..lean import dataclass
from .basis import value
from .blocks import Layout
from .cost import IterationCost
from .decoders import Seq, Windows
from .policies import Policies
from .workload import Request


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int
    max_batched_tokens: int
    block_size: int
    num_blocks: int  # of the KV cache of one replica (fit's memory model)
    shared_prefix: int = 0
    layout: Layout | None = None  # the KV groups and states (None: one full-attention group)
    # engines.py's policies: decode-first (vLLM) or prefill-first (SGLang); no_evict: a request
    # starts only when its whole prompt + output fits beside the running ones' (TensorRT-LLM)
    order: str = "decode-first"
    no_evict: bool = False


class Replica(Policies, Windows):
    def __init__(self, cost: IterationCost, cfg: SchedulerConfig, on_finish: Callable[[Seq], None]
                 | None = None, trace: bool = False):
        self.cost, self.cfg = cost, cfg
        self.on_finish = on_finish
        bs = cfg.block_size
        self.pb = cfg.shared_prefix // bs  # pinned prefix blocks
        lay = cfg.layout or Layout(bs, (None,), (1,), 0, cfg.num_blocks, 1)
        self.lay = lay = Layout(bs, lay.reaches, lay.weights, lay.state, lay.units, lay.unit,
                                self.pb)
        self.total = lay.units  # the pool, in units (a full-attention model's: its blocks)
        self.simple = lay.simple and not cost.windowed
        self.prefix_ready = False
        self.free = lay.units - lay.pinned_units
        # windows and chunks: (W, weight) of each sliding group, C of each chunked one
        self.slides = [(r, w) for r, w in zip(lay.reaches, lay.weights, strict=True)
                       if isinstance(r, int)]
        self.sat = [[0] * bs for _ in self.slides]  # decoders past each window, per residue
        self.chunks = sorted({r.size for r in lay.reaches if r is not None and not
                              isinstance(r, int)})
        self.dslide = [b[1] for b in cost.dbasis if b[0] == "dec_slide"]
        self.dsum = [0] * len(cost.dbasis)  # Σ (o − (W − 1)) or Σ ⌊L/C⌋ of each decode form
        self.dn = [0] * len(cost.dbasis)  # decoders past W − 1 (sliding forms)
        self.evs: dict[int, list[tuple[Seq, int, str, int]]] = {}
        self.waiting: deque[Seq] = deque()
        self.running: dict[int, Seq] = {}  # admission order
        self.prefilling: dict[int, Seq] = {}
        self.n_dec = 0
        self.base = 0  # Σ (L0 − j0) over decoders: Σ L at step j = base + n_dec·j
        self.cls = [0] * bs
        self.finish_at: dict[int, dict[int, Seq]] = {}
        self.it = 0
        self.clock = 0.0
        self.preemptions = 0
        # spans of the timeline: start, seconds, used blocks, waiting, running (one iteration,
        # or a fast-forwarded run of decode steps)
        self.log: list[tuple[float, float, int, int, int]] = []
        self.durs: list[float] = []  # each iteration's seconds
        self.toks: list[int] = []  # and the decode tokens it emitted (inter-token gaps)
        self.ptoks: list[int] = []  # and the prefill tokens it ran (serve/why.py reads them)
        self.gaps: list[float] = []  # inter-token gaps that span a preemption
        self.trace = trace  # keep each iteration's schedule (tests, small runs)
        self.prefill_first = cfg.order == "prefill-first"
        self.reserved = 0  # no-evict: the units the running sequences hold or will take
        # prefill-first: while prefill steps hold the decoders back, (seconds stalled when they
        # had their last token, how many) for their next gap; and the gaps so weighted
        self.stalled: list[tuple[float, int]] = []
        self.stall = 0.0
        self.wgaps: list[tuple[float, int]] = []
        self.schedule: list[dict[str, object]] = []
        self.events: list[tuple[float, str, int]] = []

    # -- queue ------------------------------------------------------------------------------------
    def add(self, req: Request, now: float) -> Seq:
        if not self.running and not self.waiting:
            self.clock = max(self.clock, now)
        s = Seq(req)
        self.waiting.append(s)
        return s

    @property
    def busy(self) -> bool:
        return bool(self.running or self.waiting)

    @property
    def outstanding(self) -> int:
        return len(self.running) + len(self.waiting)

    # -- one iteration ----------------------------------------------------------------------------
    def _own(self, tokens: int) -> int:
        """Blocks a sequence of `tokens` cached tokens holds besides the pinned prefix."""
        return max(0, -(-tokens // self.cfg.block_size) - self.pb)

    def _preempt(self, j: int) -> int:
        """Preempt the last admitted running sequence; the units its step j needed."""
        _, s = self.running.popitem()
        if self.cfg.no_evict:
            self.reserved -= self._whole(s)
        s.preemptions += 1
        self.preemptions += 1
        self.events.append((self.clock, "preempt", s.req.id))
        due = 0
        if s.req.id in self.prefilling:
            del self.prefilling[s.req.id]
            self.free += s.blocks
        else:
            L = s.L0 + j - s.j0
            if self.simple:
                self.free += self._own(L)
                due = int(s.cls == (-j) % self.cfg.block_size)
            else:
                held = self.lay.held(L)
                self.free += held
                due = self.lay.own(L, L + 1) - held
                self._leave(s, L)
            self.n_dec -= 1
            self.base -= s.L0 - s.j0
            self.cls[s.cls] -= 1
            del self.finish_at[s.last_iter][s.req.id]
            s.gen += j - s.j0
            s.last = self.clock  # its last token: the end of the step before
        s.tokens = s.req.prompt + s.gen
        s.done = s.blocks = s.cached = 0  # a received KV cache is freed too: recomputed here
        self.waiting.appendleft(s)
        return due

    def advance(self, until: float) -> None:
        """The next iteration, or a fast-forwarded run of decode steps that start before
        `until` (the next arrival)."""
        # a traced run keeps every iteration's schedule: it steps one at a time
        if self.trace or self.stalled or not (self.n_dec and not self.prefilling
                                              and self._stretch(until)):
            self.step()

    def _blocked(self) -> bool:
        """Whether no waiting sequence can be admitted until a sequence ends."""
        if not self.waiting:
            return True
        cfg = self.cfg
        if len(self.running) >= cfg.max_num_seqs or self._room() <= 0:
            return True
        s = self.waiting[0]
        if cfg.no_evict and self.reserved + self._whole(s) > self.total - self.lay.pinned_units:
            return True  # only a finish frees its reservation
        start = min(max(self.pb * cfg.block_size if self.prefix_ready else 0, s.cached),
                    s.tokens - 1)
        k = min(s.tokens - start, self._room())
        if self.simple:
            return self._own(start + k) > self.free  # blocks only shrink during decodes
        # a window's frees between events are at most a block a decoder per block_size steps:
        # the stretch stops before the head would fit (see _stretch)
        return self.lay.own(start, start + k) > self.free

    def _stretch(self, until: float) -> int:
        if not self._blocked():
            return 0
        bs, j, B = self.cfg.block_size, self.it, self.n_dec
        stop = min(self.finish_at)  # handled by step(): its sequences end
        head = 0  # the units the queue's head needs, where a window's frees could let it in
        if self.simple:
            cache = self.base + B * j
            c0, m0, comm, over = self.cost.terms(0, 0, 0, 0, B, cache)
            c1, m1, _, _ = self.cost.terms(0, 0, 0, 0, B, cache + B)
        else:
            stop = min(stop, min(self.evs, default=stop))  # window sums change form there
            cache = self.base + B * j
            c0, m0, comm, over = self.cost.terms(0, 0, 0, 0, B, cache, dex=self._dex(j))
            c1, m1, _, _ = self.cost.terms(0, 0, 0, 0, B, cache + B, dex=self._dex(j + 1))
            waiting = self.waiting[0] if self.waiting and len(self.running) < \
                self.cfg.max_num_seqs else None
            if waiting is not None and self.slides:  # frees may let the head in: re-check it
                start = min(max(self.pb * bs if self.prefix_ready else 0, waiting.cached),
                            waiting.tokens - 1)
                k = min(waiting.tokens - start, self._room())
                head = self.lay.own(start, start + k) if k > 0 else 0
        dc, dm = c1 - c0, m1 - m0
        clock, free, cls = self.clock, self.free, self.cls
        simple, per, slides = self.simple, self.lay.per_block, list(zip(self.slides, self.sat,
                                                                         strict=True))
        durs, toks = self.durs, self.toks
        i = 0
        while simple and j + i < stop and clock < until:  # one group: the loop below, lean
            need = cls[(-(j + i)) % bs]
            if need > free:
                break
            free -= need
            x, y = c0 + dc * i, m0 + dm * i
            d = (y if y > x else x) + comm + over  # max(x, y), without the call
            durs.append(d)
            clock += d
            i += 1
        while not simple and j + i < stop and clock < until:
            need = cls[(-(j + i)) % bs]
            if not simple:  # _need, inlined: a block of every group, less the windows' frees
                need *= per
                for (W, w), sat in slides:
                    need -= w * sat[(W - 1 - j - i) % bs]
            if need > free or (head and head <= free - need):  # step() admits the head there
                break
            free -= need
            d = max(c0 + dc * i, m0 + dm * i) + comm + over
            durs.append(d)
            clock += d
            i += 1
        if i:
            toks.extend([B] * i)
            self.ptoks.extend([0] * i)
            self.log.append((self.clock, clock - self.clock, self.total - free,
                             len(self.waiting), len(self.running)))
            self.clock, self.free = clock, free
            self.it += i
        return i

    def _room(self) -> int:
        """The token budget a step leaves prefills: all of it prefill-first."""
        return self.cfg.max_batched_tokens - (0 if self.prefill_first else self.n_dec)

    def _admit(self, budget: int, take: Callable[[Seq, int], None]) -> None:
        """A step's prefill chunks under its token budget: first the sequences part-way through
        their prompt (as many tokens as their free blocks allow), then the queue's head in order
        while it fits (FCFS); `take` records each chunk. One home for every step that prefills
        (this one and specsched.py's)."""
        cfg, bs, simple, lay = self.cfg, self.cfg.block_size, self.simple, self.lay
        for s in list(self.prefilling.values()):
            if budget <= 0:
                break
            k = min(s.tokens - s.done, budget)
            if simple:
                extra = self._own(s.done + k) - s.blocks
            else:  # the window's blocks behind s.done are freed first
                extra = lay.own(s.done, s.done + k) - s.blocks
            if extra > self.free:  # the tokens its free blocks allow
                if simple:
                    k = (s.blocks + self.pb + self.free) * bs - s.done
                else:
                    k = lay.afford(s.done, s.blocks, self.free) - s.done
                if k <= 0:
                    continue
                extra = (self._own(s.done + k) if simple else lay.own(s.done, s.done + k)) \
                    - s.blocks
            self.free -= extra
            s.blocks += extra
            take(s, k)
            budget -= k
        hit = self.pb * bs if self.prefix_ready else 0
        while budget > 0 and self.waiting and len(self.running) < cfg.max_num_seqs:
            s = self.waiting[0]
            if cfg.no_evict and self.reserved + self._whole(s) > self.total - lay.pinned_units:
                break  # its whole request does not fit beside the running ones' (FCFS)
            # the last token is computed to emit the next; a received KV cache is not recomputed
            start = min(max(hit, s.cached), s.tokens - 1)
            k = min(s.tokens - start, budget)
            blocks = self._own(start + k) if simple else lay.own(start, start + k)
            if blocks > self.free:
                break
            if cfg.no_evict:
                self.reserved += self._whole(s)
            self.waiting.popleft()
            self.running[s.req.id] = s
            self.prefilling[s.req.id] = s
            self.free -= blocks
            s.blocks = blocks
            s.done = start
            take(s, k)
            budget -= k

    def step(self, first: bool = True) -> None:
        cfg, bs, j = self.cfg, self.cfg.block_size, self.it
        simple, lay = self.simple, self.lay
        # prefill-first (SGLang): a step that can prefill holds no decodes; the decoders' clock
        # (self.it: their L = L0 + it − j0) does not move
        pf = first and self.prefill_first and self._can_prefill()
        if pf:
            need = 0
            if not simple:
                self._events(j)
        elif simple:
            need = self.cls[(-j) % bs]
        else:
            self._events(j)
            need = self._need(j)
        while need > self.free:
            need -= self._preempt(j)
        self.free -= need
        budget = cfg.max_batched_tokens - (0 if pf else self.n_dec)
        chunks = n = sq = ctx = 0
        pex = [0] * len(self.cost.pbasis)
        rex = [0] * len(self.cost.dbasis)
        done: list[Seq] = []
        plan: list[tuple[int, int, int]] = []

        def take(s: Seq, k: int) -> None:
            nonlocal chunks, n, sq, ctx
            c = s.c0 = s.done
            if not simple:
                for e, b in enumerate(self.cost.pbasis):
                    pex[e] += value(b, c + k) - value(b, c)
                for e, b in enumerate(self.cost.dbasis):
                    rex[e] += value(b, c)
            chunks += 1
            n += k
            sq += k * k + 2 * c * k
            ctx += c
            s.done += k
            if self.trace:
                plan.append((s.req.id, c, k))
            if s.done == s.tokens:
                done.append(s)

        self._admit(budget, take)
        if pf and not chunks:  # nothing could prefill after all (state unchanged): decode
            return self.step(False)
        decodes = 0 if pf else self.n_dec
        if not chunks and not decodes:
            if self.running:  # prefills stuck on blocks: free the last one's
                self._preempt(j)
            return
        cache = self.base + decodes * j if decodes else 0
        if simple:
            d = self.cost.seconds(chunks, n, sq, ctx, decodes, cache)
        else:
            d = self.cost.seconds(chunks, n, sq, ctx, decodes, cache, tuple(pex),
                                  self._dex(j) if decodes else (0,) * len(self.cost.dbasis),
                                  tuple(rex))
        t0, end = self.clock, self.clock + d
        self.log.append((t0, d, self.total - self.free, len(self.waiting),
                         len(self.running)))
        self.durs.append(d)
        toks = decodes
        if pf:
            self._stalling(d, done)
        elif self.stalled:
            toks = self._unstall(d, decodes)
        self.toks.append(toks)
        self.ptoks.append(n)
        if self.trace:
            self.schedule.append({"iteration": len(self.durs) - 1, "start_s": t0, "seconds": d,
                                  "prefill": plan, "decodes": decodes, "cache": cache,
                                  "free_blocks": self.free, "group_blocks": self._groups(j)})
        self.clock = end
        if self.pb and not self.prefix_ready and any(
                s.done >= self.pb * bs for s in self.prefilling.values()):
            self.prefix_ready = True
        for s in (self.finish_at.pop(j, {}) if decodes else {}).values():  # their last decode
            L = s.L0 + j - s.j0
            if simple:
                self.free += self._own(L + 1)
            else:
                self.free += lay.own(L, L + 1)
                self._leave(s, L)
            self.n_dec -= 1
            self.base -= s.L0 - s.j0
            self.cls[s.cls] -= 1
            del self.running[s.req.id]
            s.gen = s.req.output
            if cfg.no_evict:
                self.reserved -= self._whole(s)
            self._end(s, end)
        for s in done:  # a prefill emits a token
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
                if cfg.no_evict:
                    self.reserved -= self._whole(s)
                self._end(s, end)
                continue
            s.L0, s.j0 = s.tokens, j + (0 if pf else 1)
            s.cls = (s.L0 - s.j0) % bs
            s.last_iter = s.j0 + (s.req.output - s.gen) - 1
            self.cls[s.cls] += 1
            self.n_dec += 1
            self.base += s.L0 - s.j0
            self.finish_at.setdefault(s.last_iter, {})[s.req.id] = s
            if not simple:  # the window's blocks behind the prompt go before its first decode
                self.free += s.blocks - lay.own(s.L0 - 1, s.L0)
                self._join(s)
        if not pf:
            self.it += 1

    def _end(self, s: Seq, t: float) -> None:
        s.finish = s.last = t
        self.events.append((t, "finish", s.req.id))
        if self.on_finish is not None:
            self.on_finish(s)
