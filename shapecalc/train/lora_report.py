"""The `train` report under LoRA/QLoRA (`--lora-rank`): train/lora.py's counts written into the
full-training report's keys (FLOPs, model state, activations, the fit, DP traffic) and a `lora`
block with the adapters' terms. See train/lora.py for what is counted and how it was measured."""

from __future__ import annotations

from typing import Any

from ..interpret.symbolic import stages as symbolic_stages
from ..model.config import ModelConfig, ShapecalcError, Workload
from ..plan.gallop import largest_ok
from .ledgers import dp_ledger
from .lora import (
    DEFAULT,
    TARGETS,
    LoraSpec,
    base_bytes,
    lora_flops,
    lora_saved,
    lora_state,
    targeted,
    trainable,
)

SAVED_KEYS = ("per_layer", "per_layer_none", "per_layer_none_formula", "layer_input_bytes",
              "outside_bytes", "head_bytes", "held_bytes", "resident_bytes", "peak_bytes",
              "per_stage", "tensors", "held")


def check_lora(spec: LoraSpec, wl: Workload, precision: str, recompute: str, cp: int) -> str:
    """The layouts LoRA is counted for; the base's storage (bf16 | nf4 | fp32)."""
    if recompute not in ("none", "torch"):
        raise ShapecalcError("recompute", f"{recompute} with LoRA is not built yet (peft's "
                             "saved tensors are measured without checkpointing and with "
                             "transformers' gradient checkpointing): none | torch")
    for flag, v in (("tp", wl.tp), ("pp", wl.pp), ("cp", cp), ("ep", wl.ep)):
        if v != 1:
            raise ShapecalcError(flag, f"{flag}={v} with LoRA is not built yet: LoRA is counted "
                                 "on one GPU per data-parallel rank")
    if spec.dropout and not 0 <= spec.dropout < 1:
        raise ShapecalcError("lora-dropout", f"must be in [0, 1), not {spec.dropout}")
    if spec.base == "bf16" and precision == "fp32":
        raise ShapecalcError("lora-base", "bf16 with --precision fp32: an fp32 run keeps its "
                             "base in fp32 (leave out --lora-base) or use --lora-base nf4")
    if spec.base not in (None, "bf16", "nf4"):
        raise ShapecalcError("lora-base", f"unknown {spec.base!r}; known: bf16, nf4")
    return spec.base or ("fp32" if precision == "fp32" else "bf16")


def apply_lora(doc: dict[str, Any], model: ModelConfig, wl: Workload, spec: LoraSpec, *,
               precision: str, zero: int, dp: int, attention: str, act: str,
               gpu_memory: int | None, recompute: str = "none") -> None:
    """Rewrite `doc` (build_train's, full fine-tuning) for LoRA on a frozen base."""
    base = doc["training"]["lora_base"] = spec.base or ("fp32" if act == "fp32" else "bf16")
    st = symbolic_stages(model, wl, 1)
    ad = targeted(model, st, spec)
    n = trainable(ad, spec.rank)
    sized = wl.model_copy(update={"dtype": act, "act_dtype": None})
    f = lora_flops(st, ad, spec.rank, model.n_layers, recompute)
    sv = lora_saved(model, sized, attention, spec, ad, recompute)
    frozen = base_bytes(model, wl, st, base, act)
    state = lora_state(n, frozen, precision, zero, dp, spec.paged)
    fl, tr, mem = doc["flops"], doc["training"], doc["memory"]
    micro = tr["grad_accum"] * dp
    fl.update({k: f[k] for k in ("forward_flops", "backward_flops", "backward_dx_flops",
                                 "backward_dw_flops")},
              backward_convention_only_flops=0,
              forward_formula=fl["forward_formula"] + " + LoRA adapters (lora.flops)",
              backward_formula="LoRA: the base's input gradients + the adapters' (lora.flops)",
              recompute_flops=f["recompute_flops"],
              recompute_formula="LoRA: each layer's base and adapters again, to the last saved "
              "tensor (lora.flops)" if recompute == "torch" else "0",
              step_flops=f["forward_flops"] + f["backward_flops"] + f["recompute_flops"],
              forward_backward_flops=f["forward_flops"] + f["backward_flops"])
    fl["per_step"] = {k: fl[k] * micro for k in fl["per_step"]}
    for s in fl["stages"]:  # a frozen base: no weight gradient anywhere
        s.update(dw_flops=0, dw_formula="0", flops=s["dx_flops"])
    one = mem["per_stage"][0]
    params = sum(s.params * s.repeat for s in st)
    one.update(params=params + n, activation_bytes=sv["peak_bytes"],
               activation_resident_bytes=sv["resident_bytes"],
               model_state={"params": params + n, "terms": state["terms"],
                            "bytes": state["bytes"]},
               bytes=state["bytes"] + sv["peak_bytes"])
    mem["peak_bytes"] = one["bytes"]
    mem["saved"].update({k: sv[k] for k in SAVED_KEYS})
    mem["saved"]["pipeline_stages"] = [{k: sv[k] for k in ("resident_bytes", "peak_bytes",
                                                          "held_bytes", "outside_bytes")}]
    mem["saved"]["convention"] = sv["convention"] + ", peft LoRA on a frozen base"
    layer = max(sv["per_layer"].values(), default=0)
    meg = mem["activations"]["bytes_per_layer"]
    mem["saved"]["difference"] = (
        f"exact {layer:,d} B per layer under peft vs Megatron's {meg:,d} B (full training): "
        "the frozen base keeps no linear's input (no dW) and no x̂ (γ frozen); each adapter "
        "keeps its input (in a bf16 model its own fp32 copy: peft casts to the adapters' fp32) "
        "and A·x [B,T,r]")
    if gpu_memory is not None:
        mem.update(fits=one["bytes"] <= gpu_memory, free_bytes=gpu_memory - one["bytes"])

        def fits(b: int) -> bool:
            at = lora_saved(model, sized.model_copy(update={"batch": b}), attention, spec, ad,
                            recompute)
            return state["bytes"] + at["peak_bytes"] <= gpu_memory

        mem["largest_micro_batch"] = largest_ok(fits, 1, (1 << 40) - 1)
    doc["communication"]["dp"] = dp_ledger(n, 0, "fp32", zero, dp, 1)  # fp32 adapters only
    doc["lora"] = {
        "rank": spec.rank, "alpha": spec.alpha, "scaling": spec.alpha / spec.rank,
        "dropout": spec.dropout,
        "targets": [t for t in DEFAULT if any(s.role in TARGETS[t] for s in ad)],
        "base": base,
        "base_format": frozen[1], "base_params": params, "base_bytes": frozen[0],
        "trainable_params": n, "trainable_fraction": n / params,
        "adapted_linears": [{"name": s.name, "role": s.role, "repeat": s.repeat,
                             "d_in": s.operands[1][0], "d_out": s.operands[1][1],
                             "params": spec.rank * (s.operands[1][0] + s.operands[1][1])}
                            for s in ad],
        "adapter_dtype": sv["adapter_dtype"],
        "flops": {k: f[k] for k in ("adapter_forward_flops", "adapter_backward_flops",
                                    "base_backward_dx_flops")},
        "first_layer_unsaved_bytes": sv["first_layer_unsaved_bytes"],
        "dequant_bytes": frozen[2], "paged_optimizer": spec.paged,
        "paged_bytes": state["paged_bytes"],
        "model_state_with_paged_bytes": state["bytes_with_paged"],
        "not_counted": "the step time under ZeRO-3 (train/lora_time.py); "
        "adapters on routed experts (fused tensors peft's target_modules does not reach); "
        "QLoRA's dequantisation as FLOPs (elementwise: timed as memory-bound bytes); "
        "bitsandbytes' paging traffic",
    }
