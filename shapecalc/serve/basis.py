"""The per-sequence totals of models whose attention has more than one regime, as sums of a few
known functions of T (prefill) or L (decode), their coefficients solved from `ClosedForm.at`.

Within one regime the closed form is a polynomial; across a layer's window or chunk the keys a
query reads change form (costs/closed.py cuts the regimes there). Those forms are known:

- a sliding layer of window W: a prefill query i reads min(i, W) keys, so the prompt's keys are
  Σ_{i≤T} i − E_W(T), E_W(T) = Σ_{i≤T} max(0, i − W) = m(m+1)/2 (m = max(0, T − W)); its cache
  written is T − max(0, T − W). A decode on L cached tokens reads min(L + 1, W) = L + 1 −
  max(0, L − (W − 1)) keys;
- a chunked layer of chunk C (Llama 4): query i reads ((i − 1) mod C) + 1 keys, Σ = Σ i −
  C·P_C(T), P_C(T) = Σ_{i<T} ⌊i/C⌋; a decode on L reads (L mod C) + 1 = L + 1 − C·⌊L/C⌋;
- a stateful mixer's chunked scan (Mamba-2, gated DeltaNet; chunk Q): each chunk past the
  first adds its inter-chunk state work: the terms q, T·q and q² of q = ⌈T/Q⌉ − 1.

So each total is quadratic(T) + Σ_e c_e·b_e(T) (prefill) and affine(L) + Σ_e c_e·b_e(L)
(decode). `solve` finds the c_e exactly (fractions) from the closed form at points below,
between and above the cuts and checks them at the rest: a model whose totals do not follow that
form is refused in one line. Functions are 0 at 0, so a chunk's share S(c+n) − S(c) + S(0)
keeps reading b_e(c + n) − b_e(c).
"""

from __future__ import annotations

from fractions import Fraction

from ..model.config import ShapecalcError

Basis = tuple[str, int]  # (form, its W, C or Q)


def value(b: Basis, t: int) -> int:
    """b_e(t): prefill forms read the prompt length T, decode forms the cached length L."""
    form, w = b
    if form == "slide_sq":
        m = max(0, t - w)
        return m * (m + 1) // 2
    if form == "slide_lin":
        return max(0, t - w)
    if form == "chunk_sq":
        q, r = divmod(t, w)
        return w * q * (q - 1) // 2 + q * r
    if form == "chunk_lin":
        return max(0, t - 1) // w
    if form in ("scan", "scan_t", "scan_sq"):
        q = max(0, t - 1) // w  # the chunks past the first
        return q if form == "scan" else t * q if form == "scan_t" else q * q
    if form == "dec_slide":
        return max(0, t - (w - 1))
    if form == "dec_chunk":
        return t // w
    raise AssertionError(form)


def points(b: Basis) -> list[int]:
    """T (or L) at which b_e is sampled: past its cut, within and across a few periods."""
    form, w = b
    if form.startswith("slide") or form == "dec_slide":
        return [w, w + 1, w + 2, w + 3, w + 8, 2 * w + 1, 3 * w - 1]
    if form.startswith("chunk") or form == "dec_chunk":
        return [w - 1, w, w + 1, w + 2, 2 * w - 1, 2 * w, 2 * w + 3, 3 * w - 2]
    return [w, w + 1, w + 2, w + 3, 2 * w, 2 * w + 1, 2 * w + 5, 3 * w + 7, 5 * w + 3]


def solve(name: str, key: str, basis: list[Basis], samples: dict[int, int],
          known: list[tuple[int, int]]) -> list[int]:
    """Integer coefficients c_e with samples[t] = known[t] + Σ c_e·b_e(t) at every sampled t
    (`samples`: 2·S(T) or D(L); `known`: its polynomial part there). One line if there are
    none."""
    poly = dict(known)
    rows = [[Fraction(value(b, t)) for b in basis] + [Fraction(v - poly[t])]
            for t, v in sorted(samples.items())]
    n, piv = len(basis), 0
    for col in range(n):  # Gauss-Jordan over the rationals
        r = next((i for i in range(piv, len(rows)) if rows[i][col] != 0), None)
        if r is None:
            continue
        rows[piv], rows[r] = rows[r], rows[piv]
        p = rows[piv][col]
        rows[piv] = [x / p for x in rows[piv]]
        for i in range(len(rows)):
            if i != piv and rows[i][col] != 0:
                f = rows[i][col]
                rows[i] = [a - f * c for a, c in zip(rows[i], rows[piv], strict=True)]
        piv += 1
    coef = [Fraction(0)] * n
    for row in rows[:piv]:
        coef[next(i for i in range(n) if row[i] != 0)] = row[n]
    consistent = all(row[n] == 0 for row in rows[piv:])
    if not consistent or any(c.denominator != 1 for c in coef):
        raise ShapecalcError("model", f"{name}: {key} does not follow the window, chunk and scan "
                             "forms serve prices (basis.py); serve cannot simulate it")
    return [int(c) for c in coef]
