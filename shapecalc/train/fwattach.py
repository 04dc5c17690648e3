"""How `train` reads the framework's memory (train/fwmemory.py): `memory.framework` in every
report, and, for a framework other than hf, the verdict (`fits`, `free_bytes`, the largest
micro-batch) follows it while the exact autograd count and Megatron's closed form stay beside
it. Also per-op SAC's recompute FLOPs (torchtitan's `selective`)."""

from __future__ import annotations

from typing import Any

from ..model.config import ModelConfig, ShapecalcError, Workload
from ..model.parallel import stage_kind_counts
from ..model.plan import layer_plan
from ..model.stage import EXPERT_ROLES, Stage
from ..plan.gallop import largest_ok
from .fp8 import FP8_ROLES, fp8_memory
from .frameworks import Framework, describe
from .fwmemory import FwTerms, framework_memory, op_sac_recompute_flops, stage_blocks


def op_sac_flops(model: ModelConfig, full: list[Stage], policy: str, flops: dict[str, Any],
                 every: int = 0) -> dict[Any, int] | None:
    """Per-op SAC (torchtitan's selective): every second GEMM of each layer runs again in the
    backward; per-layer SAC (`every` = N): every N-th layer's forward runs again. Adds the
    FLOPs to `flops` (one micro-batch) and returns them per layer (the kind's average) for the
    step time; None for other policies."""
    if policy != "op":
        return None
    plan = layer_plan(model)
    if every:
        def layer(k: int) -> int:
            n_k = sum(1 for x in plan.kind_of if x == k)
            return sum(x.flops for x in full if x.group == "block" and x.kind == k) * \
                (n_k // every) // max(n_k, 1)
        extra = {k: layer(k) for k in range(len(plan.kinds))}
        how = f"every {every}-th layer's forward again (torchtitan per-layer SAC)"
    else:
        extra = {k: op_sac_recompute_flops(full, k) for k in range(len(plan.kinds))}
        how = "every second GEMM of each layer, again in its backward"
    total = sum(extra[k] * sum(1 for x in plan.kind_of if x == k) for k in extra)
    flops.update(recompute="selective (torchtitan " + ("per-layer" if every else "per-op")
                 + " SAC)", recompute_flops=total, recompute_formula=how,
                 step_flops=flops["step_flops"] + total)
    return {k: v for k, v in extra.items() if v}


def stage_inputs(model: ModelConfig, wl: Workload, rank: list[Stage], fp8: str | None
                 ) -> tuple[list[int], list[int], list[list[int]], list[int]]:
    """What a layout's stages hold whatever the micro-batch and ZeRO: each stage's largest
    block and root (FSDP's gathers), its layers of each kind, and its fp8 GEMMs' parameters."""
    blocks, roots = stage_blocks(model, wl, rank)
    counts = stage_kind_counts(layer_plan(model), wl.pp)
    fp8_params = [sum(c * sum(x.params // (wl.ep if x.role in EXPERT_ROLES else 1)
                              for x in rank if x.group == "block" and x.kind == k
                              and x.role in FP8_ROLES) for k, c in enumerate(kc))
                  for kc in counts] if fp8 is not None else [0] * wl.pp
    return blocks, roots, counts, fp8_params


def attach_framework(memory: dict[str, Any], fw: Framework, model: ModelConfig, wl: Workload,
                     *, recompute: str, attention: str, zero: int, dp: int, cp: int,
                     virtual: int, placed: list[tuple[int, int]], rank: list[Stage],
                     stages: list[Stage], terms: FwTerms, gpu_memory: int | None,
                     fp8: str | None = None, inputs: Any = None) -> None:
    """Adds `memory.framework`; for a framework other than hf its peak is the verdict's.
    `inputs`: stage_inputs' (train/search_fw.py computes them once for many calls)."""
    if fw.name == "hf":
        memory["framework"] = {**describe(fw, recompute), "peak_bytes": memory["peak_bytes"]}
        return
    if fw.activations == "modules" and (set(model.mixers) != {"attention"} or model.mla):
        raise ShapecalcError("framework", f"{fw.name}'s per-layer terms cover attention layers "
                             "(MHA, GQA) with dense or routed FFNs; this model's "
                             f"{'MLA' if model.mla else ', '.join(sorted(model.mixers))} layers "
                             "are counted by --framework hf (the exact autograd count)")
    blocks, roots, counts, fp8_params = inputs or stage_inputs(model, wl, rank, fp8)
    gathered = [int(1 + terms.prefetch_blocks) * b if fw.gather == "fsdp" and zero == 3
                else 0 for b in blocks]
    kept = fw.recompute[recompute] != "full"

    def extra(micro: int) -> list[int] | None:
        if fp8 is None:
            return None
        return fp8_memory(fp8, stages, counts, wl.tp, micro * (wl.seq // cp), fp8_params,
                          kept, gathered)

    def at(micro: int) -> dict[str, Any]:
        w = wl if micro == wl.batch else wl.model_copy(update={"batch": micro})
        return framework_memory(fw, model, w, recompute=recompute, attention=attention,
                                zero=zero, dp=dp, cp=cp, virtual=virtual,
                                per_stage=memory["per_stage"], placed=placed,
                                block_params=blocks, root_params=roots, stages=stages,
                                terms=terms, gpu_memory=gpu_memory, fp8_extra=extra(micro))

    out = at(wl.batch)
    if fp8 is not None:
        out["fp8"] = fp8
    memory["framework"] = out
    memory["autograd_peak_bytes"] = memory["peak_bytes"]
    memory["peak_bytes"], memory["peak_stage"] = out["peak_bytes"], out["peak_stage"]
    if gpu_memory is not None:
        memory.update(fits=out["fits"], free_bytes=out["free_bytes"])
        if fw.activations == "modules":  # the exact count's search stays for hf, deepspeed
            memory["largest_micro_batch"] = largest_ok(
                lambda m: bool(at(m)["fits"]), 1, (1 << 40) - 1)

