"""The trace's summary of selected attention (DeepSeek Sparse Attention): the convention its
FLOPs follow, the total under each of the two, K_sel, and the indexer's key cache (in the KV
dtype, as transformers keeps it, and as DeepSeek's reference code keeps it: fp8 with one fp32
scale per 128 values)."""

from __future__ import annotations

from typing import Any

from ..interpret.symbolic import stages as symbolic_stages
from ..model.config import ModelConfig, Workload, ceil_div, nbytes

REFERENCE_BLOCK = 128  # values per fp32 scale in the reference indexer cache (fp8 e4m3)


def selected_attention(model: ModelConfig, wl: Workload, flops: int, tokens: int
                       ) -> dict[str, Any] | None:
    """None without an indexer. `flops` is the step's total in the workload's convention; the
    other convention's comes from its own symbolic run (sparse reads the latents absorbed)."""
    if not (model.dsa or model.block_sparse):
        return None
    other = "sparse" if wl.selection == "eager" else "eager"
    alt = wl.model_copy(update={"selection": other, "mla_form": "absorbed"
                                if other == "sparse" and model.mla else wl.mla_form})
    alt_flops = sum(s.flops * s.repeat for s in symbolic_stages(model, alt, 1)
                    if s.group != "mtp")
    if model.block_sparse:  # MiniMax-M3: the indexer's key kept in the KV dtype (vLLM too)
        size, top = model.index_block_size or 0, model.index_topk_blocks or 0
        dI = model.block_index_head_dim or 0
        layers = len(model.block_indexer_layers)
        return {"convention": wl.selection, "flops": {wl.selection: flops, other: alt_flops},
                "top_k": top * size, "indexer_heads": model.block_index_heads,
                "indexer_head_dim": dI,
                "indexer_cache_bytes": nbytes(wl.batch * tokens * layers * dI, wl.kv),
                "indexer_cache_bytes_reference": None, "top_blocks": top, "block_size": size}
    layers = model.indexer_layers
    dI = model.index_head_dim or 0
    per_token = dI + 4 * ceil_div(dI, REFERENCE_BLOCK)  # fp8 codes and their fp32 scales
    return {
        "convention": wl.selection,
        "flops": {wl.selection: flops, other: alt_flops},
        "top_k": model.index_topk,
        "indexer_heads": model.index_heads,
        "indexer_head_dim": dI,
        "indexer_cache_bytes": nbytes(wl.batch * tokens * layers * dI,
                                      model.index_cache_dtype or wl.kv),  # dots3's: fp32
        "indexer_cache_bytes_reference": wl.batch * tokens * layers * per_token,
    }
