"""The classic variants: partial rotary, parallel residual with one or two norms, per-head q/k
LayerNorm, Granite's multipliers and the logit scale. `verify` passes on each family's tiny
config (tests/test_presets_verify.py runs it on every new preset) and fails when a variant is
perturbed on the symbolic side; the Hugging Face import reads each family's keys and refuses what
it cannot model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapecalc.check.verify import verify
from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.inputs.sources import load_preset
from shapecalc.interpret import symbolic
from shapecalc.model import forward as fwd
from shapecalc.model.config import ModelConfig, ShapecalcError, Workload

ROOT = Path(__file__).parent.parent
HF = ROOT / "tests" / "data" / "hf"
REF = json.loads((ROOT / "tests" / "data" / "classic_reference.json").read_text())
PRESETS = ["pythia-1.4b", "gpt-neox-20b", "gpt-j-6b", "phi-2", "stablelm-2-1.6b",
           "command-r-v01", "granite-3.3-8b", "falcon-40b"]
BASE = dict(vocab_size=37, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=6, d_ff=12,
            positions="rope")
# one tiny model per family's variants (D=16, Dh=6 ≠ D/H, GQA)
FAMILIES = {
    "neox": dict(parallel_block=True, parallel_norms=2, rotary_dim=2, fused_qkv=True,
                 qkv_bias=True, attn_out_bias=True, ffn_bias=True),
    "gptj": dict(parallel_block=True, rotary_dim=4, rope_interleaved=True, ffn_bias=True,
                 lm_head_bias=True),
    "stablelm": dict(ffn="swiglu", qk_norm_per_head=True, rotary_dim=2, qkv_bias=True,
                     parallel_block=True),
    "cohere": dict(ffn="swiglu", norm_bias=False, qk_norm_per_head=True, rope_interleaved=True,
                   parallel_block=True, logit_scale=0.0625, tie_embeddings=True),
    "granite": dict(ffn="swiglu", norm="rmsnorm", embedding_multiplier=12.0,
                    attention_multiplier=0.0078125, residual_multiplier=0.22, logit_scale=0.0625,
                    tie_embeddings=True),
    "falcon_new": dict(parallel_block=True, parallel_norms=2, fused_qkv=True,
                       tie_embeddings=True),
}


def tiny(family: str, **kw) -> ModelConfig:
    return ModelConfig(**{**BASE, **FAMILIES[family], **kw})


def failing(doc: dict) -> list[str]:
    return [c["name"] for c in doc["checks"] if not c["ok"]]


def run(model: ModelConfig, **kw) -> dict:
    return verify(model, Workload(**{"batch": 2, "seq": 5, "dtype": "fp32", **kw}))


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("wl", [dict(tp=2), dict(phase="decode", tp=4, logits="last"),
                                dict(seq=6, pp=2)], ids=["prefill-tp2", "decode-tp4", "pp2"])
def test_verify_passes_on_each_familys_variants(family, wl):
    assert not failing(run(tiny(family), **wl))


@pytest.mark.parametrize("name", PRESETS)
def test_each_preset_is_its_config_json(name):
    got, want = load_hf_config(HF / f"{name}.json"), load_preset(name)
    for attr in got.model_dump(exclude={"name"}):
        assert getattr(got, attr) == getattr(want, attr), attr
    assert build_trace(want, Workload(batch=1, seq=1))["totals"]["params"] == \
        REF["published"][name]["params_meta"]


# -- perturbed on the symbolic side: verify must fail ----------------------------------------------
def _symbolic_sees(monkeypatch, **change):
    """The symbolic interpreter runs the one forward on a model with `change` applied; the
    executor runs the real model."""
    real = fwd.forward
    monkeypatch.setattr(symbolic, "forward",
                        lambda ops, m, wl, z: real(ops, m.model_copy(update=change), wl, z))


@pytest.mark.parametrize("family, change", [
    ("neox", dict(rotary_dim=None)),  # partial rotary forgotten: RoPE over all of Dh
    ("gptj", dict(rotary_dim=2)),
    ("neox", dict(parallel_norms=1)),  # GPT-NeoX's second norm forgotten
    ("gptj", dict(parallel_block=False)),  # a sequential block instead of the parallel one
    ("granite", dict(residual_multiplier=None)),
    ("granite", dict(embedding_multiplier=None)),
    ("granite", dict(logit_scale=None)),
    ("stablelm", dict(qk_norm_per_head=False)),
])
def test_verify_fails_when_a_variant_is_perturbed_on_the_symbolic_side(monkeypatch, family,
                                                                        change):
    model = tiny(family)
    assert not failing(run(model, tp=2))
    _symbolic_sees(monkeypatch, **change)
    assert failing(run(model, tp=2))


def test_a_partial_rope_counted_over_all_of_dh_fails(monkeypatch):
    monkeypatch.setattr(symbolic.SymbolicOps, "rope",
                        lambda self, x, role, name, angles: self._rec(role, name, "rope", x,
                                                                      ew=3))
    bad = failing(run(tiny("neox")))
    assert "stage elementwise FLOPs (prefill)" in bad or any("elementwise" in b for b in bad)


def test_a_per_head_norm_with_one_shared_gamma_fails(monkeypatch):
    real = symbolic.SymbolicOps.head_norm

    def shared(self, x, role, name, heads):  # γ of Dh, as Qwen3's q/k norm has
        return real(self, x, role, name, fwd.Dim.const(1))

    monkeypatch.setattr(symbolic.SymbolicOps, "head_norm", shared)
    assert any("params" in b for b in failing(run(tiny("cohere"))))


# -- what the variants cost, by hand ------------------------------------------------------------
def _stage(model, role, **kw):
    wl = Workload(batch=2, seq=5, **kw)
    st = symbolic.stages(model, wl, wl.tp)
    return [s for s in st if s.role == role]


def test_partial_rope_turns_only_r_of_dh():
    q, k = _stage(tiny("neox"), "attn.rope")  # R=2 of Dh=6: 3 FLOPs per rotated element
    assert (q.elementwise_flops, k.elementwise_flops) == (3 * 2 * 4 * 5 * 2, 3 * 2 * 2 * 5 * 2)
    assert "R" in q.elementwise_formula
    (angles,) = _stage(tiny("neox"), "rope.angles")
    assert angles.shape == [5, 1]  # [T, R/2]


def test_two_norms_cost_a_second_norm_and_its_params():
    one, two = tiny("neox", parallel_norms=1), tiny("neox")
    p1 = build_trace(one, Workload(batch=1, seq=1))["totals"]["params"]
    p2 = build_trace(two, Workload(batch=1, seq=1))["totals"]["params"]
    assert p2 - p1 == 2 * 2 * 16  # N · (γ + β) · D


def test_per_head_norm_has_a_gamma_per_head():
    q, k = _stage(tiny("cohere"), "attn.q_norm") + _stage(tiny("cohere"), "attn.k_norm")
    assert (q.params, k.params) == (4 * 6, 2 * 6)
    (q2,) = _stage(tiny("cohere"), "attn.q_norm", tp=2)
    assert q2.params == 2 * 6  # H/p heads on a rank


def test_granite_scales_are_elementwise_stages():
    m = tiny("granite")
    assert len(_stage(m, "residual.scale")) == 2  # attention's and the FFN's branch
    (emb,) = _stage(m, "embed.scale")
    (lg,) = _stage(m, "head.scale")
    assert (emb.elementwise_flops, lg.elementwise_flops) == (2 * 5 * 16, 2 * 5 * 37)
    (sc,) = _stage(m, "attn.scale")
    assert sc.note == "× 0.0078125"


# -- configuration and import refusals ----------------------------------------------------------
@pytest.mark.parametrize("bad, field", [
    (dict(rotary_dim=5), "rotary_dim"),
    (dict(rotary_dim=8), "rotary_dim"),
    (dict(positions="learned", max_positions=8, rotary_dim=2), "rotary_dim"),
    (dict(parallel_norms=2), "parallel_norms"),
    (dict(qk_norm=True, qk_norm_per_head=True), "qk_norm_per_head"),
    (dict(parallel_block=True, residual_multiplier=0.5), "residual_multiplier"),
])
def test_bad_variant_fields_are_refused(bad, field):
    with pytest.raises(ShapecalcError) as e:
        ModelConfig(**{**BASE, **bad})
    assert e.value.field == field


def _write(tmp_path, cfg):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return p


@pytest.mark.parametrize("file, change, field", [
    ("phi-2", {"qk_layernorm": True}, "qk_layernorm"),
    ("gpt-j-6b", {"rotary_dim": None}, "rotary_dim"),
    ("gpt-j-6b", {"rotary_dim": 300}, "rotary_dim"),
    ("command-r-v01", {"logit_scale": None}, "logit_scale"),
    ("command-r-v01", {"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
    ("granite-3.3-8b", {"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
    ("pythia-1.4b", {"rotary_pct": 0.001}, "partial_rotary_factor"),  # R = int(0.128) = 0
    ("stablelm-2-1.6b", {"head_dim": 32}, "head_dim"),
])
def test_import_refuses_what_it_cannot_model(tmp_path, file, change, field):
    cfg = {**json.loads((HF / f"{file}.json").read_text()), **change}
    with pytest.raises(ShapecalcError) as e:
        load_hf_config(_write(tmp_path, cfg))
    assert e.value.field == field


def test_import_reads_the_rotary_factor_where_transformers_does(tmp_path):
    neox = json.loads((HF / "pythia-1.4b.json").read_text())
    neox.pop("rotary_pct")  # GPTNeoXConfig's default 0.25
    assert load_hf_config(_write(tmp_path, neox)).rotary_dim == 32
    neox["rope_parameters"] = {"rope_type": "default", "rope_theta": 1e4,
                               "partial_rotary_factor": 0.5}
    assert load_hf_config(_write(tmp_path, neox)).rotary_dim == 64
    phi = json.loads((HF / "phi-2.json").read_text())
    phi.pop("partial_rotary_factor")  # PhiConfig's default 0.5
    assert load_hf_config(_write(tmp_path, phi)).rotary_dim == 40
    neox_seq = {**json.loads((HF / "gpt-neox-20b.json").read_text()),
                "use_parallel_residual": False}
    m = load_hf_config(_write(tmp_path, neox_seq))
    assert (m.parallel_block, m.parallel_norms) == (False, 1)


def test_cli_refusal_is_one_line_exit_2(tmp_path, cli):
    cfg = {**json.loads((HF / "phi-2.json").read_text()), "qk_layernorm": True}
    r = cli("trace", "--hf-config", str(_write(tmp_path, cfg)))
    assert r.code == 2 and "qk_layernorm" in r.err and len(r.err.strip().splitlines()) == 1


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_closed_form_equals_the_stage_pipeline(family):
    from shapecalc.costs.closed import ClosedForm
    from tests.test_closed import assert_equal_at

    m = tiny(family)
    points = [dict(batch=b, seq=t, phase=ph, tp=tp, pp=pp, dtype="bf16", kv_dtype="fp8",
                   act_dtype="bf16")
              for b, t, ph, tp, pp in [(1, 3, "prefill", 1, 1), (3, 9, "decode", 2, 2),
                                       (2, 17, "prefill", 4, 1), (5, 40, "decode", 1, 2)]]
    assert_equal_at(m, ClosedForm(m), points)


# -- the executor's RoPE layouts ----------------------------------------------------------------
def _turn(x, R, interleaved, pos):
    import numpy as np

    from shapecalc.interpret import rotary

    _, cos, sin = rotary.tables(R, np.asarray(pos), np.float64, interleaved)
    return rotary.rotate(x, cos, sin, interleaved)[0]


def test_the_executors_rope_turns_halves_or_pairs_by_hand():
    import numpy as np

    x = np.arange(1.0, 7.0)[None]  # one position, Dh = 6, R = 4
    th = [1.0, 10000 ** -0.5]  # position 1 × the frequencies 10000^(−2i/R)
    for interleaved, pairs in ((False, [(0, 2), (1, 3)]), (True, [(0, 1), (2, 3)])):
        want = x.copy()
        for (a, b), t in zip(pairs, th, strict=True):
            c, s = np.cos(t), np.sin(t)
            want[0, a], want[0, b] = x[0, a] * c - x[0, b] * s, x[0, b] * c + x[0, a] * s
        # (the angles are float32, as transformers computes them; a wrong layout is off by O(1))
        np.testing.assert_allclose(_turn(x, 4, interleaved, [1]), want, rtol=1e-6)


def test_the_executors_rope_equals_transformers_gptj_and_gpt_neox():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import numpy as np
    from transformers.models.gpt_neox import modeling_gpt_neox as neox
    from transformers.models.gptj import modeling_gptj as gptj

    B, H, T, Dh, R = 2, 3, 5, 12, 8
    x = torch.randn(B, T, H, Dh, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    pos = np.arange(T)
    # GPT-J: rotate_every_two on x[..., :R] of [B, T, H, Dh]
    sincos = gptj.create_sinusoidal_positions(T, R).to(torch.float64)[None]
    sin, cos = torch.split(sincos, R // 2, dim=-1)
    want = torch.cat([gptj.apply_rotary_pos_emb(x[..., :R], sin, cos), x[..., R:]], dim=-1)
    got = _turn(x.numpy().transpose(0, 2, 1, 3), R, True, pos).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-6)
    # GPT-NeoX: rotate_half on the first R of [B, H, T, Dh]
    q = x.transpose(1, 2)
    inv = 1.0 / (10000 ** (torch.arange(0, R, 2, dtype=torch.float64) / R))
    emb = torch.cat([torch.arange(T, dtype=torch.float64)[:, None] * inv] * 2, dim=-1)[None]
    want, _ = neox.apply_rotary_pos_emb(q, q, emb.cos(), emb.sin())
    np.testing.assert_allclose(_turn(q.numpy(), R, False, pos), want.numpy(), rtol=1e-6,
                               atol=1e-6)
