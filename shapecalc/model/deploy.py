"""Deployment modes: the widths engines run a model at, by name (`--mode`).

`--dtype` is the width of the weights. Activations and all-reduces are the weights' width when it
is 16 or 32 bits, else bf16; the KV cache is the activations' width; fp8 weights run W8A8 GEMMs
at the fp8 peak, int8 and int4 weights are weight-only (config.act_width, config.compute_width:
how vLLM and TensorRT-LLM run them). `--act-dtype`/`--kv-dtype`/`--compute-dtype` say otherwise.
A mode names a mix:
- bf16: everything in bf16;
- fp8: W8A8 as vLLM and TensorRT-LLM run it on Hopper — fp8 weights and GEMMs at fp8 peak, while
  activations between kernels and the all-reduces stay bf16; the KV cache stays bf16;
- int8-wo, int4-wo: weight-only quantisation — int8/int4 weights, dequantised into 16-bit GEMMs;
- fp8-kv: bf16 everywhere but an fp8 KV cache;
- mxfp4, nf4: MXFP4 (gpt-oss) or bitsandbytes NF4 weights, block scales included, dequantised into
  16-bit GEMMs (weight-only);
- nvfp4: NVFP4 weights and W4A4 GEMMs at the fp4 peak (Blackwell), bf16 between kernels.
Explicit --dtype/--act-dtype/--kv-dtype win over the mode's; --compute-dtype over its compute.
Each mode's GEMMs run at config.compute_width of its weights and activations.
"""

from __future__ import annotations

from typing import Any

from .config import ShapecalcError
from .suggest import did_you_mean

# mode → (weights, activations and all-reduce, KV cache)
MODES: dict[str, tuple[str, str, str]] = {
    "bf16": ("bf16", "bf16", "bf16"),
    "fp8": ("fp8", "bf16", "bf16"),
    "int8-wo": ("int8", "bf16", "bf16"),
    "int4-wo": ("int4", "bf16", "bf16"),
    "fp8-kv": ("bf16", "bf16", "fp8"),
    "mxfp4": ("mxfp4", "bf16", "bf16"),
    "nvfp4": ("nvfp4", "bf16", "bf16"),
    "nf4": ("nf4", "bf16", "bf16"),
}


def mode_fields(mode: str | None) -> dict[str, Any]:
    """The workload fields a mode sets (none without a mode)."""
    if mode is None:
        return {}
    if mode not in MODES:
        raise ShapecalcError("mode", f"{mode!r} is not one of {', '.join(MODES)}"
                             + did_you_mean(mode, MODES))
    w, act, kv = MODES[mode]
    return {"dtype": w, "act_dtype": act, "kv_dtype": kv}


def widths(wl: Any, compute: str | None = None) -> dict[str, str]:
    """Which bytes are at which width: weights, activations and all-reduces, KV cache (and the
    GEMMs' peak when planning)."""
    out = {"weights": wl.dtype, "activations": wl.act, "all_reduce": wl.act, "kv_cache": wl.kv}
    if compute is not None:
        out["compute"] = compute
    return out
