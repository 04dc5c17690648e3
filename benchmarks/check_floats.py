"""render/floats.py against `repr` on tens of millions of floats (a check, not a test: minutes).

Every item of `repr_bytes`, its NUL bytes deleted, must be `repr(x).encode()`. The values:
log-uniform over 1e-12..1e20 (random bits), times and rates as a sweep computes them (ratios and
products of random integers and floats), decimals of 1..17 significant digits at every exponent
(read from random digit strings), the neighbours (±1..3 ulps) of every power of ten and of two
and of their small multiples, integers and halves, and 17-digit decimals ending in 5 (ties of
the 16-digit rounding). Arrays of mixed lengths (the small path, one pass, several passes).

    python benchmarks/check_floats.py [MILLIONS] [--seed S]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from shapecalc.render import floats


def _digits(rng: np.random.Generator, n: int) -> np.ndarray:
    """Decimals of 1..17 significant digits, exponents −13..20, from their text."""
    p = rng.integers(1, 18, n)
    m = rng.integers(10 ** (p - 1), 10**p, dtype=np.int64)
    e = rng.integers(-13, 21, n) - p + 1
    return np.array([float(f"{a}e{b}") for a, b in zip(m.tolist(), e.tolist(), strict=True)])


def _neighbours() -> np.ndarray:
    """±1..3 ulps around 10^j, 2^k and their multiples by 1..99, inside the fast range and out."""
    base = [10.0**j for j in range(-14, 23)] + [2.0**k for k in range(-50, 70)]
    base = np.array([b * m for b in base for m in range(1, 100)])
    out = [base]
    lo = hi = base
    for _ in range(3):
        lo, hi = np.nextafter(lo, 0), np.nextafter(hi, np.inf)
        out += [lo, hi]
    return np.concatenate(out)


def batch(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """About n values of each kind (a sixth of n each)."""
    k = n // 6
    bits = rng.integers(0, 1 << 52, k) | (1023 << 52)  # mantissa bits in [1, 2), scaled
    logu = bits.view(np.float64) * 10.0 ** rng.uniform(-12.3, 20, k)
    rates = rng.integers(1, 10**7, k) / rng.uniform(1e-4, 10, k)
    times = rng.integers(1, 10**12, k) * 2e-15 / rng.uniform(1e-3, 1, k) * rng.integers(1, 9, k)
    ints = rng.integers(1, 10**17, k).astype(np.float64) / rng.choice([1.0, 2.0, 4.0], k)
    heads, exps = rng.integers(10**15, 10**16, k // 4), rng.integers(-28, 5, k // 4)
    pairs = zip(heads.tolist(), exps.tolist(), strict=True)
    ties = np.array([float(f"{a}5e{b}") for a, b in pairs])
    return [logu, rates, times, ints, _digits(rng, k), ties]


def check(a: np.ndarray) -> int:
    """The number of values whose text is not repr's (the first few printed)."""
    got = floats.repr_bytes(a)
    want = [repr(v).encode() for v in a.tolist()]
    if b"\n".join(got.tolist()).replace(b"\0", b"") == b"\n".join(want):
        return 0
    texts = [g.replace(b"\0", b"") for g in got.tolist()]
    bad = [i for i, (g, w) in enumerate(zip(texts, want, strict=True)) if g != w]
    for i in bad[:5]:
        print("MISMATCH", a[i].hex(), repr(a[i]), got[i], file=sys.stderr)
    return len(bad)


def main() -> int:
    args = sys.argv[1:]
    seed = int(args[args.index("--seed") + 1]) if "--seed" in args else 0
    millions = float(args[0]) if args and not args[0].startswith("-") else 20
    rng = np.random.default_rng(seed)
    total = bad = 0
    slow = 0
    t0 = time.perf_counter()
    parts = [_neighbours()]
    while total < millions * 1e6:
        parts += batch(rng, 1_200_000) if len(parts) < 2 else []
        for a in parts:
            a = a[rng.permutation(a.size)]
            at = 0
            while at < a.size:  # lengths of every kind: the small path, one pass, several
                m = int(rng.choice([1, 7, 99, 100, 1000, 5462, 16384, 16385, 40000]))
                piece = a[at:at + m]
                bad += check(piece)
                with np.errstate(all="ignore"):
                    slow += sum(s.size for _, s in (floats._chunk(piece[i:i + floats._CHUNK])
                                                    for i in range(0, piece.size, floats._CHUNK))
                                ) if piece.size >= floats._FEW else piece.size
                total += piece.size
                at += m
        parts = []
        print(f"{total:,} values, {bad} wrong, {slow:,} by repr itself "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
