"""The memory terms of one training rank as a framework keeps them (train/frameworks.py names
the frameworks and their sources); `framework_memory` is the entry point.

Per pipeline stage, bytes:
  model_state   the framework's bytes per parameter, ZeRO-sharded as train/memory.py shards;
  activations   c chunk passes in flight (the 1F1B count report.py gives), each keeping its
                layers' resident bytes; the hf and deepspeed rows read the exact autograd count;
                the module frameworks these per-layer terms (w = 2, bf16; n = b·T/cp tokens,
                ÷ t with tensor and sequence parallelism; Korthikanti et al. 2022's terms for a
                GPT layer, 34·s·b·h + 5·a·s²·b with dropout, reproduced by them):
                  norms     each norm's input w·n·D and output w·n·D (the next GEMM's input),
                            TE's fp32 statistics 4·n (RMSNorm) or 8·n (LayerNorm);
                  attention q, k, v: w·n·(H + 2·H_kv)·Dh; flash keeps the output w·n·H·Dh and
                            its fp32 log-sum-exp 4·b·H·T; eager the softmax w·b·H·T² (and,
                            with dropout, its mask b·H·T² and output w·b·H·T²);
                  FFN       the up (and gate) output w·n·Dff·(1 + gated), the activation's
                            output w·n·Dff; routed experts the same per (token, expert) pair
                            at Dff_e plus the permuted input and the expert output w·n·k·D,
                            the router's fp32 probabilities 4·n·E;
                  dropout   a 1-byte mask n·D after attention and after the FFN (dropout > 0).
                Policies: none (all), selective (drops the [T,T] tensors), full (the layer's
                input w·n·D only), op (torchtitan per-op SAC: the input, every odd-numbered
                GEMM's output in the layer's order, the attention kernel's output and
                log-sum-exp), and every N-th layer full (sac_layer_every=N).
  backward      the largest layer's recomputed tensors and gradients in flight while it goes
                back (its none bytes − its resident bytes under recompute, plus w·n·(Dff·(1 +
                gated) + 2·D)); or, on the last stage, the loss at its backward, whichever is more;
  loss          vocab_parallel (Megatron): the fp32 logits 4·n·V/t kept, 2·n·V/t more at the
                peak (the bf16 logits); fp32 (torch's F.cross_entropy on .float()): the fp32
                log-softmax 4·n·V/t kept, 12·n·V/t at its backward (the saved output, the
                incoming and the outgoing fp32 gradients); with t > 1 torchtitan's
                loss_parallel (torch/distributed/tensor/parallel/loss.py, its DTensor
                _nll_loss_backward: zeros_like(log-probs), scatter (a new tensor), × grad_output,
                beside the saved fp32 log-probs) 16·n·V/t, and the output linear keeps its
                all-gathered input w·n·D; fused_ce=1: the bf16 logits' gradient 2·n·V/t
                only (a fused or chunked cross-entropy);
  gathered      FSDP: the bf16 copy of the block running and the one prefetched, 2·(1 +
                prefetch_blocks)·P_block, and the root's (embedding, output) 2·P_root, plus the
                block's gradients before their reduce-scatter (bf16 and the fp32 reduce copy,
                6·P_block); with pp every block of the stage stays gathered (2·P_stage).
                DeepSpeed ZeRO-3: min(max_live_parameters, two blocks + prefetch bucket) in
                bf16; ZeRO 1–3's gradient bucket reduce_bucket_size × 2 B (×2 with
                overlap_comm, on by default for ZeRO-3 only: DeepSpeedZeroConfig's
                overlap_comm_valid, "self.overlap_comm = self.stage == ZeroStageEnum.weights");
  reserve       the caching allocator's reserve over what it holds: allocator_reserve × the
                allocated bytes (fragmentation, the block rounding), and comm_buffer_bytes
                (NCCL's buffers sit outside the caching allocator: 0 unless given).
All terms are stated and overridable (--fw-term NAME=VALUE); none is fitted.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from ..inputs.numbers import bounded, named_numbers
from ..lean import dataclass
from ..model.config import ModelConfig, ShapecalcError, Workload, ceil_div
from ..model.parallel import stage_kind_counts
from ..model.plan import layer_plan
from ..model.record import INT_MAX
from ..model.stage import ATTN_SCORE_ROLES, EXPERT_ROLES, Stage
from .frameworks import Framework, describe
from .memory import ZERO_SHARDED, Term, model_state

W = 2  # the activations' width: bf16 (non-hf frameworks plan mixed precision)


@dataclass(frozen=True)
class FwTerms:
    allocator_reserve: float = 0.05  # reserved over allocated (fragmentation, rounding)
    comm_buffer_bytes: float = 0.0  # NCCL buffers (outside the caching allocator)
    dropout: float = 0.0  # 1: dropout masks kept (Megatron's GPT defaults 0.1; recipes 0)
    fused_ce: float = 0.0  # 1: a fused / chunked cross-entropy (no fp32 [n, V] tensors)
    sac_layer_every: float = 0.0  # torchtitan per-layer SAC: every N-th block checkpointed
    recompute_layernorm: float = 0.0  # Megatron --recompute-modules layernorm: norm outputs
    recompute_moe_act: float = 0.0  # Megatron --recompute-modules moe_act: experts' activation
    prefetch_blocks: float = 1.0  # FSDP blocks gathered ahead of the running one
    reduce_bucket_size: float = 5e8  # DeepSpeed reduce_bucket_size (elements)
    max_live_parameters: float = 1e9  # DeepSpeed stage3_max_live_parameters (elements)
    prefetch_bucket_size: float = 5e7  # DeepSpeed stage3_prefetch_bucket_size (elements)


TERM_NAMES = tuple(f.name for f in fields(FwTerms))
# each term's kind and range: a switch is 0 or 1, a count (bytes, elements, blocks, layers) a
# whole number (2.5 was truncated to 2), a fraction at most 1; 1e308 overflowed int()
SWITCH, COUNT = (0, 1, True), (0, INT_MAX, True)
TERM_RANGES: dict[str, tuple[float, float, bool]] = {
    "allocator_reserve": (0.0, 1.0, False), "dropout": (0.0, 1.0, False),
    "fused_ce": SWITCH, "recompute_layernorm": SWITCH, "recompute_moe_act": SWITCH,
    "comm_buffer_bytes": COUNT, "sac_layer_every": COUNT, "prefetch_blocks": COUNT,
    "reduce_bucket_size": COUNT, "max_live_parameters": COUNT, "prefetch_bucket_size": COUNT}


def fw_terms(sets: list[str] | None) -> FwTerms:
    """`--fw-term NAME=VALUE` overrides, each through the one bounded parser."""
    out = FwTerms()
    for key, v, text in named_numbers(sets, "fw-term", TERM_NAMES):
        lo, hi, whole = TERM_RANGES[key]
        if whole and v == v and abs(v) < float("inf") and v != int(v):
            raise ShapecalcError(f"fw-term.{key}", f"must be a whole number, got {text}")
        bounded(v, f"fw-term.{key}", lo, hi, "(0 off, 1 on)" if hi == 1 and whole else "")
        out = replace(out, **{key: v})
    return out


def _layer_terms(model: ModelConfig, moe: bool, n: int, b: int, s: int, t: int,
                 attention: str, terms: FwTerms) -> dict[str, int]:
    """One layer's tensors (bytes, one rank, one micro-batch) under no recompute, by name."""
    h, dh, H, Hkv = model.d_model, model.dh, model.n_heads, model.kv_heads
    stat = 8 if model.norm == "layernorm" else 4
    drop = terms.dropout > 0
    out = {"input": W * n * h // t, "norms": (W * n * h * 3 + 2 * stat * n) // t,
           "qkv": W * n * (H + 2 * Hkv) * dh // t}
    if attention == "flash":
        out["core"] = (W * n * H * dh + 4 * b * H * s) // t
    else:
        out["core"] = W * n * H * dh // t
        out["scores"] = b * H * s * s * (W + (1 + W) * drop) // t
    up = 1 + model.gated
    if moe:
        k, e, f = model.experts_per_token or 1, model.n_experts or 1, model.dff_expert
        pairs = n * k
        out["router"] = 4 * n * e // t
        out["ffn"] = W * pairs * (2 * h + f * (up + 1)) // t
        if model.n_shared_experts:
            out["ffn"] += W * n * model.n_shared_experts * model.dff_shared * (up + 1) // t
    else:
        out["ffn"] = W * n * model.d_ff * (up + 1) // t
    if drop:
        out["dropout"] = 2 * n * h // t
    return out


def _op_sac_saved(stages: list[Stage], kind: int, t: int, n: int) -> int:
    """Per-op SAC: the bytes of every odd-numbered GEMM output of a layer of this kind (their
    order in the forward; torchtitan counts each mm per block, saving 1st, 3rd, ...)."""
    gemms = [x for x in stages if x.group == "block" and x.kind == kind and x.flops
             and x.role not in ATTN_SCORE_ROLES]
    total = 0
    for i, x in enumerate(gemms):
        if i % 2 == 0:  # a linear's output [B, T, N]: N per token
            width = 1
            for d in x.shape[2:]:
                width *= d
            total += W * n * width // t
    return total


def op_sac_recompute_flops(stages: list[Stage], kind: int) -> int:
    """Per-op SAC re-runs every even-numbered GEMM of a layer in its backward: their FLOPs."""
    gemms = [x for x in stages if x.group == "block" and x.kind == kind and x.flops
             and x.role not in ATTN_SCORE_ROLES]
    return sum(x.flops for i, x in enumerate(gemms) if i % 2 == 1)


def layer_memory(model: ModelConfig, wl: Workload, policy: str, attention: str, cp: int,
                 terms: FwTerms, stages: list[Stage]) -> list[dict[str, int]]:
    """Per layer kind: the resident bytes one layer keeps and its backward's extra bytes."""
    plan = layer_plan(model)
    b, s, t = wl.batch, wl.seq // cp, wl.tp
    n = b * s
    out = []
    for k, spec in enumerate(plan.kinds):
        parts = _layer_terms(model, spec.ffn == "moe", n, b, s, t, attention, terms)
        full = sum(parts.values())
        if policy == "none":
            kept = full
        elif policy == "selective":
            kept = full - parts.get("scores", 0)
        elif policy == "full":
            kept = parts["input"]
        elif policy == "op":
            kept = parts["input"] + parts["core"] + _op_sac_saved(stages, k, t, n)
        else:
            raise ShapecalcError("recompute", f"no memory rule for policy {policy!r}")
        if policy in ("none", "selective"):  # Megatron's recompute_modules (elementwise only)
            kept -= (terms.recompute_layernorm > 0) * 2 * W * n * model.d_model // t
            if spec.ffn == "moe":
                kept -= (terms.recompute_moe_act > 0) * W * n * (model.experts_per_token or 1) \
                    * model.dff_expert // t
        widest = (model.d_ff if spec.ffn != "moe"
                  else model.dff_expert * (model.experts_per_token or 1))
        grads = W * n * (widest * (1 + model.gated) + 2 * model.d_model) // t
        out.append({"resident": kept, "none": full, "backward": full - kept + grads})
    return out


def _loss(fw: Framework, model: ModelConfig, n: int, t: int, terms: FwTerms) -> tuple[int, int]:
    """(kept, at its peak) bytes of the logits and the cross-entropy on the last stage."""
    nv = n * model.vocab_size // t
    head_in = 2 * W * n * model.d_model // t  # the final norm's input and output
    if fw.loss == "fp32" and t > 1:  # the output linear saves its all-gathered input
        head_in = W * n * model.d_model // t + W * n * model.d_model
    if terms.fused_ce:
        return head_in, head_in + W * nv
    if fw.loss == "vocab_parallel":
        return head_in + 4 * nv, head_in + 6 * nv
    if t > 1:  # loss_parallel's _nll_loss_backward: zeros_like, scatter, × grad, the saved
        return head_in + 4 * nv, head_in + 16 * nv  # log-probs: four fp32 [n, V/t]
    return head_in + 4 * nv, head_in + 12 * nv


def _gathered(fw: Framework, zero: int, pp: int, block: int, root: int, stage: int,
              terms: FwTerms) -> int:
    """Bytes of the gathered (unsharded) parameters and the gradient buckets at the peak."""
    if fw.gather == "fsdp" and zero == 3:
        if pp > 1:  # not resharded after the forward: the whole stage stays gathered
            return 2 * stage + 6 * block
        return 2 * int(1 + terms.prefetch_blocks) * block + 2 * root + 6 * block
    if fw.gather == "deepspeed" and zero:
        bucket = int(2 * terms.reduce_bucket_size) * (2 if zero == 3 else 1)
        if zero == 3:
            live = min(int(terms.max_live_parameters),
                       2 * block + int(terms.prefetch_bucket_size))
            return bucket + 2 * live
        return bucket
    return 0


def fw_widths(fw: Framework) -> tuple[Term, ...]:
    """The framework's bytes per parameter of each model-state term (memory.model_state's)."""
    return (Term("weights", fw.weights, "weights"), Term("gradients", fw.gradients, "gradients"),
            Term("optimizer", fw.optimizer, "optimizer states"))


def framework_memory(fw: Framework, model: ModelConfig, wl: Workload, *, recompute: str,
                     attention: str, zero: int, dp: int, cp: int, virtual: int,
                     per_stage: list[dict[str, Any]], placed: list[tuple[int, int]],
                     block_params: list[int], root_params: list[int], stages: list[Stage],
                     terms: FwTerms, gpu_memory: int | None = None,
                     fp8_extra: list[int] | None = None) -> dict[str, Any]:
    """Peak bytes per rank as `fw` keeps them. `per_stage` are train's rows (layers,
    chunks_in_flight, the hf count's activation_bytes); `placed` the (dense, expert) params
    each stage's rank holds; `block_params`/`root_params` a stage's largest block and its
    embedding + head on one rank (what FSDP gathers)."""
    policy = fw.recompute[recompute]
    bpp = fw_widths(fw)
    every = int(terms.sac_layer_every)
    if every and (fw.name != "torchtitan" or policy != "op"):
        raise ShapecalcError("fw-term.sac_layer_every", "is torchtitan's per-layer SAC: "
                             "--framework torchtitan --recompute selective")
    if every > model.n_layers:  # no N-th block at all: the flag would do nothing
        raise ShapecalcError("fw-term.sac_layer_every", f"must be at most the model's "
                             f"{model.n_layers} layers, got {every:,}")
    for key in ("recompute_layernorm", "recompute_moe_act"):
        if getattr(terms, key) and fw.name != "megatron":
            raise ShapecalcError(f"fw-term.{key}", "is Megatron's --recompute-modules")
    lm = (layer_memory(model, wl, policy, attention, cp, terms, stages)
          if fw.activations == "modules" else [])
    lm_none = (layer_memory(model, wl, "none", attention, cp, terms, stages)
               if every else lm)
    lm_full = (layer_memory(model, wl, "full", attention, cp, terms, stages)
               if every else lm)
    plan = layer_plan(model)
    counts = stage_kind_counts(plan, wl.pp)
    n = wl.batch * (wl.seq // cp)
    rows = []
    for i, (row, (dense, experts)) in enumerate(zip(per_stage, placed, strict=True)):
        ms = model_state(dense, experts, "mixed", zero, dp * cp, wl.ep, bpp)
        c = row["chunks_in_flight"]
        last = i == wl.pp - 1
        if fw.activations == "autograd":
            acts, back, loss_peak = row["activation_bytes"], 0, 0
        else:
            per_pass = 0
            for k, cnt in enumerate(counts[i]):
                if every:  # every N-th block fully checkpointed, the rest keep all
                    full_n = cnt // every
                    per_pass += full_n * lm_full[k]["resident"] + (cnt - full_n) * \
                        lm_none[k]["resident"]
                else:
                    per_pass += cnt * lm[k]["resident"]
            acts = ceil_div(c * per_pass, virtual)
            back = max((lm_full if every else lm)[k]["backward"]
                       for k, cnt in enumerate(counts[i]) if cnt) if any(counts[i]) else 0
            kept, loss_peak = _loss(fw, model, n, wl.tp, terms) if last else (0, 0)
            acts += kept
            loss_peak -= kept
        gathered = _gathered(fw, zero, wl.pp, block_params[i], root_params[i], dense + experts,
                             terms)
        fp8 = fp8_extra[i] if fp8_extra else 0
        allocated = ms["bytes"] + acts + max(back, loss_peak) + gathered + fp8
        reserve = int(allocated * terms.allocator_reserve)
        total = allocated + reserve + int(terms.comm_buffer_bytes)
        rows.append({"stage": i, "model_state_bytes": ms["bytes"], "activation_bytes": acts,
                     "backward_bytes": back, "loss_peak_bytes": loss_peak,
                     "gathered_bytes": gathered, "fp8_bytes": fp8,
                     "allocated_bytes": allocated, "reserve_bytes": reserve,
                     "comm_buffer_bytes": int(terms.comm_buffer_bytes), "bytes": total})
    peak = max(rows, key=lambda x: x["bytes"])
    out = {**describe(fw, recompute), "zero_sharded": list(ZERO_SHARDED[zero]),
           "terms": {k: getattr(terms, k) for k in TERM_NAMES}, "per_stage": rows,
           "peak_stage": peak["stage"], "peak_bytes": peak["bytes"]}
    if gpu_memory is not None:
        out.update(fits=peak["bytes"] <= gpu_memory, free_bytes=gpu_memory - peak["bytes"])
    return out


def stage_blocks(model: ModelConfig, wl: Workload, rank: list[Stage]
                 ) -> tuple[list[int], list[int]]:
    """Per pipeline stage, the largest block's and the root's (embedding, final norm, head)
    parameters on one rank: what FSDP gathers around them."""
    plan = layer_plan(model)
    counts = stage_kind_counts(plan, wl.pp)
    per_kind = []
    for k in range(len(plan.kinds)):
        dense = sum(x.params for x in rank if x.group == "block" and x.kind == k
                    and x.role not in EXPERT_ROLES)
        experts = sum(x.params for x in rank if x.group == "block" and x.kind == k
                      and x.role in EXPERT_ROLES)
        per_kind.append(dense + experts // wl.ep)
    emb = sum(x.params for x in rank if x.group == "embedding")
    head = sum(x.params for x in rank if x.group == "head")
    blocks = [max((per_kind[k] for k, c in enumerate(kc) if c), default=0) for kc in counts]
    roots = [emb * (i == 0) + head * (i == wl.pp - 1) for i in range(wl.pp)]
    return blocks, roots
