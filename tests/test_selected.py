"""Selected attention (DeepSeek Sparse Attention: the lightning indexer and top-K_sel keys of
DeepSeek-V3.2 and GLM-5, with GLM-5's shared top-k layers) against PyTorch and by hand:
parameters equal transformers' meta-device count at full size (and the published count);
prefill and decode FLOPs equal FlopCounterMode (full size on the meta device; reduced width on
real tensors) at B=1, T=16 and T=4096 (past index_topk), logits on every position, in the eager
convention (transformers'); the KV bytes equal every tensor transformers' cache holds after the
prefill (the latent and the indexer's keys). The sparse kernel's convention is checked by hand
(8 keys, K_sel = 2), and the executor's two conventions give the same logits.

tests/data/selected_reference.json was measured with torch 2.13.0 and transformers 5.24.0 by
tests/torch_reference/measure_selected.py; with torch installed, `test_live` measures again."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from reference_cases import load_case as _load
from reference_cases import totals as _totals

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.inputs.sources import load_preset, published
from shapecalc.interpret.numeric import step
from shapecalc.interpret.symbolic import stages as symbolic_stages
from shapecalc.interpret.weights import Weights
from shapecalc.model.config import ModelConfig, ShapecalcError, Workload

DATA = Path(__file__).parent / "data"
REF = json.loads((DATA / "selected_reference.json").read_text())
CASES = {c["name"]: c for c in REF["cases"]}
# transformers re-expands the cached latents (MLA's latent form) and masks the dense scores
EAGER = dict(mla_form="latent", selection="eager")


@pytest.mark.parametrize("name", sorted(CASES))
def test_params_equal_the_meta_device_count(tmp_path, name):
    case = CASES[name]
    assert _totals(_load(tmp_path, case["hf_config"]), 1)["params"] == case["full"]["params_meta"]


def test_preset_equals_its_config_and_the_published_count(tmp_path):
    want = load_preset("deepseek-v3.2-exp")
    got = load_hf_config(DATA / "hf" / "deepseek-v3.2-exp.json")
    for attr in want.model_dump(exclude={"name"}):
        assert getattr(got, attr) == getattr(want, attr), attr
    meta = CASES["deepseek-v3.2-exp"]["full"]["params_meta"]
    assert _totals(want, 1)["params"] == meta == published("deepseek-v3.2-exp")["params"]
    # DeepSeek-V3's 671,026,404,352 and one indexer per layer: wq_b, wk, k_norm (γ, β), weights
    indexer = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
    assert meta == 671_026_404_352 + 61 * indexer


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
        assert _totals(m, s["seq"], dtype=dtype, **EAGER)["flops"] == s["prefill"], s["seq"]
        assert _totals(m, s["seq"], dtype=dtype, phase="decode", **EAGER)["flops"] \
            == s["decode"], s["seq"]
    if width == "reduced":  # a T past index_topk: the selection really selects
        assert part["steps"][-1]["seq"] > part["hf_config"]["index_topk"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_cache_bytes_equal_transformers_cache(tmp_path, name):
    case = CASES[name]
    m = _load(tmp_path, case["hf_config"])
    for s in case["full"]["steps"]:
        tot = _totals(m, s["seq"], **EAGER)
        assert tot["kv_cache_bytes"] == s["cache_after_prefill"]["bytes"]
        sel = tot["selected_attention"]
        assert sel["indexer_cache_bytes"] == s["cache_after_prefill"]["indexer_bytes"]
    if "reduced" in case:
        r = case["reduced"]
        m = _load(tmp_path, r["hf_config"])
        for s in r["steps"]:
            assert _totals(m, s["seq"], **EAGER)["kv_cache_bytes"] \
                == s["cache_after_prefill_bf16"]["bytes"]


def _tiny(**kw) -> ModelConfig:
    base = dict(name="tiny-dsa", vocab_size=64, d_model=32, n_layers=1, n_heads=4, d_ff=48,
                kv_lora_rank=16, q_lora_rank=24, qk_nope_head_dim=8, qk_rope_head_dim=4,
                v_head_dim=8, index_topk=2, index_heads=2, index_head_dim=8, norm="rmsnorm",
                ffn="swiglu", positions="rope")
    return ModelConfig(**{**base, **kw})


def _role(m: ModelConfig, wl: Workload, role: str) -> int:
    return sum(s.flops * s.repeat for s in symbolic_stages(m, wl, 1) if s.role == role)


def test_sparse_kernel_by_hand():
    """8 keys, K_sel = 2: FlashMLA's sparse MLA reads each query's 2 selected latents of
    D_c + D_r = 20 (scores) and D_c = 16 (values), over H = 4 heads, absorbed."""
    m, H, Dc, Dr, Dn, Dv = _tiny(), 4, 16, 4, 8, 8
    full = Workload(seq=8, selection="sparse")
    assert _role(m, full, "attn.scores") == 2 * H * 8 * 2 * (Dc + Dr)
    assert _role(m, full, "attn.values") == 2 * H * 8 * 2 * Dc
    # causal: query i reads min(i+1, 2) keys: 1 + 2·7 = 15 pairs
    causal = full.model_copy(update={"attention_flops": "causal"})
    assert _role(m, causal, "attn.scores") == 2 * H * 15 * (Dc + Dr)
    assert _role(m, causal, "attn.values") == 2 * H * 15 * Dc
    # the absorption: q_nope·W_UKᵀ and ·W_UV per query
    assert _role(m, full, "attn.q_absorb") == 2 * H * 8 * Dn * Dc
    assert _role(m, full, "attn.v_up") == 2 * H * 8 * Dc * Dv
    # decode on 8 cached tokens: the new token reads its 2 of T′ = 9
    dec = full.model_copy(update={"phase": "decode"})
    assert _role(m, dec, "attn.scores") == 2 * H * 2 * (Dc + Dr)
    # the eager convention scores all 8 keys (the indexer too, in both)
    eager = Workload(seq=8)
    assert _role(m, eager, "attn.scores") == 2 * H * 8 * 8 * (Dn + Dr)
    HI, DI = 2, 8
    for wl in (full, eager):
        assert _role(m, wl, "attn.index_scores") == 2 * HI * 8 * 8 * DI
        assert _role(m, wl, "attn.index_sum") == 2 * 8 * 8 * HI
    # a causal count scores each query against its i+1 keys: 36 pairs
    assert _role(m, causal, "attn.index_scores") == 2 * HI * 36 * DI
    assert _role(m, causal, "attn.index_sum") == 2 * 36 * HI


def test_dense_below_k_selected_above():
    """T ≤ K_sel: every key is selected (the sparse count is the dense one, absorbed); past it,
    each query reads K_sel."""
    m = _tiny(index_topk=16)
    for T, keys in ((8, 8), (16, 16), (40, 16)):
        wl = Workload(seq=T, selection="sparse")
        assert _role(m, wl, "attn.scores") == 2 * 4 * T * keys * 20


def test_conventions_give_the_same_logits():
    """The executor runs the indexer and the top-K_sel for real: eager (masked dense scores) and
    sparse (gathered latents) compute the same attention, so the same logits."""
    m = _tiny(n_layers=2, index_topk=3)
    ids = np.random.default_rng(0).integers(0, 64, (2, 9))
    out = {}
    for sel in ("eager", "sparse"):
        wl = Workload(batch=2, seq=9, selection=sel, dtype="fp32")
        out[sel] = step(m, wl, Weights(m, dtype=np.float64), ids).full
    assert np.allclose(out["eager"], out["sparse"], rtol=1e-9, atol=1e-12)
    wl = Workload(batch=2, seq=9, dtype="fp32", selection="eager")
    dense = step(_tiny(n_layers=2, index_topk=64), wl, Weights(m, dtype=np.float64), ids).full
    assert not np.allclose(dense, out["eager"])  # the selection changes the output


@pytest.mark.parametrize("field,value", [("index_topk", 0), ("index_heads", -1)])
def test_bad_fields_name_the_key(field, value):
    with pytest.raises(Exception, match=field):
        _tiny(**{field: value})


@pytest.mark.parametrize("key,value", [("index_topk", 0), ("index_topk", -4),
                                       ("index_n_heads", 0), ("index_head_dim", 2.5),
                                       ("q_lora_rank", None)])
def test_bad_configs_name_the_key(tmp_path, key, value):
    cfg = {**CASES["deepseek-v3.2-exp"]["reduced"]["hf_config"], key: value}
    with pytest.raises(ShapecalcError, match=key):
        _load(tmp_path, cfg)


def test_workload_refusals():
    with pytest.raises(ShapecalcError, match="selection"):
        build_trace(load_preset("deepseek-v3"), Workload(seq=8, selection="sparse"))
    with pytest.raises(ShapecalcError, match="selection"):
        build_trace(_tiny(), Workload(seq=8, selection="sparse", mla_form="latent"))
    with pytest.raises(ShapecalcError, match="mla_form"):
        build_trace(_tiny(), Workload(seq=8, mla_form="expanded"))


def test_outputs_name_the_convention():
    for sel in ("eager", "sparse"):
        tot = _totals(_tiny(), 8, selection=sel)["selected_attention"]
        assert tot["convention"] == sel
        assert set(tot["flops"]) == {"eager", "sparse"}
        assert tot["flops"][sel] == _totals(_tiny(), 8, selection=sel)["flops"]
    assert _totals(load_preset("deepseek-v3"), 8)["selected_attention"] is None


@pytest.mark.slow
def test_live(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "measure_selected", Path(__file__).parent / "torch_reference" / "measure_selected.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import torch
    torch.manual_seed(0)
    cfg = CASES["deepseek-v3.2-exp"]["reduced"]["hf_config"]
    small, scfg = mod._build(cfg, "cpu", torch.float32)
    got = mod._steps(small, scfg.vocab_size, 16, False)
    want = CASES["deepseek-v3.2-exp"]["reduced"]["steps"][0]
    assert (got["prefill"], got["decode"]) == (want["prefill"], want["decode"])


@pytest.mark.slow
def test_closed_form_across_the_selection_cut():
    """The sweep's closed form cuts its regimes at K_sel (prefill: T = K_sel; decode: T′ reaches
    K_sel), as at a window W: equal to the pipeline on both sides."""
    from shapecalc.costs.closed import ClosedForm
    from tests.test_closed import assert_equal_at
    m = _tiny(n_layers=3, index_topk=16, index_shared_layers=(2,))
    points = [dict(batch=b, seq=t, phase=ph, tp=tp, pp=1, dtype="bf16", kv_dtype="bf16",
                   act_dtype="bf16")
              for ph in ("prefill", "decode") for t in (1, 14, 15, 16, 17, 40)
              for b in (1, 3) for tp in (1, 2)]
    for form, selection in (("latent", "eager"), ("absorbed", "eager"), ("absorbed", "sparse")):
        for flops in ("full", "causal"):
            cf = ClosedForm(m, mla_form=form, selection=selection, attention_flops=flops)
            assert_equal_at(m, cf, points)


def test_train_refuses_in_one_line():
    from shapecalc.train.memory import check_trainable
    with pytest.raises(ShapecalcError, match="index_topk") as e:
        check_trainable(load_preset("deepseek-v3.2-exp"))
    assert "\n" not in str(e.value)


def test_fit_reads_the_indexer_cache():
    """At T = 131,072 a token adds, on each of the 61 layers, the latent (512 + 64) and the
    indexer's key (128), in bf16; the latent is replicated on every tensor-parallel rank."""
    from shapecalc.model.parallel import kv_bytes_per_sequence, kv_bytes_per_token
    m = load_preset("deepseek-v3.2-exp")
    assert kv_bytes_per_token(m, "bf16") == 61 * (512 + 64 + 128) * 2 == 85_888
    for p in (1, 8):
        assert kv_bytes_per_sequence(m, "bf16", 131_072, "prefill", p) == 131_072 * 85_888
    tot = _totals(m, 131_072, phase="decode")
    assert tot["kv_cache_bytes"] == 131_073 * 85_888
    sel = tot["selected_attention"]
    assert sel["indexer_cache_bytes"] == 131_073 * 61 * 128 * 2
    assert sel["indexer_cache_bytes_reference"] == 131_073 * 61 * (128 + 4)


def test_explain_topk_worked_example():
    from shapecalc.check.explain import to_json, topk_example
    doc = to_json(topk_example())
    sel = np.array(doc["selected"])
    assert sel.shape == (6, 6)
    assert sel.sum(axis=1).tolist() == [min(i + 1, 2) for i in range(6)]
    assert not np.triu(sel, 1).any()  # never a future key
    A = np.array(doc["weights"])
    assert np.allclose(A.sum(axis=1), 1) and np.all(A[sel == 0] == 0)


def test_glm5_preset_equals_its_config_and_the_published_count():
    want = load_preset("glm-5")
    got = load_hf_config(DATA / "hf" / "glm-5.json")
    for attr in want.model_dump(exclude={"name"}):
        assert getattr(got, attr) == getattr(want, attr), attr
    meta = CASES["glm-5"]["full"]["params_meta"]
    assert _totals(want, 1)["params"] == meta == published("glm-5")["params"] == 743_911_199_232


def test_shared_topk_layers_by_hand(tmp_path):
    """GLM-5's IndexShare: a layer reusing the previous indexer layer's top-k has no indexer
    (no wq_b, wk, k_norm, weights_proj) and caches no k_I; its attention reads the same K_sel
    keys. Reduced case: layers 1 and 2 of 4 share layer 0's."""
    r = CASES["glm-5"]["reduced"]
    m = _load(tmp_path, r["hf_config"])
    assert m.index_shared_layers == (1, 2) and m.indexer_layers == 2
    c = r["hf_config"]
    D, Dq, HI, DI = c["hidden_size"], c["q_lora_rank"], c["index_n_heads"], c["index_head_dim"]
    per_indexer = Dq * HI * DI + D * DI + 2 * DI + D * HI
    full = _load(tmp_path, {**c, "index_topk_freq": 1})
    assert full.indexer_layers == 4
    assert _totals(full, 1)["params"] - _totals(m, 1)["params"] == 2 * per_indexer
    lat = c["kv_lora_rank"] + c["qk_rope_head_dim"]
    assert _totals(m, 10)["kv_cache_bytes"] == 10 * (4 * lat + 2 * DI) * 2
    # the sparse kernel's attention is the same on every layer: only the indexer is skipped
    sparse = build_trace(m, Workload(seq=100, selection="sparse"))
    scores = [s for s in sparse["stages"] if s["role"] == "attn.scores"]
    assert len({s["flops"] for s in scores}) == 1
    labels = [k["label"] for k in sparse["layers"]["kinds"]]
    assert any("shared top-k" in x for x in labels)


@pytest.mark.parametrize("cfg,key", [
    ({"indexer_types": ["shared", "full", "full", "full"]}, "indexer_types"),
    ({"indexer_types": ["full", "full"]}, "indexer_types"),
    ({"indexer_types": ["full", "dense", "full", "full"]}, "indexer_types"),
    ({"index_topk_pattern": "FSX"}, "index_topk_pattern"),
    ({"index_topk_freq": "4"}, "index_topk_freq"),
])
def test_bad_indexer_types_name_the_key(tmp_path, cfg, key):
    with pytest.raises(ShapecalcError, match=key):
        _load(tmp_path, {**CASES["glm-5"]["reduced"]["hf_config"], **cfg})


def test_shared_layer_sparse_kernel_by_hand():
    """8 keys, K_sel = 2, layer 1 sharing layer 0's top-k: its attention reads the same 2 keys
    per query as layer 0's (2·H·8·2·(D_c+D_r) scores), and it runs no indexer."""
    m = _tiny(n_layers=2, index_shared_layers=(1,))
    st = symbolic_stages(m, Workload(seq=8, selection="sparse"), 1)
    by_kind: dict = {}
    for s in st:
        if s.kind is not None:
            by_kind.setdefault(s.kind, []).append(s)
    own, shared = by_kind[0], by_kind[1]
    assert [s.flops for s in own if s.role == "attn.scores"] == [2 * 4 * 8 * 2 * 20]
    assert [s.flops for s in shared if s.role == "attn.scores"] == [2 * 4 * 8 * 2 * 20]
    assert not [s for s in shared if s.role.startswith("attn.index")]
    assert [s.op for s in shared if s.role == "attn.topk"] == ["reuse"]


def test_python_api_takes_the_selection():
    from shapecalc import api
    for sel in ("eager", "sparse"):
        tot = api.trace("glm-5", seq=8192, selection=sel).totals
        assert tot.selected_attention.convention == sel
    eager, sparse = (api.trace("glm-5", seq=8192, selection=s).totals.flops
                     for s in ("eager", "sparse"))
    assert sparse < eager  # past K_sel the kernel reads 2048 of 8192 keys
