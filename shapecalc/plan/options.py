"""What a planner may tell fit, compare and sweep: memory utilization, efficiencies, price, the
compute dtype, the attention kernel the workspace assumes, chunked prefill."""

from __future__ import annotations

import math
from fractions import Fraction

from ..inputs.hardware import GPU, PEAK_DTYPES
from ..lean import dataclass
from ..model.config import ShapecalcError
from ..model.record import INT_MAX
from ..model.suggest import did_you_mean_dtype

ACTIVATIONS = (
    "2 × the largest tensor one rank writes in the prefill step, the KV cache aside (its input "
    "and output live together); with FlashAttention (the default) the [B,H,T,T] scores and the "
    "GQA-repeated K/V are never materialised and are left out; the step holds all B·T prompt "
    "tokens, or with --max-batched-tokens N (chunked prefill, as vLLM profiles it) N tokens"
)


@dataclass(frozen=True)
class PlanOptions:
    utilization: float = 0.9
    compute_efficiency: float = 1.0
    memory_efficiency: float = 1.0
    link_efficiency: float = 1.0
    price: float | None = None  # per GPU-hour
    compute_dtype: str | None = None
    attention: str = "flash"  # flash | eager: which tensors the workspace estimate counts
    max_batched_tokens: int | None = 8192  # a prefill step's tokens (vLLM); None: all B·T
    perf: tuple[str, ...] = ()  # NAME=VALUE overrides of the expected-time terms (plan/perf.py)
    price_source: str | None = None  # "--price", or the profile it defaulted from (price.py)

    def __post_init__(self) -> None:
        for name in ("utilization", "compute_efficiency", "memory_efficiency", "link_efficiency"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 < v <= 1 and math.isfinite(v)):
                raise ShapecalcError(name.replace("_", "-"), f"must be in (0, 1], got {v}")
        if self.price is not None and not (self.price > 0 and math.isfinite(self.price)):
            raise ShapecalcError(
                "price", f"--price must be a price per GPU-hour > 0, got {self.price:g}"
            )
        if self.compute_dtype is not None and self.compute_dtype not in PEAK_DTYPES:
            raise ShapecalcError(
                "compute-dtype", f"{self.compute_dtype!r} is not one of {', '.join(PEAK_DTYPES)}"
                + did_you_mean_dtype(self.compute_dtype, PEAK_DTYPES))
        if self.attention not in ("flash", "eager"):
            raise ShapecalcError("attention", f"{self.attention!r} is not one of flash, eager")
        if self.max_batched_tokens is not None and not 1 <= self.max_batched_tokens <= INT_MAX:
            raise ShapecalcError(
                "max-batched-tokens", f"must be in 1..2⁶³−1, got {self.max_batched_tokens}"
            )

    def reserve(self, capacity: int) -> int:
        """Bytes kept free: capacity − ⌊capacity × utilization⌋ (exact)."""
        return capacity - math.floor(capacity * Fraction(str(self.utilization)))


def compute_dtype(gpu: GPU, compute: str, opts: PlanOptions) -> tuple[str, float | None]:
    """The dtype matmuls run in (the workload's, config.compute_width, unless
    --compute-dtype), and its peak."""
    dt = opts.compute_dtype or compute
    return dt, gpu.peak(dt)


def require_peak(gpu: GPU, compute: str, opts: PlanOptions) -> tuple[str, float]:
    dt, peak = compute_dtype(gpu, compute, opts)
    if peak is None:
        have = ", ".join(d for d in PEAK_DTYPES if gpu.peak(d) is not None)
        raise ShapecalcError(
            "compute-dtype",
            f"{gpu.name} has no {dt} peak FLOP/s (it has {have}); pass --compute-dtype to estimate "
            f"with another (e.g. bf16, as weight-only {dt} kernels compute), or --set-gpu "
            f"peak_flops.{dt}=…",
        )
    return dt, peak


