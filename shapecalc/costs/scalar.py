"""The few array operations the closed form and planning use, for one point in plain Python
numbers: `fit` asks about one workload, and answers it without importing NumPy (start-up is its
budget). grid.ARRAYS is the same namespace over NumPy arrays, for sweeps."""

from __future__ import annotations

import math
from typing import Any

BOUNDS = ("compute", "memory", "communication")


class Scalars:
    nan = math.nan

    @staticmethod
    def full(n: int, value: Any, dtype: Any = None) -> Any:
        return value

    @staticmethod
    def zeros(n: int, dtype: Any = None) -> int:
        return 0

    @staticmethod
    def maximum(a: Any, b: Any) -> Any:
        return a if a != a or a >= b else b  # NaN wins, as in NumPy

    @staticmethod
    def minimum(a: Any, b: Any) -> Any:
        return a if a != a or a <= b else b

    @staticmethod
    def where(cond: Any, a: Any, b: Any) -> Any:
        return a if cond else b

    @staticmethod
    def floats(a: Any) -> float:
        return float(a)

    @staticmethod
    def isnan(a: Any) -> bool:
        return a != a

    @staticmethod
    def bound(compute: float, memory: float, comm: float) -> str | None:
        """Which term is largest: the phase is compute-, memory- or communication-bound."""
        if compute != compute:
            return None
        terms = (compute, memory, comm)
        return BOUNDS[terms.index(max(terms))]


SCALARS = Scalars()
