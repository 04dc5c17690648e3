"""The JSON Schema of `train --json`'s `lora` block (train/lora_report.py), each key described."""

from __future__ import annotations

from pydantic import StrictBool, StrictInt

from ..costs.described import described, many

I = StrictInt

AdaptedLinear = described(
    "TrainLoraLinear", "One targeted linear of a layer (per occurrence, × repeat)",
    ("name", str, "the forward stage's name"), ("role", str, "its role (attn.q, ffn.down, …)"),
    ("repeat", I, "occurrences (the layers of its kind)"),
    ("d_in", I, "its input width"), ("d_out", I, "its output width"),
    ("params", I, "r·(d_in + d_out): lora_A and lora_B"))

LoraFlops = described(
    "TrainLoraFlops", "The step's LoRA FLOPs apart (one micro-batch, whole model)",
    ("adapter_forward_flops", I, "the adapters' forward: Σ 2·m·r·(d_in + d_out)"),
    ("adapter_backward_flops", I, "the adapters' dW_A, dW_B, dX of A·x and (where the input "
     "takes a gradient) dX_A"),
    ("base_backward_dx_flops", I, "the frozen base's input gradients (no dW)"))

LoraOut = described(
    "TrainLora", "LoRA/QLoRA fine-tuning (--lora-rank): the adapters on a frozen base",
    ("rank", I, "r"), ("alpha", float, "α"),
    ("scaling", float, "α/r, the adapter output's multiplier (changes no count)"),
    ("dropout", float, "lora_dropout"), ("targets", list[str], "--lora-targets, peft's names"),
    ("base", str, "the frozen base's storage: bf16, fp32 or nf4"),
    ("base_format", str, "the base's format, named"), ("base_params", I, "its parameters"),
    ("base_bytes", I, "its bytes (NF4: model/quant.py's bnb-nf4 with double quantization)"),
    ("trainable_params", I, "the adapters' parameters: Σ r·(d_in + d_out) × repeat"),
    ("trainable_fraction", float, "trainable_params / base_params"),
    ("adapted_linears", many(AdaptedLinear), "each targeted linear"),
    ("adapter_dtype", str, "the adapters' width (peft's autocast_adapter_dtype: fp32)"),
    ("flops", LoraFlops, "the FLOPs, apart"),
    ("first_layer_unsaved_bytes", I, "what the first layer does not save (its input takes no "
     "gradient), already taken off the activations"),
    ("dequant_bytes", I, "QLoRA: one NF4 weight dequantised to bf16, the largest (0 for bf16)"),
    ("paged_optimizer", StrictBool, "--paged-optimizer"),
    ("paged_bytes", I, "the optimizer states paged off the GPU (0 without it)"),
    ("model_state_with_paged_bytes", I, "the model state with the paged states counted"),
    ("not_counted", str, "what is left out"))

LoraTime = described(
    "TrainLoraTime", "The step time's LoRA terms (train/lora_time.py; with --gpu)",
    ("adapter_efficiency", float, "the r-wide adapter GEMMs' share of the GEMM rate: r/(r + h)"),
    ("adapter_efficiency_formula", str, "its formula, with h = gemm_half_tokens"),
    ("adapter_flops_per_micro_batch", I, "the adapters' forward and backward FLOPs, one "
     "micro-batch (the first layer's dX_A apart: timed with the base's)"),
    ("adapter_gemm_s_per_micro_batch", float, "their seconds (in per_stage's gemm_s)"),
    ("optimizer_s", float, "AdamW over the adapters (their ZeRO shard), memory-bound, in step_s"),
    ("optimizer_bytes", I, "its bytes: 28 a parameter (8-bit states: 16)"),
    ("dequant_bytes_per_micro_batch", I, "QLoRA: NF4 read + bf16 written, each base linear, "
     "forward, dX and the recompute's re-run (in memory_bound_s; 0 for bf16)"))
