"""verify's checks of the stateful token mixers: the state bytes, and each chunked scan equal to
the plain step-by-step recurrence (both run in float64 by the executor, interpret/mamba2.py), and
Mamba-1's prefill scan equal to T single-token decode steps (interpret/mamba1.py)."""

from __future__ import annotations

from typing import Any

from ..model.config import ModelConfig
from ..model.stage import Stage

SCAN_TOL = 1e-6  # relative to the largest value of the output and the final state
# why verify skips its padding check for CCA with attention biases: ZayaCCAProjection zeroes the
# pads' hidden states, so their q/k/v are the biases, which its convs and delayed value carry
# into the real tokens (a padded batch differs from the unpadded runs in transformers too)
CCA_PADS = "CCA with attention biases: the pads' projection biases reach the real tokens"
# transformers' MiniMaxM3VLIndexer anchors blocks to key slots: left padding moves them
BLOCK_PADS = "block-sparse: blocks sit at key slots, left padding shifts them (as in transformers)"
# and for Inkling's log-scaled logits: InklingAttention's τ reads each query's place in the step
# (pads included), so a padded row's τ differs from its unpadded run's, in transformers too
LOG_PADS = ("log-scaled logits (log_scaling_floor): τ reads each query's place, pads "
            "included")


def pads_skipped(model: ModelConfig, T: int) -> str | None:
    """Why verify's padded-batch check does not apply to `model` at T, else None."""
    if model.shared_kv:
        return "shared_kv: no padding modelled"
    if model.block_sparse:
        return BLOCK_PADS
    if T < 2:
        return "T=1: nothing to pad"
    if model.log_scaling_floor is not None and T > model.log_scaling_floor:
        return LOG_PADS
    return CCA_PADS if "cca" in model.mixers and model.qkv_bias else None


def state_checks(stages: list[Stage], traced: int, measured: Any) -> list[dict]:
    """`traced`: the trace's state_cache_bytes; `measured`: the executor's, extrapolated to
    every layer of each kind."""
    out = [{"name": "state cache bytes (all layers)", "symbolic": traced,
            "measured": measured, "ok": traced == measured}]
    errs = [s.extra["scan_recurrence_rel_err"] for s in stages
            if "scan_recurrence_rel_err" in s.extra]
    if errs:
        out.append({"name": f"chunked scan == step-by-step recurrence (float64, relative, "
                            f"{len(errs)} layer(s))", "symbolic": f"≤ {SCAN_TOL:g}",
                    "measured": f"{max(errs):.1e}", "ok": max(errs) <= SCAN_TOL})
    steps = [s.extra["conv_steps_rel_err"] for s in stages if "conv_steps_rel_err" in s.extra]
    if steps:  # a convolution of one form (interpret/short_conv.py)
        out.append({"name": f"prefill conv == T single-token decode steps (float64, relative, "
                            f"{len(steps)} layer(s))", "symbolic": f"≤ {SCAN_TOL:g}",
                    "measured": f"{max(steps):.1e}", "ok": max(steps) <= SCAN_TOL})
    steps = [s.extra["scan_steps_rel_err"] for s in stages if "scan_steps_rel_err" in s.extra]
    if steps:  # Mamba-1's one form: the prefill's scan against T single-token decode steps
        out.append({"name": f"prefill scan == T single-token decode steps (float64, relative, "
                            f"{len(steps)} layer(s))", "symbolic": f"≤ {SCAN_TOL:g}",
                    "measured": f"{max(steps):.1e}", "ok": max(steps) <= SCAN_TOL})
    return out
