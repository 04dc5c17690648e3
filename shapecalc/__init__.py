"""shapecalc: every shape, FLOP, parameter and byte of a decoder-only Transformer, exactly.

The public API is what this module exports (`__all__`): load a model and a GPU, then `trace`,
`fit`, `compare` and `sweep`, whose typed results have the fields of the CLI's `--json`. It lives
in `shapecalc/api.py` and is imported on first use (PEP 562), so that the command line, which
imports this package, starts without it. The subpackages are implementation, not API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "GPU",
    "CompareResult",
    "FitResult",
    "Model",
    "ModelConfig",
    "ShapecalcError",
    "SweepRow",
    "TraceResult",
    "Workload",
    "compare",
    "fit",
    "load_gpu",
    "load_model",
    "sweep",
    "trace",
    "workload",
]

if TYPE_CHECKING:
    from .api import (
        GPU,
        CompareResult,
        FitResult,
        Model,
        ModelConfig,
        ShapecalcError,
        SweepRow,
        TraceResult,
        Workload,
        compare,
        fit,
        load_gpu,
        load_model,
        sweep,
        trace,
        workload,
    )


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import api

        value = getattr(api, name)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module 'shapecalc' has no attribute {name!r}")


def __dir__() -> list[str]:
    return [*__all__, "__version__"]
