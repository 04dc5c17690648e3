"""Shortest round-trip text of float64 arrays, byte for byte what `repr` writes, vectorised.

For positive x with 10⁻⁶ ≤ x < 10¹⁷ (not a power of two): X = x·10^k ∈ [10¹⁶, 10¹⁷) exactly, as
Dekker's product of x and 10^k (exact for k ≤ 22) in float64, split into N = ⌊X⌋ and the
fraction f. The nearest p-digit decimal is N's first p digits rounded by the rest
plus f; it round-trips when its distance to X is at most half of x's ulp at that scale (H ≥ 0.55,
so 17 digits always do), and as more digits only come closer, the fewest is the smallest p that
does (16 and 15 tried on every value, fewer on those 15 suit). That is repr's choice (the
shortest string that reads back as x; the nearest of those). Any point where a rounding or the
ulp test falls within 10⁻⁹ of its threshold (a tie), and every other value (0, negatives, NaN,
inf, tiny or huge), is written by `repr` itself.

The text is laid out the same on every row of an array, from 4-byte cells, with NUL where a row
has nothing (the sweep writer deletes every NUL): the integer part (right-aligned), the point and
the zeros after it ("0.000"), 16 digits with no trailing zeros (the shortest digits never end in
one; an integer's are "0"), then a 17th digit (0.0ddd…) or the exponent ("e-05").
"""

from __future__ import annotations

import numpy as np

_TOL = 1e-9  # X is exact: only float rounding of the tests (≪ 10⁻¹²) and true ties
_P10 = np.array([10**i for i in range(18)], dtype=np.int64)
_F10 = np.array([10.0**k for k in range(23)])  # exact: 5²² < 2⁵³
_LO = np.float64(1e-6).view(np.uint64)  # positive floats' bits are in their order
_SPAN = np.float64(1e17).view(np.uint64) - _LO
_EXPO = 0x7FF << 52
_FEW = 100  # fewer values: repr itself is quicker than ~100 NumPy calls
_CHUNK = 16384  # values a pass (~130 NumPy calls): 4096 and 8192 were slower, 32768 no faster
_TABLES: dict[str, np.ndarray] = {}
_WORK: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # kept: fresh ones cost page faults


def _split(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Veltkamp's split: v = hi + lo exactly, each half of 26 bits or fewer."""
    c = v * 134217729.0  # 2²⁷ + 1
    hi = c - (c - v)
    return hi, v - hi


def _scales() -> tuple[np.ndarray, ...]:
    """By x's biased exponent E: 10^(t+1), t = ⌊log10 2^(E−1023)⌋ (x's decade is t or t + 1);
    and at 2E + (x ≥ that): 10^k and its halves (NaN where k = 16 − decade is outside 0..22),
    and decpt = decade + 1 (1000 there: an exponent's, as for NaN). A threshold one ulp off
    (10^(t+1) is inexact below 1) leaves N out of range: repr."""
    t = np.floor((np.arange(2048) - 1023) * np.log10(2.0))  # ≥ 4.5·10⁻⁴ from an integer but at 0
    decade = (t[:, None] + np.arange(2)).reshape(-1)
    k = 16 - decade
    ok = (k >= 0) & (k <= 22)
    kk = np.where(ok, k, 0).astype(np.intp)
    scale = [np.where(ok, v[kk], np.nan) for v in (_F10, *_split(_F10))]
    with np.errstate(over="ignore"):  # inf above 10³⁰⁸
        thresh = 10.0 ** (t + 1)
    return (thresh, *scale, np.where(ok, decade + 1, 1000).astype(np.int64))


_THRESH, *_SCALE, _DECPT = _scales()


def text_cells() -> dict[str, np.ndarray]:
    """The cells' texts (uint32: 4 bytes), built with NumPy (Python strings cost more at each
    start):
    - "int", right-aligned, NUL before: 0..9999 with leading zeros; at 10000 + v a number's first
      group (no leading zeros, 0 none), at 20000 + v its last where it begins there (0 is "0");
    - "frac", left-aligned: 0..9999 with leading zeros; at 10000 + v no trailing zeros (0 none),
      at 20000 + v the same but 0 is "0";
    - "dot": "." and 0..3 zeros at 0..3, "." at 4, nothing at 5 (an exponent after one digit);
    - "tail": at g (0..9) the digit (0: NUL), at 10·c the exponent c − 20 ("e-05")."""
    if not _TABLES:
        v = np.arange(10_000)
        digits = np.stack([v // 1000, v // 100 % 10, v // 10 % 10, v % 10], axis=1)
        asc = (digits + ord("0")).astype(np.uint8)
        nz = digits != 0
        col = np.arange(4)
        first = np.where(nz.any(1), nz.argmax(1), 3)[:, None]  # 0 keeps its last digit
        last = np.where(nz.any(1), 3 - nz[:, ::-1].argmax(1), -1)[:, None]

        def cells(keep: np.ndarray) -> np.ndarray:
            return np.where(keep, asc, 0).astype(np.uint8).reshape(-1).view(np.uint32)

        every = np.ones((1, 4), dtype=bool)
        lead, strip = col >= first, col <= last
        lead0, strip0 = lead.copy(), strip.copy()
        lead0[0], strip0[0, 0] = False, True
        _TABLES["int"] = np.concatenate([cells(every), cells(lead0), cells(lead)])
        _TABLES["frac"] = np.concatenate([cells(every), cells(strip), cells(strip0)])
        _TABLES["dot"] = np.frombuffer(b".\0\0\0.0\0\0.00\0.000.\0\0\0\0\0\0\0", dtype=np.uint32)
        tail = [b"\0\0\0\0"] + [bytes([48 + g]) + b"\0\0\0" for g in range(1, 10)]
        for e in range(-19, 19):
            tail += [b"e%+03d" % e] + [b"\0\0\0\0"] * 9
        _TABLES["tail"] = np.frombuffer(b"".join(tail), dtype=np.uint32)
    return _TABLES


def _work(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n-long work arrays: float64, int64 and bool rows."""
    if not _WORK or _WORK[0][0].shape[1] < n:
        _WORK[:] = [(np.empty((8, n)), np.empty((10, n), dtype=np.int64),
                     np.empty((5, n), dtype=bool))]
    f, i, b = _WORK[0]
    return f[:, :n], i[:, :n], b[:, :n]


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


def _drop(N: np.ndarray, f: np.ndarray, H: np.ndarray, q: np.ndarray, D: int, M: np.ndarray,
          ok: np.ndarray, amb: np.ndarray, within: np.ndarray | None,
          t: np.ndarray, u: np.ndarray, r: np.ndarray, b: np.ndarray) -> None:
    """_round_at for D = 10 or 100 (q = N // D), in place: where it reads back (ok, and within),
    M becomes the text (17 digits, zeros after the p); amb |= a tie of either test. t, u, r, b:
    work arrays."""
    np.multiply(q, D, out=r)
    np.subtract(N, r, out=r)
    np.add(r, f, out=t)  # r + f ∈ [0, D)
    np.subtract(D, t, out=u)
    np.minimum(t, u, out=u)  # the distance to the nearest
    np.less_equal(u, H, out=ok)
    if within is not None:
        ok &= within
    if D == 10:  # a tie of the rounding (at D = 100 the distance 50 > H: never a text)
        np.greater(u, D / 2 - _TOL, out=b)
        amb |= b
    np.subtract(u, H, out=u)
    np.abs(u, out=u)
    np.less(u, _TOL, out=b)
    amb |= b
    np.greater(t, D / 2, out=b)
    np.add(q, b, out=r)
    r *= D
    r -= M
    r *= ok
    M += r


def _short(N: np.ndarray, f: np.ndarray, H: np.ndarray, i: np.ndarray, M: np.ndarray,
           amb: np.ndarray) -> None:
    """The rows i, where 15 digits read back: the text is the roundest integer in [X − H, X + H]
    (2H < 100: one multiple of 10^j there at most for j ≥ 2), [N + lo, B = N + hi] as integers,
    which holds a multiple of 10^j where B mod 10^j ≤ hi − lo; amb |= an end at an integer."""
    fs, Hs = f[i], H[i]
    top, bot = fs + Hs, fs - Hs
    hi, lo = np.floor(top), np.ceil(bot)
    bad = (top - hi < _TOL) | (hi + 1 - top < _TOL) | (bot - lo + 1 < _TOL) | (lo - bot < _TOL)
    amb[i] |= bad
    B = N[i] + hi.astype(np.int64)
    W = (hi - lo).astype(np.int64)
    r = B % 1000
    ok = r <= W  # 14 digits
    M[i] = np.where(ok, B - r, M[i])
    j = np.flatnonzero(ok)
    if j.size:  # 13..1: each power of ten at once (rare rows)
        Bj = B[j]
        fit = np.count_nonzero(Bj[:, None] % _P10[None, 4:17] <= W[j, None], axis=1)
        M[i[j]] = Bj - Bj % _P10[3 + fit]


def _chunk(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The texts of x (contiguous float64) as 'S' items, and where the fast path did not write."""
    n = x.size
    F, I, B = _work(n)
    bits = x.view(np.int64)
    fast, b0, amb, exp = B[0], B[1], B[2], B[3]
    u0 = I[0].view(np.uint64)
    np.subtract(x.view(np.uint64), _LO, out=u0)
    np.less(u0, _SPAN, out=fast)  # 1e-6 ≤ x < 1e17: no NaN, inf, 0 or negative
    np.left_shift(bits, 12, out=I[0])
    np.not_equal(I[0], 0, out=b0)  # not a power of two (its lower neighbour is nearer)
    fast &= b0
    # the scale k: X = x·10^k ∈ [10¹⁶, 10¹⁷), from x's exponent and one comparison (_scales);
    # negatives' and NaN's garbage is clipped by the tables
    lg, P, ph, pl, xh, xl, hi, lo = F
    k = I[1]  # 2E + (x ≥ 10^(t+1)), the tables' index
    np.right_shift(bits, 52, out=k)
    np.take(_THRESH, k, out=lg, mode="clip")
    np.greater_equal(x, lg, out=b0)
    k <<= 1
    k += b0
    for v, out in zip(_SCALE, (P, ph, pl), strict=True):
        np.take(v, k, out=out, mode="clip")
    # Dekker's product: x·10^k = hi + lo exactly (x = xh + xl, 10^k = ph + pl: 26-bit halves)
    np.multiply(x, 134217729.0, out=xh)
    np.subtract(xh, x, out=xl)
    xh -= xl
    np.subtract(x, xh, out=xl)
    np.multiply(x, P, out=hi)
    np.multiply(xh, ph, out=lo)
    lo -= hi
    tmp = lg
    np.multiply(xh, pl, out=tmp)
    lo += tmp
    np.multiply(xl, ph, out=tmp)
    lo += tmp
    np.multiply(xl, pl, out=tmp)
    lo += tmp
    fl = ph
    np.floor(lo, out=fl)
    f = lo
    f -= fl
    N, r = I[2], I[3]
    np.copyto(N, hi, casting="unsafe")
    np.copyto(r, fl, casting="unsafe")
    N += r
    np.subtract(N, 10**16, out=r)
    np.less(r.view(np.uint64), 9 * 10**16, out=b0)
    fast &= b0
    # half an ulp at the scale: 2^(e − 53)·10^k, exact
    np.bitwise_and(bits, _EXPO, out=r)
    r -= 53 << 52
    H = hi
    np.multiply(r.view(np.float64), P, out=H)
    # 17 digits always read back (the nearest: N rounded by f); then 16, 15, and fewer
    t, u = xh, xl
    np.subtract(f, 0.5, out=t)
    np.abs(t, out=t)
    np.less(t, _TOL, out=amb)
    np.greater(f, 0.5, out=b0)
    M, q, ok16, ok15 = I[4], I[5], B[3], B[4]
    np.add(N, b0, out=M)
    np.floor_divide(N, 10, out=q)
    _drop(N, f, H, q, 10, M, ok16, amb, None, t, u, r, b0)
    q //= 10
    _drop(N, f, H, q, 100, M, ok15, amb, ok16 & fast, t, u, r, b0)
    i15 = np.flatnonzero(ok15)
    if i15.size:
        _short(N, f, H, i15, M, amb)
    np.greater(fast, amb, out=fast)  # fast and not amb
    decpt = I[0]
    np.take(_DECPT, k, out=decpt, mode="clip")
    np.greater_equal(M, 10**17, out=b0)  # 9.99… → 10: one digit (a longer text ends in a 0)
    if np.count_nonzero(b0):
        np.copyto(M, 10**16, where=b0)
        decpt += b0
    np.add(decpt, 3, out=r)
    np.greater(r.view(np.uint64), 19, out=exp)  # repr's exponent: decpt ≤ −4 or > 16
    # the integer part (d digits: 1 before an exponent) and the rest R: 17 digits, left-aligned
    d, P2, integer = I[6], I[7], I[8]
    np.maximum(decpt, 0, out=d)
    z = I[9]
    np.subtract(d, decpt, out=z)  # the zeros after the point: up to 3 but for an exponent
    any_exp = bool(np.count_nonzero(exp))
    if any_exp:
        np.copyto(d, 1, where=exp)
    np.subtract(17, d, out=r)
    np.take(_P10, r, out=P2, mode="clip")
    np.floor_divide(M, P2, out=integer)
    P2 *= integer
    R = M
    R -= P2
    np.take(_P10, d, out=P2, mode="clip")
    R *= P2
    # the layout, from the fast rows: the integer part's width, the zeros after the point, and
    # an exponent or a 17th digit (0.0ddd…) at the end
    wi = max(1, int(d.max()))  # "0" before the point at least
    if any_exp:
        np.greater(fast, exp, out=b0)
        zeros = int(np.max(z, where=b0, initial=0))
        tw = 4 if np.count_nonzero(exp & fast) else int(np.count_nonzero(d == 0) > 0)
    else:  # no NaN, inf, 0 or negative either: every row's z is ≤ 3
        zeros = int(z.max())
        tw = int(np.count_nonzero(d == 0) > 0)
    W = wi + 1 + zeros + 16 + tw
    tab = text_cells()
    buf = np.empty(4 + n * W + 4, dtype=np.uint8)  # a cell spills up to 3 bytes either side

    def cell(at: int) -> np.ndarray:
        return np.ndarray((n,), dtype=np.uint32, buffer=buf, offset=4 + at, strides=(W,))

    # written in this order, each cell's spill (NUL, or over the row before) is overwritten by
    # a later one: the integer part (right-aligned), the point and zeros, the digits, the tail
    gi = (wi + 3) // 4
    at = wi - 4 * gi
    if gi == 1:
        integer += 20000
        np.take(tab["int"], integer, out=cell(at), mode="clip")
    else:
        g, lead = I[7], B[2]
        lead[...] = True
        div = 10 ** (4 * (gi - 1))
        for _ in range(gi - 1):
            np.floor_divide(integer, div, out=g)
            np.multiply(g, div, out=r)
            integer -= r
            np.multiply(lead, 10000, out=r)
            r += g
            np.take(tab["int"], r, out=cell(at), mode="clip")
            np.equal(g, 0, out=b0)
            lead &= b0
            div //= 10_000
            at += 4
        np.multiply(lead, 20000, out=r)
        integer += r
        np.take(tab["int"], integer, out=cell(at), mode="clip")
    if any_exp:
        np.equal(R, 0, out=b0)
        np.add(b0, 4, out=r)
        np.copyto(z, r, where=exp)
    np.take(tab["dot"], z, out=cell(wi), mode="clip")
    # R = g0 g1 g2 g3 (4 digits each) g4: a group without trailing zeros where all after it
    # are 0, the first one "0" if R is (an integer), nothing before an exponent
    hi8, lo9, g, idx, g4 = I[2], I[5], I[6], I[7], I[8]
    np.floor_divide(R, 10**9, out=hi8)
    np.multiply(hi8, 10**9, out=lo9)
    np.subtract(R, lo9, out=lo9)
    np.floor_divide(lo9, 10, out=R)  # g2 g3
    np.multiply(R, 10, out=g4)
    np.subtract(lo9, g4, out=g4)
    end = B[4]
    np.equal(g4, 0, out=end)
    at = wi + 1 + zeros
    frac = tab["frac"]
    for j, v in ((3, R), (1, hi8)):  # g3 then g2 from R, g1 then g0 from hi8
        np.floor_divide(v, 10**4, out=g)
        np.multiply(g, 10**4, out=idx)
        np.subtract(v, idx, out=idx)  # the group after g
        np.equal(idx, 0, out=b0)
        np.multiply(end, 10000, out=r)
        idx += r
        np.take(frac, idx, out=cell(at + 4 * j), mode="clip")
        end &= b0
        np.multiply(end, 10000, out=r)
        if j == 1:  # the first group: "0" for an integer's R, but nothing before an exponent
            np.greater(end, exp, out=b0)
            np.multiply(b0, 10000, out=idx)
            r += idx
        r += g
        np.take(frac, r, out=cell(at + 4 * (j - 1)), mode="clip")
        np.equal(g, 0, out=b0)
        end &= b0
    if tw:
        np.add(decpt, 19, out=r)  # garbage where not an exponent's (clipped by take)
        r *= 10
        r *= exp
        r += g4
        if tw == 4:
            np.take(tab["tail"], r, out=cell(W - 4), mode="clip")
        else:
            np.take(tab["tail"].view(np.uint8)[::4], r, out=buf[4 + W - 1:4 + n * W:W],
                    mode="clip")
    out = np.ndarray((n,), dtype=f"S{W}", buffer=buf, offset=4)
    return out, np.flatnonzero(~fast)


def repr_bytes(a: np.ndarray) -> np.ndarray:
    """`repr(x).encode()` of each float64 of a 1-D array, as an 'S' array padded with NUL bytes
    anywhere in an item (the sweep writer deletes every NUL of a row)."""
    x = np.ascontiguousarray(a, dtype=np.float64).reshape(-1)
    n = x.size
    if n < _FEW:
        return np.array([repr(v).encode() for v in x.tolist()], dtype="S")
    parts, slow = [], []
    with np.errstate(all="ignore"):  # the slow rows' garbage is never read
        for at in range(0, n, _CHUNK):
            out, s = _chunk(x[at:at + _CHUNK])
            parts.append(out)
            slow.append(s + at)
    s = np.concatenate(slow) if len(slow) > 1 else slow[0]
    texts = np.array([repr(v).encode() for v in x[s].tolist()], dtype="S")
    width = max(texts.dtype.itemsize, *(p.dtype.itemsize for p in parts))
    if len(parts) > 1 or width > parts[0].dtype.itemsize:
        out = np.empty(n, dtype=f"S{width}")
        for at, p in zip(range(0, n, _CHUNK), parts, strict=True):
            out[at:at + p.size] = p
    else:
        out = parts[0]
    if s.size:
        out[s] = texts
    return out
