"""The last families of issue 21 (apertus, …): what their entries refuse, and the mechanisms
they brought, checked by hand and by the executor (families_reference.json holds them against
transformers)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from shapecalc.check.verify import verify
from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.interpret.elementwise import xielu
from shapecalc.model.config import ModelConfig, ShapecalcError, Workload
from shapecalc.train.memory import check_trainable

HF = Path(__file__).parent / "data" / "hf"


def _load(tmp_path, file: str, change: dict):
    cfg = {**json.loads((HF / file).read_text()), **change}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return load_hf_config(p)


def _small(tmp_path, file: str, **change):
    widths = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  intermediate_size=96, vocab_size=128, num_hidden_layers=2)
    return _load(tmp_path, file, {**widths, **change})


@pytest.mark.parametrize("file,change,field", [
    ("apertus-8b.json", {"qk_norm": False}, "qk_norm"),
    ("apertus-8b.json", {"mlp_bias": True}, "mlp_bias"),
    ("apertus-8b.json", {"hidden_act": "tanh"}, "hidden_act"),
])
def test_refuses_in_one_line_naming_the_key(tmp_path, file, change, field):
    with pytest.raises(ShapecalcError) as err:
        _load(tmp_path, file, change)
    assert err.value.field == field


def test_xielu_by_hand():
    """α raw 0: α_p = ln 2, α_n = 0.5 + ln 2; x = 2: ln2·4 + 1; x = −2: (e⁻² − 1 + 2)·α_n − 1."""
    x = np.array([2.0, -2.0, 0.0])
    y, passes = xielu(x.copy(), np.zeros(2), np.float64)
    ln2 = math.log(2)
    assert passes == 12
    assert y[0] == pytest.approx(4 * ln2 + 1)
    assert y[1] == pytest.approx((math.expm1(-2) + 2) * (0.5 + ln2) - 1)
    assert y[2] == pytest.approx((math.expm1(-1e-6) - 0) * (0.5 + ln2))


def test_apertus_counts_two_xielu_scalars_a_layer(tmp_path):
    m = _small(tmp_path, "apertus-8b.json")
    assert m.ffn == "xielu" and m.qk_norm and not m.gated
    plain = m.model_copy(update={"ffn": "relu"})
    wl = Workload(batch=1, seq=4)
    assert build_trace(m, wl)["totals"]["params"] == \
        build_trace(plain, wl)["totals"]["params"] + 2 * m.n_layers


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_verify_passes_on_a_small_apertus(tmp_path, phase):
    m = _small(tmp_path, "apertus-8b.json")
    r = verify(m, Workload(batch=2, seq=9, phase=phase, dtype="fp32"), precision="float64")
    assert r["ok"], [c for c in r["checks"] if not c["ok"]]


def test_xielu_is_refused_where_it_has_no_rule():
    base = dict(vocab_size=64, d_model=32, n_layers=1, n_heads=2, d_ff=48, ffn="xielu",
                norm="rmsnorm", positions="rope")
    with pytest.raises(ShapecalcError) as err:
        check_trainable(ModelConfig(**base))
    assert err.value.field == "ffn"
    with pytest.raises(ShapecalcError) as err:
        ModelConfig(**base, n_experts=4, experts_per_token=2, d_ff_expert=16)
    assert err.value.field == "ffn"


def test_ministral3_reads_its_query_temperature(tmp_path):
    m = _load(tmp_path, "ministral-3-8b.json", {})
    assert (m.q_temperature_beta, m.q_temperature_floor) == (0.1, 16384)
    rope = json.loads((HF / "ministral-3-8b.json").read_text())["rope_parameters"]
    other = _load(tmp_path, "ministral-3-8b.json", {"rope_parameters": {
        **rope, "llama_4_scaling_beta": 0.0, "original_max_position_embeddings": 4096}})
    assert (other.q_temperature_beta, other.q_temperature_floor) == (0.0, 4096)
    legacy = {k: v for k, v in json.loads((HF / "ministral-3-8b.json").read_text()).items()
              if k != "rope_parameters"}
    p = tmp_path / "legacy.json"  # the legacy rope_scaling, which transformers turns into it
    p.write_text(json.dumps({**legacy, "rope_scaling": {**rope, "llama_4_scaling_beta": 0.2}}))
    assert load_hf_config(p).q_temperature_beta == 0.2
    for key, value in (("llama_4_scaling_beta", None), ("original_max_position_embeddings", 0)):
        with pytest.raises(ShapecalcError) as err:
            _load(tmp_path, "ministral-3-8b.json", {"rope_parameters": {**rope, key: value}})
        assert err.value.field == f"rope_parameters.{key}"


def test_the_query_temperature_by_hand():
    """Ministral 3's get_llama_4_attn_scale: 1 + β·ln(1 + ⌊pos/S⌋), pos from 0; Llama 4's adds
    1 to pos first."""
    from shapecalc.interpret.llama4 import temperature_factors
    f = temperature_factors(np.arange(10), 0.1, 4, 0)
    want = [1 + 0.1 * math.log(1 + p // 4) for p in range(10)]
    assert f.tolist() == pytest.approx(want)
    assert temperature_factors(np.array([8190, 8191]))[1] == 1 + 0.1 * math.log(2)  # Llama 4


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_verify_passes_past_the_temperature_step(tmp_path, phase):
    """S = 4 at T = 9: the factor grows over the sequence, and each interpreter counts it."""
    m = _small(tmp_path, "ministral-3-8b.json").model_copy(update={"q_temperature_floor": 4})
    wl = Workload(batch=2, seq=9, phase=phase, dtype="fp32")
    r = verify(m, wl, precision="float64")
    assert r["ok"], [c for c in r["checks"] if not c["ok"]]
    stages = [s for s in build_trace(m, wl)["stages"] if s["role"] == "attn.temperature"]
    Tq = 9 if phase == "prefill" else 1
    assert stages and stages[0]["elementwise_flops"] == 2 * 4 * Tq * 16 + 5 * Tq


def test_nanochat_norms_have_no_weights(tmp_path):
    """Every norm x/RMS(x): the embeddings', each block's two, the final one and the q/k norms
    after RoPE, none with a parameter; the logits softcapped."""
    m = _small(tmp_path, "nanochat-d32.json")
    assert (m.norm_weights, m.embedding_norm, m.qk_l2_norm, m.ffn, m.final_softcap) == \
        (False, True, True, "relu2", 15.0)
    stages = build_trace(m, Workload(batch=1, seq=4))["stages"]
    norms = [s for s in stages if s["op"] in ("rmsnorm", "layernorm", "l2norm")]
    assert {s["op"] for s in norms} == {"l2norm"} and not any(s["params"] for s in norms)
    assert [s["role"] for s in stages].count("embed.norm") == 1


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_verify_passes_on_a_small_nanochat(tmp_path, phase):
    m = _small(tmp_path, "nanochat-d32.json")
    r = verify(m, Workload(batch=2, seq=9, phase=phase, dtype="fp32"), precision="float64")
    assert r["ok"], [c for c in r["checks"] if not c["ok"]]


def test_norm_weights_false_needs_a_plain_rmsnorm():
    base = dict(vocab_size=64, d_model=32, n_layers=1, n_heads=2, d_ff=48, positions="rope",
                norm_weights=False)
    assert ModelConfig(**base, norm="rmsnorm").norm_kind(None) == "l2norm"
    for extra in ({"norm": "layernorm"}, {"norm": "rmsnorm", "norm_plus_one": True}):
        with pytest.raises(ShapecalcError) as err:
            ModelConfig(**base, **extra)
        assert err.value.field == "norm_weights"


def _cohere2_moe_variant() -> dict:
    """Command A+'s config with what its class defaults leave off: one dense prefix layer of
    its own width (RoPE forced there), a shared MLP summed in, sigmoid routing renormalised,
    RMSNorm."""
    cfg = json.loads((HF / "command-a-plus.json").read_text())
    for k in ("layer_types", "mlp_layer_types"):
        cfg.pop(k)
    return {**cfg, "first_k_dense_replace": 1, "prefix_dense_intermediate_size": 30000,
            "num_shared_experts": 1, "shared_expert_combination_strategy": "sum",
            "expert_selection_fn": "sigmoid", "norm_topk_prob": True, "rms_norm_eps": 1e-5}


def test_cohere2_moe_reads_its_prefix_shared_mlp_and_router(tmp_path):
    m = _load(tmp_path, "command-a-plus.json", {})
    assert m.parallel_block and m.n_experts == 8 and m.ffn_types is None
    assert m.nope_layers == tuple(range(3, 40, 4)) and m.layer_types[3] == "full"
    p = tmp_path / "variant.json"
    p.write_text(json.dumps(_cohere2_moe_variant()))
    v = load_hf_config(p)
    assert v.ffn_types == ("dense",) + ("moe",) * 39 and (v.d_ff, v.dff_expert) == (30000, 22528)
    assert (v.n_shared_experts, v.dff_shared, v.router_scoring, v.norm) == \
        (1, 22528, "sigmoid", "rmsnorm")
    # layer 0 is the dense prefix: full attention (pattern 1) with RoPE forced
    assert v.layer_types[:5] == ("full", "sliding", "sliding", "sliding", "full")
    assert 0 not in v.nope_layers and 4 in v.nope_layers
    for key, value in (("shared_expert_combination_strategy", "average"),
                       ("expert_selection_fn", "relu"), ("first_k_dense_replace", -1)):
        with pytest.raises(ShapecalcError) as err:
            _load(tmp_path, "command-a-plus.json", {**_cohere2_moe_variant(), key: value})
        assert err.value.field == key


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_verify_passes_on_a_small_cohere2_moe_variant(tmp_path, phase):
    cfg = {**_cohere2_moe_variant(), "prefix_dense_intermediate_size": 80,
           "num_hidden_layers": 5, "sliding_window": 4, "num_experts": 4, "hidden_size": 64,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
           "intermediate_size": 48, "vocab_size": 128}
    p = tmp_path / "small.json"
    p.write_text(json.dumps(cfg))
    m = load_hf_config(p)
    for tp in (1, 2):
        r = verify(m, Workload(batch=2, seq=9, phase=phase, dtype="fp32", tp=tp),
                   precision="float64")
        assert r["ok"], [c for c in r["checks"] if not c["ok"]]


@pytest.mark.slow
def test_live_cohere2_moe_variant_equals_transformers(tmp_path):
    """The variant's mechanisms against transformers (torch installed): params, FLOPs of
    prefill and decode at T=16 and 300 at reduced width, and the cache."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import sys
    sys.path.insert(0, str(Path(__file__).parent / "torch_reference"))
    import measure_families
    small = measure_families._small("cohere2_moe", _cohere2_moe_variant())
    for seq in (16, 300):
        live = measure_families.measure_case("variant", "cohere2_moe", small, seq)
        p = tmp_path / "config.json"
        p.write_text(json.dumps({"model_type": "cohere2_moe", **live["hf_config"]}))
        m = load_hf_config(p)
        wl = dict(batch=1, seq=seq, dtype="fp32")
        pre = build_trace(m, Workload(**wl))["totals"]
        assert pre["flops"] == live["prefill_flops"]
        assert build_trace(m, Workload(**wl, phase="decode"))["totals"]["flops"] == \
            live["decode_flops"]
        assert pre["params"] == live["params"]
        assert pre["kv_cache_bytes"] == live["kv_cache_bytes_window_W"]


def test_apertus1p5_text_is_apertus_with_a_whole_head(tmp_path):
    """Apertus 1.5's text model at its class defaults is Apertus' decoder over 266,752 tokens;
    the released checkpoints' LM head pruned to 131,072 rows is refused naming the key (a
    multimodal config reads its text_config, the vision and audio tokenizers not counted)."""
    file = "apertus1p5-text-class-defaults.json"
    m = _load(tmp_path, file, {})
    assert (m.vocab_size, m.ffn, m.qk_norm) == (266752, "xielu", True)
    assert _load(tmp_path, file, {"output_vocab_size": 266752}) == m
    with pytest.raises(ShapecalcError) as err:
        _load(tmp_path, file, {"output_vocab_size": 131072})
    assert err.value.field == "output_vocab_size"
    text = json.loads((HF / file).read_text())
    p = tmp_path / "multimodal.json"
    p.write_text(json.dumps({"model_type": "apertus1p5", "text_config": text}))
    assert load_hf_config(p).n_layers == 32
