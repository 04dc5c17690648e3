"""The largest value a monotone test accepts, by galloping then bisection: fit's largest batch
and context, train's largest micro-batch. Its own module, so that train imports it without fit's
closed forms (start-up: benchmarks/bench_startup.py)."""

from __future__ import annotations

from collections.abc import Callable


def largest_ok(ok: Callable[[int], bool], lo: int, hi: int) -> int:
    """The largest x in [lo, hi] with ok(x), for ok true up to some point then false; lo − 1 if
    none. Galloping from lo (steps 1, 2, 4, …: the probes grow with the answer, not the range;
    train's probes each walk the saved tensors), then bisection: at most ~2·48 probes for 2⁴⁸."""
    if not ok(lo):
        return lo - 1
    good, bad, step = lo, hi + 1, 1
    while good + step < bad:
        if not ok(good + step):
            bad = good + step
            break
        good, step = good + step, step * 2
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if ok(mid) else (good, mid)
    return good
