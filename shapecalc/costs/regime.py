"""One regime of a closed form: the range of T over which the stage list keeps one structure,
and every number of it a polynomial in B and T (closed.py fits them)."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from ..lean import dataclass
from .poly import Poly


@dataclass(frozen=True)
class Regime:
    """T in [lo, hi] (hi None: unbounded) for one (phase, p): every number a Poly."""

    lo: int
    hi: int | None
    polys: dict[str, Poly]
    tags: dict[str, Any]
    decode: bool = False
    # the tag scans compute makes at every point, done once a regime (byte_sum, largest)
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def attn_causal(self) -> Poly:
        """The attention FLOPs a causal kernel does (the lower triangle)."""
        return self.polys["attn_causal"]

    def tagged(self, prefix: str) -> list[tuple[str, Any, Any]]:
        """(key, class, repeat) of the tags under `prefix.`, in order."""
        if (prefix, None) not in self.memo:
            self.memo[prefix, None] = [(k, *tg) for k, tg in self.tags.items()
                                       if k.startswith(prefix + ".")]
        return self.memo[prefix, None]

    def activations(self, skip: tuple[str, ...]) -> list[tuple[str, Any]]:
        """(key, class) of the activations that can be the largest, those of a kind in `skip`
        left out: each distinct (polynomial, class) once, and none another of its class covers
        (≥ at every B, T: bytes grow with elements), so compute's `largest` evaluates fewer."""
        if ("act", skip) not in self.memo:
            seen, out = set(), []
            for k, (cls, kind) in ((k, tg) for k, tg in self.tags.items() if k.startswith("act.")):
                sig = (self.polys[k], cls)
                if kind not in skip and sig not in seen:
                    seen.add(sig)
                    out.append((k, cls))
            polys = [self.polys[k] for k, _ in out]
            self.memo["act", skip] = [  # of two that cover each other, the first stays
                (k, cls) for i, (k, cls) in enumerate(out)
                if not any(j != i and c == cls and polys[j].covers(polys[i])
                           and (j < i or not polys[i].covers(polys[j]))
                           for j, (_, c) in enumerate(out))]
        return self.memo["act", skip]

    def majorant(self) -> Regime:
        """Every polynomial with its coefficients made positive (kept: int64 proofs ask again)."""
        if "majorant" not in self.memo:
            self.memo["majorant"] = Regime(
                self.lo, self.hi, {k: v.majorant() for k, v in self.polys.items()}, self.tags,
                self.decode)
        return self.memo["majorant"]  # type: ignore[no-any-return]
