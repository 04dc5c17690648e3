"""The one home of the quantities that parallelism and caching derive: how tensor parallelism
shards KV heads, the bytes a KV cache holds per token and in paged blocks, ring all-reduce traffic,
how pipeline stages split the layers and their parameters. Trace, closed form, planning and verify
import them; none of them writes these formulas again."""

from __future__ import annotations

from typing import Any

from .config import DTYPE_BITS, MLA_DEFAULT, ModelConfig, ceil_div, nbytes
from .plan import LayerPlan, Reach, held, layer_kv_heads, layer_plan, widened

# ── tensor parallelism ──────────────────────────────────────────────────────────────────────────


def kv_heads_per_rank(model: ModelConfig, p: int, attention: str = "full") -> int:
    """KV heads one rank holds: H_kv/p, or one replicated head when H_kv < p (as vLLM does);
    of a layer of that attention kind (MiMo-V2-Flash's sliding layers: H_sw/p)."""
    return max(1, model.kv_heads_of(attention) // p)


def kv_replicated(model: ModelConfig, p: int) -> bool:
    return p > model.kv_heads


def ring_allreduce_bytes(nbytes: Any, p: int) -> Any:
    """Bytes one rank sends in a ring all-reduce of an `nbytes` buffer over p ranks:
    reduce-scatter then all-gather, each p−1 steps of one ⌈nbytes/p⌉ chunk."""
    return 2 * (p - 1) * ceil_div(nbytes, p) if p > 1 else 0


# ── the KV cache ────────────────────────────────────────────────────────────────────────────────


def kv_elements_per_token(model: ModelConfig, p: int = 1, layers: int | None = None,
                          mla: str = MLA_DEFAULT, reach: Any = "any") -> int:
    """Elements one token adds to one rank's cache over `layers` layers (default N):
    2·layers·H_kv·Dh (H_kv per rank); where layers differ (Gemma 4's global Dh_g and H_kv_g,
    MiMo-V2-Flash's sliding H_sw and values of their own width D_v) each layer's H_kv(ℓ)·(Dh(ℓ) +
    D_v(ℓ)) (`reach` a group's window: its layers). MLA (form `mla`): a latent cache holds
    layers·(D_c + D_r), the same on every tensor-parallel rank (the latent is not split by
    heads); an expanded cache holds layers·(H/p)·((D_n + D_r) + D_v): each head's K and V."""
    if _per_layer(model):  # dots3: widths set per layer, or the indexer keys in their own dtype
        return sum(kv + idx for kv, idx in _layer_rows(model, p, layers, mla, reach, None))
    n = (model.mixers.count("attention") + model.mixers.count("inkling")  # Inkling's attend
         if layers is None else layers)
    if model.shared_kv:  # DeepSeek-V4: one K=V tensor per layer (its entries: entry_bytes)
        return n * model.dh
    if model.mla:
        if mla == "expanded":
            return n * (model.n_heads // p) * (model.dh + model.v_dim)
        # DSA: the indexer's key k_I of D_I beside the latent, on the layers running an indexer
        # (of a part of the layers: as many as it can hold, an upper bound)
        idx = model.indexer_layers if layers is None else min(layers, model.indexer_layers)
        return n * (model.kv_lora_rank + model.rot) + idx * (model.index_head_dim or 0)  # type: ignore
    # block-sparse attention: the block indexer's one key of D_I per token, on its layers
    blk = len(model.block_indexer_layers)
    blk = (blk if layers is None else min(layers, blk)) * (model.block_index_head_dim or 0)
    if (model.global_head_dim is not None or model.kv_heads_sliding is not None
            or model.v_dim != model.dh):
        return _layer_kv_elements(model, p, layers, reach) + blk
    return 2 * n * kv_heads_per_rank(model, p) * model.dh + blk


def _layer_kv_elements(model: ModelConfig, p: int, layers: int | None, reach: Any) -> int:
    """Σ H_kv(ℓ)·(Dh(ℓ) + D_v(ℓ)) over the caching layers (`layers` None: every one; a group's
    `reach`: its layers; else `layers` of the widest, an upper bound for a part of the model)."""
    plan = layer_plan(model)

    def width(i: int) -> int:
        heads, dh = layer_kv_heads(model, i), model.layer_dh(i)
        return max(1, heads // p) * (dh + (dh if model.v_head_dim is None else model.v_head_dim))

    attn = [i for i, k in enumerate(plan.kind_of) if plan.kinds[k].caches]
    if layers is None:
        return sum(width(i) for i in attn)
    if reach != "any":
        attn = [i for i in attn if plan.kinds[plan.kind_of[i]].reach == reach]
    return layers * max((width(i) for i in attn), default=0)


def kv_cache_form(model: ModelConfig, mla: str = MLA_DEFAULT) -> str:
    """What a token's cache entry is: kv (K and V of each KV head), or MLA's form."""
    return f"mla-{mla}" if model.mla else "kv"


def kv_cache_replicated(model: ModelConfig, p: int, mla: str = MLA_DEFAULT) -> bool:
    """Every rank holds the whole entry: one copied KV head (H_kv < p), or MLA's latent, which
    is not split by heads."""
    return kv_replicated(model, p) or (model.mla and mla != "expanded")


def kv_bytes_per_token(model: ModelConfig, dtype: str, p: int = 1,
                       layers: int | None = None, mla: str = MLA_DEFAULT, reach: Any = "any"
                       ) -> int:
    """2·N·H_kv·Dh·bytes (MLA: see kv_elements_per_token): what one token adds to the cache of
    every layer (of one rank); `reach`: only the layers of that window's group."""
    if _per_layer(model):
        return sum(split_bytes_per_token(model, dtype, p, layers, mla, reach))
    return nbytes(kv_elements_per_token(model, p, layers, mla, reach), dtype)


def split_elements_per_token(model: ModelConfig, p: int = 1, layers: int | None = None,
                             mla: str = MLA_DEFAULT, reach: Any = "any") -> tuple[int, int]:
    """(elements in the KV dtype, elements in index_cache_dtype) one token adds: dots3's
    indexer keys apart; elsewhere all of kv_elements_per_token and 0."""
    if not _per_layer(model) or model.index_cache_dtype is None:
        return kv_elements_per_token(model, p, layers, mla, reach), 0
    rows = _layer_rows(model, p, layers, mla, reach, None)
    return sum(r[0] for r in rows), sum(r[1] for r in rows)


def split_bytes_per_token(model: ModelConfig, dtype: str, p: int = 1, layers: int | None = None,
                          mla: str = MLA_DEFAULT, reach: Any = "any") -> tuple[int, int]:
    """(latent bytes, indexer-key bytes) one token adds (dots3: the indexer keys apart, in
    their own dtype; elsewhere they are in the latent's tensor and the second is 0)."""
    if not _per_layer(model):
        return kv_bytes_per_token(model, dtype, p, layers, mla, reach), 0
    rows = _layer_rows(model, p, layers, mla, reach, dtype)
    kv, idx = sum(r[0] for r in rows), sum(r[1] for r in rows)
    if model.index_cache_dtype is None:
        return nbytes(kv + idx, dtype), 0
    return nbytes(kv, dtype), nbytes(idx, model.index_cache_dtype)


def _per_layer(model: ModelConfig) -> bool:
    """The cache's widths vary by layer (dots3: per-layer widths, the indexer keys in fp32)."""
    return not model.shared_kv and (
        model.layer_widths is not None or (model.mla and model.index_cache_dtype is not None))


def _layer_rows(model: ModelConfig, p: int, layers: int | None, mla: str, reach: Any,
                dtype: str | None) -> list[tuple[int, int]]:
    """(latent elements, indexer elements) a token adds to each attention layer (of the group of
    `reach`, or all): D_c + D_r (each head's K and V, expanded) and the D_I of a layer that runs
    an indexer (not a sliding one, not a shared top-k one); of `layers` < all of them, the
    widest (in `dtype`'s bytes): an upper bound, as kv_elements_per_token's."""
    plan = layer_plan(model)
    rows = []
    for k in plan.kind_of:
        spec = plan.kinds[k]
        if spec.mixer not in ("attention", "inkling") or (reach != "any" and spec.reach != reach):
            continue
        w = widened(model, spec)
        if not model.mla:  # K and V of each of the layer's KV heads (on this rank)
            rows.append((2 * kv_heads_per_rank(w, p) * w.dh, 0))
            continue
        if mla == "expanded":
            rows.append(((w.n_heads // p) * (w.dh + w.v_dim), 0))
            continue
        indexed = model.dsa and spec.attention != "sliding" and not spec.shared_topk
        rows.append((w.kv_lora_rank + w.rot, (model.index_head_dim or 0) * indexed))  # type: ignore
    if layers is None or layers >= len(rows):
        return rows
    wide = DTYPE_BITS[model.index_cache_dtype] / DTYPE_BITS[dtype] if (
        model.index_cache_dtype and dtype) else 1  # an indexer value's bytes, in KV values
    return sorted(rows, key=lambda r: r[0] + wide * r[1], reverse=True)[:layers]


def cached_tokens(window: Reach, T: int, phase: str) -> int:
    """Tokens one layer's cache holds after the step: the prompt's T, or T+1 after a decode,
    at most the layer's window W, or a chunked layer's current chunk (plan.held)."""
    return held(window, T + (1 if phase == "decode" else 0))


def kv_groups(plan: LayerPlan) -> list[tuple[Reach, int]]:
    """(window, layers) of each group of layers that share a window (vLLM's KV cache groups: a
    paged block spans the layers of one group); one group when every layer attends alike."""
    out: dict[Reach, int] = {}
    for kind, count in zip(plan.kinds, plan.counts, strict=True):
        if kind.caches:  # a state-space layer's cache is its state (state_bytes_per_sequence);
            # a KV-sharing layer's is another layer's
            out[kind.reach] = out.get(kind.reach, 0) + count
    return list(out.items())


def kv_group_bytes(model: ModelConfig, dtype: str, T: int, phase: str, p: int = 1,
                   mla: str = MLA_DEFAULT) -> list[tuple[Reach, int, int, int]]:
    """(reach, layers, tokens, bytes) of each KV group for one sequence on one rank after the
    step: the tokens each of its layers holds (at most its window) × a token's bytes over them
    (Gemma 2 at T=8192: 21 layers × 4096 tokens and 21 × 8192, not 42 × 8192), and the
    compressed entries of its layers (DeepSeek-V4: beside the window, not in its tokens)."""
    out = []
    for window, layers in kv_groups(layer_plan(model)):
        tokens = cached_tokens(window, T, phase)
        out.append((window, layers, tokens,
                    tokens * kv_bytes_per_token(model, dtype, p, layers, mla, window)
                    + nbytes(entry_elements(model, T, phase, window), dtype)))
    return out


def kv_bytes_per_sequence(model: ModelConfig, dtype: str, T: int, phase: str, p: int = 1,
                          mla: str = MLA_DEFAULT) -> int:
    """What one sequence's cache holds on one rank after the step: the groups' sum (compressed
    entries included)."""
    return sum(g[3] for g in kv_group_bytes(model, dtype, T, phase, p, mla))


def entries(ratio: int, T: Any, phase: str) -> Any:
    """Compressed entries an hca layer holds after the step: ⌊T/m′⌋ (⌊(T+1)/m′⌋ after a
    decode), one per closed window of m′ tokens (ints, or NumPy arrays)."""
    return (T + (1 if phase == "decode" else 0)) // ratio


def entry_elements(model: ModelConfig, T: Any, phase: str, reach: Any = "any") -> Any:
    """One sequence's compressed entries over every compressed layer (DeepSeek-V4): ⌊T/m′⌋·Dh
    each in an hca layer, ⌊T/m⌋·(Dh + D_I) in a csa layer (its indexer's keys beside them);
    kept beside the paged window, contiguous. `reach`: only the layers of that window's group."""
    plan = layer_plan(model)
    out: Any = 0
    for k, c in zip(plan.kinds, plan.counts, strict=True):
        if k.compress and (reach == "any" or k.reach == reach):
            width = model.dh + (model.csa_index_head_dim or 0) * (k.attention == "csa")
            out = out + entries(k.compress, T, phase) * c * width
    return out


def entry_bytes(model: ModelConfig, dtype: str, T: Any, phase: str) -> Any:
    """entry_elements in the KV dtype."""
    return nbytes(entry_elements(model, T, phase), dtype)


def paged_blocks(batch: Any, tokens: Any, block_size: int) -> Any:
    """Blocks of one group: ⌈tokens/block_size⌉ per sequence (ints, or NumPy arrays)."""
    return batch * ceil_div(tokens, block_size)


def paged_kv(model: ModelConfig, batch: int, T: int, phase: str, block_size: int, dtype: str,
             p: int = 1, mla: str = MLA_DEFAULT) -> tuple[int, int]:
    """(blocks, bytes) of a paged cache: each sequence takes ⌈tokens/block_size⌉ blocks in each
    group, a block spanning the group's layers; the last block's empty slots count."""
    blocks = total = 0
    for window, layers in kv_groups(layer_plan(model)):
        tokens = cached_tokens(window, T, phase)
        b = paged_blocks(batch, tokens, block_size)
        blocks += b
        # dots3's fp32 indexer keys are held apart from the blocks, contiguous
        lat, idx = split_bytes_per_token(model, dtype, p, layers, mla, window)
        total += b * block_size * lat + batch * tokens * idx
    return blocks, total + batch * entry_bytes(model, dtype, T, phase)


# ── Mixture-of-Experts and expert parallelism ───────────────────────────────────────────────────


def active_params(params: Any, expert_params: Any, model: ModelConfig) -> Any:
    """Parameters one token uses: all of them but the E − k routed experts it skips in each MoE
    layer (`expert_params`: all routed experts' parameters)."""
    if not model.moe:
        return params
    E, k = model.n_experts, model.experts_per_token
    return params - expert_params * (E - k) // E  # type: ignore[operator]


def ep_rank_expert_params(tp_slice: Any, expert_params: Any, ep: int) -> Any:
    """Routed-expert parameters one GPU holds: with ep > 1 whole experts, E/ep of them (vLLM's
    split); otherwise its Dff_e/tp slice of every expert (`tp_slice`)."""
    return expert_params // ep if ep > 1 else tp_slice


def alltoall_bytes(batch: int, tq: int, model: ModelConfig, dtype: str) -> int:
    """One MoE layer's all-to-all under expert parallelism when every token goes off-rank:
    dispatch and combine each move B·T·k·D activations."""
    return 2 * nbytes(batch * tq * (model.experts_per_token or 0) * model.d_model, dtype)


def distinct_experts(tokens: Any, model: ModelConfig) -> Any:
    """Expected distinct experts that `tokens` tokens (k routings each) reach in one layer under
    uniform routing: E·(1 − (1 − k/E)^tokens). Why decode of a MoE is cheap at batch 1 and not at
    batch 64: a step reads only the experts it touches."""
    E, k = model.n_experts or 0, model.experts_per_token or 0
    return E * (1 - (1 - k / E) ** tokens) if E else 0.0


# ── pipeline parallelism ────────────────────────────────────────────────────────────────────────


def residual_width(model: ModelConfig) -> int:
    """What one token's residual holds between blocks: D, or n_hc·D with hyper-connections
    (n_hc streams): what crosses a pipeline boundary per token."""
    return (model.hc_streams or 1) * model.d_model


def pp_layers(n_layers: int, s: int) -> list[int]:
    """Layers per pipeline stage, as vLLM splits them: the remainder goes to the stages just
    before the last one (the last already holds the final norm and LM head)."""
    parts = [n_layers // s] * s
    for i in range(2, n_layers % s + 2):
        parts[-i] += 1
    return parts


def stage_kind_counts(plan: LayerPlan, s: int) -> list[list[int]]:
    """Layers of each kind held by each of s pipeline stages."""
    out, start = [], 0
    for n in pp_layers(len(plan.kind_of), s):
        counts = [0] * len(plan.kinds)
        for k in plan.kind_of[start : start + n]:
            counts[k] += 1
        out.append(counts)
        start += n
    return out


def stage_sums(plan: LayerPlan, s: int, per_layer: list[int]) -> list[int]:
    """A per-layer quantity of each kind (parameters, KV bytes) summed over each stage."""
    return [sum(c * v for c, v in zip(counts, per_layer, strict=True))
            for counts in stage_kind_counts(plan, s)]


def stage_group_layers(plan: LayerPlan, s: int) -> list[list[int]]:
    """Layers of each KV group (as `kv_groups` orders them) held by each pipeline stage."""
    windows = [w for w, _ in kv_groups(plan)]
    out = []
    for counts in stage_kind_counts(plan, s):
        per = [0] * len(windows)
        for kind, c in zip(plan.kinds, counts, strict=True):
            if kind.caches:
                per[windows.index(kind.reach)] += c
        out.append(per)
    return out


def stage_params(plan: LayerPlan, s: int, per_layer: list[int], embedding: int, head: int,
                 table: int, tied: bool) -> list[int]:
    """Parameters of each pipeline stage, placed as vLLM places them: the layers it holds, the
    embedding group on the first, the head group on the last, and with tied embeddings and s > 1
    the last stage's own copy of the `table`."""
    out = stage_sums(plan, s, per_layer)
    out[0] += embedding
    out[-1] += head + (table if tied and s > 1 else 0)
    return out
