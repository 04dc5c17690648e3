"""The registry of the executor's vector-Jacobian products, apart from them: a mixer's backward
rule file (vjp_mamba2.py, vjp_deltanet.py) registers its VJPs here and keeps its FLOP and saved-
tensor counts beside them, so that train reads the counts without loading NumPy or the executor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# (vjp.Ctx, the output gradients) → the input gradients; Ctx unnamed here, or vjp ↔ vjp_rules
Rule = Callable[[Any, list[Any]], list[Any]]
RULES: dict[str, Rule] = {}
# ops whose first n arguments are their tensor inputs, kept as copies (`saved["ins"]`): a token
# mixer's operations (vjp_mamba2.py, vjp_deltanet.py) name theirs so
INPUTS: dict[str, int] = {}


def rule(op: str, inputs: int | None = None) -> Callable[[Rule], Rule]:
    def register(f: Rule) -> Rule:
        RULES[op] = f
        if inputs is not None:
            INPUTS[op] = inputs
        return f
    return register
