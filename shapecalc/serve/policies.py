"""The engine profiles' policies in the scheduler (engines.py): prefill-first steps (SGLang)
and the inter-token gaps of the decoders they hold back, and no-evict admission (TensorRT-LLM's
GUARANTEED_NO_EVICT). A mixin of scheduler.Replica, whose state it reads."""

from __future__ import annotations

from typing import Any

from .blocks import Layout
from .decoders import Seq


class Policies:
    cfg: Any  # scheduler.SchedulerConfig
    lay: Layout
    simple: bool
    pb: int
    free: int
    n_dec: int
    prefilling: dict[int, Seq]
    stalled: list[tuple[float, int]]
    stall: float
    wgaps: list[tuple[float, int]]

    def _own(self, tokens: int) -> int:
        raise NotImplementedError

    def _blocked(self) -> bool:
        raise NotImplementedError

    def _whole(self, s: Seq) -> int:
        """No-evict: the units a request's prompt and all its output take at most."""
        n = s.req.prompt + s.req.output
        if self.simple:
            return self._own(n)
        return max(self.lay.own(max(0, s.req.prompt - self.cfg.max_batched_tokens),
                                s.req.prompt), self.lay.own(n - 1, n))

    def _can_prefill(self) -> bool:
        """Prefill-first: whether a prefill chunk can run this step."""
        bs = self.cfg.block_size
        for s in self.prefilling.values():
            if self.free > 0 or s.done < (s.blocks + self.pb) * bs or (
                    not self.simple and self.lay.afford(s.done, s.blocks, self.free) > s.done):
                return True
        return not self._blocked()

    def _stalling(self, d: float, done: list[Seq]) -> None:
        """Prefill-first: a prefill step of d seconds held the decoders back; those whose
        prefill ends in it decode next, their last token at its end."""
        if not self.stalled:
            self.stall = 0.0
            if self.n_dec:
                self.stalled.append((0.0, self.n_dec))
        self.stall += d
        joined = sum(1 for s in done if s.gen + 1 < s.req.output)
        if joined:
            self.stalled.append((self.stall, joined))

    def _unstall(self, d: float, decodes: int) -> int:
        """The first decode step after a stall: each decoder's gap spans the prefill steps
        since its last token (weighted gaps); returns the decodes left at the step's own
        gap (none, but for a sequence that joined otherwise)."""
        extra = sum(c for _, c in self.stalled) - decodes  # preempted this step: the latest
        for t, c in reversed(self.stalled):
            c, extra = c - min(c, max(extra, 0)), extra - min(c, max(extra, 0))
            if c:
                self.wgaps.append((self.stall - t + d, c))
        left = max(0, -sum(c for _, c in self.stalled) + decodes)
        self.stalled, self.stall = [], 0.0
        return left
