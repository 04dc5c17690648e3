"""The `train` report's lines for the framework its memory follows (memory.framework) and the
efficiencies that follow the GPU and the shapes (time.efficiency)."""

from __future__ import annotations

from typing import Any

from .units import human_bytes


def framework_lines(mem: dict[str, Any]) -> list[str]:
    fw = mem.get("framework")
    if fw is None:
        return []
    head = (f"  memory follows: {fw['name']} ({fw['title']}; recompute policy "
            f"{fw['recompute_policy']}; {fw['source']})")
    if "per_stage" not in fw:
        return [head]
    out = [head]
    for st in fw["per_stage"]:
        out.append(
            f"    stage {st['stage']}: model state {human_bytes(st['model_state_bytes'])} + "
            f"activations {human_bytes(st['activation_bytes'])} + the larger of backward "
            f"{human_bytes(st['backward_bytes'])} and loss {human_bytes(st['loss_peak_bytes'])}"
            f" + gathered {human_bytes(st['gathered_bytes'])}"
            + (f" + fp8 {human_bytes(st['fp8_bytes'])}" if st["fp8_bytes"] else "")
            + f" = {human_bytes(st['allocated_bytes'])} + allocator reserve "
            f"{human_bytes(st['reserve_bytes'])}"
            + (f" + comm buffers {human_bytes(st['comm_buffer_bytes'])}"
               if st["comm_buffer_bytes"] else "")
            + f" = {human_bytes(st['bytes'])}")
    out.append(f"    (the exact autograd count's peak, beside: "
               f"{human_bytes(mem['autograd_peak_bytes'])})")
    return out


def efficiency_text(ti: dict[str, Any]) -> str:
    """How the step time's efficiencies were made: the fit on published figures (hf), or the
    GPU's terms and the run's shapes."""
    e = ti.get("efficiency")
    if e is None:
        return "fitted on published figures"
    return (f"{e['chip']}'s e_gemm {e['e_gemm']:.2f} × GEMM sizes {e['gemm_size_factor']:.3f}"
            f", e_attn {e['e_attn']:.2f} × T/(T + {e['attention_half_seq']:g}) = "
            f"{e['attention_seq_factor']:.3f}, clock ×{e['clock_factor']:.3f}, "
            f"elementwise ×{e['elementwise_passes']:g}; fitted on {e['fitted_on']}")
