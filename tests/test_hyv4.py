"""Hunyuan 4 (hy_v4): MLA with DeepSeek-V3.2's lightning indexer, layers that reuse the most
recent full layer's top-k (the reuse variant: indexer_types "shared"), a sink per head, an
elementwise output gate, Hunyuan's hyper-connections, a sigmoid MoE whose routed SwiGLU alone is
clamped. The numbers against transformers (params at full size, FLOPs at full size on the meta
device and at reduced width on real tensors, T=16 and T=4096, the cache after the prefill) are
tests/data/selected_reference.json's cases "hunyuan-4" and "hy_v4 class defaults", checked by
tests/test_selected.py's parametrised tests with the other DSA families; here: the preset, the
reuse variant by hand (8 keys, K_sel = 2, the sparse kernel's convention), the cache and the
parameters by hand, the clamp's scope, and the refusals."""

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
REF = {c["name"]: c for c in json.loads((DATA / "selected_reference.json").read_text())["cases"]}
HY = REF["hunyuan-4"]
EAGER = dict(mla_form="latent", selection="eager")  # what HYV4Attention computes


def test_preset_is_the_class_defaults_and_the_meta_device_count():
    """No Hub config.json was found: the preset is HYV4Config's defaults, field by field the
    import of tests/data/hf/hunyuan-4.json."""
    want = load_preset("hunyuan-4")
    got = load_hf_config(DATA / "hf" / "hunyuan-4.json")
    for attr in want.model_dump(exclude={"name"}):
        assert getattr(got, attr) == getattr(want, attr), attr
    meta = HY["full"]["params_meta"]
    assert meta == REF["hy_v4 class defaults"]["full"]["params_meta"] == 58_278_193_133
    assert _totals(want, 1)["params"] == meta == published("hunyuan-4")["params"]


def test_class_defaults_alone_import_as_the_preset(tmp_path):
    want, got = load_preset("hunyuan-4"), _load(tmp_path, {"model_type": "hy_v4"})
    for attr in want.model_dump(exclude={"name"}):
        assert getattr(got, attr) == getattr(want, attr), attr


def test_the_reuse_schedule_and_its_parameters_by_hand():
    """indexer_types' default: full on layer 0 and where (i − 1) % 4 == 0 (10 of 34 layers); a
    shared layer has no indexer. Per layer: MLA, gate_proj [D → H·D_v], H sinks, two
    hyper-connections (fn [2n, n·D], base [2n], scale [2]) and two RMSNorms."""
    m = load_preset("hunyuan-4")
    full = [i for i in range(34) if i not in set(m.index_shared_layers or ())]
    assert full == [0, 1, 5, 9, 13, 17, 21, 25, 29, 33] and m.indexer_layers == 10
    D, H, Dq, Dc, Dr, Dn, Dv, n = 2816, 32, 1536, 512, 64, 192, 256, 4
    attn = (D * Dq + Dq + Dq * H * (Dn + Dr) + D * (Dc + Dr) + Dc + Dc * H * (Dn + Dv)
            + H * Dv * D + D * H * Dv + H)
    hyper = 2 * (2 * n * n * D + 2 * n + 2)
    indexer = Dq * 16 * 128 + D * 128 + 2 * 128 + D * 16
    E, de = 256, 768
    moe = D * E + E * 3 * D * de + 3 * D * de
    layers = 34 * (attn + hyper + 2 * D) + 3 * D * 6912 + 33 * moe + 10 * indexer
    total = layers + 2 * 120832 * D + D + n * n * D + n + 1
    assert total == _totals(m, 1)["params"] == 58_278_193_133


def test_the_cache_holds_indexer_keys_on_full_layers_only():
    """After a prefill of T: every layer's latent (D_c + D_r), the 10 full layers' k_I (D_I),
    in bf16; = transformers' cache (keys, values, indexer_keys), every tensor once."""
    m = load_preset("hunyuan-4")
    for s in HY["full"]["steps"]:
        T = s["seq"]
        tot = _totals(m, T, **EAGER)
        assert tot["kv_cache_bytes"] == T * (34 * (512 + 64) + 10 * 128) * 2 \
            == s["cache_after_prefill"]["bytes"]
        assert tot["selected_attention"]["indexer_cache_bytes"] == T * 10 * 128 * 2 \
            == s["cache_after_prefill"]["indexer_bytes"]


def _tiny(**kw) -> ModelConfig:
    """Hunyuan 4 in miniature: layers full, full, shared (layer 2 reuses layer 1's top-k)."""
    base = dict(name="tiny-hy", vocab_size=64, d_model=32, n_layers=3, n_heads=4, d_ff=48,
                kv_lora_rank=16, q_lora_rank=24, qk_nope_head_dim=8, qk_rope_head_dim=4,
                v_head_dim=12, index_topk=2, index_heads=2, index_head_dim=8, norm="rmsnorm",
                ffn="swiglu", positions="rope", index_shared_layers=(2,), attention_sinks=True,
                attn_output_gate=True, hc_streams=4, hc_mixing="none", n_experts=4,
                experts_per_token=2, d_ff_expert=16, n_shared_experts=1,
                router_scoring="sigmoid", norm_topk_prob=True, routed_scaling_factor=2.5,
                swiglu_limit=0.1, swiglu_limit_routed_only=True, ffn_types=("dense", "moe",
                                                                            "moe"))
    return ModelConfig(**{**base, **kw})


def _by_layer(m: ModelConfig, wl: Workload) -> dict[int, list]:
    out: dict[int, list] = {}
    for s in symbolic_stages(m, wl, 1):
        if s.kind is not None:
            out.setdefault(s.kind, []).append(s)
    return out


def test_reuse_variant_sparse_kernel_by_hand():
    """8 keys, K_sel = 2, the sparse kernel's convention: layer 2 reuses layer 1's selection
    (the most recent full layer, not layer 0's): it runs no indexer, and its attention reads the
    same 2 latents a query as the full layers: scores 2·H·T·2·(D_c+D_r), A·c_KV 2·H·T·2·D_c;
    each head's sink joins its softmax: 5 per element over 2 + 1 columns; the gate x·W_g is
    2·T·D·H·D_v and its sigmoid and product elementwise."""
    m, H, T, Dc, Dr, Dv, D = _tiny(), 4, 8, 16, 4, 12, 32
    wl = Workload(seq=T, selection="sparse")
    kinds = _by_layer(m, wl)
    assert sorted(kinds) == [0, 1, 2]  # dense + full, MoE + full, MoE + shared top-k
    plan = build_trace(m, wl)["layers"]["kinds"]
    assert "shared top-k" in plan[2]["label"]
    for kind, stages in kinds.items():
        by = {s.role: s for s in stages}
        assert by["attn.scores"].flops == 2 * H * T * 2 * (Dc + Dr)
        assert by["attn.values"].flops == 2 * H * T * 2 * Dc
        sm = by["attn.softmax"]
        assert sm.params == H and sm.elementwise_flops == 5 * H * T * (2 + 1)
        assert by["attn.gate"].flops == 2 * T * D * H * Dv
        index = [s for s in stages if s.role.startswith("attn.index")]
        if kind < 2:  # the indexer: its scores 2·H_I·T·T·D_I, its head sum 2·T·T·H_I
            assert by["attn.index_scores"].flops == 2 * 2 * T * T * 8
            assert by["attn.index_sum"].flops == 2 * T * T * 2 and by["attn.topk"].op == "topk"
        else:  # reused: no indexer, no wq_b/wk/weights_proj, no k_I in its cache
            assert not index and by["attn.topk"].op == "reuse"
            assert "indexer" not in by["attn.latent"].name
    # eager (transformers): every layer scores all 8 keys and masks the unselected
    eager = _by_layer(m, Workload(seq=T, **EAGER))
    for stages in eager.values():
        assert {s.role: s for s in stages}["attn.scores"].flops == 2 * H * T * T * (8 + Dr)


def test_reuse_variant_runs_for_real():
    """The executor hands layer 1's selection to layer 2: eager (masked dense scores, sinks,
    the gate) and sparse (the gathered latents) give the same logits, and the selection changes
    them (K_sel = 2 of 9 keys)."""
    m = _tiny()
    ids = np.random.default_rng(0).integers(0, 64, (2, 9))
    out = {}
    for sel in ("eager", "sparse"):
        wl = Workload(batch=2, seq=9, selection=sel, dtype="fp32")
        out[sel] = step(m, wl, Weights(m, dtype=np.float64), ids).full
    assert np.allclose(out["eager"], out["sparse"], rtol=1e-9, atol=1e-12)
    dense = step(_tiny(index_topk=64), Workload(batch=2, seq=9, dtype="fp32"),
                 Weights(m, dtype=np.float64), ids).full
    assert not np.allclose(dense, out["eager"])


@pytest.mark.slow
def test_verify_passes_on_the_reduced_preset():
    from shapecalc.check.verify import verify
    from tests.test_presets_verify import reduced
    m = reduced(load_preset("hunyuan-4")).model_copy(update={"index_topk": 4})
    for sel, phase, tp in (("eager", "prefill", 2), ("sparse", "decode", 1)):
        doc = verify(m, Workload(batch=1, seq=10, selection=sel, phase=phase, tp=tp), layers=3)
        assert doc["ok"], [c["name"] for c in doc["checks"] if not c["ok"]]


@pytest.mark.slow
def test_closed_form_equals_the_stages_across_the_selection_cut():
    """The sweep's closed form (sinks, the gate, the streams, the reuse) equals the pipeline on
    both sides of K_sel, in each convention."""
    from shapecalc.costs.closed import ClosedForm
    from tests.test_closed import assert_equal_at
    m = _tiny(index_topk=6)
    points = [dict(batch=b, seq=t, phase=ph, tp=tp, pp=1, dtype="bf16", kv_dtype="bf16",
                   act_dtype="bf16")
              for ph in ("prefill", "decode") for t in (1, 5, 6, 7, 20) for b in (1, 2)
              for tp in (1, 2)]
    for form, selection in (("latent", "eager"), ("absorbed", "sparse")):
        assert_equal_at(m, ClosedForm(m, mla_form=form, selection=selection), points)


def test_the_clamp_is_on_the_routed_experts_only():
    """HYV4Experts clamps its gate and up; HYV4MLP (the dense layer and the shared expert) does
    not: no clamp stage outside the routed experts, whose elementwise count carries it."""
    m = _tiny()
    st = symbolic_stages(m, Workload(seq=8), 1)
    clamps = [s for s in st if s.role.endswith(".clamp")]
    assert {s.role for s in clamps} == {"moe.experts.clamp"}
    # the gate and the up of each token's k = 2 experts of Dff_e = 16, on the 2 MoE layers
    assert sum(s.elementwise_flops * s.repeat for s in clamps) == 2 * (2 * 8 * 2 * 16)
    both = _tiny(swiglu_limit_routed_only=False)
    roles = {s.role for s in symbolic_stages(both, Workload(seq=8), 1)}
    assert {"ffn.clamp", "moe.shared.clamp", "moe.experts.clamp"} <= roles


@pytest.mark.parametrize(("cfg", "key"), [
    ({"indexer_types": ["shared"] + ["full"] * 5}, "indexer_types"),
    ({"indexer_types": ["full"] * 5}, "indexer_types"),
    ({"indexer_types": ["full", "dense"] + ["full"] * 4}, "indexer_types"),
    ({"layer_types": ["sliding_attention"] * 6}, "layer_types"),
    ({"swiglu_limit": 0}, "swiglu_limit"),
    ({"swiglu_limit": -1.0}, "swiglu_limit"),
    ({"hc_mult": 0}, "hc_streams"),
    ({"index_topk": 0}, "index_topk"),
    ({"n_shared_experts": -1}, "n_shared_experts"),
    ({"mlp_layer_types": ["dense"] * 5}, "mlp_layer_types"),
])
def test_bad_configs_exit_2_naming_the_key(cli, tmp_path, cfg, key):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**HY["reduced"]["hf_config"], **cfg}))
    r = cli("trace", "--hf-config", str(p))
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and key in r.err, r.err
    assert "Traceback" not in r.err


def test_every_layer_dense_is_a_dense_model(tmp_path):
    """mlp_layer_types all dense: HYV4DecoderLayer builds HYV4MLP on every layer, no experts."""
    m = _load(tmp_path, {**HY["reduced"]["hf_config"], "mlp_layer_types": ["dense"] * 6})
    assert m.n_experts is None and m.swiglu_limit is None


def test_train_refuses_in_one_line():
    from shapecalc.train.memory import check_trainable
    with pytest.raises(ShapecalcError) as e:
        check_trainable(load_preset("hunyuan-4"))
    assert "\n" not in str(e.value)
    with pytest.raises(ShapecalcError, match="attention_sinks"):
        check_trainable(_tiny(index_topk=None, index_heads=None, index_head_dim=None,
                              index_shared_layers=None, hc_streams=None, hc_mixing="sinkhorn",
                              swiglu_limit=None, swiglu_limit_routed_only=False))


@pytest.mark.slow
def test_live():
    """With torch and transformers installed: the reduced Hunyuan 4 measured again (real
    tensors, T=16) equals the stored FlopCounterMode counts and cache bytes."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import importlib.util

    import torch
    spec = importlib.util.spec_from_file_location(
        "measure_selected", Path(__file__).parent / "torch_reference" / "measure_selected.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    small, scfg = mod._build(HY["reduced"]["hf_config"], "cpu", torch.float32)
    got = mod._steps(small, scfg.vocab_size, 16, False)
    want = HY["reduced"]["steps"][0]
    assert (got["prefill"], got["decode"]) == (want["prefill"], want["decode"])
