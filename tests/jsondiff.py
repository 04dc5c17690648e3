"""One JSON comparison for the tests that hold documents to a contract (golden files, README)."""

from __future__ import annotations

import math

# floats (modelled times, ratios) may move in their last bits between machines: NumPy's SIMD
# loops for exp, log and power differ by CPU (AVX2, AVX-512); every count is an int, held exactly
FLOAT_REL = 1e-12


def contains(old: object, new: object, where: str = "", *, strict: bool = True) -> str | None:
    """None if `new` holds everything `old` holds (objects may gain keys), else where it differs.
    strict: the keys keep their order and values their JSON type (1 is not 1.0)."""
    if isinstance(old, dict):
        if not isinstance(new, dict):
            return f"{where}: not an object"
        if strict and [k for k in new if k in old] != list(old):  # same order, new keys aside
            return f"{where}: keys reordered"
        for k, v in old.items():
            if k not in new:
                return f"{where}.{k}: no such key (real keys: {', '.join(new)})"
            bad = contains(v, new[k], f"{where}.{k}", strict=strict)
            if bad:
                return bad
        return None
    if isinstance(old, list):
        if not isinstance(new, list) or len(new) != len(old):
            return f"{where}: list length {len(old)} → {len(new) if isinstance(new, list) else '?'}"
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            bad = contains(a, b, f"{where}[{i}]", strict=strict)
            if bad:
                return bad
        return None
    if strict and type(old) is not type(new):
        return f"{where}: {old!r} → {new!r}"
    if isinstance(old, float) and isinstance(new, float):
        if old == new or math.isclose(old, new, rel_tol=FLOAT_REL):
            return None
        return f"{where}: {old!r} → {new!r}"
    if old != new:
        return f"{where}: {old!r} → {new!r}"
    return None
