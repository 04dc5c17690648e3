"""One JSON comparison for the tests that hold documents to a contract (golden files, README)."""

from __future__ import annotations


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
    if (strict and type(old) is not type(new)) or old != new:
        return f"{where}: {old!r} → {new!r}"
    return None
