"""Llama 4: chunked attention, NoPE layers, the L2 q/k norm, the attention temperature and its
routing — read from config.json, traced once per kind of layer, executed by verify (which fails
when the symbolic chunk, NoPE or q/k-norm formulas are perturbed), and the closed form equal to the
stage list on both sides of every chunk boundary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_closed import assert_equal_at, valid_tps  # tests/ is on sys.path (rootdir-less)

from shapecalc.check.verify import verify
from shapecalc.costs.closed import ClosedForm
from shapecalc.costs.grid import evaluate
from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.inputs.sources import load_preset
from shapecalc.interpret import symbolic
from shapecalc.model import forward as fwd
from shapecalc.model.config import ModelConfig, ShapecalcError, Workload
from shapecalc.model.plan import layer_plan

HF = Path(__file__).parent / "data" / "hf"

TINY = ModelConfig(
    name="tiny-llama4", vocab_size=500, d_model=64, n_layers=4, n_heads=4, n_kv_heads=2,
    head_dim=16, d_ff=96, ffn="swiglu", norm="rmsnorm", positions="rope", max_positions=4096,
    attention_chunk_size=4, layer_types=("chunked", "chunked", "chunked", "full"),
    nope_layers=(3,), qk_l2_norm=True, attn_temperature_tuning=True, n_experts=6,
    experts_per_token=2, d_ff_expert=32, n_shared_experts=1, router_scoring="topk_sigmoid",
    routing_on_input=True, ffn_types=("dense", "moe", "dense", "moe"),
)


def _text(stem: str) -> dict:
    return json.loads((HF / f"{stem}.json").read_text())["text_config"]


def _load(tmp_path, cfg: dict):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return load_hf_config(p)


def _failed(doc: dict) -> list[str]:
    return [c["name"] for c in doc["checks"] if not c["ok"]]


# ── reading config.json ──────────────────────────────────────────────────────────────────────────


def test_the_text_config_and_the_plain_text_model_read_alike(tmp_path):
    outer = json.loads((HF / "llama4-scout.json").read_text())
    a, b = load_hf_config(HF / "llama4-scout.json"), _load(tmp_path, outer["text_config"])
    assert a.model_dump(exclude={"name"}) == b.model_dump(exclude={"name"})
    assert "text_config of a multimodal config; the vision tower is not counted" in a.name
    assert "vision" not in b.name


def test_defaults_follow_transformers(tmp_path):
    t = _text("llama4-maverick")
    for key in ("no_rope_layers", "moe_layers", "attention_chunk_size", "use_qk_norm",
                "attn_temperature_tuning", "num_local_experts", "num_experts_per_tok",
                "head_dim", "intermediate_size_mlp"):
        t.pop(key)
    m = _load(tmp_path, t)  # Llama4TextConfig: every 4th layer NoPE, MoE every 2nd, C 8192, ...
    assert m.nope_layers == tuple(range(3, 48, 4))
    assert m.layer_types == ("chunked", "chunked", "chunked", "full") * 12
    assert m.ffn_types == ("dense", "moe") * 24
    assert (m.attention_chunk_size, m.qk_l2_norm, m.attn_temperature_tuning) == (8192, True, True)
    assert (m.n_experts, m.experts_per_token, m.dh, m.d_ff) == (16, 1, 128, 16384)
    t["no_rope_layer_interval"] = 3
    t["attention_chunk_size"] = None  # no chunks: every layer full attention
    m = _load(tmp_path, t)
    assert m.nope_layers == tuple(range(2, 48, 3))
    assert (m.layer_types, m.attention_chunk_size) == (None, None)
    t["moe_layers"] = [5]  # overrides interleave_moe_layer_step
    assert _load(tmp_path, t).ffn_types == tuple("moe" if i == 5 else "dense" for i in range(48))


def test_every_layer_rope_and_chunked(tmp_path):
    t = {**_text("llama4-scout"), "no_rope_layers": [1] * 48}
    m = _load(tmp_path, t)
    assert (m.layer_types, m.attention_chunk_size, m.nope_layers) == (None, 8192, None)
    assert not m.attn_temperature_tuning  # no NoPE layer for it to act on
    assert {k.label for k in layer_plan(m).kinds} == {"chunked C=8192 · MoE"}


def test_refusals(tmp_path):
    t = _text("llama4-scout")
    with pytest.raises(ShapecalcError, match="sliding_attention") as e:
        _load(tmp_path, {**t, "layer_types": ["sliding_attention"] * 48})
    assert e.value.field == "layer_types"
    with pytest.raises(ShapecalcError) as e:
        _load(tmp_path, {**t, "no_rope_layers": [1, 0]})
    assert e.value.field == "no_rope_layers"
    with pytest.raises(ShapecalcError) as e:
        _load(tmp_path, {**t, "interleave_moe_layer_step": 0})
    assert e.value.field == "interleave_moe_layer_step"
    with pytest.raises(ShapecalcError) as e:
        _load(tmp_path, {**t, "layer_types": ["chunked_attention"] * 48,
                         "attention_chunk_size": None})
    assert e.value.field == "layer_types"


@pytest.mark.parametrize("update,field", [
    ({"attention_chunk_size": None}, "layer_types"),
    ({"layer_types": ("full",) * 4}, "attention_chunk_size"),
    ({"nope_layers": (4,)}, "nope_layers"),
    ({"nope_layers": (1, 1)}, "nope_layers"),
    ({"positions": "learned"}, "nope_layers"),
    ({"n_experts": None, "experts_per_token": None, "d_ff_expert": None, "n_shared_experts": 0,
      "router_scoring": "softmax", "ffn_types": None}, "routing_on_input"),
])
def test_bad_fields_are_refused(update, field):
    with pytest.raises(ShapecalcError) as e:
        ModelConfig.model_validate({**TINY.model_dump(), **update})
    assert e.value.field == field


# ── the trace ────────────────────────────────────────────────────────────────────────────────────


def test_each_kind_once_with_its_count():
    plan = layer_plan(load_preset("llama4-maverick"))
    assert dict(zip((k.label for k in plan.kinds), plan.counts, strict=True)) == {
        "chunked C=8192": 24, "chunked C=8192 · MoE": 12, "full attention · NoPE · MoE": 12}
    plan = layer_plan(load_preset("llama4-scout"))
    assert plan.counts == (36, 12)


def _stages(model, **kw):
    return build_trace(model, Workload(batch=1, **kw))


def test_stages_of_each_kind():
    doc = _stages(TINY, seq=10)
    by_kind: dict[int, list[str]] = {}
    for s in doc["stages"]:
        if s["group"] == "block":
            by_kind.setdefault(s["kind"], []).append(s["role"])
    chunked, full = by_kind[0], by_kind[2]  # kinds: chunked dense, chunked MoE, NoPE MoE
    assert "attn.rope" in chunked and "attn.q_l2norm" in chunked and "attn.k_l2norm" in chunked
    assert "attn.temperature" not in chunked
    assert "attn.rope" not in full and "attn.q_l2norm" not in full
    assert "attn.temperature" in full
    assert chunked.count("attn.mask") == 2  # causal, and the chunk mask (T=10 > C=4)
    assert full.count("attn.mask") == 1
    assert "moe.experts.in" in by_kind[1] and "moe.experts.in" not in chunked


@pytest.mark.parametrize("T,held,keys", [(3, 3, 4), (4, 4, 1), (10, 2, 3), (11, 3, 4),
                                          (12, 4, 1)])
def test_a_chunked_layer_holds_and_reads_its_chunk(T, held, keys):
    """After a prefill of T tokens the chunked layers hold the last chunk's ((T−1) mod C)+1;
    a decode query reads (T mod C)+1 keys and leaves (T mod C)+1; full layers hold T (and T+1)."""
    kv_per_token_layer = 2 * TINY.kv_heads * TINY.dh * 2  # bf16
    pre = _stages(TINY, seq=T)["totals"]["kv_cache_bytes"]
    assert pre == kv_per_token_layer * (3 * held + T)
    dec = _stages(TINY, seq=T, phase="decode")
    assert dec["totals"]["kv_cache_bytes"] == kv_per_token_layer * (3 * keys + T + 1)
    qk = [s for s in dec["stages"] if s["role"] == "attn.scores"]
    assert [s["shape"][-1] for s in qk] == [keys, keys, T + 1]


def test_decode_at_a_real_length_reads_the_current_chunk():
    doc = _stages(load_preset("llama4-scout"), seq=2 * 8192 + 5, phase="decode")
    qk = {s["kind"]: s for s in doc["stages"] if s["role"] == "attn.scores"}
    assert qk[0]["shape"][-1] == 6 and qk[0]["dims"][-1] == "T_c"
    assert qk[1]["shape"][-1] == 2 * 8192 + 6


def test_causal_attention_flops_count_the_pairs_inside_chunks():
    # T = 10, C = 4: chunks of 4, 4, 2 tokens: 10 + 10 + 3 = 23 (query, key) pairs per head
    doc = _stages(TINY, seq=10, attention_flops="causal")
    qk = next(s for s in doc["stages"] if s["role"] == "attn.scores" and s["kind"] == 0)
    assert qk["flops"] == 2 * TINY.n_heads * 23 * TINY.dh


# ── the closed form ──────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("attention_flops", ["full", "causal"])
def test_closed_form_equals_the_stage_list_across_chunks(attention_flops):
    cf = ClosedForm(TINY, attention_flops=attention_flops)
    keys = ("flops", "elementwise_flops", "kv_cache_bytes", "kv_cache_paged_bytes",
            "kv_cache_blocks", "params", "active_params")
    for phase in ("prefill", "decode"):
        for tp in (1, 2):
            for T in range(1, 14):
                wl = Workload(batch=3, seq=T, phase=phase, tp=tp,
                              attention_flops=attention_flops)
                t = build_trace(TINY, wl)["totals"]
                got = cf.at(3, T, phase, tp)
                for k in keys:
                    assert got[k] == t[k], (phase, tp, T, k)
    # a grid spanning many chunks at once
    ts = list(range(1, 30))
    grid = evaluate(cf, 2, ts, "decode", 1)
    for i, T in enumerate(ts):
        t = build_trace(TINY, Workload(batch=2, seq=T, phase="decode",
                                       attention_flops=attention_flops))["totals"]
        assert int(grid["flops"][i]) == t["flops"] and int(grid["kv_cache_bytes"][i]) == (
            t["kv_cache_bytes"])


def test_regime_intervals_repeat_with_the_chunk():
    cf = ClosedForm(TINY)
    assert cf.intervals("prefill")[:3] == [(1, 4), (5, 8), (9, 12)]
    assert cf.intervals("decode")[:3] == [(1, 3), (4, 7), (8, 11)]
    assert cf.interval("decode", 10**6) == (10**6 - 10**6 % 4, 10**6 - 10**6 % 4 + 3)


# ── verify ───────────────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("seq,phase,kw", [
    (10, "prefill", {}), (10, "decode", {"block_size": 2}), (11, "decode", {"tp": 2}),
    (12, "decode", {"block_size": 2}), (9, "prefill", {"attention_flops": "causal"}),
    (10, "decode", {"ep": 2}),
])
def test_verify_passes_on_a_tiny_llama4(seq, phase, kw):
    doc = verify(TINY, Workload(batch=2, seq=seq, phase=phase, **kw))
    assert doc["ok"], _failed(doc)


def test_verify_passes_on_a_random_llama4_config():
    import random
    rng = random.Random(4)
    n = 4
    C = rng.choice([2, 3, 5])
    types = (*(rng.choice(["chunked", "full"]) for _ in range(n - 1)), "chunked")
    m = TINY.model_copy(update=dict(
        n_layers=n, attention_chunk_size=C, layer_types=types,
        nope_layers=tuple(i for i, t in enumerate(types) if t == "full") or None,
        n_experts=rng.choice([4, 8]), experts_per_token=rng.choice([1, 2, 3]),
        ffn_types=(*(rng.choice(["dense", "moe"]) for _ in range(n - 1)), "moe"),
        qk_l2_norm=rng.choice([True, False])))
    ModelConfig.model_validate(m.model_dump())
    for phase in ("prefill", "decode"):
        doc = verify(m, Workload(batch=2, seq=2 * C + 1, phase=phase, block_size=2))
        assert doc["ok"], (m, _failed(doc))


def test_verify_fails_when_the_symbolic_chunk_is_off(monkeypatch):
    real = fwd.Sizes._chunk_keys
    monkeypatch.setattr(fwd.Sizes, "_chunk_keys", lambda self, C: real(self, C + 1))
    doc = verify(TINY, Workload(batch=2, seq=10, phase="decode"))
    assert not doc["ok"] and any("KV" in n or "FLOP" in n for n in _failed(doc))
    doc = verify(TINY, Workload(batch=2, seq=10))
    assert not doc["ok"]


def test_verify_fails_when_the_symbolic_nope_rule_is_off(monkeypatch):
    # RoPE on every layer in the symbolic side only: the NoPE layer's elementwise work differs
    real = fwd._attention

    def rope_everywhere(ops, m, spec, *a, **k):
        if isinstance(ops, symbolic.SymbolicOps):
            spec = spec._replace(nope=False)
        return real(ops, m, spec, *a, **k)

    monkeypatch.setattr(fwd, "_attention", rope_everywhere)
    assert not verify(TINY, Workload(batch=2, seq=6))["ok"]


@pytest.mark.parametrize("what", ["l2norm", "temperature"])
def test_verify_fails_when_the_qk_norm_or_temperature_formula_is_off(monkeypatch, what):
    if what == "temperature":
        monkeypatch.setitem(symbolic.ELEMENTWISE, "temperature", 5)
    else:
        real = symbolic.SymbolicOps.norm

        def off(self, x, role, name, width=None, kind=None):
            s = real(self, x, role, name, width, kind)
            if kind == "l2norm":
                self.stages[-1].elementwise_flops += 1
            return s

        monkeypatch.setattr(symbolic.SymbolicOps, "norm", off)
    doc = verify(TINY, Workload(batch=2, seq=6))
    assert not doc["ok"] and _failed(doc)


def test_verify_fails_when_the_routing_on_input_is_dropped(monkeypatch):
    m = TINY
    real = symbolic.SymbolicOps.experts

    def plain(self, *a, **k):
        self.m = m.model_copy(update={"routing_on_input": False})
        try:
            return real(self, *a, **k)
        finally:
            self.m = m

    monkeypatch.setattr(symbolic.SymbolicOps, "experts", plain)
    assert not verify(m, Workload(batch=2, seq=6))["ok"]


# ── planning ─────────────────────────────────────────────────────────────────────────────────────


def test_fit_sizes_a_chunked_layer_for_its_fullest_chunk():
    """Scout at tp=8 (one KV head a rank, 512 B per token and layer): 12 full layers hold T
    tokens, 36 chunked layers at most C = 8192 — on the way to T, whatever T mod C is."""
    from shapecalc.inputs.hardware import load_gpu
    from shapecalc.plan.fit import fit
    from shapecalc.plan.options import PlanOptions

    m, gpu = load_preset("llama4-scout"), load_gpu("H100-SXM")
    for T in (8192, 16384, 16385, 20000):
        doc = fit(m, Workload(batch=8, seq=T, tp=8), gpu, PlanOptions())
        assert doc["memory_per_rank"]["kv_cache"] == 8 * 512 * (12 * -(-T // 16) * 16 + 36 * 8192)
    doc = fit(m, Workload(batch=8, seq=16384, tp=8), gpu, PlanOptions())
    T = doc["max_seq"]  # the memory grows with T, so the largest T that fits is a threshold
    for t, ok in ((T, True), (T + 1, False)):
        assert fit(m, Workload(batch=8, seq=t, tp=8), gpu, PlanOptions())["fits"] is ok


@st.composite
def chunked_models(draw):
    """Random models with chunked layers, beside full and sliding ones (the closed form's
    periodic regimes cut with the windows' own)."""
    n = draw(st.integers(1, 5))
    kinds = draw(st.lists(st.sampled_from(["chunked", "full", "sliding"]), min_size=n,
                          max_size=n).filter(lambda ks: "chunked" in ks))
    moe = draw(st.booleans())
    return TINY.model_copy(update=dict(
        n_layers=n, layer_types=tuple(kinds), attention_chunk_size=draw(st.integers(1, 12)),
        sliding_window=draw(st.integers(1, 12)) if "sliding" in kinds else None,
        nope_layers=tuple(i for i, k in enumerate(kinds) if k == "full") or None,
        qk_l2_norm=draw(st.booleans()), attn_temperature_tuning=draw(st.booleans()),
        ffn_types=(*(draw(st.sampled_from(["dense", "moe"])) for _ in range(n - 1)), "moe")
        if moe else None,
        **({} if moe else dict(n_experts=None, experts_per_token=None, d_ff_expert=None,
                               n_shared_experts=0, router_scoring="softmax",
                               routing_on_input=False)),
    ))


@settings(max_examples=12, deadline=None)
@given(model=chunked_models(), data=st.data())
def test_closed_form_equals_the_stage_list_on_random_chunked_models(model, data):
    model = ModelConfig.model_validate(model.model_dump())
    cf = ClosedForm(model, attention_flops=data.draw(st.sampled_from(["full", "causal"])),
                    block_size=data.draw(st.sampled_from([1, 3, 16])))
    points = [dict(batch=data.draw(st.integers(1, 5)), seq=data.draw(st.integers(1, 40)),
                   phase=data.draw(st.sampled_from(["prefill", "decode"])),
                   tp=data.draw(st.sampled_from(valid_tps(model))), pp=1, dtype="bf16",
                   kv_dtype="bf16", act_dtype="bf16") for _ in range(6)]
    assert_equal_at(model, cf, points)
