"""The mechanisms of Cohere 2, EXAONE 4, MiniMax-M2, HY-V3, EXAONE-MoE and Granite SWA / MoE SWA
where their reference data does not reach: the values each refuses in one line naming the key,
and the readings that follow what the modeling code does with a key (their counts against
transformers are in test_families_reference.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.model.config import ShapecalcError, Workload

HF = Path(__file__).parent / "data" / "hf"


def _load(tmp_path, file: str, change: dict):
    cfg = {**json.loads((HF / f"{file}.json").read_text()), **change}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return load_hf_config(p)


def _params(m) -> int:
    return build_trace(m, Workload(batch=1, seq=1))["totals"]["params"]


@pytest.mark.parametrize("file, change, field", [
    # Exaone4Config computes (i+1) % sliding_window_pattern: a string pattern cannot build
    ("exaone-4.0-32b", {"sliding_window_pattern": "LLLG"}, "sliding_window_pattern"),
    ("exaone-4.0-32b", {"sliding_window": None}, "layer_types"),
    ("command-r7b", {"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
    ("command-r7b", {"layer_types": ["full_attention"] * 4}, "layer_types"),
    ("minimax-m2", {"scoring_func": "softmax"}, "scoring_func"),
    ("minimax-m2", {"use_qk_norm": False}, "use_qk_norm"),
    ("minimax-m2", {"rotary_dim": 256}, "partial_rotary_factor"),
    ("hy3", {"first_k_dense_replace": 3}, "first_k_dense_replace"),
    ("hy3", {"mlp_layer_types": ["dense", "sparse"]}, "mlp_layer_types"),
    ("hy3", {"mlp_layer_types": ["dense"] + ["moe"] * 79}, "mlp_layer_types"),
    ("hy3", {"num_shared_experts": None}, "num_shared_experts"),
    ("k-exaone", {"scoring_func": "softmax"}, "scoring_func"),
    ("k-exaone", {"first_k_dense_replace": -1}, "first_k_dense_replace"),
    ("granite-swa", {"layer_rope_theta": [10000.0] * 23}, "layer_rope_theta"),
    ("granite-swa", {"layer_rope_theta": [1e4, 1e4, 2e4] + [1e4] * 21}, "layer_rope_theta"),
    ("granitemoe-swa", {"shared_intermediate_size": -1}, "shared_intermediate_size"),
])
def test_refuses_in_one_line_naming_the_key(tmp_path, file, change, field):
    with pytest.raises(ShapecalcError) as e:
        _load(tmp_path, file, change)
    assert e.value.field == field
    assert "\n" not in str(e.value)


def test_cohere2_ignores_use_qk_norm_as_its_attention_does(tmp_path):
    # Cohere2Attention builds no q/k norms: the count is the one without them
    plain, asked = (_load(tmp_path, "command-r7b", {"use_qk_norm": v}) for v in (False, True))
    assert _params(asked) == _params(plain) == 8028033024


def test_the_full_layers_are_nope_only_with_a_window_on_exaone4(tmp_path):
    # EXAONE 4 turns q and k on every layer when sliding_window is null; Cohere 2 never on its
    # full layers
    m = _load(tmp_path, "exaone-4.0-32b", {"sliding_window": None,
                                           "layer_types": ["full_attention"] * 64})
    assert m.nope_layers is None and m.layer_types is None
    c = _load(tmp_path, "command-r7b", {"layer_types": ["full_attention"] * 32})
    assert c.nope_layers == tuple(range(32))


def test_hy_v3_mlp_layer_types_and_its_shared_fall_back(tmp_path):
    # mlp_layer_types wins; a longer list builds (layer i reads entry i); 0 shared experts make
    # HYV3MLP fall back to intermediate_size
    kinds = ["dense", "sparse", "dense"] + ["sparse"] * 78
    m = _load(tmp_path, "hy3", {"mlp_layer_types": kinds, "first_k_dense_replace": 1})
    assert m.ffn_types == ("dense", "moe", "dense", *("moe",) * 77)
    zero = _load(tmp_path, "hy3", {"num_shared_experts": 0})
    assert (zero.n_shared_experts, zero.dff_shared) == (1, 13312)
    two = _load(tmp_path, "hy3", {"num_shared_experts": 2})
    assert (two.n_shared_experts, two.dff_shared) == (1, 3072)


def test_exaone_moe_mlp_layers_from_first_k_and_no_shared_at_zero(tmp_path):
    m = _load(tmp_path, "k-exaone", {"first_k_dense_replace": 3, "num_shared_experts": 0})
    assert m.ffn_types[:4] == ("dense", "dense", "dense", "moe")
    assert m.n_shared_experts == 0


def test_granite_swa_layer_rope_theta(tmp_path):
    # θ 0: NoPE; one θ per kind of layer: rope_base (full) and rope_base_local (sliding)
    thetas = [5e5, 1e4, 1e4, 0] * 6
    m = _load(tmp_path, "granite-swa", {"layer_rope_theta": thetas})
    assert m.nope_layers == tuple(range(3, 24, 4))
    assert (m.rope_base, m.rope_base_local) == (5e5, 1e4)


def test_minimax_m2_rotary_dim_and_a_given_factor(tmp_path):
    # MiniMaxM2Config: partial_rotary_factor = rotary_dim / head_dim unless a factor is given
    assert _load(tmp_path, "minimax-m2", {}).rotary_dim == 64
    assert _load(tmp_path, "minimax-m2", {"partial_rotary_factor": 0.25}).rotary_dim == 32
    assert _load(tmp_path, "minimax-m2", {"rotary_dim": None}).rotary_dim is None


_AFMOE = {"model_type": "afmoe", "hidden_size": 64, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 176, "vocab_size": 1000,
          "num_hidden_layers": 8, "moe_intermediate_size": 32, "num_experts": 8,
          "num_experts_per_tok": 2, "num_shared_experts": 2, "sliding_window": 100,
          "mup_enabled": True, "route_scale": 2.5, "attention_bias": True}


def test_afmoe_reads_its_layout(tmp_path):
    # every 4th layer full and NoPE, the first dense, the gate and routing bias, √D embeddings,
    # one shared MLP of 2 × 32, route_scale as the routed scale
    p = tmp_path / "config.json"
    p.write_text(json.dumps(_AFMOE))
    m = load_hf_config(p)
    assert m.layer_types == ("sliding", "sliding", "sliding", "full") * 2
    assert m.nope_layers == (3, 7) and m.ffn_types == ("dense", *("moe",) * 7)
    assert m.attn_output_gate and m.routing_bias and m.embedding_scale
    assert (m.n_shared_experts, m.dff_shared, m.routed_scaling_factor) == (1, 64, 2.5)
    assert m.norm_position == "sandwich"
    with pytest.raises(ShapecalcError) as e:
        p.write_text(json.dumps({**_AFMOE, "global_attn_every_n_layers": 0}))
        load_hf_config(p)
    assert e.value.field == "global_attn_every_n_layers"
