"""render/floats.py: vectorised shortest round-trip text, byte for byte `repr`, on the values a
sweep writes (times, rates) and on the awkward ones (ties, powers of two and ten, carries, the
edges of the fast range, 0, negatives, NaN, inf, subnormals)."""

from __future__ import annotations

import numpy as np

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
