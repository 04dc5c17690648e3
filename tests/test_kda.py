"""Kimi Delta Attention (KDA, model/kda.py): the executor's chunked form (as transformers 5.24's
chunk_kimi_delta_attention computes it) equals the step-by-step recurrence and every other
verify check passes, under TP too; a perturbed chunk formula is caught; its counts by hand; bad
configs exit 2 naming the key."""

from __future__ import annotations

import json

import pytest

from shapecalc.check.verify import verify
from shapecalc.costs.trace import build_trace
from shapecalc.interpret import kda as numeric_kda
from shapecalc.model.config import ModelConfig, Workload

# KDA, then attention without RoPE; H = 2 heads of D_k = 6 (gated DeltaNet's fields, equal)
KDA = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=40,
           ffn="swiglu", norm="rmsnorm", positions="none", mixer_types=["kda", "attention"],
           gdn_qk_heads=2, gdn_v_heads=2, gdn_qk_dim=6, gdn_v_dim=6, conv_kernel=4, scan_chunk=8)


# Ling 3.0's form: full-rank gates, the bounded forget gate; MLA with RoPE and a head-wise gate
LING = dict(KDA, n_kv_heads=None, head_dim=None, positions="rope", kda_low_rank=False,
            kda_gate_bound=-5.0, attn_head_gate=True, kv_lora_rank=12, qk_nope_head_dim=6,
            qk_rope_head_dim=4, v_head_dim=8)


def _scan_check(r: dict) -> dict:
    return next(c for c in r["checks"] if c["name"].startswith("chunked scan =="))


@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize("T", [3, 19])  # within one chunk (and under K_c); past two chunks
def test_verify_passes(phase, T):
    r = verify(ModelConfig(**KDA), Workload(batch=2, seq=T, phase=phase, dtype="fp32"),
               precision="float64")
    assert not [c for c in r["checks"] if not c["ok"]]
    if phase == "prefill":
        assert float(_scan_check(r)["measured"]) <= 1e-12


@pytest.mark.parametrize(("form", "tp"), [("absorbed", 1),
                                          pytest.param("latent", 1, marks=pytest.mark.slow),
                                          pytest.param("absorbed", 2, marks=pytest.mark.slow),
                                          pytest.param("latent", 2, marks=pytest.mark.slow)])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_verify_passes_in_ling_form(phase, form, tp):
    r = verify(ModelConfig(**LING), Workload(batch=2, seq=19, phase=phase, dtype="fp32", tp=tp,
                                             mla_form=form), precision="float64")
    assert not [c for c in r["checks"] if not c["ok"]]


def test_ling_form_counts_by_hand():
    """Full-rank gates: f_proj and g_proj [D → H·D_k]; the head-wise gate [D → H]."""
    D, H, Dk = 32, 2, 6
    low, full = (build_trace(ModelConfig(**f), Workload(seq=5))["totals"]["params"]
                 for f in ({**LING, "kda_low_rank": True}, LING))
    assert full - low == 2 * (D * H * Dk - (D * Dk + Dk * H * Dk))
    gated = [s for s in build_trace(ModelConfig(**LING), Workload(seq=5))["stages"]
             if s["role"] == "attn.head_gate"]
    assert [s["params"] for s in gated] == [D * 4] and gated[0]["flops"] == 2 * 5 * D * 4


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_verify_passes_under_tensor_parallelism(phase):
    """p = 2 ranks, each its heads: the gates' down-projections replicated, their
    up-projections, q, k, v, the conv channels and the per-channel b_dt split by heads."""
    r = verify(ModelConfig(**KDA), Workload(batch=2, seq=19, phase=phase, dtype="fp32", tp=2),
               precision="float64")
    assert not [c for c in r["checks"] if not c["ok"]]
    assert any(c["name"].startswith("TP p=2 == unsharded") for c in r["checks"])


def test_the_kda_check_catches_a_perturbed_chunk_formula(monkeypatch):
    model, wl = ModelConfig(**KDA), Workload(batch=1, seq=19, dtype="fp32")
    assert _scan_check(verify(model, wl, precision="float64"))["ok"]
    decay = numeric_kda._pairwise_decay
    monkeypatch.setattr(numeric_kda, "_pairwise_decay", lambda G: decay(G * 1.0001))
    c = _scan_check(verify(model, wl, precision="float64"))
    assert not c["ok"] and float(c["measured"]) > 1e-6


def test_counts_by_hand():
    """One KDA layer's parameters, its prefill matmul FLOPs (T padded to whole chunks of L) and
    its state, written out from modeling_kimi_linear.py."""
    D, H, Dk, K, L, T = 32, 2, 6, 4, 8, 19
    kd = H * Dk
    params = (3 * D * kd + 2 * (D * Dk + Dk * kd) + D * H + kd * D  # q, k, v, f_a/b, g_a/b, b, o
              + 3 * kd * K + kd + H + Dk)  # conv, b_dt, A_log, the output norm's γ
    m = ModelConfig(**KDA)
    doc = build_trace(m, Workload(batch=1, seq=T))
    mixer = [s for s in doc["stages"] if s["role"].startswith("kda.")]
    assert sum(s["params"] for s in mixer) == params
    TL = L * -(-T // L)
    linears = 2 * T * (3 * D * kd + 2 * (D * Dk + Dk * kd) + D * H + kd * D)
    conv = 2 * 3 * kd * K * (T + K - 1)
    rule = 2 * H * TL * (2 * L * Dk + L * Dk + 3 * Dk * Dk)  # A·v_β, A·k_β, A_qk·v; 3 reads of S
    assert sum(s["flops"] for s in mixer) == linears + conv + rule
    assert doc["totals"]["state_cache_bytes"] == 3 * kd * K * 2 + H * Dk * Dk * 4


@pytest.mark.parametrize(("field", "value"), [
    ("gdn_v_dim", 4),  # KDA's v heads are as wide as q and k
    ("gdn_v_heads", 4),  # and as many
    ("gdn_qk_dim", None),  # KDA layers need it
    ("scan_chunk", None),
    ("kda_gate_bound", 1.0),  # the log-decay must stay below 0
])
def test_bad_configs_exit_2_naming_the_key(cli, tmp_path, field, value):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({k: v for k, v in {**KDA, field: value}.items()
                                if v is not None}))
    r = cli("trace", "--config", str(path))
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in r.err, r.err


def test_train_refuses_kda(cli, tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(KDA))
    r = cli("train", "--config", str(path))
    assert r.code == 2 and "kda" in r.err and len(r.err.strip().splitlines()) == 1, r.err


# OLMo-Hybrid's form: gated DeltaNet with β ∈ (0, 2) beside output-normed attention
OLMO = dict(vocab_size=64, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=40,
            ffn="swiglu", norm="rmsnorm", norm_position="output", positions="rope",
            qk_norm=True, qk_norm_width="all", mixer_types=["gated_deltanet", "attention",
                                                          "gated_deltanet"],
            gdn_qk_heads=2, gdn_v_heads=4, gdn_qk_dim=8, gdn_v_dim=6, gdn_fused_proj=False,
            gdn_neg_eigval=True, conv_kernel=4, scan_chunk=8)


@pytest.mark.parametrize("fields", [KDA, LING, OLMO], ids=["kda", "ling", "olmo"])
def test_closed_form_equals_the_stages(fields):
    """The closed form (sweep, fit, compare) equals each traced point: the state constant in
    T, the rules linear in T_L."""
    from test_closed import assert_equal_at  # tests/ is on sys.path (rootdir-less)

    from shapecalc.costs.closed import ClosedForm
    model = ModelConfig(**fields)
    whole = model.qk_norm_width == "all"  # OLMo's whole-width q/k norms: tp 1 only
    at = ((1, 1, "prefill", 1), (3, 19, "prefill", 2), (2, 64, "decode", 1), (1, 70, "decode", 2))
    points = [dict(batch=b, seq=t, phase=ph, tp=1 if whole else p, pp=1, dtype="bf16",
                   kv_dtype="bf16", act_dtype="bf16") for b, t, ph, p in at]
    assert_equal_at(model, ClosedForm(model), points)


def test_olmo_form_verifies():
    """β ∈ (0, 2) and the blocks' mixed norm placement, prefill past two chunks and decode."""
    for phase in ("prefill", "decode"):
        r = verify(ModelConfig(**OLMO), Workload(batch=2, seq=19, phase=phase, dtype="fp32"),
                   precision="float64")
        assert not [c for c in r["checks"] if not c["ok"]]
