"""The trace's totals and its TP/PP ledgers, declared once: each key, its type, what it means,
and the sweep column that carries it per point.

trace.py builds its sections in this order and with exactly these keys (`section`), the JSON
Schemas (schemas.py) are made from these declarations, and the sweep's numeric columns are
`SWEEP_COLUMNS`, which the closed form must evaluate. A key is added here, once.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Field(NamedTuple):
    name: str
    type: str  # int | bool | list[int] | the name of a nested schema (schemas.py)
    doc: str
    column: str | None = None  # the sweep column of this number, if it is one per point


TOTALS: tuple[Field, ...] = (
    Field("params", "int", "parameters, as the implementation counts them (a tied LM head once)",
          "params"),
    Field("active_params", "int", "parameters one token uses: a MoE skips E − k routed experts "
          "a layer", "active_params"),
    Field("params_breakdown", "ParamsBreakdown", "parameters by part and by layer kind"),
    Field("flops", "int", "matmul FLOPs of the step (1 multiply-add = 2 FLOPs)", "flops"),
    Field("flops_breakdown", "FlopsBreakdown", "matmul FLOPs by where they go"),
    Field("elementwise_flops", "int", "elementwise FLOPs, counted apart", "elementwise_flops"),
    Field("weight_bytes", "int", "bytes of all parameters in the weight dtype", "weight_bytes"),
    Field("kv_cache_bytes", "int", "bytes the KV cache holds after the step, all layers",
          "kv_cache_bytes"),
    Field("kv_cache_tokens", "int", "tokens per sequence in the longest layer's cache",
          "kv_cache_tokens"),
    Field("kv_cache_bytes_per_token", "int", "2·N·H_kv·Dh·bytes: one token, every layer "
          "(MLA: N·(D_c+D_r)·bytes latent, or N·H·(Dh+D_v)·bytes expanded; DeepSeek-V4: N·Dh·"
          "bytes, its K=V once, the compressed entries apart)",
          "kv_cache_bytes_per_token"),
    Field("state_cache_bytes", "int", "bytes the stateful mixers hold after the step, all "
          "layers: each Mamba-2, gated DeltaNet or KDA layer's conv state [D_conv, K_c] "
          "(activation dtype; vLLM's: K_c − 1 columns) and recurrent state (fp32: [H_s, D_s, "
          "N_s], or [H_v, D_qk, D_hv]) per sequence, whatever T is, as state_cache_convention "
          "says",
          "state_cache_bytes"),
    Field("mixer_flops_convention", "str", "how the stateful mixers' FLOPs are counted: "
          "transformers-torch (FlopCounterMode on transformers 5.24's own torch path: T padded "
          "to whole chunks, the scans' einsums as matmuls, triangular solves uncounted) or fused "
          "(what mamba_ssm's and flash-linear-attention's kernels compute: no padding, their "
          "blocks; --mixer-flops); none without such mixers"),
    Field("state_cache_convention", "str", "whose state cache state_cache_bytes follows: "
          "transformers (a conv window of K_c inputs, an fp32 recurrent state) or vllm (K_c − 1 "
          "columns, the recurrent state in state_dtype; --state-cache); none without such "
          "mixers"),
    Field("kv_cache_form", "str", "what a token's cache entry is: kv (K and V of each KV head), "
          "mla-absorbed or mla-latent (MLA's latent c_KV and k_rope), mla-expanded (K and V "
          "of every head)"),
    Field("kv_cache_blocks", "int", "paged blocks of all sequences, over the window groups",
          "kv_cache_blocks"),
    Field("kv_cache_paged_bytes", "int", "bytes of those blocks, empty slots included",
          "kv_cache_paged_bytes"),
    Field("largest_activation", "Activation", "the largest tensor the step writes (no cache)",
          "largest_activation_bytes"),
    Field("kv_cache_groups", "list[KvGroup]", "the layers sharing each window W or chunk C "
          "(both null: full attention): how many, the tokens each holds per sequence, bytes"),
    Field("mtp_params", "int", "parameters of the multi-token-prediction modules as the "
          "checkpoint stores them (each its own embedding, norms, eh_proj, block and head): "
          "not in params, as the published counts leave them out"),
    Field("flops_sparse_kernel", "int|null", "DeepSeek-V4 (shared_kv): matmul FLOPs with QKᵀ "
          "and A·V over only the keys each query may read (a sparse kernel: min(t+1, W) window "
          "keys, the closed hca entries, the top K_sel csa entries), beside flops (eager "
          "transformers: every key scored, then masked); null otherwise"),
    Field("mtp_flops", "int|null", "matmul FLOPs of the MTP modules on the step (with --mtp; "
          "null: not traced): not in flops"),
    Field("mtp_kv_cache_bytes", "int|null", "bytes the MTP modules' own KV cache holds after "
          "the step (with --mtp; null: not traced): not in kv_cache_bytes"),
    Field("weight_format", "str", "how the weights are stored: a plain dtype (weight_bytes = "
          "params × bits), or a quantized format (its bytes tensor by tensor)"),
    Field("weight_bytes_breakdown", "WeightParts", "weight_bytes by part: the quantized data, "
          "their scales, zeros, other (g_idx, quant_state), what stays unquantized"),
    Field("weight_tensors", "list[WeightTensor]", "a format's stored tensors, each with its "
          "shape, dtype and count (empty for a plain dtype)"),
    Field("selected_attention", "SelectedAttention|null", "DeepSeek Sparse Attention: the "
          "convention flops follows (eager: transformers' dense scores, the unselected masked; "
          "sparse: a sparse kernel reading each query's K_sel selected latents), the step's "
          "FLOPs under each, K_sel, the indexer's heads and width, its key cache in the KV dtype "
          "(in kv_cache_bytes) and as DeepSeek's reference keeps it (fp8, an fp32 scale per "
          "128); null without an indexer"),
)

TP_LEDGER: tuple[Field, ...] = (
    Field("degree", "int", "p: the tensor-parallel degree"),
    Field("heads_per_rank", "int", "H/p query heads"),
    Field("kv_heads_per_rank", "int", "H_kv/p KV heads, or 1 replicated head",
          "kv_heads_per_rank"),
    Field("kv_heads_replicated", "bool", "p > H_kv: every rank holds a copy of one KV head"),
    Field("kv_cache_replicated", "bool", "every rank holds the whole cache entry of a token: "
          "MLA's latent (not split by heads), or one KV head copied"),
    Field("d_ff_per_rank", "int", "Dff/p"),
    Field("vocab_per_rank", "int", "⌈N_vocab/p⌉ rows of the vocab-parallel tables"),
    Field("splits", "list[Split]", "how each weight is split, and one rank's share"),
    Field("allreduce_per_layer", "int", "all-reduces ending one layer", "allreduce_per_layer"),
    Field("allreduce_bytes", "int", "B·T·D·bytes: one all-reduce's buffer", "allreduce_bytes"),
    Field("allreduce_bytes_per_layer", "int", "all-reduce bytes of one layer",
          "allreduce_bytes_per_layer"),
    Field("allreduce_bytes_total", "int", "all-reduce bytes of all N layers",
          "allreduce_bytes_total"),
    Field("ring_bytes_per_rank", "int", "2(p−1)·⌈bytes/p⌉: what a ring all-reduce sends per rank",
          "ring_bytes_per_rank"),
    Field("ring_bytes_per_rank_total", "int", "ring bytes per rank over all layers",
          "ring_bytes_per_rank_total"),
    Field("embedding_allreduce_bytes", "int", "the vocab-parallel embedding's all-reduce",
          "embedding_allreduce_bytes"),
    Field("logits_allgather_bytes", "int", "the vocab-parallel logits' all-gather",
          "logits_allgather_bytes"),
    Field("params_per_rank", "int", "one rank's parameters", "params_per_rank"),
    Field("weight_bytes_per_rank", "int", "one rank's weight bytes", "weight_bytes_per_rank"),
    Field("kv_cache_bytes_per_rank", "int", "one rank's KV cache bytes", "kv_cache_bytes_per_rank"),
    Field("state_cache_bytes_per_rank", "int", "one rank's stateful-mixer state bytes",
          "state_cache_bytes_per_rank"),
    Field("flops_per_rank", "int", "one rank's matmul FLOPs", "flops_per_rank"),
    Field("largest_activation_bytes_per_rank", "int", "the largest tensor one rank writes"),
)

PP_LEDGER: tuple[Field, ...] = (
    Field("stages", "int", "s: pipeline stages"),
    Field("layers_per_stage", "list[int]", "layers of each stage, split as vLLM does"),
    Field("boundaries", "int", "s − 1 hand-offs"),
    Field("boundary_bytes", "int", "B·T·D·bytes (B·T·n_hc·D·bytes with hyper-connections): the "
          "residual stream crossing one boundary",
          "boundary_bytes"),
    Field("boundary_bytes_total", "int", "bytes crossing all boundaries", "boundary_bytes_total"),
    Field("params_per_stage", "list[int]", "parameters of each stage"),
    Field("weight_bytes_per_stage", "list[int]", "weight bytes of each stage"),
    Field("kv_cache_bytes_per_stage", "list[int]", "KV cache bytes of each stage"),
)

EP_LEDGER: tuple[Field, ...] = (
    Field("degree", "int", "ep: the routed experts split over ep ranks"),
    Field("composition", "str", "how tp and ep share the GPUs, as vLLM composes them"),
    Field("moe_layers", "int", "layers whose FFN is a Mixture-of-Experts"),
    Field("experts_per_rank", "int", "E/ep routed experts on each rank"),
    Field("expert_params", "int", "all routed experts' parameters, all layers"),
    Field("expert_params_per_rank", "int", "the routed experts one rank holds"),
    Field("expert_weight_bytes_per_rank", "int", "their bytes"),
    Field("params_per_rank", "int", "one rank's parameters: attention and the rest split by tp, "
          "routed experts by ep"),
    Field("weight_bytes_per_rank", "int", "their bytes"),
    Field("alltoall_bytes_per_layer", "int", "dispatch + combine, 2·B·T·k·D·bytes: every token "
          "off-rank (the worst case)"),
    Field("alltoall_bytes_per_layer_expected", "float", "× (ep−1)/ep: the off-rank share under "
          "uniform routing (an expectation)"),
    Field("alltoall_bytes_total", "int", "the worst case over the MoE layers"),
)

# the per-point numbers a sweep row carries, in this order (the CSV's columns)
SWEEP_COLUMNS: tuple[str, ...] = tuple(
    f.column for f in (*TOTALS, *TP_LEDGER, *PP_LEDGER, *EP_LEDGER) if f.column is not None)


def section(fields: tuple[Field, ...], values: dict[str, Any]) -> dict[str, Any]:
    """A section of the trace in declared order, with exactly the declared keys."""
    names = [f.name for f in fields]
    if set(values) != set(names):
        raise AssertionError(f"trace section keys differ from fields.py: "
                             f"{sorted(set(values) ^ set(names))}")
    return {n: values[n] for n in names}
