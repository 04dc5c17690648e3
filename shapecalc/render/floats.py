"""Shortest round-trip text of float64 arrays, byte for byte what `repr` writes, vectorised.

For positive x with 10⁻⁶ ≤ x < 10¹⁷ (not a power of two): X = x·10^k ∈ [10¹⁶, 10¹⁷) exactly, as
Dekker's product of x and 10^k (exact for k ≤ 22) in float64, split into N = ⌊X⌋ and the
fraction f. The nearest p-digit decimal is N's first p digits rounded by the rest
plus f; it round-trips when its distance to X is at most half of x's ulp at that scale (H ≥ 0.55,
so 17 digits always do), and as more digits only come closer, the fewest is a binary search over
p. That is repr's choice (the shortest string that reads back as x; the nearest of those). Any
point where a rounding or the ulp test falls within 10⁻⁹ of its threshold (a tie),
and every other value (0, negatives, NaN, inf, tiny or huge), is written by `repr` itself.
"""

from __future__ import annotations

import numpy as np

_TOL = 1e-9  # X is exact: only float rounding of the tests (≪ 10⁻¹²) and true ties
_P10 = np.array([10**i for i in range(18)], dtype=np.int64)
_F10 = np.array([10.0**k for k in range(23)])  # exact: 5²² < 2⁵³
# the text's bytes: the 20 digits of N·10^(17−p) (3 leading zeros), then these constants
_CONST = b"0123456789.e+-\0\0"
_ZERO, _DOT, _E, _PLUS, _MINUS, _NUL = 20, 30, 31, 32, 33, 34
_W = 22  # the longest text: "0.000" + 17 digits, or d.dddddddddddddddde-05
_TABLES: dict[str, np.ndarray] = {}


def _templates() -> tuple[np.ndarray, np.ndarray]:
    """For each (kind, decimal point position decpt ∈ [−10, 17]): the byte sources of the text
    (indices into a row of 20 digits, then constants) and its length. Python's rule
    (format_float_short, mode 'r'): an exponent when decpt ≤ −4 or decpt > 16, ".0" on integers.
    The digit row holds NUL past the p digits (but for integers: their zeros), so one template
    serves every p."""
    if "src" not in _TABLES:
        src = np.full((5, 28, _W), _NUL, dtype=np.intp)
        size = np.zeros((5, 28), dtype=np.intp)
        d = list(range(3, 20))  # the 17 digits
        for decpt in range(-10, 18):
            exp = decpt - 1
            tail = [_E, _MINUS if exp < 0 else _PLUS, _ZERO + abs(exp) // 10, _ZERO + abs(exp) % 10]
            for kind, t in enumerate((
                [*d[:max(decpt, 0)], _DOT, *d[max(decpt, 0):]],  # 0: a fraction, 0 < decpt < p
                [*d[:max(decpt, 0)], _DOT, _ZERO],  # 1: an integer, decpt ≥ p (zeros kept)
                [_ZERO, _DOT, *[_ZERO] * max(-decpt, 0), *d],  # 2: decpt ≤ 0
                [d[0], _DOT, *d[1:], *tail],  # 3: an exponent, p > 1
                [d[0], *tail],  # 4: an exponent, one digit
            )):
                t = t[:_W]
                src[kind, decpt + 10, :len(t)] = t
                size[kind, decpt + 10] = len(t)
        _TABLES["src"], _TABLES["size"] = src, size
    return _TABLES["src"], _TABLES["size"]


def _runs(src: np.ndarray) -> list[tuple[int, int, int]]:
    """A template as (at, start, length) copies: runs of consecutive digits, constants one by
    one (start ≥ 20), the NUL tail left out."""
    out: list[tuple[int, int, int]] = []
    for at, v in enumerate(src.tolist()):
        if v == _NUL:
            break
        if v < 20 and out and out[-1][1] < 20 and out[-1][1] + out[-1][2] == v:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + 1)
        else:
            out.append((at, v, 1))
    return out


def _groups4() -> np.ndarray:
    """0..9999 as 4 ASCII digits (leading zeros), one uint32 each; at 10000·m + v, only the
    first m digits of v, NUL after (m = 0..4)."""
    if "g4" not in _TABLES:
        # built with NumPy: the 50,000 Python strings cost ~0.1 s, at every start
        v = np.arange(10_000)
        digits = np.stack([v // 1000, v // 100 % 10, v // 10 % 10, v % 10], axis=1) + ord("0")
        keep = np.arange(4) < np.arange(5)[:, None, None]  # (m, 1, 4): the first m digits
        text = np.where(keep, digits[None], 0).astype(np.uint8)  # (5, 10000, 4)
        _TABLES["g4"] = text.reshape(-1).view(np.uint32)
    return _TABLES["g4"]


def _split(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Veltkamp's split: v = hi + lo exactly, each half of 26 bits or fewer."""
    c = v * 134217729.0  # 2²⁷ + 1
    hi = c - (c - v)
    return hi, v - hi


_SPLIT10 = _split(_F10)


def _scaled(x: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x·10^k exactly, as N + f (N an integer, 0 ≤ f < 1) where x·10^k ∈ [10¹⁶, 10¹⁷), for
    0 ≤ k ≤ 22 (10^k exact): Dekker's product hi + lo, hi an even integer (≥ 2⁵³)."""
    P = _F10[k]
    hi = x * P
    xh, xl = _split(x)
    ph, pl = _SPLIT10[0][k], _SPLIT10[1][k]
    lo = ((xh * ph - hi) + xh * pl + xl * ph) + xl * pl
    fl = np.floor(lo)
    return hi.astype(np.int64) + fl.astype(np.int64), lo - fl


def _round_at(N: np.ndarray, f: np.ndarray, H: np.ndarray, D: np.ndarray | np.int64
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The nearest decimal to N + f with the last digits below D dropped (its digits), whether
    it reads back as x (within H), and whether either test is within _TOL of its threshold."""
    q = N // D
    r = N - q * D
    up2 = 2 * r - D + 2 * f  # 2(r + f) − D: > 0 rounds up
    c = up2 > 0
    dist = np.abs((r - np.where(c, D, 0)) + f)
    return q + c, dist <= H, (np.abs(up2) < 2 * _TOL) | (np.abs(dist - H) < _TOL)


def repr_bytes(a: np.ndarray) -> np.ndarray:
    """`repr(x).encode()` of each float64 of a 1-D array, as an 'S' array padded with NUL bytes
    anywhere in an item (the sweep writer deletes every NUL of a row)."""
    x = np.ascontiguousarray(a, dtype=np.float64)
    n = x.size
    with np.errstate(all="ignore"):
        fast = np.isfinite(x) & (x > 0) & ((x.view(np.int64) & ((1 << 52) - 1)) != 0)
        e10 = np.floor(np.log10(np.where(fast, x, 1.0))).astype(np.int64)
    k = 16 - e10
    X = x * _F10[np.clip(k, 0, 22)]  # to fix log10's off-by-one next to a power of ten
    k += (X < 1e16).astype(np.int64) - (X >= 1e17)
    fast &= (k >= 0) & (k <= 22)
    k[~fast] = 16
    xs = np.where(fast, x, 1.0)
    N, f = _scaled(xs, k)
    fast &= (N >= 10**16) & (N < 10**17)
    N[~fast] = 10**16
    H = np.spacing(xs) * _F10[k] / 2  # half an ulp at the scale: exact (a power of two · 10^k)
    # the digits: 17 always read back; most computed values need 16 or 17, so 16 and 15 are
    # tried on all (scalar divisors), then a binary search over 1..14 where 15 did
    p = np.full(n, 17, dtype=np.int64)
    digits, _, amb = _round_at(N, f, H, np.int64(1))
    d16, ok, bad = _round_at(N, f, H, np.int64(10))
    amb |= bad
    p[ok] = 16
    np.copyto(digits, d16, where=ok)
    i15 = np.flatnonzero(ok)
    if i15.size:
        d15, ok15, bad = _round_at(N[i15], f[i15], H[i15], np.int64(100))
        amb[i15] |= bad
        i15, d15 = i15[ok15], d15[ok15]
        p[i15], digits[i15] = 15, d15
    if i15.size:
        Ns, fs, Hs = N[i15], f[i15], H[i15]
        lo = np.ones(i15.size, dtype=np.int64)
        hi = np.full(i15.size, 15, dtype=np.int64)
        bad_s = np.zeros(i15.size, dtype=bool)
        while (todo := lo < hi).any():
            mid = (lo + hi) // 2
            _, oks, bad = _round_at(Ns, fs, Hs, _P10[17 - mid])
            bad_s |= bad & todo
            hi = np.where(todo & oks, mid, hi)
            lo = np.where(todo & ~oks, mid + 1, lo)
        ds, _, bad = _round_at(Ns, fs, Hs, _P10[17 - hi])
        amb[i15] |= bad_s | bad
        p[i15], digits[i15] = hi, ds
    fast &= ~amb
    decpt = 17 - k
    carry = digits == _P10[p]  # only at p = 1 (a longer one would end in a zero)
    if carry.any():
        digits[carry] = 1
        decpt[carry] += 1
    fast &= (decpt >= -10) & (decpt <= 17)
    p[~fast] = 1
    decpt[~fast] = 1
    M = digits * _P10[17 - p]  # the p digits, then zeros: 17 digits
    M[~fast] = 0
    exp = (decpt <= -4) | (decpt > 16)
    kind = np.where(exp, np.where(p > 1, 3, 4), np.where(decpt <= 0, 2, np.where(decpt < p, 0, 1)))
    keep = np.where(kind == 1, 17, p) + 3  # the row's bytes kept: NUL past the digits
    # 20 digits (3 leading zeros), 4 a group: M = g0·10¹⁶ + g1·10¹² + g2·10⁸ + g3·10⁴ + g4
    hi8 = M // 10**8
    lo8 = M - hi8 * 10**8
    G = np.empty((5, n), dtype=np.int64)
    t = hi8 // 10**4  # g0·10⁴ + g1
    G[2] = hi8 - t * 10**4
    G[0] = t // 10**4
    G[1] = t - G[0] * 10**4
    G[3] = lo8 // 10**4
    G[4] = lo8 - G[3] * 10**4
    for j in range(5):  # the first m of group j's digits: m = clip(keep − 4j, 0, 4)
        G[j] += np.clip(keep - 4 * j, 0, 4) * 10_000
    rowb = np.ascontiguousarray(_groups4().take(G).T).view(np.uint8)  # (n, 20)
    src, size = _templates()
    code = kind * 28 + decpt + 10
    counts = np.bincount(code, minlength=size.size)
    present = np.flatnonzero(counts).tolist()
    width = int(size.reshape(-1)[present].max(initial=1))
    out = np.zeros((n, width), dtype=np.uint8)
    # the commonest first, on every row; each other one on its own rows only (gathered, then
    # put back: a whole copy per template cost a sweep's writer ~10%)
    for i, c in enumerate(sorted(present, key=lambda c: -counts[c])):
        rows = np.flatnonzero(code == c) if i else None
        dst = out if rows is None else np.zeros((rows.size, width), dtype=np.uint8)
        digs = rowb if rows is None else rowb[rows]
        for at, start, length in _runs(src.reshape(-1, _W)[c]):
            if start >= 20:  # a constant byte
                dst[:, at] = _CONST[start - 20]
            else:
                dst[:, at:at + length] = digs[:, start:start + length]
        if rows is not None:
            out[rows] = dst
    slow = np.flatnonzero(~fast)
    if slow.size:
        texts = np.array([repr(v).encode() for v in x[slow].tolist()], dtype="S")
        width = max(width, texts.dtype.itemsize)
        wide = np.zeros((n, width), dtype=np.uint8)
        wide[:, :out.shape[1]] = out
        wide[slow] = 0
        wide[slow, :texts.dtype.itemsize] = texts.view(np.uint8).reshape(slow.size, -1)
        out = wide
    return np.ascontiguousarray(out).view(f"S{width}").reshape(n)
