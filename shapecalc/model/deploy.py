"""Deployment modes: the widths engines run a model at, by name (`--mode`).

`--dtype` is the width of the weights, and of the activations, all-reduces and KV cache unless
`--act-dtype`/`--kv-dtype` say otherwise. Serving engines mix widths; a mode names a mix:
- bf16: everything in bf16;
- fp8: W8A8 as vLLM and TensorRT-LLM run it on Hopper — fp8 weights and GEMMs at fp8 peak, while
  activations between kernels and the all-reduces stay bf16; the KV cache stays bf16;
- int8-wo, int4-wo: weight-only quantisation — int8/int4 weights, dequantised into 16-bit GEMMs;
- fp8-kv: bf16 everywhere but an fp8 KV cache.
Explicit --dtype/--act-dtype/--kv-dtype win over the mode's; --compute-dtype over its compute.
"""

from __future__ import annotations

from typing import Any

from .config import ShapecalcError

# mode → (weights, activations and all-reduce, KV cache, the GEMMs' peak)
MODES: dict[str, tuple[str, str, str, str]] = {
    "bf16": ("bf16", "bf16", "bf16", "bf16"),
    "fp8": ("fp8", "bf16", "bf16", "fp8"),
    "int8-wo": ("int8", "bf16", "bf16", "bf16"),
    "int4-wo": ("int4", "bf16", "bf16", "bf16"),
    "fp8-kv": ("bf16", "bf16", "fp8", "bf16"),
}


def mode_fields(mode: str | None) -> dict[str, Any]:
    """The workload fields a mode sets (none without a mode)."""
    if mode is None:
        return {}
    if mode not in MODES:
        raise ShapecalcError("mode", f"{mode!r} is not one of {', '.join(MODES)}")
    w, act, kv, _ = MODES[mode]
    return {"dtype": w, "act_dtype": act, "kv_dtype": kv}


def mode_compute(mode: str | None) -> str | None:
    """The dtype whose peak the mode's GEMMs run at (None without a mode)."""
    mode_fields(mode)  # a known mode, or the error
    return None if mode is None else MODES[mode][3]


def widths(wl: Any, compute: str | None = None) -> dict[str, str]:
    """Which bytes are at which width: weights, activations and all-reduces, KV cache (and the
    GEMMs' peak when planning)."""
    out = {"weights": wl.dtype, "activations": wl.act, "all_reduce": wl.act, "kv_cache": wl.kv}
    if compute is not None:
        out["compute"] = compute
    return out
