#!/usr/bin/env python3
"""Measure dots3's text model (model_type dots3_note) with PyTorch and write
``tests/data/dots3_reference.json``. Run by hand; the tests only read the JSON
(tests/test_dots3.py re-measures the reduced case live when torch is installed):

    pip install torch==2.13.0+cpu transformers==5.24.0
    python tests/torch_reference/measure_dots3.py [--out PATH] [--only NAME]

The counting is measure_selected.py's (shapecalc/reference/measure.py's ``count``,
``forward_steps``, ``n_params``). Per case:

  * ``full``: the model at full size on the meta device, bf16, eager attention, the routed
    experts on transformers' shape-static ``batched_mm`` path: ``params_meta``, FlopCounterMode
    of the prefill (logits on every position) and of one decode step on its cache, at B=1, T=16
    and T=4096 (past index_topk = 2048 and the sliding window of 512), and every tensor of the
    cache after each prefill (the latents, k_rope, the indexer's fp32 keys).
  * ``reduced``: the same on real tensors at a reduced width (float32, CPU, random weights,
    real routing on the eager experts, whose per-expert matmuls FlopCounterMode counts, and a
    real top-k), the sliding layers of their own widths, at T=16 and at T past its index_topk
    and window; and the cache after the prefill in bf16.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from transformers import AutoModelForCausalLM
from transformers.models.dots3_note.configuration_dots3_note import Dots3NoteTextConfig

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from tests.torch_reference.measure_selected import measure, run

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")

# 6 layers: indexed 0, 1, 5 and sliding 2-4 (the class's pattern), the sliding layers of their
# own heads and widths (the released checkpoint's swa_* keys), one dense layer first
DOTS3_REDUCED = {
    "model_type": "dots3_note", "vocab_size": 512, "hidden_size": 128,
    "intermediate_size": 192, "moe_intermediate_size": 48,
    "shared_experts_intermediate_size": 40, "num_hidden_layers": 6, "num_attention_heads": 4,
    "num_key_value_heads": 4, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2,
    "topk_group": 1, "kv_lora_rank": 32, "q_lora_rank": 48, "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8, "v_head_dim": 16, "head_dim": 24, "index_topk": 64,
    "index_n_heads": 4, "index_head_dim": 32, "sliding_window": 24, "pad_token_id": 0,
    "bos_token_id": 1, "eos_token_id": 2, "swa_num_attention_heads": 2,
    "swa_num_key_value_heads": 2, "swa_q_lora_rank": 40, "swa_kv_lora_rank": 24,
    "swa_head_dim": 28, "swa_qk_nope_head_dim": 20, "swa_v_head_dim": 12,
}

CASES: list[dict[str, Any]] = [
    {"name": "dots3", "config": "hf/dots3.json", "seqs": [16, 4096],
     "reduced": DOTS3_REDUCED, "reduced_seqs": [16, 100]},
    {"name": "dots3_note class defaults", "hf_config": {"model_type": "dots3_note"},
     "seqs": [16, 4096]},
]


def _build_text(raw: dict[str, Any], dtype: Any) -> Any:
    """A reduced dots3 text model on real tensors: Dots3NoteTextConfig itself (the multimodal
    Dots3NoteConfig holds its towers' adapters to a 5120-wide text model)."""
    cfg = Dots3NoteTextConfig(**{k: v for k, v in raw.items() if k != "model_type"})
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=dtype,
                                             experts_implementation="eager")
    return model.eval(), model.config


HOW = ("tests/torch_reference/measure_dots3.py: params on the meta device at full size; "
               "FLOPs = FlopCounterMode (shapecalc/reference/measure.py's count) at full size on "
               "the meta device (bf16, eager attention, experts_implementation=batched_mm) and "
               "at a reduced width on real tensors (float32, CPU, real routing on the eager "
               "experts and a real top-k), B=1, "
               "logits on every position, prefill and one decode step on the prefill's cache; "
               "cache bytes = every tensor of transformers' cache after the prefill (the "
               "latents, k_rope and the indexer's keys, which it keeps in fp32; a sliding "
               "layer keeps W-1 tokens).")


def main() -> None:
    run(CASES, os.path.join(DATA, "dots3_reference.json"), HOW,
        lambda case: measure(case, _build_text))


if __name__ == "__main__":
    main()
