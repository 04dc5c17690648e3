"""Which training framework the memory follows (`train --framework`), what each runs, and the
one entry point other planners call: `framework_memory` (train/fwmemory.py holds its terms).

`hf` is today's exact count: what autograd saves when transformers' modeling code runs
(train/saved.py), model states by train/memory.py's PRECISIONS. The others keep other tensors,
derived from their code (each rule cites the file and function it follows):

  megatron    Megatron-Core with Transformer Engine. Bytes per parameter: bf16 weights 2, fp32
              main gradients 4 (megatron/training/arguments.py validate_args: "bfloat16
              requires gradient accumulation and all-reduce to be done in fp32", so bf16 sets
              accumulate_allreduce_grads_in_fp32 and the DDP grad buffer is fp32), optimizer 12
              (fp32 master, Adam m, v), sharded over dp by the distributed optimizer
              (docs/source/api-guide/dist_optimizer.md: "float16 param, fp32 grads | 18 |
              6 + 12/d"). --zero 0 or 1 (the distributed optimizer); its FSDP is not modelled.
              Activations: Korthikanti et al.'s per-layer terms, generalised to GQA, gated FFNs
              and routed experts, plus what TE keeps (fp32 norm statistics, the fused
              attention's fp32 softmax statistics); recompute none | selective | full.
              Loss: megatron/core/tensor_parallel/cross_entropy.py (_VocabParallelCrossEntropy:
              the logits' fp32 copy exponentiated in place and saved, the gradient written into
              it).
  torchtitan  FSDP2 (torchtitan/distributed/ + parallelize apply_fsdp): fp32 sharded
              parameters 4, fp32 gradients 4, Adam 8 (MixedPrecisionPolicy(param_dtype=bf16,
              reduce_dtype=fp32)), all sharded (--zero 3) or replicated (--zero 0, DDP); each
              block all-gathered in bf16 for its forward and backward with the next one
              prefetched, the root (embedding, final norm, output) gathered around them; with
              pp the blocks are not resharded after the forward (reshard_after_forward=False).
              Activation checkpointing (torchtitan/distributed/activation_checkpoint.py):
              --recompute full (or torch) = _apply_full_ac (ptd_checkpoint_wrapper per block);
              selective = per-op SAC (_apply_op_sac: the save list is aten.mm and the SDPA
              kernels, "Saves output of all compute ops, except every second mm"); the 2024
              per-layer option (selective_ac_option = N: every N-th block fully checkpointed)
              is --fw-term sac_layer_every=N. Loss: torchtitan/components/loss.py
              cross_entropy_loss, F.cross_entropy(pred.flatten(0, 1).float(), ...): the fp32
              logits, log-softmax's fp32 output, and at its backward the fp32 gradients.
  deepspeed   DeepSpeed ZeRO 0–3 on transformers' modules (activations: the hf count).
              Bytes per parameter as `mixed`; buckets (deepspeed/runtime/zero/config.py
              DeepSpeedZeroConfig): reduce_bucket_size 5e8 elements, ZeRO-3's
              stage3_max_live_parameters 1e9 and stage3_prefetch_bucket_size 5e7; parameters
              under stage3_param_persistence_threshold 1e5 elements are kept whole. The
              pipeline engine refuses ZeRO-2 and -3 (deepspeed/runtime/pipe/engine.py,
              PipelineEngine.__init__: "ZeRO-2 and ZeRO-3 are incompatible with pipeline
              parallelism").
  llm-foundry Composer's FSDP1 (FULL_SHARD = --zero 3, SHARD_GRAD_OP = 2, NO_SHARD = 0) over
              llm-foundry's MPT modules: fp32 flat parameters sharded, bf16 gathered per block
              (backward prefetch: two units), activations as torch modules keep them (the
              module terms: fused GELU, flash attention), fp32 cross-entropy under autocast;
              --recompute none | full (activation_checkpointing per block).

Every framework's output also carries Megatron's closed form (train/report.py), and names the
framework its memory follows.

API (for planners that search layouts): `train.report.build_train(model, wl, ..., framework=,
fw_terms=, fp8=)` returns the report whose `memory.framework` is this count (`peak_bytes`,
`fits`, `per_stage` by term) and whose `memory.peak_bytes` / `fits` follow it;
`framework(name, zero=, recompute=, pp=, fp8=, virtual=)` checks a combination without building
anything (ShapecalcError naming the flag); `fwmemory.framework_memory` is the per-stage function
build_train calls, `fwmemory.FwTerms` / `fw_terms([...])` its stated terms.
"""

from __future__ import annotations

from typing import Any

from ..lean import dataclass
from ..model.config import ShapecalcError
from ..model.suggest import not_one_of


@dataclass(frozen=True)
class Framework:
    name: str
    title: str
    zero: tuple[int, ...]  # --zero values it runs
    pipeline_zero: tuple[int, ...]  # of those, what it runs with pp > 1
    recompute: dict[str, str]  # --recompute value → the framework's own policy
    weights: int  # bytes per parameter of each model-state term (mixed precision)
    gradients: int
    optimizer: int
    activations: str  # "autograd" (the hf count) | "modules" (fwmemory's per-layer terms)
    loss: str  # "autograd" | "vocab_parallel" | "fp32"
    gather: str  # "" | "fsdp" (per-block bf16 all-gather) | "deepspeed" (ZeRO-3 buckets)
    fp8: tuple[str, ...]  # --fp8 modes it runs
    source: str


_TE = ("te-delayed", "te-current", "te-block", "mxfp8")
FRAMEWORKS: dict[str, Framework] = {
    "hf": Framework("hf", "transformers eager (autograd's exact count)", (0, 1, 2, 3),
                    (0, 1, 2, 3), {r: r for r in ("none", "selective", "full", "torch")},
                    2, 2, 12, "autograd", "autograd", "", (),
                    "train/saved.py (measured against saved_tensors_hooks)"),
    "megatron": Framework("megatron", "Megatron-Core + Transformer Engine", (0, 1), (0, 1),
                          {"none": "none", "selective": "selective", "full": "full"},
                          2, 4, 12, "modules", "vocab_parallel", "", (*_TE, "deepseek"),
                          "NVIDIA/Megatron-LM (dist_optimizer.md; core/tensor_parallel/"
                          "cross_entropy.py; Korthikanti et al. 2022 Table 2)"),
    "torchtitan": Framework("torchtitan", "torchtitan FSDP2", (0, 3), (0, 3),
                            {"none": "none", "selective": "op", "full": "full",
                             "torch": "full"},
                            4, 4, 8, "modules", "fp32", "fsdp",
                            ("torchao-tensor", "torchao-row", "mxfp8"),
                            "pytorch/torchtitan (distributed/activation_checkpoint.py; "
                            "components/loss.py; parallelize apply_fsdp)"),
    "deepspeed": Framework("deepspeed", "DeepSpeed ZeRO", (0, 1, 2, 3), (0, 1),
                           {"none": "none", "torch": "torch", "full": "torch"},
                           2, 2, 12, "autograd", "autograd", "deepspeed", _TE,
                           "deepspeedai/DeepSpeed (runtime/zero/config.py; runtime/pipe/"
                           "engine.py)"),
    "llm-foundry": Framework("llm-foundry", "llm-foundry / Composer FSDP1", (0, 2, 3), (),
                             {"none": "none", "full": "full", "torch": "full"},
                             4, 4, 8, "modules", "fp32", "fsdp", ("te-delayed",),
                             "mosaicml/llm-foundry (MPT modules) over torch FSDP1"),
}
NAMES = tuple(FRAMEWORKS)
# pipeline schedules without interleaving (--virtual-stages 1 only): DeepSpeed's PipelineEngine
# runs one 1F1B schedule (deepspeedai/DeepSpeed#1110, its maintainer: "DeepSpeed's pipeline
# engine schedule is equivalent to the 1F1B schedule (option b, or PipeDream-Flush)"; #4035:
# "Deepspeed doesn't have interleaved 1F1B implementation")
NO_INTERLEAVING = ("deepspeed",)
HELP = ("hf (default: autograd's exact count, transformers eager; any --zero, --recompute) | "
        "megatron (Megatron-Core + TE: --zero 0|1, --recompute none|selective|full) | "
        "torchtitan (FSDP2: --zero 0|3, --recompute none|selective (per-op SAC)|full|torch) | "
        "deepspeed (ZeRO 0-3 on transformers' modules, --zero 0|1 with --pp; --recompute "
        "none|torch|full) | llm-foundry (Composer FSDP1: --zero 0|2|3, no --pp, --recompute "
        "none|full|torch)")


def framework(name: str, *, zero: int, recompute: str, pp: int, fp8: str | None = None,
              virtual: int = 1) -> Framework:
    """The framework, or exit 2 naming the flag a combination it cannot run."""
    fw = FRAMEWORKS.get(name)
    if fw is None:
        raise not_one_of("framework", name, NAMES)
    if zero not in fw.zero:
        raise ShapecalcError("zero", f"{fw.name} runs --zero {' | '.join(map(str, fw.zero))}, "
                             f"not {zero}")
    if pp > 1 and zero not in fw.pipeline_zero:
        why = ("its pipeline engine refuses ZeRO-2 and ZeRO-3" if fw.name == "deepspeed"
               else "it has no pipeline schedule here")
        raise ShapecalcError("zero" if fw.pipeline_zero else "pp",
                             f"{fw.name} with --pp {pp}: {why}")
    if virtual > 1 and fw.name in NO_INTERLEAVING:
        raise ShapecalcError("virtual_stages", f"{fw.name}'s pipeline engine runs 1F1B only: "
                             "no interleaved stages (--virtual-stages 1)")
    if recompute not in fw.recompute:
        raise ShapecalcError("recompute", f"{fw.name} runs --recompute "
                             f"{' | '.join(fw.recompute)}, not {recompute!r}")
    if fp8 is not None and fp8 not in fw.fp8:
        runs = [f for f in FRAMEWORKS.values() if fp8 in f.fp8]
        raise ShapecalcError("fp8", f"{fw.name} does not run {fp8!r} (it runs "
                             f"{', '.join(fw.fp8) or 'no fp8 mode'}); --framework "
                             f"{' | '.join(f.name for f in runs)} does")
    return fw


def describe(fw: Framework, recompute: str) -> dict[str, Any]:
    """What `memory.framework` says about the framework it follows."""
    return {"name": fw.name, "title": fw.title, "source": fw.source,
            "recompute_policy": fw.recompute[recompute],
            "bytes_per_param": {"weights": fw.weights, "gradients": fw.gradients,
                                "optimizer": fw.optimizer},
            "activations": fw.activations, "loss": fw.loss, "gather": fw.gather or "none"}
