"""Two mechanisms of the forward (AFMoE's): an attention output gate, o ⊙ sigmoid(x·W_g) before
WO with W_g [D, H·Dh] split by column, and a routing bias, a parameter of E added to the scores
only to choose the experts (no gradient reaches it). The NumPy executor must agree with the
symbolic counts (prefill, decode, tensor parallel), the backward with finite differences, and
the counts with the hand-worked ones."""

from __future__ import annotations

import pytest

from shapecalc.check.verify import verify
from shapecalc.costs.trace import build_trace
from shapecalc.model.config import ModelConfig, Workload
from shapecalc.train.verify import train_verify

MODEL = ModelConfig(
    vocab_size=1000, d_model=64, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=176,
    ffn="swiglu", norm="rmsnorm", norm_position="sandwich", positions="rope", qk_norm=True,
    sliding_window=100, layer_types=("sliding", "sliding", "sliding", "full"), nope_layers=(3,),
    n_experts=8, experts_per_token=2, d_ff_expert=32, n_shared_experts=1, d_ff_shared=64,
    router_scoring="sigmoid", norm_topk_prob=True, routed_scaling_factor=2.5,
    ffn_types=("dense", "moe", "moe", "moe"), attn_output_gate=True, routing_bias=True)


@pytest.mark.parametrize("kw", [dict(seq=130), dict(seq=130, tp=2), dict(seq=130, phase="decode")])
def test_numeric_equals_symbolic(kw):
    assert verify(MODEL, Workload(batch=1, **kw))["ok"]


def test_backward_leaves_the_routing_bias_without_a_gradient():
    assert train_verify(MODEL, Workload(batch=2, seq=16))["ok"]


def test_counts_by_hand():
    off = MODEL.model_copy(update=dict(attn_output_gate=False, routing_bias=False))
    t, t0 = (build_trace(m, Workload(batch=1, seq=16))["totals"] for m in (MODEL, off))
    # per layer the gate [64, 4·16]; per MoE layer the routing bias of 8
    assert t["params"] - t0["params"] == 4 * 64 * 64 + 3 * 8
    # the gate's matmul: 2·T·D·H·Dh per layer
    assert t["flops"] - t0["flops"] == 4 * 2 * 16 * 64 * 64
