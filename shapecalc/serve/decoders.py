"""The sequences of a replica, and its decoders' window and chunk bookkeeping (scheduler.py's
module doc): the sums the cost's decode forms read, the decoders past each sliding window by
residue, and the events that move them at steps known when a decode starts."""

from __future__ import annotations

from typing import Any

from .blocks import Layout
from .cost import IterationCost
from .workload import Request


class Seq:
    __slots__ = (
        "L0",
        "blocks",
        "c0",
        "cached",
        "cls",
        "done",
        "epoch",
        "finish",
        "first",
        "gen",
        "j0",
        "last",
        "last_iter",
        "preemptions",
        "req",
        "tokens",
    )

    def __init__(self, req: Request):
        self.req = req
        self.tokens = req.prompt  # to prefill (prompt + generated after a preemption)
        self.done = 0  # of those, computed
        self.cached = req.cached  # of those, received with it (disaggregated decode)
        self.blocks = 0  # own blocks while prefilling
        self.gen = 0  # tokens emitted (when the decode started, while decoding)
        self.j0 = self.L0 = self.cls = self.last_iter = self.c0 = self.epoch = 0
        self.first = self.last = self.finish = -1.0
        self.preemptions = 0


class Windows:
    """Replica's window and chunk state (set up in Replica.__init__)."""

    cfg: Any
    cost: IterationCost
    lay: Layout
    pb: int
    free: int
    cls: list[int]
    slides: list[tuple[int, int]]
    sat: list[list[int]]
    chunks: list[int]
    dsum: list[int]
    dn: list[int]
    evs: dict[int, list[tuple[Seq, int, str, int]]]
    running: dict[int, Seq]
    prefilling: dict[int, Seq]

    def _need(self, j: int) -> int:
        """Units the decoders need at step j: a block in every group for those filling their
        last one, less the block each sliding group frees behind the window."""
        bs = self.cfg.block_size
        need = self.cls[(-j) % bs] * self.lay.per_block
        for (W, w), sat in zip(self.slides, self.sat, strict=True):
            need -= w * sat[(W - 1 - j) % bs]
        return need

    def _dex(self, j: int) -> tuple[int, ...]:
        """The decoders' sums of the cost's decode forms at step j."""
        return tuple(self.dsum[e] + self.dn[e] * j if b[0] == "dec_slide" else self.dsum[e]
                     for e, b in enumerate(self.cost.dbasis))

    def _event(self, s: Seq, step: int, kind: str, x: int) -> None:
        if step <= s.last_iter:  # past its last decode it has ended
            self.evs.setdefault(step, []).append((s, s.epoch, kind, x))

    def _join(self, s: Seq) -> None:
        """A decoder's window sums and events (its first decode step is s.j0 on L0 tokens)."""
        o, bs, pb = s.L0 - s.j0, self.cfg.block_size, self.pb
        for e, b in enumerate(self.cost.dbasis):
            if b[0] == "dec_slide":
                if s.L0 >= b[1] - 1:
                    self.dn[e] += 1
                    self.dsum[e] += o - (b[1] - 1)
                else:
                    self._event(s, b[1] - 1 - o, "dsat", e)
            else:
                self.dsum[e] += (s.L0 - 1) // b[1]
        for g, (W, _) in enumerate(self.slides):
            thr = W - 1 + (pb + 1) * bs
            if s.L0 >= thr:
                self.sat[g][o % bs] += 1
            else:
                self._event(s, thr - o, "bsat", g)
        for C in self.chunks:
            self._event(s, s.j0 + (-s.L0) % C, "wrap", C)

    def _leave(self, s: Seq, L: int) -> None:
        """Undo _join for a decoder on L tokens at the current step (its events are stale)."""
        o, bs, pb = s.L0 - s.j0, self.cfg.block_size, self.pb
        s.epoch += 1
        for e, b in enumerate(self.cost.dbasis):
            if b[0] == "dec_slide":
                if L >= b[1] - 1:
                    self.dn[e] -= 1
                    self.dsum[e] -= o - (b[1] - 1)
            else:
                self.dsum[e] -= L // b[1]
        for g, (W, _) in enumerate(self.slides):
            if L >= W - 1 + (pb + 1) * bs:
                self.sat[g][o % bs] -= 1

    def _events(self, j: int) -> None:
        """Apply the events of step j: decoders reaching a window, chunks wrapping."""
        lay = self.lay
        for s, epoch, kind, x in self.evs.pop(j, ()):
            if epoch != s.epoch:
                continue
            o = s.L0 - s.j0
            if kind == "dsat":
                self.dn[x] += 1
                self.dsum[x] += o - (self.cost.dbasis[x][1] - 1)
            elif kind == "bsat":
                self.sat[x][o % self.cfg.block_size] += 1
            else:  # L = o + j wraps at a multiple of C: the chunk behind it is freed
                L = o + j
                for e, b in enumerate(self.cost.dbasis):
                    if b == ("dec_chunk", x):
                        self.dsum[e] += 1
                for g, r in enumerate(lay.reaches):
                    if r is not None and not isinstance(r, int) and r.size == x:
                        self.free += lay.weights[g] * (lay.blocks(g, L - 1, L)
                                                       - lay.blocks(g, L, L))
                self._event(s, j + x, "wrap", x)

    def _groups(self, j: int) -> list[int]:
        """Blocks each KV group holds during step j, over the running sequences (traced runs)."""
        lay, out = self.lay, [0] * len(self.lay.reaches)
        for s in self.running.values():
            if s.req.id in self.prefilling:
                c, N = s.c0, s.done
            else:
                c = s.L0 + j - s.j0
                N = c + 1
            for g in range(len(out)):
                out[g] += lay.blocks(g, c, N)
        return out

