"""verify runs the Gemma 2/3 and OLMo 2 variants, and fails when the symbolic side of one is
perturbed: the softcaps, the post-norms, the query_pre_attn_scalar score scale, the whole-width
q/k norms."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shapecalc.check.verify import verify
from shapecalc.costs.trace import build_trace
from shapecalc.interpret import symbolic
from shapecalc.interpret.numeric import step
from shapecalc.interpret.weights import Weights
from shapecalc.model.config import ModelConfig, ShapecalcError, Workload, check

# Gemma 3-like with Gemma 2's softcaps: sandwich norms, (1+γ), s = 9 ≠ Dh = 6, two RoPE bases,
# windows of 3 on local layers, q/k norms per head
GEMMA = ModelConfig(
    vocab_size=40, d_model=16, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=6, d_ff=24,
    ffn="geglu", norm="rmsnorm", norm_position="sandwich", norm_plus_one=True, positions="rope",
    tie_embeddings=True, embedding_scale=True, qk_norm=True, query_pre_attn_scalar=9,
    attn_softcap=5.0, final_softcap=3.0, rope_base=1e6, rope_base_local=1e4,
    layer_types=("sliding", "sliding", "full", "sliding"), sliding_window=3)
# OLMo 2-like: output norms, no pre-norms, q/k norms over H·Dh = 24 and H_kv·Dh = 12
OLMO = ModelConfig(
    vocab_size=40, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=6, d_ff=24,
    ffn="swiglu", norm="rmsnorm", norm_position="output", positions="rope", qk_norm=True,
    qk_norm_width="all", rope_base=5e5)


def failing(doc):
    return {c["name"] for c in doc["checks"] if not c["ok"]}


@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize("model,tp", [(GEMMA, 1), (GEMMA, 2), (OLMO, 1)],
                         ids=["gemma", "gemma-tp2", "olmo"])
def test_verify_passes(model, tp, phase):
    wl = Workload(batch=2, seq=7, phase=phase, tp=tp, pp=2, block_size=2, padding_mask=True)
    doc = verify(model, wl, precision="float64")
    assert doc["ok"], [c for c in doc["checks"] if not c["ok"]]
    names = {c["name"] for c in doc["checks"]}
    assert f"stage scale factors ({phase}, p=1)" in names


def test_olmo_whole_width_norm_refuses_tp():
    with pytest.raises(ShapecalcError) as e:
        check(OLMO, Workload(tp=2))
    assert e.value.field == "tp" and "qk_norm_width" in e.value.reason


WL = Workload(batch=2, seq=6)


def test_a_different_softcap_constant_fails(monkeypatch):
    monkeypatch.setitem(symbolic.ELEMENTWISE, "softcap", 2)
    assert "stage elementwise FLOPs (prefill, p=1)" in failing(verify(GEMMA, WL))


def test_a_forgotten_softcap_fails(monkeypatch):
    monkeypatch.setattr(symbolic.SymbolicOps, "softcap", lambda self, x, role, name, cap: x)
    assert "stage names and shapes (prefill, p=1)" in failing(verify(GEMMA, WL))


@pytest.mark.parametrize("model", [GEMMA, OLMO], ids=["sandwich", "output"])
def test_forgotten_post_norms_fail(monkeypatch, model):
    real = symbolic.SymbolicOps.norm

    def no_post(self, x, role, name, width=None, kind=None):
        if role in ("attn.post_norm", "ffn.post_norm"):
            return x
        return real(self, x, role, name, width, kind)

    monkeypatch.setattr(symbolic.SymbolicOps, "norm", no_post)
    bad = failing(verify(model, WL))
    assert "stage names and shapes (prefill, p=1)" in bad and "total params" in bad


def test_a_score_scale_of_one_over_root_dh_fails(monkeypatch):
    real = symbolic.SymbolicOps.scale

    def root_dh(self, x, role, name, factor, label):
        if role == "attn.scale":  # the plain 1/√Dh instead of 1/√query_pre_attn_scalar
            factor = self.m.dh**-0.5
        return real(self, x, role, name, factor, label)

    monkeypatch.setattr(symbolic.SymbolicOps, "scale", root_dh)
    assert "stage scale factors (prefill, p=1)" in failing(verify(GEMMA, WL))
    assert not failing(verify(OLMO, WL))  # Dh is OLMo 2's own scale: nothing to catch


def test_per_head_qk_norms_on_olmo_fail(monkeypatch):
    real = symbolic.SymbolicOps.norm

    def per_head(self, x, role, name, width=None, kind=None):
        if role in ("attn.q_norm", "attn.k_norm"):
            width = self.z.Dh  # γ of Dh, as a per-head norm has
        return real(self, x, role, name, width, kind)

    monkeypatch.setattr(symbolic.SymbolicOps, "norm", per_head)
    assert "stage params (prefill, p=1)" in failing(verify(OLMO, WL))


# ── what the executor does with them ─────────────────────────────────────────────────────────


def _run(model, **kw):
    ids = np.arange(12).reshape(2, 6) % model.vocab_size
    m = model.model_copy(update=kw)
    w = Weights(m, dtype=np.float64, std=2.0)
    return step(m, WL, w, ids).full, w


def _logits(model, **kw):
    return _run(model, **kw)[0]


def test_the_executor_applies_each_variant():
    base, w = _run(GEMMA)
    assert np.abs(base).max() < 3.0  # the final softcap bounds every logit
    assert np.abs(_logits(GEMMA, final_softcap=None)).max() > 3.0
    for change in ({"attn_softcap": None}, {"query_pre_attn_scalar": None},
                   {"rope_base_local": None}):
        assert not np.allclose(_logits(GEMMA, **change), base), change
    # (1+γ) with γ stored around 0 is the function γ stored around 1 computes: the same logits
    # from the same draws, the stored γ one lower (what a real Gemma checkpoint holds)
    plain, w1 = _run(GEMMA, norm_plus_one=False)
    np.testing.assert_allclose(plain, base)
    gammas = [k for k in w.full if k[-1] == "γ"]
    assert len(gammas) == 4 * 4 + 2 * 4 + 1  # 4 norms and q, k norms a layer; the final norm
    for k in gammas:
        np.testing.assert_allclose(w1.full[k] - w.full[k], 1.0)


def test_trace_shows_the_variants():
    doc = build_trace(GEMMA, Workload(seq=8))
    names = [s["name"] for s in doc["stages"]]
    assert names.count("RoPE angles") == names.count("RoPE angles (sliding layers)") == 1
    for n in ("attention softcap", "final logit softcap", "post-attention norm", "post-FFN norm"):
        assert n in names
    scale = next(s for s in doc["stages"] if s["role"] == "attn.scale")
    assert scale["factor"] == 9**-0.5 and "query_pre_attn_scalar" in scale["note"]
    norms = [s for s in doc["stages"] if s["role"] in ("attn.q_norm", "attn.k_norm")]
    assert {s["params"] for s in build_trace(OLMO, Workload(seq=8))["stages"]
            if s["role"] in ("attn.q_norm", "attn.k_norm")} == {24, 12}
    assert {s["params"] for s in norms} == {6}


# ── the closed form (sweep, fit) and random variants ─────────────────────────────────────────


@pytest.mark.parametrize("name", ["gemma2-9b", "gemma3-27b", "olmo2-7b"])
def test_closed_form_equals_the_trace(name):
    """sweep's and fit's closed form on both sides of the windows, every valid tp."""
    from test_closed import assert_equal_at

    from shapecalc.costs.closed import ClosedForm
    from shapecalc.inputs.sources import load_preset

    model = load_preset(name)
    tps = [1, 2, 4] if name != "olmo2-7b" else [1]
    points = [dict(batch=b, seq=t, phase=ph, tp=p, pp=s, dtype="bf16", kv_dtype="fp8",
                   act_dtype="bf16")
              for b, t, ph, p, s in ((1, 1000, "prefill", tps[-1], 1), (3, 1024, "decode", 1, 2),
                                     (2, 5000, "decode", tps[0], 4), (5, 9000, "prefill", 1, 3),
                                     (7, 1023, "decode", tps[-1], 2))]
    assert_equal_at(model, ClosedForm(model), points)
    assert_equal_at(model, ClosedForm(model, attention_flops="causal", logits="last"), points)


@st.composite
def variants(draw):
    H = draw(st.sampled_from([2, 4]))
    kv = draw(st.sampled_from([k for k in (1, 2, H) if H % k == 0]))
    position = draw(st.sampled_from(["sandwich", "output", "pre"]))
    qk = draw(st.sampled_from([None, "head", "all"]))
    n = draw(st.integers(1, 4))
    types = tuple(draw(st.sampled_from(["sliding", "full"])) for _ in range(n))
    model = ModelConfig(
        vocab_size=draw(st.integers(5, 30)), d_model=8, n_layers=n, n_heads=H, n_kv_heads=kv,
        head_dim=draw(st.sampled_from([2, 4])), d_ff=8, ffn=draw(st.sampled_from(["geglu",
                                                                                   "swiglu"])),
        norm="rmsnorm", norm_position=position, norm_plus_one=draw(st.booleans()),
        positions="rope", tie_embeddings=draw(st.booleans()), qk_norm=qk is not None,
        qk_norm_width=qk or "head",
        query_pre_attn_scalar=draw(st.sampled_from([None, 3.0, 50.0])),
        attn_softcap=draw(st.sampled_from([None, 0.5, 20.0])),
        final_softcap=draw(st.sampled_from([None, 0.5, 20.0])),
        rope_base_local=draw(st.sampled_from([None, 100.0])),
        layer_types=types, sliding_window=2 if "sliding" in types else None)
    tp = 1 if qk == "all" else draw(st.sampled_from([p for p in (1, 2) if H % p == 0
                                                     and (kv % p == 0 or p % kv == 0)]))
    wl = Workload(batch=draw(st.integers(1, 2)), seq=draw(st.integers(1, 6)),
                  phase=draw(st.sampled_from(["prefill", "decode"])), tp=tp,
                  pp=draw(st.integers(1, min(2, n))), dtype=draw(st.sampled_from(["fp32", "bf16"])))
    return model, wl


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(variants())
def test_verify_on_random_variants(case):
    model, wl = case
    doc = verify(model, wl)
    assert doc["ok"], [c for c in doc["checks"] if not c["ok"]]
