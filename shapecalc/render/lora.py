"""The LoRA/QLoRA block of `train`'s text report (train/lora_report.py's `lora`)."""

from __future__ import annotations

from typing import Any

from .units import human_bytes, human_flops


def _n(x: int) -> str:
    return f"{x:,d}"


def lora_lines(lo: dict[str, Any], mem: dict[str, Any]) -> list[str]:
    fl = lo["flops"]
    out = ["", f"LoRA (peft): rank r={lo['rank']}, α={lo['alpha']:g} (scaling α/r = "
           f"{lo['scaling']:g}: no shape changes), dropout {lo['dropout']:g}, targets "
           f"{','.join(lo['targets'])}; {len(lo['adapted_linears'])} linear(s) a layer, adapters "
           f"in {lo['adapter_dtype']}",
           f"  trainable: {_n(lo['trainable_params'])} params = Σ r·(d_in + d_out) "
           f"({100 * lo['trainable_fraction']:.3f}% of the base's {_n(lo['base_params'])})",
           f"  frozen base: {lo['base_format']}, {_n(lo['base_bytes'])} B "
           f"({human_bytes(lo['base_bytes'])}); no weight gradients, no optimizer states",
           f"  FLOPs: adapters {human_flops(fl['adapter_forward_flops'])} forward, "
           f"{human_flops(fl['adapter_backward_flops'])} backward; the base's input gradients "
           f"{human_flops(fl['base_backward_dx_flops'])} (its first layer's input takes none: "
           f"{_n(lo['first_layer_unsaved_bytes'])} B it does not save)"]
    if lo["dequant_bytes"]:
        out.append(f"  QLoRA: each NF4 weight dequantised to bf16 before its matmul (forward and "
                   f"dX; elementwise, not counted as FLOPs), one held at a time: "
                   f"{human_bytes(lo['dequant_bytes'])}")
    if lo["paged_optimizer"]:
        out.append(f"  paged optimizer: {_n(lo['paged_bytes'])} B of AdamW states "
                   f"({human_bytes(lo['paged_bytes'])}) page to CPU RAM, off the GPU's total")
    out.append(f"  not counted: {lo['not_counted']}")
    return out
