"""Gemma 4's text decoders (gemma4_text, gemma4_unified_text): verify passes at reduced width
(prefill and decode, with the per-layer embeddings, the global layers' own head width, K=V and
their own KV heads); the per-layer embedding table, its projection and the gate/projection of
each layer count as transformers counts them; the readers' bad configs exit 2 naming the key."""

from __future__ import annotations

import json

import pytest
from conftest import need_torch
from test_sources import params as hand_count

from shapecalc.check.against import verify_against
from shapecalc.check.verify import verify
from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.model.config import ShapecalcError, Workload

G4 = {"model_type": "gemma4_text", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 6,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "global_head_dim": 16,
      "intermediate_size": 24, "hidden_size_per_layer_input": 4,
      "vocab_size_per_layer_input": 64, "sliding_window": 5,
      "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
                      "sliding_attention", "full_attention", "sliding_attention"]}
K_EQ_V = {"attention_k_eq_v": True, "num_global_key_value_heads": 1}
SHARED = {"num_kv_shared_layers": 3, "use_double_wide_mlp": True}


def _load(tmp_path, cfg: dict):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return load_hf_config(path)


@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize("extra", [{}, K_EQ_V, SHARED, {**K_EQ_V, **SHARED},
                                   {"model_type": "gemma4_unified_text",
                                    "hidden_size_per_layer_input": None,
                                    "vocab_size_per_layer_input": None}])
def test_verify_passes_at_reduced_width(tmp_path, phase, extra):
    cfg = {k: v for k, v in {**G4, **extra}.items() if v is not None}
    r = verify(_load(tmp_path, cfg), Workload(batch=2, seq=9, phase=phase, dtype="fp32"),
               precision="float64")
    assert not [c for c in r["checks"] if not c["ok"]]


@pytest.mark.parametrize(("phase", "tp", "pp"), [("prefill", 2, 2), ("decode", 4, 1)])
def test_verify_passes_split_over_ranks(tmp_path, phase, tp, pp):
    """tp 4 holds a copy of the global layers' one KV head on each rank (H_kv_g < p); the
    per-layer embeddings are replicated; pipeline stages split the KV-sharing layers off."""
    m = _load(tmp_path, {**G4, **K_EQ_V, **SHARED})
    r = verify(m, Workload(batch=2, seq=9, phase=phase, dtype="fp32", tp=tp, pp=pp),
               precision="float64")
    assert not [c for c in r["checks"] if not c["ok"]]


def test_the_last_layer_is_forced_full_and_the_global_layers_have_their_own_heads(tmp_path):
    m = _load(tmp_path, {**G4, **K_EQ_V})
    assert m.layer_types[-1] == "full" and m.global_head_dim == 16 and m.global_kv_heads == 1
    doc = build_trace(m, Workload(batch=1, seq=4))
    ks = [s for s in doc["stages"] if s["role"] == "attn.k"]
    assert sorted(s["shape"][-1] for s in ks) == [16, 16]  # H_kv_g·Dh_g = 1·16, H_kv·Dh = 2·8
    assert len([s for s in doc["stages"] if s["role"] == "attn.v"]) == 1  # the sliding kind's
    # the per-layer table [N_vocab_p, N·D_p] and projection [D, N·D_p], once
    ple = {s["role"]: s["params"] for s in doc["stages"] if s["role"].startswith("ple.")}
    assert ple["ple.embed"] == 64 * 6 * 4 and ple["ple.proj"] == 32 * 6 * 4


@pytest.mark.parametrize("extra", [{}, K_EQ_V, SHARED, {**K_EQ_V, **SHARED, "attention_bias": True},
                                   {"model_type": "gemma4_unified_text",
                                    "hidden_size_per_layer_input": None}])
def test_params_equal_the_hand_count(tmp_path, extra):
    """The trace's parameters = tests/test_sources.py's count written from the modeling code."""
    m = _load(tmp_path, {k: v for k, v in {**G4, **extra}.items() if v is not None})
    assert build_trace(m, Workload(batch=1, seq=4))["totals"]["params"] == hand_count(m)


@pytest.mark.parametrize(("change", "key"), [
    ({"num_kv_shared_layers": 6}, "num_kv_shared_layers"),
    ({"num_kv_shared_layers": 5}, "num_kv_shared_layers"),  # no full layer before the last
    ({"enable_moe_block": True}, "enable_moe_block"),
    ({"use_bidirectional_attention": "all"}, "use_bidirectional_attention"),
    ({"global_head_dim": 0}, "global_head_dim"),
    ({"hidden_size_per_layer_input": 4, "vocab_size_per_layer_input": "x"},
     "vocab_size_per_layer_input"),
    ({"per_layer_config": {"1": {"head_dim": 16}, "4": {"head_dim": 32}}}, "per_layer_config"),
    ({"per_layer_config": {"0": {"head_dim": 16}}}, "per_layer_config"),
])
def test_bad_configs_are_refused_naming_the_key(tmp_path, change, key):
    with pytest.raises(ShapecalcError) as err:
        _load(tmp_path, {**G4, **change})
    assert err.value.field == key


@pytest.mark.slow
@pytest.mark.parametrize("extra", [{**K_EQ_V, "attention_bias": True},
                                   {**SHARED, "final_logit_softcapping": 30.0}])
@pytest.mark.parametrize("seq", [16, 300])
def test_every_module_agrees_with_transformers(tmp_path, extra, seq):
    """The mechanisms the gemma-4 preset leaves off (K=V with its own KV heads and biases; KV
    sharing with the double-wide MLP), measured live on the meta device: each total and each
    module's own count equal."""
    need_torch()
    cfg = {**G4, **extra}
    doc = verify_against(_load(tmp_path, cfg), cfg, Workload(batch=1, seq=seq), "test")
    assert doc["ok"], [c for c in doc["checks"] if not c["ok"]]
    assert all(c["first_difference"] is None for c in doc["checks"])


def test_a_multimodal_gemma4_config_reads_its_text_model(tmp_path):
    """Gemma4ForConditionalGeneration's config.json: its text_config is the decoder read (the
    vision and audio towers are not counted, and the name says so)."""
    text = _load(tmp_path, G4)
    m = _load(tmp_path, {"model_type": "gemma4", "tie_word_embeddings": True,
                         "text_config": G4, "vision_config": {"model_type": "gemma4_vision"}})
    assert "text_config" in m.name
    assert m.model_dump(exclude={"name"}) == text.model_dump(exclude={"name"})


@pytest.mark.slow
@pytest.mark.parametrize("extra", [{}, {**K_EQ_V, **SHARED}])
def test_the_closed_form_equals_the_trace(tmp_path, extra):
    """Per-kind head widths, KV heads and KV sharing in the totals the planners sweep: the closed
    form equals the stage list at random points (windows crossed, tp with H_kv_g < p)."""
    import random

    from test_closed import DTYPES, assert_equal_at, valid_tps

    from shapecalc.costs.closed import ClosedForm

    m = _load(tmp_path, {**G4, **extra})
    cf, rng, tps = ClosedForm(m), random.Random(7), valid_tps(m)
    points = [dict(batch=rng.randint(1, 9), seq=rng.randint(1, 40), phase=phase,
                   tp=rng.choice(tps), pp=rng.randint(1, 3), dtype=rng.choice(DTYPES),
                   kv_dtype=rng.choice(DTYPES), act_dtype=rng.choice(DTYPES))
              for phase in ("prefill", "decode") for _ in range(4)]
    assert_equal_at(m, cf, points)
