"""The JSON Schema rows of `train --json`'s framework keys (`memory.framework`,
`memory.autograd_peak_bytes`, `training.fp8`, `time.efficiency`): train/fwmemory.py,
train/fp8.py and train/efficiency.py build them."""

from __future__ import annotations

from pydantic import StrictBool, StrictInt

from ..costs.described import described, many

I, IN, F = StrictInt, StrictInt | None, float

FwBytesPerParam = described(
    "TrainFwBytesPerParam", "Bytes per parameter of each model-state term, as the framework "
    "keeps them", ("weights", I, "the weights' bytes"), ("gradients", I, "the gradients'"),
    ("optimizer", I, "the optimizer states' (fp32 master and moments)"))

FwStage = described(
    "TrainFwStage", "One pipeline stage's rank, bytes by term as the framework keeps them",
    ("stage", I, "the pipeline stage"),
    ("model_state_bytes", I, "weights, gradients and optimizer states at its widths"),
    ("activation_bytes", I, "the in-flight micro-batches' kept activations (and the loss's)"),
    ("backward_bytes", I, "the largest layer's recomputed tensors and gradients going back"),
    ("loss_peak_bytes", I, "the cross-entropy's bytes at its peak beyond what it keeps"),
    ("gathered_bytes", I, "FSDP's gathered blocks, DeepSpeed's buckets"),
    ("fp8_bytes", I, "fp8's weight copies and saved inputs' change (negative: a saving)"),
    ("allocated_bytes", I, "the sum of the terms above (the larger of backward and loss)"),
    ("reserve_bytes", I, "the caching allocator's reserve over it"),
    ("comm_buffer_bytes", I, "NCCL buffers, as given"),
    ("bytes", I, "allocated + reserve + comm buffers"))

FwMemory = described(
    "TrainFwMemory", "The framework the memory follows (train/frameworks.py) and, other than "
    "hf, its count",
    ("name", str, "hf | megatron | torchtitan | deepspeed | llm-foundry"),
    ("title", str, "what it is"), ("source", str, "the code its rules follow"),
    ("recompute_policy", str, "its policy for --recompute (e.g. torchtitan's per-op SAC)"),
    ("bytes_per_param", FwBytesPerParam, "its model-state widths"),
    ("activations", str, "autograd (the exact count) | modules (fwmemory's per-layer terms)"),
    ("loss", str, "how it keeps the cross-entropy: autograd | vocab_parallel | fp32"),
    ("gather", str, "none | fsdp | deepspeed: the gathered parameters' rule"),
    ("peak_bytes", I, "the peak rank's bytes as it keeps them"),
    ("zero_sharded", list[str] | None, "the terms ZeRO shards", None),
    ("terms", dict[str, float] | None, "its stated terms (--fw-term NAME=VALUE)", None),
    ("per_stage", many(FwStage) | None, "each pipeline stage, by term", None),
    ("peak_stage", IN, "the stage with the most bytes", None),
    ("fits", StrictBool | None, "peak_bytes ≤ the GPU's memory (with --gpu)", None),
    ("free_bytes", IN, "the GPU's memory − peak_bytes (with --gpu)", None),
    ("fp8", str | None, "the --fp8 mode its bytes include", None))

Fp8 = described(
    "TrainFp8", "The fp8 recipe (train/fp8.py)", ("mode", str, "the --fp8 mode"),
    ("gemms", list[str], "the stage roles whose GEMMs run in fp8"),
    ("weight_copy_bytes_per_param", F, "fp8 weight copies kept per fp8 GEMM parameter"),
    ("saved_input_bytes_per_element", F, "bytes a saved fp8 GEMM input takes (bf16: 2)"),
    ("scale_bytes_per_element", F, "block scales per element"))

Efficiency = described(
    "TrainEfficiency", "How the run's efficiencies follow the GPU and the shapes "
    "(train/efficiency.py; --framework other than hf)",
    ("chip", str, "the chip whose fitted terms apply"),
    ("e_gemm", F, "the chip's GEMM efficiency at large sizes (fitted)"),
    ("e_attn", F, "its attention efficiency at long sequences (fitted)"),
    ("gemm_size_factor", F, "f(M)·f(N)·f(K) over the run's GEMMs, FLOP-weighted"),
    ("attention_seq_factor", F, "T/(T + attention_half_seq)"),
    ("clock_factor", F, "(power limit / TDP)^(1/3), ≤ 1"),
    ("elementwise_passes", F, "how often eager kernels move each elementwise stage's bytes"),
    ("fitted_on", str, "where e_gemm and e_attn come from"),
    ("gemm_half_dim", F, "the GEMM dimension at which f is ½ (fitted, all GPUs)"),
    ("attention_half_seq", F, "the sequence at which attention reaches half (fitted)"))
