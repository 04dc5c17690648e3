"""Speculative decoding: the settings, the acceptance, its defaults and the seeded draws.

Each step of a decoding sequence runs k draft tokens and the target verifies k + 1 query tokens
(the last emitted token and the k drafts) on its cache; the first rejected draft ends the run,
and the target emits one more token of its own there (the bonus), so a step emits 1 … k + 1
tokens. That is how vLLM V1 runs it: its scheduler (vllm/v1/core/sched/scheduler.py,
`schedule`) gives a running request `num_tokens_with_spec − num_computed_tokens` new tokens
(1 + its k spec tokens) against the token budget and calls `allocate_slots(request,
num_new_tokens, num_lookahead_tokens=self.num_lookahead_tokens)`; the rejection sampler keeps
the accepted prefix and the bonus token (vllm/v1/sample/rejection_sampler.py).

Acceptance: α_i is the probability that draft i is accepted given drafts 1 … i − 1 were. The
expected tokens a step emits are 1 + Σ_i Π_{j≤i} α_j, for one α (i.i.d.) (1 − α^{k+1})/(1 − α).
Defaults, per draft kind, from published figures (each solved for α, i.i.d.):

- eagle3: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, MT-bench acceptance length τ = 2.77 at K = 7
  (temperature 1), as nebius/EAGLE3-Llama-3.3-70B-Instruct's model card lists it ("Comparison
  with Public Checkpoints … yuhuili/EAGLE3-LLaMA3.1-Instruct-8B | 2.77"): (1 − α⁸)/(1 − α) =
  2.77, α = 0.650;
- mtp: DeepSeek-V3 technical report (arXiv 2412.19437, §5.4.3): "the acceptance rate of the
  second token prediction ranges between 85% and 90%": α = 0.85, the low end;
- draft: Llama-3-8B-Instruct (Q4_K_M) drafting Llama-3-70B-Instruct in llama.cpp, 8 drafted
  tokens, "Accepted Rate: 58.68" (devquasar.com, "Speculative Decoding tradeoffs GPU with large
  models (Llama 70B + 8B)"): accepted / drafted = Σ_{i≤8} α^i / 8 = 0.5868, α = 0.880.

Draws: a sequence's tokens per step are drawn from that distribution, one uniform a step, from
one generator seeded by the workload's seed, in the order sequences start decoding (Draws):
deterministic, as the simulation is.
"""

from __future__ import annotations

from typing import Any

from ..inputs.numbers import bounded, bounded_int, parse_number
from ..lean import dataclass
from ..model.config import ShapecalcError
from ..model.suggest import not_one_of

KINDS = ("draft", "eagle3", "mtp")
MAX_K = 64  # drafts a step (vLLM's num_speculative_tokens; SGLang's speculative_num_steps)

# the published figures above: (kind, what it gives, value, k it was measured at, source)
PUBLISHED: dict[str, dict[str, Any]] = {
    "eagle3": {"form": "acceptance_length", "value": 2.77, "k": 7,
               "source": "nebius/EAGLE3-Llama-3.3-70B-Instruct model card: "
               "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B MT-bench τ = 2.77 at K = 7"},
    "mtp": {"form": "rate", "value": 0.85, "k": 1,
            "source": "DeepSeek-V3 technical report §5.4.3 (arXiv 2412.19437): \"the "
            "acceptance rate of the second token prediction ranges between 85% and 90%\""},
    "draft": {"form": "accepted_fraction", "value": 0.5868, "k": 8,
              "source": "devquasar.com, Llama-3-8B (Q4_K_M) drafting Llama-3-70B in "
              "llama.cpp, 8 drafted: \"Accepted Rate: 58.68\""},
}


def expected_tokens(alphas: tuple[float, ...]) -> float:
    """Tokens a step emits on average: 1 + Σ_i Π_{j≤i} α_j."""
    out, p = 1.0, 1.0
    for a in alphas:
        p *= a
        out += p
    return out


def _solve(f: Any, target: float) -> float:
    """α in (0, 1) with f(α) = target, f increasing (bisection to 1e-12)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return (lo + hi) / 2


def default_alpha(kind: str) -> float:
    """The i.i.d. α the kind's published figure gives (module doc)."""
    p = PUBLISHED[kind]
    k, v = p["k"], p["value"]
    if p["form"] == "rate":
        return float(v)
    if p["form"] == "acceptance_length":
        return _solve(lambda a: expected_tokens((a,) * k), v)
    return _solve(lambda a: (expected_tokens((a,) * k) - 1.0) / k, v)


@dataclass(frozen=True)
class Spec:
    """Speculative decoding of a deployment: the draft kind, k and the per-position α."""

    kind: str
    k: int
    alphas: tuple[float, ...]  # one a position, 1 … k
    acceptance_given: bool
    seed: int = 0

    @property
    def expected(self) -> float:
        return expected_tokens(self.alphas)

    def pmf(self) -> list[float]:
        """P(a step emits m tokens), m = 1 … k + 1."""
        out, p = [], 1.0
        for a in self.alphas:
            out.append(p * (1.0 - a))
            p *= a
        return [*out, p]

    def doc(self) -> dict[str, Any]:
        return {"draft": self.kind, "k": self.k, "acceptance": list(self.alphas),
                "acceptance_source": "--acceptance" if self.acceptance_given
                else PUBLISHED[self.kind]["source"],
                "expected_tokens_per_step": self.expected}


def parse_acceptance(text: str | None, k: int, kind: str) -> tuple[tuple[float, ...], bool]:
    """`0.7` (every position) or `0.8,0.6,0.5` (one per position, k of them); each in (0, 1).
    None: the kind's published default."""
    if text is None:
        return (default_alpha(kind),) * k, False
    items = [x.strip() for x in text.split(",")]
    vals = []
    for x in items:
        v = parse_number(x, "acceptance")
        if not 0.0 < v < 1.0:
            raise ShapecalcError("acceptance", f"{x!r} must be in (0, 1): the probability a "
                                 "draft token is accepted")
        vals.append(v)
    if len(vals) == 1:
        return (vals[0],) * k, True
    if len(vals) != k:
        raise ShapecalcError("acceptance", f"gives {len(vals)} positions for --spec-k {k}: "
                             "give one rate or one per draft position")
    return tuple(vals), True


def make_spec(kind: str | None, k: int | None, acceptance: str | None, seed: int) -> Spec | None:
    """The run's speculation, or None when no speculative flag is given."""
    if kind is None and k is None and acceptance is None:
        return None
    if kind is None:
        raise ShapecalcError("draft", "speculative decoding needs a draft: --draft draft "
                             "(with --draft-preset or --draft-config), eagle3 (with "
                             "--draft-config) or mtp (the model's own MTP layers)")
    if kind not in KINDS:
        raise not_one_of("draft", kind, KINDS)
    if k is None:
        raise ShapecalcError("spec-k", "give the draft tokens a step (--spec-k K, ≥ 1)")
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise ShapecalcError("spec-k", f"must be ≥ 1 draft token a step, got {k}")
    bounded_int(k, "spec-k", 1, MAX_K, "draft tokens a step")
    alphas, given = parse_acceptance(acceptance, k, kind)
    for a in alphas:
        bounded(a, "acceptance", 0.0, 1.0)
    return Spec(kind, k, alphas, given, seed)


class Draws:
    """Tokens emitted per step (1 … k + 1), drawn from the spec's distribution by one generator
    seeded by the workload's seed, in the order sequences start decoding (the simulation is
    deterministic, so the draws are too), a chunk at a time."""

    CHUNK = 1 << 18

    def __init__(self, spec: Spec):
        import numpy as np

        self.np = np
        self.cdf = np.cumsum(spec.pmf()[:-1])
        self.rng = np.random.default_rng([spec.seed, 0x5BEC])
        self.buf = np.zeros(0, np.int64)
        self.cz = np.zeros(1, np.int64)  # cz[m]: Σ of buf's first m draws
        self.pos = 0

    def take(self, R: int) -> tuple[Any, Any, int]:
        """The steps that emit R tokens: each step's drawn tokens, the tokens before each step
        (0, a₁, a₁ + a₂, …) and their sum (≥ R: the last step's draw is cut to what is left)."""
        np = self.np
        if len(self.buf) - self.pos < R:  # each step emits ≥ 1 token: R draws suffice
            new = np.searchsorted(self.cdf, self.rng.random(max(self.CHUNK, R)), side="right")
            new += 1
            self.buf = np.concatenate((self.buf[self.pos:], new))
            self.cz = np.concatenate(([0], np.cumsum(self.buf)))
            self.pos = 0
        p, cz = self.pos, self.cz
        base = int(cz[p])
        S = int(cz[p: p + R + 1].searchsorted(base + R))
        self.pos = p + S
        return self.buf[p: p + S], cz[p: p + S] - base, int(cz[p + S]) - base
