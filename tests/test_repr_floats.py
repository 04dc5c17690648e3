"""render/floats.py: vectorised shortest round-trip text, byte for byte `repr`, on the values a
sweep writes (times, rates) and on the awkward ones (ties, powers of two and ten, carries, the
edges of the fast range, 0, negatives, NaN, inf, subnormals), in every layout of the cells and
every number of passes. (benchmarks/check_floats.py runs tens of millions more.)"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shapecalc.render.floats import repr_bytes


def _same(a: np.ndarray) -> None:
    got = np.array([s.replace(b"\0", b"") for s in repr_bytes(a).tolist()], dtype="S")
    want = np.array([repr(x).encode() for x in a.tolist()], dtype="S")
    bad = np.flatnonzero(got != want)
    assert not bad.size, [(a[i], got[i], want[i]) for i in bad[:5]]


def test_awkward_values_are_repr():
    edges = [0.1, 0.2, 0.3, 1 / 3, 2 / 3, 1.0, 2.0, 0.5, 9.5, 10.0, 123.0, 1e-4, 1e-5, 1e-6,
             9.99999e-7, 1e-7, 1e15, 1e16, 1e17, 9.999999999999999e15, 1234567890123456.0,
             12345678901234567.0, 99.99999999999999, 9.999999999999998, 0.9999999999999999,
             5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 0.0, -0.0, -1.5,
             float("nan"), float("inf"), -float("inf"), 0.04102440623761194, 24.375695882313952,
             4.35, 2.675, 0.125, 1.5e-6, 3e16, 8.5, 0.000123456789]
    _same(np.array(edges))
    _same(np.nextafter(np.array(edges[:24]), np.inf))
    _same(np.nextafter(np.array(edges[:24]), -np.inf))
    _same(np.array([0.0, -2.5, 1e-300, float("nan")]))  # none on the fast path
    _same(np.array([-0.0]))


def test_many_values_are_repr():
    rng = np.random.default_rng(7)
    parts = [
        rng.random(20_000),  # 16–17 digits
        np.exp(rng.uniform(-20, 45, 20_000)),  # every exponent, both notations
        np.concatenate([np.round(rng.uniform(0, 1000, 4_000), d) for d in range(6)]),  # few digits
        rng.integers(1, 10**6, 20_000) / rng.integers(1, 10**6, 20_000),
        rng.integers(1, 2**53, 20_000).astype(float) * 2.0 ** rng.integers(-70, 40, 20_000),
        10.0 ** rng.integers(-8, 18, 2_000) * rng.integers(1, 100, 2_000),
        np.array([], dtype=float),
    ]
    for a in parts:
        _same(a)


def test_every_layout_is_repr():
    """The cells' layout is chosen per array (the integer part's width, the zeros after the
    point, a 17th digit or an exponent at the end): arrays of one kind each, and mixed."""
    rng = np.random.default_rng(11)
    digits = rng.random(400) + 1.0  # 16–17 digits, and fewer (1.5)
    kinds = [digits * 10.0**e for e in range(-7, 18)] + [np.round(digits, 2) * 10.0**e
                                                          for e in range(-7, 18)]
    for a in kinds:
        _same(a)
    _same(np.concatenate(kinds))
    _same(np.concatenate([kinds[3], [np.nan, 0.0, -1.0]]))  # an exponent only where repr writes
    _same(np.concatenate([kinds[20], [float("inf")] * 3]))
    _same(np.array([123456789012345.6] * 99 + [1e-5]))  # wide integer part, then an exponent


def test_neighbours_and_short_digits_are_repr():
    """±1..3 ulps of every power of ten and of two (and small multiples) in and out of the fast
    range; decimals of every length 1..17 at every exponent; 17 digits ending in 5 (ties of the
    16-digit rounding); integers and halves; values that round up to the next power of ten."""
    base = np.array([m * 10.0**j for j in range(-9, 20) for m in (1, 2, 5, 9, 25, 99)]
                    + [2.0**k for k in range(-25, 60)])
    near = [base]
    lo = hi = base
    for _ in range(3):
        lo, hi = np.nextafter(lo, 0), np.nextafter(hi, np.inf)
        near += [lo, hi]
    _same(np.concatenate(near))
    rng = np.random.default_rng(5)
    p = rng.integers(1, 18, 20_000)
    m = rng.integers(10 ** (p - 1), 10**p, dtype=np.int64)
    e = rng.integers(-8, 19, 20_000) - p + 1
    _same(np.array([float(f"{a}e{b}") for a, b in zip(m.tolist(), e.tolist(), strict=True)]))
    ties = rng.integers(10**15, 10**16, 5_000)
    _same(np.array([float(f"{a}5e{b}") for a, b in
                    zip(ties.tolist(), rng.integers(-22, 2, 5_000).tolist(), strict=True)]))
    _same(rng.integers(1, 10**17, 5_000) / rng.choice([1.0, 2.0, 4.0], 5_000))
    _same(np.array([9.9999999999999999e-5, 0.0009999999999999998, 9.999999999999999e15,
                    0.09999999999999999, 99999.99999999999] * 30))


def test_lengths_and_passes():
    """The small path (repr itself), one pass, several passes (each its own layout), and a
    strided or non-float64 input."""
    rng = np.random.default_rng(3)
    a = np.concatenate([rng.random(20_000) * 1e-5, rng.random(20_000) * 1e5])
    for n in (0, 1, 99, 100, 16_384, 16_385, 40_000):
        _same(a[-n:] if n else a[:0])
    _same(a[::3])
    got = repr_bytes(a[:500].astype(np.float32))
    assert [s.replace(b"\0", b"") for s in got.tolist()] == [
        repr(float(x)).encode() for x in a[:500].astype(np.float32).tolist()]


@settings(max_examples=40)  # ~1 s here; local runs of 6,000–20,000 examples passed
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=100,
                max_size=200),
       st.lists(st.floats(min_value=1e-7, max_value=1e18), min_size=100, max_size=200))
def test_any_floats_are_repr(mixed, fast):
    """Any float64 (the fast path beside repr's), and the fast path's range alone."""
    _same(np.array(mixed))
    _same(np.array(fast))
