"""Which weight format a model's weights have at a dtype, and the dtype a quantized checkpoint
sets: what every command asks first. The tensors a format stores are enumerated in
quant_tensors.py, loaded only for weights that have a format (a plain dtype is params × bits).
"""

from __future__ import annotations

from typing import Any

from .config import ModelConfig
from .errors import ShapecalcError
from .quantization import DTYPE_FORMATS, Quantization, dtype_of, label

# ── which format, and the dtype it sets ────────────────────────────────────────────────────────


def weight_format(model: ModelConfig, dtype: str) -> Quantization | None:
    """The format of the weights at `dtype`: the checkpoint's (its quantization), that of a
    format dtype (mxfp4, nvfp4, nf4: DTYPE_FORMATS), or None for params × bits. A dtype that
    is not the checkpoint's is refused: the format sets it, never silently."""
    q = model.quantization
    if q is None:
        return DTYPE_FORMATS.get(dtype)
    if dtype != dtype_of(q):
        raise ShapecalcError(
            "dtype", f"{dtype} is not the checkpoint's weights: its quantization ({label(q)}) "
            f"stores {dtype_of(q)}; leave out --dtype and --mode (the format sets the weights), "
            f"or --set quantization=null to plan the weights as plain {dtype}")
    return q


def source_fields(model: ModelConfig, fields: dict[str, Any]) -> dict[str, Any]:
    """A source's workload fields with the dtype its quantization stores (a [workload] dtype
    that differs is refused by weight_format when the workload is used)."""
    if model.quantization is None or "dtype" in fields:
        return fields
    return {**fields, "dtype": dtype_of(model.quantization)}
