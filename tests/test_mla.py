"""Multi-head Latent Attention (DeepSeek-V2/V3, Kimi K2): exact against transformers and by hand.

- params equal `sum(p.numel())` of transformers' model on the meta device for the four real
  config.json files, and round to the publishers' figures;
- prefill and decode matmul FLOPs equal FlopCounterMode on tiny really-run models in the form
  transformers 5.x runs (`--mla-form latent`: the latent cache re-expanded every step), and the
  KV bytes equal the transformers cache after the prefill and after the decode step;
- the three forms' FLOPs and KV differ exactly by the hand formulas;
- verify runs all three forms (TP included) and fails when an MLA size is perturbed;
- bad MLA inputs exit 2 with one line.

Numbers: tests/data/mla_reference.json, measured by tests/torch_reference/harness.py (mla).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_closed import assert_equal_at
from test_errors import _one_clean_line

from shapecalc.check.verify import verify
from shapecalc.costs.closed import ClosedForm
from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import ModelConfig, ShapecalcError, Workload
from shapecalc.model.quant import source_fields

DATA = Path(__file__).parent / "data"
REF = json.loads((DATA / "mla_reference.json").read_text())
ROOT = Path(__file__).parent.parent
FORMS = ("absorbed", "latent", "expanded")


def totals(m: ModelConfig, **kw) -> dict:
    return build_trace(m, Workload(**source_fields(m, kw)))["totals"]


# ── params: transformers on the meta device, and the published figures ──────────────────────────


@pytest.mark.parametrize("stem", sorted(REF["published"]))
def test_params_equal_the_meta_device_count(stem):
    pub = REF["published"][stem]
    for m in (load_hf_config(ROOT / pub["file"]), load_preset(stem)):
        assert totals(m, batch=1, seq=1)["params"] == pub["params_meta"]


def test_params_round_to_the_published_figures():
    def active(stem: str) -> tuple[int, int]:
        t = totals(load_preset(stem), batch=1, seq=1)
        return t["params"], t["active_params"]

    # DeepSeek-V3: "671B total parameters with 37B activated" (the main model, without MTP)
    total, act = active("deepseek-v3")
    assert (round(total / 1e9), act // 10**9) == (671, 37)
    total, act = active("kimi-k2")  # "1 trillion total parameters, 32 billion activated"
    assert (round(total / 1e12), act // 10**9) == (1, 32)
    total, act = active("deepseek-v2")  # "236B total parameters, 21B activated"
    assert (round(total / 1e9), act // 10**9) == (236, 21)
    # V2-Lite: "15.7B total, 2.4B activated": 2.4B leaves out the input embedding
    m = load_preset("deepseek-v2-lite")
    total, act = active("deepseek-v2-lite")
    assert round(total / 1e8) == 157
    assert (act - m.vocab_size * m.d_model) // 10**8 == 24


@pytest.mark.parametrize("stem", sorted(REF["published"]))
def test_preset_equals_config(stem):
    """The preset is the model at its width; the config's fp8 quantization_config is the
    stored checkpoint (deepseek-v3-fp8 is the config in every field)."""
    got = load_hf_config(ROOT / REF["published"][stem]["file"])
    want = load_preset(stem)
    for attr in got.model_dump(exclude={"name", "quantization"}):
        assert getattr(got, attr) == getattr(want, attr), attr
    assert want.quantization is None
    if got.quantization is not None:
        assert got.quantization.format == "fp8-block" and got.quantization.block == (128, 128)
    if stem == "deepseek-v3":
        assert got.model_dump(exclude={"name"}) == load_preset(
            "deepseek-v3-fp8").model_dump(exclude={"name"})


# ── FLOPs and KV bytes: FlopCounterMode and the transformers cache ───────────────────────────────


def _totals(m: ModelConfig, case: dict, **kw) -> dict:
    return totals(m, batch=case["batch"], seq=case["seq"], dtype="fp32", mla_form="latent", **kw)


@pytest.mark.parametrize("case", REF["cases"], ids=[c["name"] for c in REF["cases"]])
def test_latent_form_equals_transformers(case, hf_model):
    m = hf_model(case)
    pre, dec = _totals(m, case), _totals(m, case, phase="decode")
    assert pre["flops"] == case["prefill_flops"]
    assert _totals(m, case, logits="last")["flops"] == case["prefill_last_flops"]
    assert dec["flops"] == case["decode_flops"]
    assert pre["params"] == case["params"] == case["params_meta"]
    # transformers caches c_KV [B,1,T,D_c] and k_rope [B,1,T,D_r] per layer (float32 here)
    assert pre["kv_cache_bytes"] == case["kv_cache_bytes_prefill"]
    assert dec["kv_cache_bytes"] == case["kv_cache_bytes_decode"]
    c = case["hf_config"]
    shape = [case["batch"], 1, case["seq"]]
    assert case["kv_cache_shapes_prefill"][0] == [[*shape, c["kv_lora_rank"]],
                                                  [*shape, c["qk_rope_head_dim"]]]


@pytest.mark.parametrize("name", [REF["cases"][0]["name"], REF["cases"][2]["name"]])
def test_live_flop_counter(name, hf_model, live_measure):
    case = next(c for c in REF["cases"] if c["name"] == name)
    live = live_measure("mla", case)
    m = hf_model(live)
    assert _totals(m, live)["flops"] == live["prefill_flops"]
    assert _totals(m, live, phase="decode")["flops"] == live["decode_flops"]
    assert _totals(m, live)["kv_cache_bytes"] == live["kv_cache_bytes_prefill"]


# ── the three forms, by hand ─────────────────────────────────────────────────────────────────────


def test_the_three_decode_forms_differ_by_the_hand_formulas():
    m = load_preset("deepseek-v2-lite")
    N, H, Dc, Dr, Dn, Dv = 27, 16, 512, 64, 128, 128
    T = 4095
    Tk = T + 1  # T′: the cached tokens and the new one
    f = {form: totals(m, batch=1, seq=T, phase="decode", mla_form=form)["flops"]
         for form in FORMS}
    # latent re-expands the T′ − 1 older latents through kv_b_proj; expanded expands only the new
    assert f["latent"] - f["expanded"] == N * 2 * (Tk - 1) * Dc * H * (Dn + Dv)
    # absorbed: q_nope·W_UKᵀ and ·W_UV replace kv_b_proj on the new token (the same 2·H·Dc·
    # (Dn+Dv)); scores and A·V run over D_c+D_r and D_c instead of Dn+Dr and Dv
    assert f["absorbed"] - f["expanded"] == N * 2 * H * Tk * ((Dc + Dr) + Dc - (Dn + Dr) - Dv)
    # "those re-expansions are most of V2-Lite's decode FLOPs"
    assert f["latent"] - f["expanded"] > f["latent"] / 2
    # prefill expands the latent in every form (engines do too): the same FLOPs
    assert len({totals(m, batch=2, seq=64, mla_form=form)["flops"] for form in FORMS}) == 1


def test_kv_cache_per_token_per_form_and_rank():
    m = load_preset("deepseek-v2-lite")  # 27 layers, H=16
    for form, per_layer in (("absorbed", 512 + 64), ("latent", 512 + 64),
                            ("expanded", 16 * ((128 + 64) + 128))):
        t = totals(m, batch=1, seq=10, dtype="bf16", mla_form=form)
        assert t["kv_cache_bytes_per_token"] == 27 * per_layer * 2
        assert t["kv_cache_bytes"] == 10 * 27 * per_layer * 2
        assert t["kv_cache_form"] == f"mla-{form}"
    # under TP the latent is whole on every rank; the expanded cache splits by heads
    for form, split in (("absorbed", 1), ("expanded", 4)):
        doc = build_trace(m, Workload(batch=1, seq=10, tp=4, mla_form=form))
        tp = doc["parallel"]["tp"]
        assert tp["kv_cache_bytes_per_rank"] * split == doc["totals"]["kv_cache_bytes"]
        assert tp["kv_cache_replicated"] is (form == "absorbed")


@pytest.mark.parametrize("form", FORMS)
def test_closed_form_equals_the_trace_in_each_form(form):
    m = load_preset("deepseek-v2-lite").model_copy(update={"n_layers": 3, "ffn_types": (
        "dense", "moe", "moe")})
    cf = ClosedForm(m, logits="last", mla_form=form)
    points = [dict(batch=b, seq=t, phase=ph, tp=tp, pp=pp, dtype="bf16", kv_dtype=kv,
                   act_dtype="bf16")
              for b, t, ph, tp, pp, kv in ((1, 1, "prefill", 1, 1, "bf16"),
                                           (3, 700, "decode", 2, 1, "fp8"),
                                           (2, 33, "prefill", 4, 3, "bf16"),
                                           (5, 4096, "decode", 8, 1, "int4"))]
    assert_equal_at(m, cf, points)


# ── verify: every form runs, TP included; perturbations fail ────────────────────────────────────


def tiny(**kw) -> ModelConfig:
    fields = dict(vocab_size=97, d_model=64, n_layers=3, n_heads=4, d_ff=96, ffn="swiglu",
                  norm="rmsnorm", positions="rope", max_positions=4096, kv_lora_rank=32,
                  q_lora_rank=24, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12,
                  n_experts=8, experts_per_token=2, d_ff_expert=16, n_shared_experts=2,
                  router_scoring="sigmoid", norm_topk_prob=True, routed_scaling_factor=2.5,
                  ffn_types=("dense", "moe", "moe"))
    return ModelConfig(**{**fields, **kw})


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("q_lora", [24, None])
def test_verify_passes_in_every_form(form, tp, q_lora):
    doc = verify(tiny(q_lora_rank=q_lora, qkv_bias=q_lora is None,
                      attn_out_bias=q_lora is None),
                 Workload(batch=2, seq=5, tp=tp, mla_form=form), precision="float64")
    assert doc["ok"], [c for c in doc["checks"] if not c["ok"]]
    names = {c["name"] for c in doc["checks"]}
    assert f"decode (KV cache, p={tp}) == full forward over T+1 tokens" in names


@pytest.mark.parametrize("what", ["Dc", "Dr", "Dv"])
@pytest.mark.parametrize("form", ["absorbed", "expanded"])
def test_verify_fails_when_an_mla_size_is_perturbed(monkeypatch, what, form):
    import inspect

    from shapecalc.model.expr import Dim
    from shapecalc.model.forward import Sizes

    real = Sizes.of

    def perturbed(model, wl, p=None, poly=False):
        z = real(model, wl, p, poly)
        if inspect.stack()[1].frame.f_globals["__name__"] != "shapecalc.interpret.symbolic":
            return z  # the executor keeps the true sizes
        d = getattr(z, what)
        return z._replace(**{what: Dim(d.value + 2, d.expr)})

    monkeypatch.setattr(Sizes, "of", staticmethod(perturbed))
    doc = verify(tiny(), Workload(batch=2, seq=5, phase="decode", mla_form=form),
                 precision="float64")
    assert not doc["ok"]


def test_verify_fails_when_absorbed_decode_drops_the_value_up_projection(monkeypatch):
    from shapecalc.interpret.symbolic import SymbolicOps

    real = SymbolicOps.head_linear

    def no_params(self, x, role, name, d_in, d_out, of, part):
        out = real(self, x, role, name, d_in, d_out, of, part)
        if part == "v":
            self.stages[-1].params = 0
        return out

    monkeypatch.setattr(SymbolicOps, "head_linear", no_params)
    doc = verify(tiny(), Workload(batch=2, seq=5, phase="decode"), precision="float64")
    assert "stage params (decode, p=1)" in {c["name"] for c in doc["checks"] if not c["ok"]}


# ── planning: the DeepSeek-V3 questions ─────────────────────────────────────────────────────────


def test_deepseek_v3_expert_parallel_ledger(cli):
    r = cli("trace", "--preset", "deepseek-v3", "--ep", "8", "--tp", "1", "--json")
    assert r.code == 0, r.err
    ep = json.loads(r.out)["parallel"]["ep"]
    assert ep["experts_per_rank"] == 256 // 8 == 32
    assert ep["moe_layers"] == 61 - 3
    # dispatch and combine each move B·T·k·D activations (bf16): 2 · 1·2048·8·7168 · 2 bytes
    assert ep["alltoall_bytes_per_layer"] == 2 * 1 * 2048 * 8 * 7168 * 2
    assert ep["alltoall_bytes_total"] == 58 * ep["alltoall_bytes_per_layer"]


def test_deepseek_v3_fits_8_h200_in_fp8_not_in_bf16(cli):
    fits = {}
    for dtype in ("fp8", "bf16"):
        r = cli("fit", "--preset", "deepseek-v3", "--gpu", "h200", "--ep", "8", "--dtype", dtype,
                "--json")
        assert r.code == (0 if dtype == "fp8" else 1), r.err  # exit 1: does not fit
        doc = json.loads(r.out)
        assert doc["gpus"] == 8 and doc["kv_cache_form"] == "mla-absorbed"
        fits[dtype] = doc["fits"]
        # one GPU: the non-expert 17.1 B and 32 of each MoE layer's 256 experts
        assert doc["memory_per_rank"]["weights"] == 98_856_229_888 * (1 if dtype == "fp8" else 2)
    assert fits == {"fp8": True, "bf16": False}


# ── bad inputs: exit 2, one line naming the field ────────────────────────────────────────────────


def _one_line(r, field: str) -> None:
    assert field in _one_clean_line(r), r.err


@pytest.mark.parametrize("change,field", [
    ({"num_key_value_heads": 8}, "num_key_value_heads"),
    ({"moe_layer_freq": 2}, "moe_layer_freq"),
    ({"scoring_func": "softmax"}, "scoring_func"),
    ({"head_dim": 128}, "head_dim"),
    ({"first_k_dense_replace": 61}, "first_k_dense_replace"),
])
def test_bad_deepseek_configs_exit_2(cli, tmp_path, change, field):
    cfg = {**json.loads((DATA / "hf" / "deepseek-v3.json").read_text()), **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    _one_line(cli("trace", "--hf-config", str(path)), field)


def test_bad_deepseek_v2_router_exits_2(cli, tmp_path):
    base = json.loads((DATA / "hf" / "deepseek-v2-lite.json").read_text())
    for change, field in (({"topk_method": "noaux_tc"}, "topk_method"),
                          ({"norm_topk_prob": True}, "norm_topk_prob")):
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**base, **change}))
        _one_line(cli("trace", "--hf-config", str(path)), field)


def test_bad_mla_fields_and_forms():
    with pytest.raises(ShapecalcError) as e:
        tiny(kv_lora_rank=None)
    assert e.value.field == "q_lora_rank"
    with pytest.raises(ShapecalcError) as e:
        tiny(v_head_dim=None)
    assert e.value.field == "v_head_dim"
    with pytest.raises(ShapecalcError) as e:
        tiny(qk_rope_head_dim=7)
    assert e.value.field == "qk_rope_head_dim"
    for clash in ({"n_kv_heads": 2}, {"qk_norm": True}, {"fused_qkv": True}):
        with pytest.raises(ShapecalcError) as e:
            tiny(**clash)
        assert e.value.field == next(iter(clash))


def test_mla_form_on_a_model_without_mla_exits_2(cli):
    _one_line(cli("trace", "--preset", "llama2-7b", "--mla-form", "latent"), "mla_form")
    _one_line(cli("trace", "--preset", "deepseek-v2-lite", "--mla-form", "compressed"),
              "mla_form")


def test_explain_refuses_mla_in_one_line(cli, tmp_path):
    path = tmp_path / "mla.json"
    path.write_text(json.dumps(tiny().model_dump(exclude={"name"})))
    _one_line(cli("explain", "--config", str(path)), "kv_lora_rank")


def test_verify_cli_simulates_expert_parallelism_on_a_deepseek_like_model(cli, tmp_path):
    path = tmp_path / "mla.json"
    path.write_text(json.dumps(tiny().model_dump(exclude={"name"})))
    r = cli("verify", "--config", str(path), "--ep", "4", "--json")
    assert r.code == 0, r.err
    names = {c["name"]: c for c in json.loads(r.out)["checks"]}
    assert names["EP ep=4 == one rank (prefill logits)"]["ok"]
    _one_line(cli("verify", "--config", str(path), "--ep", "4", "--tp", "2"), "ep")


@pytest.mark.parametrize("form", FORMS)
def test_the_padding_mask_is_listed_and_run_in_every_decode_form(form):
    wl = Workload(batch=2, seq=5, phase="decode", mla_form=form, padding_mask=True)
    stages = build_trace(tiny(), wl)["stages"]
    assert [s["kind"] for s in stages if s["name"] == "padding mask"] == [0, 1]  # each kind once
    doc = verify(tiny(), wl, precision="float64")
    assert doc["ok"], [c for c in doc["checks"] if not c["ok"]]
