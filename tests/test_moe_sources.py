"""Mixture-of-Experts families (and dense Qwen3) from Hugging Face config.json, and their presets.

Each config loads to the fields its family's transformers classes build; each preset equals the
model loaded from its config; parameter totals equal the published counts, and here also a hand
formula of this file's own (`count`), which gives the active parameters per token too: every
parameter but the routed experts a token skips (E − k of them in each MoE layer).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.inputs.sources import load_preset, published
from shapecalc.model.config import ModelConfig, ShapecalcError, Workload
from shapecalc.model.quant import source_fields

HF = Path(__file__).parent / "data" / "hf"
# transformers' meta-device counts of these config.json files and the published integers, and
# tiny models transformers built and counted (cases)
REFERENCE = json.loads((Path(__file__).parent / "data" / "moe_reference.json").read_text())
PRESETS = ("mixtral-8x7b", "mixtral-8x22b", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-20b",
           "gpt-oss-120b", "qwen3-8b")
CONFIGS = (*PRESETS, "qwen1.5-moe-a2.7b", "phi3.5-moe")
# the totals by hand (the `count` formula below), equal to the published ones and transformers'
TOTAL = {
    "mixtral-8x7b": 46_702_792_704,
    "mixtral-8x22b": 140_620_634_112,
    "qwen3-30b-a3b": 30_532_122_624,
    "qwen3-235b-a22b": 235_093_634_560,
    "gpt-oss-20b": 20_914_757_184,
    "gpt-oss-120b": 116_829_156_672,
    "qwen3-8b": 8_190_735_360,
    "qwen1.5-moe-a2.7b": 14_315_784_192,
    "phi3.5-moe": 41_873_153_344,
}
# active per token, by hand (`count` with k routed experts a layer), embeddings and LM head
# included. Mixtral-8x7B: 12,879,925,248, Mistral AI's figure. The cards' rounded figures: Mixtral
# 8x22B 39 B; Qwen3-30B-A3B "3.3B activated" (3.35 B); Qwen3-235B-A22B 22 B; Qwen1.5-MoE-A2.7B
# 2.7 B (2.0 B without the embeddings); Phi-3.5-MoE 6.6 B; gpt-oss 3.6 B and 5.1 B, which leave
# out the embedding table (4,187,440,704 − 579,133,440 = 3,608,307,264).
ACTIVE = {
    "mixtral-8x7b": 12_879_925_248,
    "mixtral-8x22b": 39_152_031_744,
    "qwen3-30b-a3b": 3_353_032_704,
    "qwen3-235b-a22b": 22_190_763_520,
    "gpt-oss-20b": 4_187_440_704,
    "gpt-oss-120b": 5_711_982_912,
    "qwen3-8b": 8_190_735_360,
    "qwen1.5-moe-a2.7b": 2_689_173_504,
    "phi3.5-moe": 6_640_999_744,
}


def count(m: ModelConfig, active: bool = False) -> int:
    """Parameters by hand; `active`: k routed experts per MoE layer instead of E."""
    d, h, hkv, dh, v = m.d_model, m.n_heads, m.kv_heads, m.dh, m.vocab_size
    norm = d * (2 if m.has_norm_bias else 1)
    attn = 2 * d * h * dh + 2 * d * hkv * dh + (h * dh + 2 * hkv * dh) * m.qkv_bias
    attn += d * m.attn_out_bias + 2 * dh * m.qk_norm + h * m.attention_sinks
    mats = 3 if m.gated else 2

    def ffn(width: int, bias: bool) -> int:
        return mats * d * width + (((mats - 1) * width + d) if bias else 0)

    moe = 0
    if m.n_experts is not None and m.experts_per_token is not None:
        e = m.experts_per_token if active else m.n_experts
        moe = d * m.n_experts + m.n_experts * m.router_bias + e * ffn(m.dff_expert, m.expert_bias)
        moe += m.n_shared_experts * ffn(m.dff_shared, False) + d * m.shared_expert_gate
    kinds = m.ffn_types or ("moe" if m.moe else "dense",) * m.n_layers
    layers = sum(moe if k == "moe" else ffn(m.d_ff, m.ffn_bias) for k in kinds)
    layers += m.n_layers * (attn + 2 * norm)
    return v * d * (1 if m.tie_embeddings else 2) + v * m.lm_head_bias + norm + layers


def hf(stem: str) -> dict:
    return json.loads((HF / f"{stem}.json").read_text())


def write(tmp_path: Path, cfg: dict, name: str = "config.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return p


def load(tmp_path: Path, cfg: dict) -> ModelConfig:
    return load_hf_config(write(tmp_path, cfg))


def raises(field: str, fn, *args) -> ShapecalcError:
    with pytest.raises(ShapecalcError) as info:
        fn(*args)
    assert info.value.field == field, str(info.value)
    assert "\n" not in str(info.value)
    return info.value


def attrs(m: ModelConfig, names: str) -> tuple:
    return tuple(getattr(m, n) for n in names.split())


def totals(m: ModelConfig) -> dict:
    return build_trace(m, Workload(batch=1, seq=1, **source_fields(m, {})))["totals"]


# ── each family's fields ─────────────────────────────────────────────────────────────────────────


def test_mixtral_fields():
    m = load_hf_config(HF / "mixtral-8x7b.json")
    assert attrs(m, "d_model n_layers n_heads kv_heads dh d_ff ffn norm") == (
        4096, 32, 32, 8, 128, 14336, "swiglu", "rmsnorm")
    assert attrs(m, "n_experts experts_per_token dff_expert n_shared_experts") == (8, 2, 14336, 0)
    assert attrs(m, "router_scoring norm_topk_prob router_bias expert_bias") == (
        "softmax", True, False, False)
    assert attrs(m, "sliding_window layer_types ffn_types qkv_bias tie_embeddings") == (
        None, None, None, False, False)
    big = load_hf_config(HF / "mixtral-8x22b.json")
    assert attrs(big, "d_model n_layers n_heads kv_heads d_ff max_positions") == (
        6144, 56, 48, 8, 16384, 65536)


def test_qwen2_moe_fields():
    m = load_hf_config(HF / "qwen1.5-moe-a2.7b.json")
    assert attrs(m, "d_model n_layers n_heads kv_heads d_ff qkv_bias attn_out_bias") == (
        2048, 24, 16, 16, 5632, True, False)
    assert attrs(m, "n_experts experts_per_token dff_expert norm_topk_prob") == (60, 4, 1408, False)
    assert attrs(m, "n_shared_experts dff_shared shared_expert_gate") == (1, 5632, True)
    assert attrs(m, "sliding_window ffn_types qk_norm") == (None, None, False)


def test_qwen3_fields():
    dense = load_hf_config(HF / "qwen3-8b.json")
    assert attrs(dense, "d_model n_layers n_heads kv_heads dh d_ff qk_norm") == (
        4096, 36, 32, 8, 128, 12288, True)
    assert attrs(dense, "n_experts qkv_bias attn_out_bias sliding_window") == (
        None, False, False, None)
    m = load_hf_config(HF / "qwen3-30b-a3b.json")
    assert attrs(m, "d_model n_heads kv_heads dh head_dim qk_norm") == (2048, 32, 4, 128, 128, True)
    assert attrs(m, "n_experts experts_per_token d_ff dff_expert norm_topk_prob") == (
        128, 8, 6144, 768, True)
    assert attrs(m, "n_shared_experts shared_expert_gate ffn_types") == (0, False, None)
    big = load_hf_config(HF / "qwen3-235b-a22b.json")
    assert attrs(big, "n_layers d_model n_heads kv_heads dh dff_expert") == (
        94, 4096, 64, 4, 128, 1536)


def test_phimoe_fields():
    m = load_hf_config(HF / "phi3.5-moe.json")
    assert attrs(m, "norm has_norm_bias qkv_bias attn_out_bias lm_head_bias") == (
        "layernorm", True, True, True, True)
    assert attrs(m, "n_experts experts_per_token dff_expert norm_topk_prob sliding_window") == (
        16, 2, 6400, False, 131072)
    assert attrs(m, "vocab_size kv_heads tie_embeddings") == (32064, 8, False)


def test_gpt_oss_fields():
    m = load_hf_config(HF / "gpt-oss-20b.json")
    assert attrs(m, "d_model n_heads kv_heads dh d_ff ffn") == (2880, 64, 8, 64, 2880, "swiglu")
    assert attrs(m, "qkv_bias attn_out_bias attention_sinks sliding_window") == (
        True, True, True, 128)
    assert m.layer_types == ("sliding", "full") * 12
    assert attrs(m, "n_experts experts_per_token router_bias expert_bias norm_topk_prob") == (
        32, 4, True, True, True)
    big = load_hf_config(HF / "gpt-oss-120b.json")
    assert attrs(big, "n_layers n_experts") == (36, 128)
    assert big.layer_types == ("sliding", "full") * 18


# ── presets and published totals ─────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("stem", PRESETS)
def test_preset_equals_config(stem):
    """The preset is the model at its width; the config's quantization_config is the stored
    checkpoint: the `-mxfp4` preset, which is the config in every field."""
    got, want = load_hf_config(HF / f"{stem}.json"), load_preset(stem)
    skip = {"name", "quantization"}
    for attr in got.model_dump(exclude=skip):  # every field, each named on failure
        assert getattr(got, attr) == getattr(want, attr), attr
    assert got.model_dump(exclude=skip) == want.model_dump(exclude=skip)
    assert want.quantization is None
    if got.quantization is not None:
        assert got.model_dump(exclude={"name"}) == load_preset(
            f"{stem}-mxfp4").model_dump(exclude={"name"})
    assert published(stem)["params"] == TOTAL[stem]


@pytest.mark.parametrize("stem", CONFIGS)
def test_hand_count_equals_published(stem):
    m = load_hf_config(HF / f"{stem}.json")
    assert count(m) == TOTAL[stem]
    assert count(m, active=True) == ACTIVE[stem]
    ref = REFERENCE["published"][stem]
    assert ref["params_meta"] == ref["params_published"] == TOTAL[stem]


@pytest.mark.parametrize("stem", CONFIGS)
def test_trace_params_equal_published(stem):
    t = totals(load_hf_config(HF / f"{stem}.json"))
    assert (t["params"], t["active_params"]) == (TOTAL[stem], ACTIVE[stem])
    if stem in PRESETS:
        t = totals(load_preset(stem))
        assert (t["params"], t["active_params"]) == (TOTAL[stem], ACTIVE[stem])


@pytest.mark.parametrize("case", REFERENCE["cases"], ids=[c["name"] for c in REFERENCE["cases"]])
def test_tiny_models_transformers_built(case, tmp_path):
    """cfg.to_dict() of each tiny model: its parameters, and the prefill's matmul FLOPs (which
    see k, E and every width the reader gives)."""
    m = load(tmp_path, case["hf_config"])
    t = build_trace(m, Workload(batch=case["batch"], seq=case["seq"]))["totals"]
    assert (t["params"], t["flops"]) == (case["params"], case["prefill_flops"])
    assert count(m) == case["params"]


# ── class defaults and per-layer keys ────────────────────────────────────────────────────────────


def test_defaults_follow_transformers(tmp_path):
    g = hf("gpt-oss-20b")
    for key in ("head_dim", "layer_types", "sliding_window", "attention_bias",
                "num_key_value_heads", "num_experts_per_tok", "experts_per_token"):
        del g[key]
    m = load(tmp_path, g)  # GptOssConfig: head_dim 64, W 128, even layers slide, biases, k=4
    assert attrs(m, "dh sliding_window qkv_bias attn_out_bias kv_heads experts_per_token") == (
        64, 128, True, True, 8, 4)
    assert m.layer_types == ("sliding", "full") * 12
    x = hf("mixtral-8x7b")
    del x["num_local_experts"], x["num_experts_per_tok"], x["sliding_window"]
    assert attrs(load(tmp_path, x), "n_experts experts_per_token sliding_window") == (8, 2, None)
    x["num_experts"] = 4  # MixtralConfig's attribute_map: num_experts is num_local_experts
    assert load(tmp_path, x).n_experts == 4
    q = hf("qwen3-30b-a3b")
    for key in ("head_dim", "norm_topk_prob", "num_experts", "moe_intermediate_size"):
        del q[key]
    m = load(tmp_path, q)  # Qwen3MoeConfig has no head_dim: D/H
    assert attrs(m, "dh norm_topk_prob n_experts dff_expert") == (64, False, 128, 768)
    d = hf("qwen3-8b")
    del d["head_dim"]
    assert load(tmp_path, d).dh == 128  # Qwen3Config's head_dim is 128 whatever D/H is
    p = hf("phi3.5-moe")
    for key in ("attention_bias", "lm_head_bias", "sliding_window", "num_local_experts"):
        del p[key]
    m = load(tmp_path, p)
    assert attrs(m, "qkv_bias lm_head_bias sliding_window n_experts norm") == (
        False, False, None, 16, "layernorm")
    w = hf("qwen1.5-moe-a2.7b")
    for key in ("shared_expert_intermediate_size", "moe_intermediate_size", "num_experts"):
        del w[key]
    m = load(tmp_path, {**w, "qkv_bias": False})
    assert attrs(m, "n_experts dff_expert dff_shared qkv_bias") == (60, 1408, 5632, False)


def test_qwen_moe_layer_kinds(tmp_path):
    q = hf("qwen1.5-moe-a2.7b")
    m = load(tmp_path, {**q, "mlp_only_layers": [0, 5]})
    assert m.ffn_types is not None and m.ffn_types.count("dense") == 2
    assert m.ffn_types[0] == m.ffn_types[5] == "dense" and m.ffn_types[1] == "moe"
    m = load(tmp_path, {**q, "decoder_sparse_step": 2})  # (i+1) % 2 == 0: odd i are MoE
    assert m.ffn_types == ("dense", "moe") * 12
    # 12 layers trade router, experts, shared expert and gate for a dense MLP of 5632
    moe = 60 * 2048 + 60 * 3 * 2048 * 1408 + 3 * 2048 * 5632 + 2048
    assert count(m) == TOTAL["qwen1.5-moe-a2.7b"] - 12 * (moe - 3 * 2048 * 5632) == 8_085_743_616
    assert totals(m)["params"] == count(m)
    none = load(tmp_path, {**q, "num_experts": 0})  # every MLP dense, of intermediate_size
    assert attrs(none, "n_experts ffn_types n_shared_experts d_ff") == (None, None, 0, 5632)
    all_dense = load(tmp_path, {**q, "mlp_only_layers": list(range(24))})
    assert all_dense.n_experts is None
    raises("decoder_sparse_step", load, tmp_path, {**q, "decoder_sparse_step": 0})
    t = hf("qwen3-30b-a3b")
    m = load(tmp_path, {**t, "mlp_only_layers": [47]})
    assert m.ffn_types == ("moe",) * 47 + ("dense",)
    moe, dense = 128 * 2048 + 128 * 3 * 2048 * 768, 3 * 2048 * 6144  # the last layer's FFN
    assert count(m) == TOTAL["qwen3-30b-a3b"] - (moe - dense) == 29_965_629_440
    assert totals(m)["params"] == count(m)


def test_qwen_sliding_windows(tmp_path):
    q = hf("qwen1.5-moe-a2.7b")  # 5.x: layers with (i+1) % 2 below max_window_layers (21) slide
    m = load(tmp_path, {**q, "use_sliding_window": True, "sliding_window": 4096})
    assert m.sliding_window == 4096 and m.layer_types is not None
    assert m.layer_types[:4] == ("sliding", "full", "sliding", "full")
    assert m.layer_types.count("sliding") == 11 and m.layer_types[21:] == ("full",) * 3
    d = hf("qwen3-8b")  # Qwen3: layers at or past max_window_layers slide
    m = load(tmp_path, {**d, "use_sliding_window": True, "sliding_window": 4096,
                        "max_window_layers": 30})
    assert m.layer_types == ("full",) * 30 + ("sliding",) * 6
    m = load(tmp_path, {**d, "use_sliding_window": True, "sliding_window": 4096,
                        "max_window_layers": 0})
    assert (m.sliding_window, m.layer_types) == (4096, None)
    assert load(tmp_path, {**d, "sliding_window": 4096}).sliding_window is None  # not used
    t = hf("qwen3-30b-a3b")  # Qwen3-MoE: every layer slides when use_sliding_window
    m = load(tmp_path, {**t, "use_sliding_window": True, "sliding_window": 4096})
    assert (m.sliding_window, m.layer_types) == (4096, None)


# ── refusals ─────────────────────────────────────────────────────────────────────────────────────


def test_dense_families_refuse_expert_keys(tmp_path):
    x = {**hf("mixtral-8x7b"), "model_type": "mistral"}  # not a silent 7.24 B dense model
    err = raises("num_local_experts", load, tmp_path, x)
    assert "'mistral'" in err.reason
    q = {**hf("qwen3-30b-a3b"), "model_type": "qwen3"}
    raises("num_experts", load, tmp_path, q)
    assert load(tmp_path, {**hf("qwen3-8b"), "num_experts": 0}).n_experts is None


def test_unmodelled_keys_are_refused(tmp_path):
    g = hf("gpt-oss-20b")
    err = raises("experts_per_token", load, tmp_path, {**g, "experts_per_token": 2})
    assert "num_experts_per_tok" in err.reason
    chunked = ["chunked_attention", *g["layer_types"][1:]]
    assert "chunked_attention" in raises("layer_types", load, tmp_path,
                                         {**g, "layer_types": chunked}).reason
    raises("layer_types", load, tmp_path, {**g, "layer_types": g["layer_types"][:4]})
    raises("layer_types", load, tmp_path, {**g, "sliding_window": None})
    x = hf("mixtral-8x7b")
    raises("num_experts", load, tmp_path, {**x, "num_experts": 4})  # contradicts the other key
    raises("num_local_experts", load, tmp_path, {**x, "num_local_experts": 0})
    q = hf("qwen1.5-moe-a2.7b")
    raises("shared_expert_intermediate_size", load, tmp_path,
           {**q, "shared_expert_intermediate_size": 0})


def test_text_config_of_a_multimodal_config(tmp_path):
    inner = {**hf("mixtral-8x7b")}
    del inner["tie_word_embeddings"]
    outer = {"model_type": "some_vlm", "tie_word_embeddings": True, "text_config": inner}
    m = load(tmp_path, outer)
    assert attrs(m, "n_experts tie_embeddings d_model") == (8, True, 4096)
    err = raises("model_type", load, tmp_path, {**outer, "text_config": {"model_type": "bert"}})
    assert "'some_vlm' (its text_config: 'bert') is not supported" in err.reason
