"""dots3's text model (model_type dots3_note) against PyTorch and by hand: MLA with DeepSeek Sparse
Attention's indexer on the indexed layers, sliding-window MLA layers of their own widths
(per_layer_config: heads, D_c, D_n per layer, in the one layer plan), DeepSeek-V3's MoE.
Parameters equal transformers' meta-device count at full size; prefill and decode FLOPs equal
FlopCounterMode (full size on the meta device with the batched_mm experts; reduced width on real
tensors with the eager experts) at B=1, T=16 and T past index_topk and the window, logits on
every position, eager convention; the KV bytes equal every tensor transformers' cache holds after
the prefill (the latents and k_rope in the KV dtype, the indexer's keys in fp32; a sliding layer
keeps W−1 tokens there, min(T, W) in shapecalc: checked with the window one shorter). The preset
is the class defaults (no config.json on the Hub that `search` finds).

tests/data/dots3_reference.json was measured with torch 2.13.0 and transformers 5.24.0 by
tests/torch_reference/measure_dots3.py; with torch installed, `test_live` measures again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from reference_cases import load_case as _load

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import ModelConfig, ShapecalcError, Workload
from shapecalc.model.plan import layer_plan

DATA = Path(__file__).parent / "data"
REF = json.loads((DATA / "dots3_reference.json").read_text())
CASES = {c["name"]: c for c in REF["cases"]}
EAGER = dict(mla_form="latent", selection="eager")  # transformers' latent cache, masked scores


def _totals(m: ModelConfig, T: int, **kw) -> dict:
    return build_trace(m, Workload(batch=1, seq=T, **{**EAGER, **kw}))["totals"]


def _hf_window(m: ModelConfig) -> ModelConfig:
    """The model as transformers' cache holds it: a sliding layer keeps W−1 tokens."""
    return m.model_copy(update={"sliding_window": m.sliding_window - 1})


@pytest.mark.parametrize("name", sorted(CASES))
def test_params_equal_the_meta_device_count(tmp_path, name):
    case = CASES[name]
    assert _totals(_load(tmp_path, case["hf_config"]), 1)["params"] == case["full"]["params_meta"]


def test_preset_is_its_config_and_the_class_defaults(tmp_path):
    want = load_preset("dots3")
    for got in (load_hf_config(DATA / "hf" / "dots3.json"),
                _load(tmp_path, {"model_type": "dots3_note"})):
        for attr in want.model_dump(exclude={"name"}):
            assert getattr(got, attr) == getattr(want, attr), attr
    assert CASES["dots3"]["hf_config"] == json.loads((DATA / "hf" / "dots3.json").read_text())


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("width", ["full", "reduced"])
def test_flops_equal_flopcountermode(tmp_path, name, width):
    case = CASES[name]
    if width not in case:
        pytest.skip("measured at full size only")
    part = case[width]
    m = _load(tmp_path, case["hf_config"] if width == "full" else part["hf_config"])
    dtype = "bf16" if width == "full" else "fp32"
    for s in part["steps"]:
        assert _totals(m, s["seq"], dtype=dtype)["flops"] == s["prefill"], s["seq"]
        assert _totals(m, s["seq"], dtype=dtype, phase="decode")["flops"] == s["decode"], s["seq"]
    last = part["steps"][-1]["seq"]  # past the top-k and the window: both really cut
    assert last > m.index_topk and last > m.sliding_window


@pytest.mark.parametrize("name", sorted(CASES))
def test_cache_bytes_equal_transformers_cache(tmp_path, name):
    case = CASES[name]
    m = _load(tmp_path, case["hf_config"])
    for s in case["full"]["steps"]:
        tot = _totals(_hf_window(m), s["seq"])
        assert tot["kv_cache_bytes"] == s["cache_after_prefill"]["bytes"]
        assert tot["selected_attention"]["indexer_cache_bytes"] \
            == s["cache_after_prefill"]["indexer_bytes"]
    if "reduced" in case:
        r = _hf_window(_load(tmp_path, case["reduced"]["hf_config"]))
        for s in case["reduced"]["steps"]:  # bf16 latents beside fp32 indexer keys
            assert _totals(r, s["seq"])["kv_cache_bytes"] == s["cache_after_prefill_bf16"]["bytes"]


def test_per_layer_widths_by_hand():
    """The preset's two kinds of attention, each of its own widths: 13 indexed layers of
    H=128, D_c=512, D_n=128 with the indexer, 33 sliding of H=64, D_c=1024, D_n=192 without."""
    m = load_preset("dots3")
    plan = layer_plan(m)
    widths = {k.widths for k in plan.kinds}
    assert widths == {(), (("n_heads", 64), ("kv_lora_rank", 1024), ("qk_nope_head_dim", 192))}
    D, Dq, Dr, Dv = 5120, 1024, 64, 128

    def attention(H: int, Dc: int, Dn: int) -> int:  # q_a, q_b, kv_a, kv_b, o, g, norms
        return (D * Dq + Dq + Dq * H * (Dn + Dr) + D * (Dc + Dr) + Dc + Dr
                + Dc * H * (Dn + Dv) + H * Dv * D + D * H)

    indexer = Dq * 64 * 128 + D * 128 + 2 * 128 + D * 64  # wq_b, wk, k_norm (γ, β), weights
    E, Dffe, Dffs, V, Dff = 256, 1536, 1536, 152064, 13824
    moe = E * 3 * D * Dffe + E * D + 3 * D * Dffs  # routed experts, router, shared expert
    hand = (2 * V * D + D + 46 * 2 * D + 13 * (attention(128, 512, 128) + indexer)
            + 33 * attention(64, 1024, 192) + 3 * D * Dff + 45 * moe)
    assert hand == CASES["dots3"]["full"]["params_meta"] == _totals(m, 1)["params"]
    assert m.indexer_layers == 13
    # a token's cache: 13 × ((512+64)·2 + 128·4) + 33 × (1024+64)·2 bytes
    assert _totals(m, 16)["kv_cache_bytes_per_token"] == 13 * (576 * 2 + 128 * 4) + 33 * 1088 * 2


def test_both_conventions_hold_the_same_parameters():
    """The sparse kernel's convention (absorbed, gathered latents) gates each head as eager
    does: the same parameters, its own FLOPs."""
    m = load_preset("dots3")
    eager, sparse = _totals(m, 4096), _totals(m, 4096, mla_form="absorbed", selection="sparse")
    assert eager["params"] == sparse["params"] == CASES["dots3"]["full"]["params_meta"]
    assert sparse["selected_attention"]["flops"]["eager"] == eager["flops"]
    assert eager["selected_attention"]["flops"]["sparse"] == sparse["flops"]


BAD = [
    ({"per_layer_config": [{}] * 5}, "per_layer_config", "lists 5 layers"),
    ({"per_layer_config": {"46": {"num_attention_heads": 64}}}, "per_layer_config", "0..45"),
    ({"per_layer_config": {"2": {"intermediate_size": 4096}}},
     "per_layer_config.intermediate_size", "not modelled per layer"),
    ({"per_layer_config": {"2": {"num_attention_heads": 64}}}, "per_layer_config",
     "needs one config a layer type"),
    ({"swa_num_key_value_heads": 32}, "swa_num_key_value_heads", "must equal"),
    ({"per_layer_config": {str(i): {"num_attention_heads": 64} for i in range(2, 46)
                           if i % 4 != 1}, "use_dsa": True},
     "per_layer_config", "layer 2's must equal num_attention_heads"),
    ({"index_topk": 0}, "index_topk", "whole number > 0"),
    ({"n_group": 3}, "n_group", "must divide"),
    ({"layer_types": ["full_attention"] * 45 + ["indexed_attention"], "per_layer_config": {}},
     "layer_types", "mixes"),
    ({"q_lora_rank": None}, "q_lora_rank", "q_a_proj"),
    ({"swa_qk_rope_head_dim": 32, "swa_head_dim": 224}, "swa_qk_rope_head_dim", "one RoPE"),
]


@pytest.mark.parametrize("change,key,why", BAD, ids=[b[1] + ":" + b[2] for b in BAD])
def test_bad_configs_name_the_key(tmp_path, change, key, why):
    with pytest.raises(ShapecalcError) as err:
        _load(tmp_path, {"model_type": "dots3_note", **change})
    assert err.value.field == key and why in str(err.value)


@pytest.mark.slow
def test_layer_widths_of_other_than_n_layers_exit_2(tmp_path):
    """A model file's layer_widths list of other than N values: exit 2, one line naming it."""
    text = (Path(__file__).parents[1] / "presets" / "models" / "dots3.toml").read_text()
    path = tmp_path / "m.toml"
    path.write_text(text.replace("n_heads = [\n", "n_heads = [\n    64,\n"))
    r = subprocess.run([sys.executable, "-m", "shapecalc", "trace", "--config", str(path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "layer_widths.n_heads" in r.stderr
    assert "lists 47 layers, but N=46" in r.stderr
    cfg = tmp_path / "config.json"  # and a config.json's per_layer_config of 5 layers, not 46
    cfg.write_text(json.dumps({"model_type": "dots3_note", "per_layer_config": [{}] * 5}))
    r = subprocess.run([sys.executable, "-m", "shapecalc", "trace", "--hf-config", str(cfg)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1
    assert r.stderr.startswith("error: per_layer_config: lists 5 layers")


@pytest.mark.slow
def test_verify_passes_at_reduced_width(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CASES["dots3"]["reduced"]["hf_config"]))
    for extra in ([], ["--seq", "100", "--selection", "sparse"], ["--phase", "decode",
                                                                  "--tp", "2"]):
        r = subprocess.run([sys.executable, "-m", "shapecalc", "verify", "--hf-config",
                            str(cfg), *(extra if "--seq" in extra else ["--seq", "40", *extra])],
                           capture_output=True, text=True)
        assert r.returncode == 0 and "all checks pass" in r.stdout, r.stdout[-2000:]


@pytest.mark.slow
def test_verify_against_transformers(tmp_path):
    """verify --against transformers on the reduced model, past its top-k and window: the
    multimodal model_type is built as its text model (Dots3NoteTextConfig) at any width."""
    pytest.importorskip("transformers")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CASES["dots3"]["reduced"]["hf_config"]))
    r = subprocess.run([sys.executable, "-m", "shapecalc", "verify", "--hf-config", str(cfg),
                        "--seq", "100", "--against", "transformers"], capture_output=True,
                       text=True)
    assert r.returncode == 0 and "all checks pass" in r.stdout, r.stdout[-2000:] + r.stderr


@pytest.mark.slow
def test_live(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from tests.torch_reference.measure_dots3 import DOTS3_REDUCED, _build_text
    from tests.torch_reference.measure_selected import _steps
    model, cfg = _build_text(DOTS3_REDUCED, __import__("torch").float32)
    got = _steps(model, cfg.vocab_size, 16, False)
    want = CASES["dots3"]["reduced"]["steps"][0]
    assert (got["prefill"], got["decode"]) == (want["prefill"], want["decode"])


@pytest.mark.slow
def test_fit_holds_each_layer_type_at_its_widths():
    """fit at T = 131,072: 13 indexed layers of 131,072 tokens × (576·2 + 128·4 fp32 bytes) and
    33 sliding layers of their 512 (paged in blocks of 16) × 1088·2 bytes, by hand."""
    r = subprocess.run([sys.executable, "-m", "shapecalc", "fit", "--preset", "dots3", "--seq",
                        "131072", "--gpu", "h100-sxm", "--json"], capture_output=True, text=True)
    got = json.loads(r.stdout)["memory_per_rank"]["kv_cache"]
    assert got == 13 * 131_072 * (576 * 2 + 128 * 4) + 33 * 512 * 1088 * 2 == 2_872_115_200


@pytest.mark.slow
def test_closed_form_equals_the_pipeline():
    """The sweep's closed form (per-layer widths, the fp32 indexer keys apart) equals the
    stage-by-stage pipeline at random points, at full and at reduced width."""
    import random

    from shapecalc.costs.closed import ClosedForm
    from tests.test_closed import DTYPES, assert_equal_at, valid_tps

    for m in (load_preset("dots3"), ModelConfig(**{**load_preset("dots3").model_dump(),
                                                   "sliding_window": 24, "index_topk": 64})):
        cf, rng = ClosedForm(m), random.Random(3)
        points = [dict(batch=rng.randint(1, 8), seq=rng.randint(1, 5000),
                       phase=rng.choice(["prefill", "decode"]), tp=rng.choice(valid_tps(m)),
                       pp=rng.randint(1, 4), dtype=rng.choice(DTYPES),
                       kv_dtype=rng.choice(DTYPES), act_dtype=rng.choice(DTYPES))
                  for _ in range(10)]
        assert_equal_at(m, cf, points)


def test_train_refuses_widths_set_per_layer():
    """train's activation terms read the model's widths: a layer_widths model is refused in one
    line naming the field (dots3 itself is refused first for its head gate and its indexer)."""
    from shapecalc.train.memory import check_trainable

    with pytest.raises(ShapecalcError) as err:
        check_trainable(_widths_model())
    assert err.value.field == "layer_widths"


def _widths_model(**kw) -> ModelConfig:
    """A dense GQA model whose layers have FFN widths of their own."""
    return ModelConfig(**{**dict(name="w", vocab_size=64, d_model=32, n_layers=3, n_heads=4,
                                 n_kv_heads=2, d_ff=48, positions="rope", norm="rmsnorm",
                                 ffn="swiglu", layer_widths={"d_ff": (48, 96, 48)}), **kw})


def test_widths_set_per_layer_on_plain_attention():
    """Generic, not dots3's only: layer 1's FFN is Dff = 96; the trace counts each layer at its
    own width and the executor agrees. Heads per layer on plain attention keep Dh and H_kv (Laguna),
    each a whole number of the K/V groups; D_r per layer is refused (one RoPE table)."""
    from shapecalc.check.verify import verify

    m = _widths_model()
    assert len(layer_plan(m).kinds) == 2
    D, V = 32, 64
    attn = D * 4 * 8 + 2 * D * 2 * 8 + 4 * 8 * D
    hand = 2 * V * D + D + 3 * 2 * D + 3 * attn + 3 * D * 48 * 2 + 3 * D * 96
    assert build_trace(m, Workload(batch=1, seq=8))["totals"]["params"] == hand
    for phase in ("prefill", "decode"):
        doc = verify(m, Workload(batch=1, seq=8, phase=phase), layers=3)
        assert doc["ok"], [c["name"] for c in doc["checks"] if not c["ok"]]
    for bad, key in (({"n_heads": (4, 3, 4)}, "layer_widths.n_heads"),):
        with pytest.raises(ShapecalcError) as err:
            _widths_model(layer_widths=bad)
        assert err.value.field == key
    dots3 = load_preset("dots3").model_dump()
    with pytest.raises(ShapecalcError) as err:
        ModelConfig(**{**dots3, "layer_widths": {**dots3["layer_widths"],
                                                 "qk_rope_head_dim": (32,) + (64,) * 45}})
    assert err.value.field == "layer_widths.qk_rope_head_dim"
