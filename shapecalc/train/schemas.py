"""The JSON Schema of `train --json` (`shapecalc schema train`), each key described.

The rows mirror the dicts train/report.py, backward.py, memory.py, activations.py, ledgers.py
and time.py build; tests validate real output against them with extra keys forbidden.
"""

from __future__ import annotations

from typing import Any

from pydantic import StrictBool, StrictInt

from ..costs.described import RecordsChecked, described, inline, many
from ..model.config import ModelConfig, Workload
from ..plan.schemas import PRICE_ROWS
from .fwschemas import Efficiency, Fp8, FwMemory
from .lora_schema import LoraOut, LoraTime

I, IN, F, FN = StrictInt, StrictInt | None, float, float | None


BytesPerParam = described(
    "TrainBytesPerParam", "Bytes one parameter takes in each model-state term",
    ("weights", I, "the weights' bytes per parameter"),
    ("gradients", I, "the gradients' bytes per parameter"),
    ("optimizer", I, "the optimizer state's bytes per parameter (fp32 master and moments)"))

Training = described(
    "TrainTraining", "The batch arithmetic and the parallel layout",
    ("micro_batch", I, "B: sequences of one micro-batch on one data-parallel rank"),
    ("grad_accum", I, "m: micro-batches a step accumulates"),
    ("dp", I, "data-parallel degree"),
    ("global_batch", I, "sequences a step: micro_batch × grad_accum × dp"),
    ("tokens_per_step", I, "global_batch × T"),
    ("tp", I, "tensor-parallel degree (with sequence parallelism)"),
    ("pp", I, "pipeline stages"), ("ep", I, "expert-parallel degree (inside dp)"),
    ("gpus", I, "tp × cp × pp × dp"), ("cp", I, "context-parallel degree (ring attention)"),
    ("virtual_stages", I, "v: interleaved model chunks per pipeline rank"),
    ("zero", I, "ZeRO stage: 0 none, 1 optimizer, 2 + gradients, 3 + weights sharded"),
    ("precision", str, "mixed | fp32 | adam8bit: the model-state terms' widths"),
    ("bytes_per_param", BytesPerParam, "bytes per parameter of each model-state term"),
    ("zero_sharded", list[str], "the model-state terms ZeRO shards over the dp·cp ranks"),
    ("recompute", str, "activation recompute: none | selective | full | torch"),
    ("fp8", Fp8 | None, "the fp8 recipe (--fp8)", None),
    ("lora_base", str | None, "LoRA: the frozen base's storage, bf16 | fp32 | nf4", None))

PerStepFlops = described(
    "TrainPerStepFlops", "The micro-batch's FLOPs × the step's micro-batches (grad_accum × dp)",
    ("forward_flops", I, "forward matmul FLOPs of the step"),
    ("backward_flops", I, "backward matmul FLOPs (dX + dW) of the step"),
    ("recompute_flops", I, "recomputed forward matmul FLOPs of the step"),
    ("step_flops", I, "forward + backward + recompute of the step"),
    ("backward_convention_only_flops", I, "of the backward, what FlopCounterMode counts and no "
     "kernel runs (a depthwise conv's dW)"))

BackwardStage = described(
    "TrainBackwardStage", "One forward stage and its backward, per occurrence",
    ("name", str, "the forward stage's name"), ("role", str, "the forward stage's role"),
    ("group", str, "embedding, block, head or mtp"),
    ("kind", IN, "a block stage's layer kind; null outside the blocks"),
    ("repeat", I, "occurrences (the layers of its kind)"),
    ("forward_flops", I, "the forward stage's matmul FLOPs"),
    ("dx_flops", I, "input gradients' matmul FLOPs (an activation operand each)"),
    ("dx_formula", str, "dx_flops in symbols"),
    ("dw_flops", I, "the weight gradient's matmul FLOPs"),
    ("dw_formula", str, "dw_flops in symbols"),
    ("elementwise_flops", I, "the backward's elementwise FLOPs"),
    ("elementwise_formula", str, "elementwise_flops in symbols"),
    ("note", str, "a short remark"), ("dims", list[str], "the forward stage's output dims"),
    ("forward_formula", str, "forward_flops in symbols"),
    ("forward_elementwise_flops", I, "the forward stage's elementwise FLOPs"),
    ("convention_only_flops", I, "counted as FlopCounterMode does, run by no kernel"),
    ("flops", I, "dx_flops + dw_flops"))

Flops = described(
    "TrainFlops", "FLOPs of one micro-batch of the whole model (per_step: the step), exact",
    ("forward_flops", I, "forward matmul FLOPs"),
    ("forward_formula", str, "forward_flops in symbols"),
    ("backward_flops", I, "backward matmul FLOPs: dX + dW"),
    ("backward_dx_flops", I, "the input gradients' matmul FLOPs"),
    ("backward_dw_flops", I, "the weight gradients' matmul FLOPs"),
    ("backward_convention_only_flops", I, "of the backward, what FlopCounterMode counts and no "
     "kernel runs (a depthwise conv's dW)"),
    ("backward_formula", str, "backward_flops in symbols"),
    ("recompute", str, "the recompute these FLOPs follow"),
    ("recompute_flops", I, "recomputed forward matmul FLOPs"),
    ("recompute_formula", str, "recompute_flops in symbols"),
    ("forward_elementwise_flops", I, "forward elementwise FLOPs"),
    ("backward_elementwise_flops", I, "backward elementwise FLOPs"),
    ("recompute_elementwise_flops", I, "recomputed elementwise FLOPs"),
    ("step_flops", I, "forward + backward + recompute matmul FLOPs of the micro-batch"),
    ("params", I, "N: the model's parameters"),
    ("tokens_per_micro_batch", I, "B × T"),
    ("approx_6nt", I, "the 6·N·tokens approximation"),
    ("approx_6nt_formula", str, "its formula"),
    ("approx_palm", I, "PaLM's (6·N + 12·L·D·T)·tokens approximation"),
    ("approx_palm_formula", str, "its formula"),
    ("forward_backward_flops", I, "forward + backward, exact (what the approximations "
     "estimate)"),
    ("per_step", PerStepFlops, "the step's FLOPs: × grad_accum × dp micro-batches"),
    ("stages", many(BackwardStage), "each forward stage with its backward"))

StateTerm = described(
    "TrainStateTerm", "One model-state term on one rank",
    ("term", str, "weights, gradients or optimizer"), ("what", str, "what it holds"),
    ("bytes_per_param", IN, "its bytes per parameter (null: LoRA's frozen base or dequant "
     "buffer, bytes of a format)"),
    ("sharded", StrictBool, "ZeRO shards it over the dp·cp ranks"),
    ("params", IN, "parameters of it the rank holds (null as bytes_per_param)"),
    ("bytes", I, "params × bytes_per_param"))

ModelState = described(
    "TrainModelState", "Weights, gradients and optimizer state on one rank of the stage",
    ("params", I, "parameters of the stage on one rank (before ZeRO)"),
    ("terms", many(StateTerm), "each term"), ("bytes", I, "all terms' bytes"))

StageMemory = described(
    "TrainStageMemory", "One pipeline stage's bytes on one rank",
    ("stage", I, "the pipeline stage (0-based)"), ("layers", I, "its layers"),
    ("params", I, "its parameters on one rank"), ("model_state", ModelState, "model state"),
    ("micro_batches_in_flight", I, "micro-batches whose activations it holds at once (1F1B)"),
    ("chunks_in_flight", I, "model-chunk passes in flight (interleaved: v per micro-batch)"),
    ("activation_bytes", I, "activations held at the peak: the in-flight ones resident, one at "
     "its backward peak (exact)"),
    ("activation_resident_bytes", I, "the in-flight micro-batches' resident activations"),
    ("activation_bytes_megatron", I, "the same by Megatron's closed form"),
    ("bytes", I, "model_state.bytes + activation_bytes"))

MegatronActs = described(
    "TrainMegatronActivations", "Megatron's closed form of a layer's activations",
    ("form", str, "the form's source (Korthikanti et al. 2022, Table 2)"),
    ("recompute", str, "the recompute it follows (torch reads as full)"),
    ("formula", str, "bytes per layer in Megatron's symbols"),
    ("bytes_per_layer", I, "bytes one layer keeps on one rank (÷ cp)"))

SavedStage = described(
    "TrainSavedStage", "What one forward stage saves for the backward",
    ("stage", str, "the stage"), ("role", str, "its role"), ("group", str, "its group"),
    ("kind", IN, "its layer kind; null outside the blocks"), ("repeat", I, "occurrences"),
    ("bytes", I, "bytes saved per occurrence"), ("total_bytes", I, "bytes × repeat"))

SavedTensor = described(
    "TrainSavedTensor", "One tensor autograd keeps, in one occurrence of its stage",
    ("stage", str, "the stage that saves it"), ("role", str, "its role"),
    ("group", str, "its group"), ("kind", IN, "its layer kind; null outside the blocks"),
    ("repeat", I, "occurrences of the stage"), ("name", str, "the tensor"),
    ("dims", list[str], "its dims in symbols"), ("shape", list[int], "its dims in numbers"),
    ("dtype", str, "its dtype"), ("elements", I, "its elements"),
    ("formula", str, "elements in symbols"),
    ("storage_bytes", I, "the bytes of its storage"),
    ("bytes", I, "what it adds: 0 when it shares a storage counted before"),
    ("shares", str, "the tensor whose storage it views (empty: its own)"),
    ("param", StrictBool, "a parameter (listed, never counted)"),
    ("core", StrictBool, "the attention core's [T,T] tensors: what selective recompute drops"),
    ("layer_input", StrictBool, "the layer's input (kept anyway under full or torch recompute)"))

HeldTensor = described(
    "TrainHeldTensor", "A tensor torch's checkpoint holds besides the layers' inputs",
    ("name", str, "the tensor"), ("dims", list[str], "its dims in symbols"),
    ("shape", list[int], "its dims in numbers"), ("dtype", str, "its dtype"),
    ("elements", I, "its elements"), ("formula", str, "elements in symbols"),
    ("bytes", I, "its bytes"), ("saved", StrictBool, "a positional argument the checkpoint "
                                "saves"))

PipelineSaved = described(
    "TrainPipelineSaved", "One pipeline stage's activations of one micro-batch",
    ("resident_bytes", I, "kept until the backward"),
    ("peak_bytes", I, "the peak while the micro-batch goes back through its layers"),
    ("held_bytes", I, "held by torch's checkpoint"),
    ("outside_bytes", I, "kept outside the layers (embedding, head, loss)"))

Saved = described(
    "TrainSaved", "The exact activation count (what autograd saves) of one micro-batch on one "
    "rank holding every layer, and on each pipeline stage, beside Megatron's closed form",
    ("convention", str, "whose saved tensors are counted (autograd, transformers eager)"),
    ("measured_families", list[str], "the families measured against autograd"),
    ("attention", str, "eager | flash: which kernel's saved tensors"),
    ("recompute", str, "the recompute"), ("dtype", str, "the activations' dtype"),
    ("tp", I, "the tensor-parallel degree the shares follow"),
    ("per_layer", dict[str, int], "bytes one layer of each kind keeps, by kind index"),
    ("per_layer_none", dict[str, int], "the same without recompute"),
    ("per_layer_none_formula", dict[str, str], "per_layer_none in symbols, by kind index"),
    ("layer_input_bytes", I, "bytes of a layer's input on one rank"),
    ("outside_bytes", I, "bytes kept outside the layers (embedding, head, loss)"),
    ("head_bytes", I, "of which the head's and the loss's"),
    ("held_bytes", I, "bytes torch's checkpoint holds (recompute torch)"),
    ("resident_bytes", I, "bytes kept until the backward"),
    ("peak_bytes", I, "the peak going back through the layers"),
    ("per_stage", many(SavedStage), "what each forward stage saves"),
    ("tensors", many(SavedTensor), "each kept tensor, per occurrence of its stage"),
    ("held", many(HeldTensor), "torch's checkpoint closure (recompute torch)"),
    ("pipeline_stages", many(PipelineSaved), "each pipeline stage's counts"),
    ("fit_reads", str, "how the memory fit combines them"),
    ("tp_rule", str, "how tensor parallelism shares the tensors (empty at tp 1)"),
    ("cp_rule", str, "how context parallelism shares them (empty at cp 1)"),
    ("megatron_bytes_per_layer", I, "Megatron's closed form, bytes per layer"),
    ("difference", str, "why the exact count and Megatron's differ"))

Memory = described(
    "TrainMemory", "Bytes per rank, per pipeline stage (exact; Megatron's beside)",
    ("per_stage", many(StageMemory), "each pipeline stage"),
    ("peak_stage", I, "the stage with the most bytes"), ("peak_bytes", I, "its bytes"),
    ("activations", MegatronActs, "Megatron's closed form"),
    ("saved", Saved, "the exact activation count"),
    ("gpu", str | None, "the GPU (with --gpu)", None),
    ("gpu_memory_bytes", IN, "its memory (with --gpu)", None),
    ("fits", StrictBool | None, "peak_bytes ≤ gpu_memory_bytes (with --gpu)", None),
    ("free_bytes", IN, "gpu_memory_bytes − peak_bytes (with --gpu)", None),
    ("largest_micro_batch", IN, "the largest micro-batch that fits (with --gpu)", None),
    ("framework", FwMemory | None, "the framework the memory follows (--framework)", None),
    ("autograd_peak_bytes", IN, "the exact autograd count's peak, when peak_bytes follows "
     "another framework", None))

DpLedger = described(
    "TrainDp", "Bytes one rank sends per step over the data-parallel group (ring collectives)",
    ("degree", I, "the ranks the gradients are reduced over: dp × cp"),
    ("zero", I, "the ZeRO stage"), ("bytes_per_step", I, "all the parts' bytes"),
    ("gradient_allreduce", IN, "ZeRO 0: the gradients' all-reduce", None),
    ("gradient_reduce_scatter", IN, "ZeRO 1–3: the gradients' reduce-scatter", None),
    ("weight_allgather", IN, "ZeRO 1–2: the updated weights' all-gather", None),
    ("weight_allgather_forward", IN, "ZeRO 3: the weights' all-gather in the forward", None),
    ("weight_allgather_backward", IN, "ZeRO 3: and again in the backward", None),
    ("note", str, "how they are counted"))

EpLedger = described(
    "TrainEp", "The MoE layers' dispatch and combine all-to-alls, forward and backward",
    ("degree", I, "expert-parallel degree"), ("moe_layers", I, "MoE layers of the stage"),
    ("forward_bytes_per_layer", I, "a layer's forward all-to-all bytes (every token off-rank)"),
    ("backward_bytes_per_layer", I, "its gradients' bytes"),
    ("bytes_per_step", I, "all MoE layers, all micro-batches"),
    ("expected_bytes_per_step", F, "× (ep−1)/ep: the share that leaves the rank"))

TpLedger = described(
    "TrainTp", "Tensor parallelism with sequence parallelism: all-gathers and reduce-scatters "
    "of one rank of the peak stage",
    ("degree", I, "tensor-parallel degree"),
    ("sequence_parallel", StrictBool, "sequence parallelism is on (tp > 1)"),
    ("collective_bytes", I, "bytes one rank sends in one all-gather or reduce-scatter of "
     "[B,T,D]"),
    ("forward_bytes_per_layer", I, "a layer's forward bytes"),
    ("backward_bytes_per_layer", I, "a layer's backward bytes"),
    ("embedding_forward_bytes", I, "the vocab-parallel embedding's forward (first stage)"),
    ("embedding_backward_bytes", I, "its backward"),
    ("head_forward_bytes", I, "the LM head's input, forward (last stage)"),
    ("head_backward_bytes", I, "its backward"),
    ("loss_forward_bytes", I, "the vocab-parallel loss's forward (last stage)"),
    ("loss_backward_bytes", I, "its backward"),
    ("forward_bytes_per_micro_batch", I, "the stage's forward bytes of one micro-batch"),
    ("backward_bytes_per_micro_batch", I, "its backward bytes"),
    ("bytes_per_step", I, "all micro-batches of the step"), ("note", str, "what is counted"))

CpLedger = described(
    "TrainCp", "Context parallelism: ring attention's K and V passes of one rank",
    ("degree", I, "context-parallel degree"),
    ("chunk_bytes", I, "one of K or V of the rank's T/cp tokens (0 at cp 1)"),
    ("tokens_per_rank", I, "T/cp"),
    ("forward_bytes_per_layer", I, "(cp−1) passes of K and V"),
    ("backward_bytes_per_layer", I, "K, V, dK, dV: twice the forward"),
    ("recompute_bytes_per_layer", I, "the forward's again when attention is recomputed"),
    ("bytes_per_micro_batch", I, "all layers of the stage"),
    ("bytes_per_step", I, "all micro-batches"), ("note", str, "what is counted"))

PpLedger = described(
    "TrainPp", "The pipeline: its schedule's bubble and boundary sends",
    ("stages", I, "pipeline stages p"), ("micro_batches", I, "m: micro-batches a step"),
    ("virtual_stages", I, "v: interleaved chunks per rank"),
    ("bubble_fraction", F, "the idle share of the step"),
    ("bubble_formula", str, "bubble_fraction in symbols"),
    ("micro_batches_in_flight_first_stage", I, "micro-batches the first stage holds at once"),
    ("chunks_in_flight_first_stage", I, "model-chunk passes the first stage holds at once"),
    ("boundary_bytes_per_micro_batch", I, "[B,T,D] sent across one boundary (0 at pp 1)"),
    ("boundary_bytes_per_step", I, "forward and backward sends of all micro-batches"))

Communication = described(
    "TrainCommunication", "Bytes per step per rank of each parallelism (the peak stage)",
    ("dp", DpLedger, "data parallelism"), ("ep", EpLedger, "expert parallelism"),
    ("tp", TpLedger, "tensor parallelism"), ("cp", CpLedger, "context parallelism"),
    ("pp", PpLedger, "pipeline parallelism"))

StageTime = described(
    "TrainStageTime", "Expected seconds of one micro-batch on one rank of a pipeline stage",
    ("stage", I, "the pipeline stage"),
    ("compute_forward_s", F, "the forward's GEMMs, attention core and memory-bound work"),
    ("compute_backward_s", F, "the backward's (and recompute's)"),
    ("gemm_s", F, "of which the GEMMs"), ("attention_s", F, "the attention core"),
    ("memory_bound_s", F, "the elementwise stages"),
    ("expert_gemm_s", F, "the routed experts' grouped GEMMs"),
    ("permute_s", F, "MoE token permutation and unpermutation (memory-bound)"),
    ("tp_s", F, "tensor-parallel collectives (on the critical path)"),
    ("cp_exposed_s", F, "ring attention's passes beyond the attention they overlap"),
    ("ep_s", F, "the all-to-alls"), ("pp_s", F, "the boundary sends"),
    ("micro_batch_s", F, "compute + tp + cp + ep + pp"),
    ("dp_s", F, "the data-parallel collectives of the step"),
    ("dp_exposed_s", F, "of which not overlapped (the last bucket and any excess)"))

TrainPerfOut = described(
    "TrainPerfTerms", "The step-time model's terms (train/time.py; --perf key=value)",
    ("gemm_efficiency", F, "fraction of dense peak a training GEMM reaches"),
    ("attention_efficiency", F, "the attention core's kernels, forward and backward"),
    ("memory_efficiency", F, "fraction of HBM bandwidth memory-bound work reaches"),
    ("link_efficiency", F, "fraction of link bandwidth the collectives reach"),
    ("collective_latency_s", F, "seconds per collective, whatever its size"),
    ("net_bandwidth", F, "bytes/s per GPU per direction between nodes"),
    ("dp_overlap", F, "share of the overlappable DP time hidden (--dp-overlap)"),
    ("grouped_gemm_efficiency", F, "MoE grouped GEMMs' efficiency relative to a dense GEMM's"),
    ("moe_imbalance", F, "the busiest expert rank's tokens over the mean (1: balanced)"))

TrainCost = described(
    "TrainCost", "What the job costs at a price per GPU-hour (plan/price.py)", *PRICE_ROWS,
    ("per_step", FN, "dollars per training step"),
    ("per_million_tokens", FN, "dollars per million trained tokens"),
    ("per_trillion_tokens", FN, "dollars per trillion trained tokens"),
    ("total", FN, "the whole run (with --train-tokens): its GPU-hours × price"))

Time = described(
    "TrainTime", "The expected step time and what follows from it (with --gpu); rates null "
    "where the step time overflows",
    ("step_s", F, "seconds of one step: pipeline_s + the exposed DP time"),
    ("pipeline_s", F, "micro_batch_slots × the slowest stage's micro-batch"),
    ("micro_batch_slots", F, "m + (p−1)/v"),
    ("bubble_s", F, "the pipeline's idle time"),
    ("bubble_fraction", F, "(p−1)/(v·m + p−1)"), ("bubble_formula", str, "its formula"),
    ("virtual_stages", I, "v"), ("slowest_stage", I, "the stage that sets the pace"),
    ("dp_exposed_s", F, "DP communication not overlapped, the worst stage"),
    ("peak_flops", F, "the GPU's dense peak at compute_dtype"),
    ("compute_dtype", str, "the GEMMs' dtype"), ("attention", str, "eager | flash"),
    ("per_stage", many(StageTime), "each pipeline stage's terms"),
    ("mfu", FN, "model FLOPs utilization: model FLOPs / (GPUs × peak × step)"),
    ("hfu", FN, "hardware FLOPs utilization: with the recompute"),
    ("model_tflops_per_gpu", FN, "achieved model TFLOP/s per GPU"),
    ("hardware_tflops_per_gpu", FN, "achieved hardware TFLOP/s per GPU"),
    ("model_flops_per_step", I, "forward + backward FLOPs the kernels run, one step"),
    ("hardware_flops_per_step", I, "with the recompute"),
    ("tokens_per_s", FN, "tokens trained per second"),
    ("tokens_per_s_per_gpu", FN, "per GPU"), ("tokens_per_day", FN, "per day"),
    ("train_tokens", IN, "--train-tokens: the tokens to train on (null: not given)"),
    ("steps", IN, "steps to train on them"), ("days", FN, "days to train on them"),
    ("gpu_hours", FN, "GPU-hours to train on them"),
    ("perf", TrainPerfOut, "the model's terms"),
    ("cost", TrainCost | None, "what it costs (with a price: --price or the profile's)", None),
    ("efficiency", Efficiency | None, "the efficiencies from the GPU and the shapes "
     "(--framework other than hf)", None),
    ("lora", LoraTime | None, "LoRA's terms (with --lora-rank; train/lora_time.py)", None))

TrainOut = described(
    "TrainOut", "`train --json`: one training step's FLOPs, memory, communication and time",
    ("model", dict[str, Any], "the model's fields (shapecalc schema config)"),
    ("workload", dict[str, Any], "the micro-batch's workload (shapecalc schema workload)"),
    ("training", Training, "the batch and the parallel layout"),
    ("flops", Flops, "the step's FLOPs, exact"),
    ("memory", Memory, "bytes per rank"),
    ("communication", Communication, "bytes per step per rank"),
    ("time", Time | None, "the expected step time (with --gpu)", None),
    ("lora", LoraOut | None, "LoRA/QLoRA (with --lora-rank; train/lora.py)", None),
    base=RecordsChecked)


def schema() -> dict[str, Any]:
    out: dict[str, Any] = TrainOut.model_json_schema()
    inline(out, "model", ModelConfig)
    inline(out, "workload", Workload)
    return out
