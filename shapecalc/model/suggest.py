"""Names a user may have meant: "did you mean …" after an unknown preset, GPU, dtype or choice,
and the dtype spellings of PyTorch and NumPy (bfloat16, float16, half, float32) as aliases."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

# PyTorch / NumPy / Hugging Face (torch_dtype) spellings → shapecalc's dtype names
DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32",
                 "float": "fp32"}


def canonical_dtype(name: Any, known: Iterable[str]) -> Any:
    """`bfloat16` → `bf16`, `BF16` → `bf16` (one of `known`); anything else unchanged (the
    validation that follows says what is wrong with it)."""
    if not isinstance(name, str):
        return name
    key = name.strip().lower()
    return DTYPE_ALIASES.get(key, key if key in set(known) else name)


def close_names(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Up to n of `known` that `name` looks like a misspelling of (case aside), best first."""
    known = list(known)
    lower = {k.lower(): k for k in known}
    key = name.lower()
    if key in lower and lower[key] != name:
        return [lower[key]]
    # what it begins (h100 → H100-SXM, H100-PCIe), then what it resembles
    begun = sorted(k for k in lower if k.startswith(key) and k != key)
    close = [k for k in difflib.get_close_matches(key, list(lower), n, 0.6) if k not in begun]
    return [lower[k] for k in [*begun, *close][:n]]


def did_you_mean(name: Any, known: Iterable[str]) -> str:
    """` (did you mean 'gpt2'?)` (or `'a' or 'b'`), or "" when nothing is close."""
    if not isinstance(name, str) or not name:
        return ""
    close = close_names(name, known)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"


def did_you_mean_dtype(name: Any, known: Iterable[str]) -> str:
    """As did_you_mean, over the dtype names and their aliases, naming the dtype each means."""
    known = list(known)
    if not isinstance(name, str) or not name:
        return ""
    close = close_names(name, [*known, *DTYPE_ALIASES])
    names = list(dict.fromkeys(DTYPE_ALIASES.get(c, c) for c in close))
    return " (did you mean " + " or ".join(repr(c) for c in names) + "?)" if names else ""


def not_one_of(field: str, name: Any, known: Iterable[str]) -> Exception:
    """The refusal of a name outside a flag's choices (--draft, --emit, --ep-mode, --dataset,
    --framework, --fp8): `'eagle' is not one of draft, eagle3, mtp (did you mean 'eagle3'?)`."""
    from .errors import ShapecalcError

    known = list(known)
    return ShapecalcError(field, f"{name!r} is not one of {', '.join(known)}"
                          f"{did_you_mean(name, known)}")
