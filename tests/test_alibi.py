"""ALiBi, BLOOM's embedding norm, GPT-BigCode's MQA and StarCoder2's window, executed: `verify`
passes on each family's tiny reference model and on the new presets, and fails when the ALiBi
bias or the embedding norm is perturbed on the symbolic side, or when the executor gives a rank
another rank's slopes or decode the wrong key positions. The slopes are ALiBi's (checked by hand
and, when torch is installed, against transformers' BLOOM and MPT code). Config keys that
transformers ignores, or that shapecalc does not model, are refused naming the key."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from shapecalc.check.verify import verify
from shapecalc.inputs.hf import load_hf_config
from shapecalc.interpret import alibi, symbolic
from shapecalc.interpret.alibi import alibi_slopes
from shapecalc.interpret.numeric import NumericOps
from shapecalc.model.config import ModelConfig, ShapecalcError, Workload

REF = json.loads((Path(__file__).parent / "data" / "alibi_reference.json").read_text())
CASES = {c["name"]: c for c in REF["cases"]}
# a BLOOM of 6 heads (not a power of two) and its embedding norm
BLOOM = ModelConfig(name="tiny-bloom", vocab_size=60, d_model=24, n_layers=2, n_heads=6,
                    d_ff=96, positions="alibi", tie_embeddings=True, qkv_bias=True,
                    attn_out_bias=True, ffn_bias=True, fused_qkv=True, embedding_norm=True)
WL = Workload(batch=2, seq=6, tp=2, kv_dtype="fp32")  # tolerance 2e-4: no KV rounding


def failing(doc):
    return [c["name"] for c in doc["checks"] if not c["ok"]]


@pytest.mark.parametrize("name", sorted(CASES))
def test_verify_passes_on_every_reference_model(name, hf_model):
    m = hf_model(CASES[name])
    tp = 2 if m.n_heads % 2 == 0 else 1
    doc = verify(m, Workload(batch=2, seq=7, tp=tp))  # T=7 > W=4 in starcoder2_sliding4
    assert failing(doc) == [] and doc["ok"]


@pytest.mark.parametrize("tp", [1, 2, 3, 6])
def test_verify_passes_on_bloom_at_every_tp_each_rank_its_heads_slopes(tp):
    assert failing(verify(BLOOM, WL.model_copy(update={"tp": tp}))) == []


def test_alibi_slopes_by_hand():
    # a power of two: 2^(−8h/H)
    assert np.allclose(alibi_slopes(8), 2.0 ** -np.arange(1, 9))
    assert np.allclose(alibi_slopes(4), 2.0 ** (-2.0 * np.arange(1, 5)))
    # 12 heads: the 8 of H=8, then the odd steps of H=16's: 2^−0.5, 2^−1.5, 2^−2.5, 2^−3.5
    want = np.concatenate([2.0 ** -np.arange(1, 9), 2.0 ** -(np.arange(4) + 0.5)])
    assert np.allclose(alibi_slopes(12), want)
    assert len(alibi_slopes(71)) == 71 and alibi_slopes(1)[0] == 2.0**-8


@pytest.mark.skipif(importlib.util.find_spec("torch") is None
                    or importlib.util.find_spec("transformers") is None,
                    reason="torch and transformers are not installed")
def test_alibi_slopes_equal_transformers_bloom_and_mpt():
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    for H in (1, 3, 5, 6, 12, 16, 20, 48, 71, 112):
        bloom = _get_alibi_slopes(H, "cpu").double().numpy()
        mpt = -build_mpt_alibi_tensor(H, 2)[:, 0, 0].double().numpy()  # slope × (0 − 1)
        assert np.allclose(alibi_slopes(H), bloom, rtol=1e-6)
        assert np.allclose(alibi_slopes(H), mpt, rtol=1e-6)


# -- a perturbed symbolic side fails ---------------------------------------------------------------
def test_an_alibi_stage_counting_two_flops_per_score_fails(monkeypatch):
    real = symbolic.SymbolicOps.alibi

    def doubled(self, s, role, name):
        out = real(self, s, role, name)
        st = self.stages[-1]
        st.elementwise_flops *= 2
        return out

    monkeypatch.setattr(symbolic.SymbolicOps, "alibi", doubled)
    bad = failing(verify(BLOOM, WL))
    assert "stage elementwise FLOPs (prefill, p=1)" in bad and "total elementwise flops" in bad


def test_a_symbolic_side_without_the_alibi_stage_fails(monkeypatch):
    monkeypatch.setattr(symbolic.SymbolicOps, "alibi", lambda self, s, role, name: s)
    assert "stage names and shapes (prefill, p=1)" in failing(verify(BLOOM, WL))


def test_an_embedding_norm_without_beta_fails(monkeypatch):
    real = symbolic.SymbolicOps.norm

    def no_beta(self, x, role, name, width=None, kind=None):
        out = real(self, x, role, name, width, kind)
        if role == "embed.norm":
            self.stages[-1].params //= 2
        return out

    monkeypatch.setattr(symbolic.SymbolicOps, "norm", no_beta)
    bad = failing(verify(BLOOM, WL))
    assert "stage params (prefill, p=1)" in bad and "total params" in bad


# -- a wrong executor fails its behavioural checks -------------------------------------------------
def test_every_rank_adding_rank_0s_slopes_fails(monkeypatch):
    real, slopes = NumericOps.alibi, alibi.alibi_slopes

    def rank0(self, s, role, name):  # with p ranks, each adds the slopes of heads 0..H/p−1
        h = s.shape[2]
        monkeypatch.setattr(alibi, "alibi_slopes",
                            lambda H, mb=8.0: np.tile(slopes(H)[:h], H // h))
        try:
            return real(self, s, role, name)
        finally:
            monkeypatch.setattr(alibi, "alibi_slopes", slopes)

    monkeypatch.setattr(NumericOps, "alibi", rank0)
    bad = failing(verify(BLOOM, WL))
    assert "TP p=2 == unsharded (prefill logits)" in bad


def test_decode_reading_the_wrong_key_positions_fails(monkeypatch):
    real = NumericOps.alibi

    def keys_at_the_query(self, s, role, name):
        if not self.decoding:
            return real(self, s, role, name)
        return self._rec(role, name, "alibi", s, ew=self._el(s))  # no bias: distance 0

    monkeypatch.setattr(NumericOps, "alibi", keys_at_the_query)
    bad = failing(verify(BLOOM, WL))
    assert any(b.startswith("decode (KV cache, p=2) == full forward") for b in bad)


# -- Hugging Face import: the refusals -------------------------------------------------------------
def _write(tmp_path, case, **changes):
    cfg = {**CASES[case]["hf_config"], **changes}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return p


@pytest.mark.parametrize("case,changes,field", [
    ("mpt_h12", {"expansion_ratio": 8}, "expansion_ratio"),
    ("mpt_h12", {"no_bias": False}, "no_bias"),
    ("mpt_h12", {"logit_scale": 0.5}, "logit_scale"),
    ("mpt_h12", {"norm_type": "rmsnorm"}, "norm_type"),
    ("mpt_h12", {"attn_config": {"alibi": False}}, "attn_config.alibi"),
    ("mpt_h12", {"attn_config": {"qk_ln": True}}, "attn_config.qk_ln"),
    ("mpt_h12", {"attn_config": {"clip_qkv": 6}}, "attn_config.clip_qkv"),
    ("mpt_h12", {"attn_config": {"alibi_bias_max": 16}}, "attn_config.alibi_bias_max"),
    ("mpt_h12", {"attn_config": {"attn_type": "multiquery_attention"}}, "attn_config.attn_type"),
    ("mpt_h12", {"attn_config": {"softmax_scale": 0.5}}, "attn_config.softmax_scale"),
    ("mpt_h12", {"attn_config": {"prefix_lm": True}}, "attn_config.prefix_lm"),
    ("bloom_h6", {"apply_residual_connection_post_layernorm": True},
     "apply_residual_connection_post_layernorm"),
    ("bloom_h6", {"slow_but_exact": True, "pretraining_tp": 2}, "slow_but_exact"),
    ("bloom_h6", {"n_inner": 100}, "n_inner"),
    ("gpt_bigcode_mqa", {"scale_attn_weights": False}, "scale_attn_weights"),
    ("gpt_bigcode_mqa", {"add_cross_attention": True}, "add_cross_attention"),
    ("gpt_bigcode_mqa", {"num_key_value_heads": 4}, "num_key_value_heads"),
    ("starcoder2_sliding4", {"norm_type": "rms_norm"}, "norm_type"),
    ("starcoder2_sliding4", {"mlp_type": "gated"}, "mlp_type"),
])
def test_unmodelled_keys_are_refused_naming_the_key(tmp_path, case, changes, field):
    with pytest.raises(ShapecalcError) as e:
        load_hf_config(_write(tmp_path, case, **changes))
    assert e.value.field == field


def test_the_cli_exits_2_with_one_line(tmp_path, cli):
    r = cli("trace", "--hf-config", str(_write(tmp_path, "mpt_h12", expansion_ratio=8)))
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1
    assert "expansion_ratio" in r.err and "Traceback" not in r.err


def test_mpt_7b_reads_softmax_scale_equal_to_one_over_root_dh(tmp_path):
    m = load_hf_config(_write(tmp_path, "mpt_h12", attn_config={"softmax_scale": 8 ** -0.5}))
    assert m.positions == "alibi" and not m.has_norm_bias and not m.qkv_bias


def test_what_each_family_reads():
    hf = Path(__file__).parent / "data" / "hf"
    b = load_hf_config(hf / "bloom-560m.json")
    assert (b.positions, b.embedding_norm, b.fused_qkv, b.qkv_bias, b.d_ff) == (
        "alibi", True, True, True, 4096)
    s = load_hf_config(hf / "starcoder.json")
    assert (s.kv_heads, s.positions, s.max_positions, s.fused_qkv) == (1, "learned", 8192, True)
    s2 = load_hf_config(hf / "starcoder2-15b.json")
    assert (s2.sliding_window, s2.kv_heads, s2.ffn, s2.has_norm_bias, s2.ffn_bias,
            s2.tie_embeddings) == (4096, 4, "gelu", True, True, False)
    mpt = load_hf_config(hf / "mpt-7b.json")
    assert (mpt.positions, mpt.max_positions, mpt.d_ff, mpt.has_norm_bias) == (
        "alibi", 2048, 16384, False)


def test_trace_shows_the_alibi_stage_and_the_embedding_norm(cli):
    doc = cli("trace", "--preset", "bloom-560m", "--seq", "16", "--json").json()
    alibi = next(s for s in doc["stages"] if s["name"] == "ALiBi bias")
    assert alibi["dims"] == ["B", "H", "T", "T"] and alibi["elementwise_formula"] == "B·H·T²"
    norm = next(s for s in doc["stages"] if s["name"] == "embedding norm")
    assert norm["params"] == 2 * 1024
    assert doc["totals"]["params_breakdown"]["embedding_norm"] == 2048
    assert not any(s["name"] in ("position add", "RoPE q") for s in doc["stages"])
