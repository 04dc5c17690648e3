"""The closed form of sweep equals the stage pipeline (build_trace), exactly, everywhere."""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shapecalc.costs.closed import ClosedForm
from shapecalc.costs.grid import evaluate
from shapecalc.costs.poly import Poly, fit_poly
from shapecalc.costs.trace import build_trace
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import DTYPE_BITS, ModelConfig, ShapecalcError, Workload, check
from shapecalc.model.quantization import DTYPE_FORMATS
from shapecalc.plan.sweep import SWEEP_KEYS

# the plain widths: a weight format (mxfp4, nvfp4, nf4) has its own closed form (test_quant.py)
DTYPES = [d for d in DTYPE_BITS if d not in DTYPE_FORMATS]


def flat(doc: dict) -> dict[str, int]:
    """The integer totals of a trace under the names a sweep row uses."""
    t, tp, pp = doc["totals"], doc["parallel"]["tp"], doc["parallel"]["pp"]
    out = {k: v for k, v in t.items() if isinstance(v, int)}
    out.update({k: v for k, v in tp.items() if isinstance(v, int) and not isinstance(v, bool)})
    out.update({k: v for k, v in pp.items() if isinstance(v, int) and k != "stages"})
    out["largest_activation_bytes"] = t["largest_activation"]["bytes"]
    out["tp"], out["pp"] = tp["degree"], pp["stages"]
    return out


# every integer column of a sweep row, plus the grid's own axes
COMPARED = (*SWEEP_KEYS, "largest_activation_bytes_per_rank", "tp", "pp")


def assert_equal_at(model: ModelConfig, cf: ClosedForm, points: list[dict]) -> None:
    """Evaluate all points in one vectorised call; each must equal its own build_trace."""
    cols = {k: [p[k] for p in points] for k in points[0]}
    got = evaluate(cf, cols["batch"], cols["seq"], cols["phase"], cols["tp"], cols["pp"],
                      cols["dtype"], cols["kv_dtype"], cols["act_dtype"])
    for i, p in enumerate(points):
        wl = Workload(**p, logits=cf.logits, attention_flops=cf.attention_flops,
                      padding_mask=cf.padding_mask, block_size=cf.block_size,
                      mla_form=cf.mla_form, selection=cf.selection)
        doc = build_trace(model, wl)
        want = flat(doc)
        for k in COMPARED:
            assert int(got[k][i]) == want[k], (k, p, int(got[k][i]), want[k])
        # the per-stage parameters fit uses for pipeline ranks (the trace lists them at p = 1)
        stages = cf.stage_params(p["tp"], p["pp"])
        assert sum(stages) >= want["params_per_rank"] or p["pp"] == 1
        if p["tp"] == 1:
            assert stages == doc["parallel"]["pp"]["params_per_stage"], p
        if p["pp"] == 1:
            assert stages == [want["params_per_rank"]]


# -- random models, random points ------------------------------------------------------------
@st.composite
def models(draw):
    hkv = draw(st.sampled_from([1, 2, 4]))
    groups = draw(st.sampled_from([1, 2, 3]))
    h = hkv * groups
    dh = draw(st.sampled_from([2, 4, 6]))
    custom_dh = draw(st.booleans())
    d = h * dh if not custom_dh else draw(st.sampled_from([8, 12, 16]))
    positions = draw(st.sampled_from(["learned", "rope", "sinusoidal", "none"]))
    if positions == "sinusoidal" and d % 2:
        d += 1
    norm = draw(st.sampled_from(["layernorm", "rmsnorm"]))
    fields = dict(
        vocab_size=draw(st.integers(5, 40)),
        d_model=d,
        n_layers=draw(st.integers(1, 5)),
        n_heads=h,
        n_kv_heads=hkv,
        head_dim=dh if custom_dh else None,
        d_ff=draw(st.sampled_from([4, 6, 12, 24])),
        ffn=draw(st.sampled_from(["gelu", "relu", "swiglu", "geglu"])),
        norm=norm,
        norm_position=draw(st.sampled_from(["pre", "post"])),
        positions=positions,
        max_positions=draw(st.integers(40, 90)) if positions == "learned" else None,
        tie_embeddings=draw(st.booleans()),
        qkv_bias=draw(st.booleans()),
        attn_out_bias=draw(st.booleans()),
        ffn_bias=draw(st.booleans()),
        lm_head_bias=draw(st.booleans()),
        fused_qkv=draw(st.booleans()),
        sliding_window=draw(st.one_of(st.none(), st.integers(1, 30))),
        embedding_scale=draw(st.booleans()),
    )
    if fields["norm_position"] == "pre":
        fields["parallel_block"] = draw(st.booleans())
    return ModelConfig(**fields)


def valid_tps(model: ModelConfig) -> list[int]:
    out = []
    for p in (1, 2, 3, 4, 6):
        try:
            check(model, Workload(batch=1, seq=1, tp=p))
        except ShapecalcError:
            continue
        out.append(p)
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=models(), data=st.data())
def test_closed_form_equals_pipeline_on_random_configs(model, data):
    cf = ClosedForm(
        model,
        logits=data.draw(st.sampled_from(["all", "last"])),
        attention_flops=data.draw(st.sampled_from(["full", "causal"])),
        padding_mask=data.draw(st.booleans()),
        block_size=data.draw(st.sampled_from([1, 3, 16])),
    )
    tps = valid_tps(model)
    points = []
    for _ in range(5):
        phase = data.draw(st.sampled_from(["prefill", "decode"]))
        limit = cf.seq_limit(phase) or 100
        dtype = data.draw(st.sampled_from(DTYPES))
        points.append(dict(
            batch=data.draw(st.integers(1, 9)),
            seq=data.draw(st.integers(1, min(limit, 80))),
            phase=phase,
            tp=data.draw(st.sampled_from(tps)),
            pp=data.draw(st.integers(1, model.n_layers)),
            dtype=dtype,
            kv_dtype=data.draw(st.sampled_from(DTYPES)),
            act_dtype=data.draw(st.sampled_from(DTYPES)),
        ))
    assert_equal_at(model, cf, points)


# -- presets, windows, and numbers past 2⁶³ ---------------------------------------------------
@pytest.mark.parametrize("name", ["llama2-70b", "llama3-8b", "gpt2", "qwen2.5-0.5b", "laguna"])
def test_presets_equal_pipeline_at_random_points(name):
    model = load_preset(name)
    cf = ClosedForm(model)
    rng = random.Random(name)
    tps = valid_tps(model)
    points = []
    for _ in range(12):
        phase = rng.choice(["prefill", "decode"])
        limit = cf.seq_limit(phase) or 8192
        points.append(dict(batch=rng.randint(1, 64), seq=rng.randint(1, limit), phase=phase,
                           tp=rng.choice(tps), pp=rng.randint(1, 4), dtype=rng.choice(DTYPES),
                           kv_dtype=rng.choice(DTYPES), act_dtype=rng.choice(DTYPES)))
    assert_equal_at(model, cf, points)


def test_sliding_window_edges():
    """Both sides of W in both phases (mistral-7b: W = 4096)."""
    model = load_preset("mistral-7b")
    for attention in ("full", "causal"):
        cf = ClosedForm(model, attention_flops=attention)
        points = [dict(batch=b, seq=t, phase=ph, tp=2, pp=1, dtype="bf16", kv_dtype="fp8",
                       act_dtype="bf16")
                  for ph in ("prefill", "decode") for t in (1, 4094, 4095, 4096, 4097, 9000)
                  for b in (1, 3)]
        assert_equal_at(model, cf, points)


def test_beyond_int64_exact():
    """llama3.1-405b, batch 10⁸, context 128k: FLOPs far past 2⁶³, still exact integers."""
    model = load_preset("llama3.1-405b")
    cf = ClosedForm(model)
    pts = [dict(batch=10**8, seq=131072, phase="prefill", tp=8, pp=2, dtype="bf16",
                kv_dtype="fp8", act_dtype="bf16"),
           dict(batch=10**8, seq=131071, phase="decode", tp=16, pp=1, dtype="fp32",
                kv_dtype="fp32", act_dtype="fp32")]
    got = evaluate(cf, [p["batch"] for p in pts], [p["seq"] for p in pts],
                      [p["phase"] for p in pts], [8, 16], [2, 1], ["bf16", "fp32"],
                      ["fp8", "fp32"], ["bf16", "fp32"])
    assert got["flops"].dtype == object
    assert int(got["flops"][0]) > 2**63
    assert_equal_at(model, cf, pts)


def test_int64_and_object_paths_agree():
    model = load_preset("llama2-70b")
    cf = ClosedForm(model)
    small = evaluate(cf, [1, 7], [2048, 2048], ["prefill", "decode"], 4, 1, "bf16")
    assert small["flops"].dtype == np.int64
    mixed = evaluate(cf, [1, 7, 10**9], [2048, 2048, 2048], ["prefill", "decode", "prefill"], 4,
                        1, "bf16")
    assert mixed["flops"].dtype == object
    for k in small:
        assert [int(x) for x in small[k]] == [int(x) for x in mixed[k][:2]], k


def test_order_of_points_does_not_matter():
    """Sorted grids are evaluated by slices, shuffled ones by gathers: the same numbers."""
    model = load_preset("llama3-8b")
    cf = ClosedForm(model)
    g = np.meshgrid([0, 1], [1, 2, 4, 8], [1, 5, 32], [7, 512, 8000], indexing="ij")
    ph, tp, b, t = (x.ravel() for x in g)
    ref = evaluate(cf, b, t, ph, tp)
    perm = np.random.default_rng(0).permutation(b.size)
    shuf = evaluate(cf, b[perm], t[perm], ph[perm], tp[perm])
    for k in ref:
        assert np.array_equal(ref[k][perm], shuf[k]), k


def test_fit_poly_recovers_rationals():
    def f(b, t):
        return 3 * b * t * t + 5 * t + 7 + b * (t * (t + 1)) // 2

    p = fit_poly({(b, t): f(b, t) for b in (1, 2) for t in (4, 5, 6)})
    assert all(p.at(b, t) == f(b, t) for b in range(1, 9) for t in range(1, 50))
    assert isinstance(p, Poly) and Fraction(p.num[5], p.den) == Fraction(7, 2)


def test_bad_points_are_refused():
    cf = ClosedForm(load_preset("gpt2"))
    with pytest.raises(ShapecalcError, match="seq"):
        evaluate(cf, 1, 1024, "decode", 1)  # needs position 1025
    with pytest.raises(ShapecalcError, match="tp"):
        evaluate(cf, 1, 8, "prefill", 5)
    with pytest.raises(ShapecalcError, match="dtype"):
        evaluate(cf, 1, 8, "prefill", 1, 1, "fp7")
    with pytest.raises(ShapecalcError):
        evaluate(cf, 0, 8, "prefill", 1)


@pytest.mark.parametrize("name", ["llama2-7b", "mistral-7b", "gpt2"])
def test_poly_mode_equals_polynomials_fitted_to_the_pipeline(name):
    """Two ways to the same polynomials: one poly-mode run (B, T symbols) against forward
    differences over six ordinary runs of the pipeline."""
    from shapecalc.costs.poly import ATTENTION_ROLES, FIT_DTYPES, measure
    from shapecalc.interpret.symbolic import stages
    from shapecalc.model.plan import layer_plan

    model = load_preset(name)
    plan = layer_plan(model)
    for phase, p in (("prefill", 1), ("decode", 2)):
        cf = ClosedForm(model, attention_flops="causal")
        for regime in cf.regimes(phase, p):
            lo = regime.lo
            ts = [t for t in (lo, lo + 1, lo + 2) if regime.hi is None or t <= regime.hi]
            runs = {(b, t): stages(model, cf.workload(b, t, phase, p, **FIT_DTYPES), p)
                    for b in (1, 2) for t in ts}
            for key, pick in (("flops", lambda st: sum(s.flops * s.repeat for s in st)),
                              ("ew", lambda st: sum(s.elementwise_flops * s.repeat for s in st)),
                              ("attn", lambda st: sum(s.flops * s.repeat for s in st
                                                      if s.role in ATTENTION_ROLES)),
                              ("kv_tokens", lambda st: max(
                                  (s.shape[3] for s in st if s.op == "kv_cache"), default=0))):
                fitted = fit_poly({pt: pick(st) for pt, st in runs.items()})
                assert fitted == regime.polys[key], (name, phase, p, key)
            one = measure(stages(model, cf.workload(1, lo, phase, p, **FIT_DTYPES), p,
                                 poly=True), plan)[0]
            # a causal closed form's attention is already the causal half
            assert {**one, "attn_causal": one["attn"]} == regime.polys


@pytest.mark.parametrize("name", ["llama3-8b", "mistral-7b", "gemma2-9b", "llama4-scout",
                                  "deepseek-v2-lite", "gpt2"])
def test_causal_flops_equal_the_causal_conventions_count(name):
    """Times are planned on the FLOPs a causal kernel does, whatever --attention-flops counts:
    under the seeds' full [T,T] convention, `causal_flops` equals the causal convention's
    `flops` (windows, chunks and MLA included), and decode has nothing to skip."""
    model = load_preset(name)
    full, causal = ClosedForm(model), ClosedForm(model, attention_flops="causal")
    for B, T, p in ((1, 1, 1), (3, 37, 2), (2, 700, 1), (1, 5000, 2), (4, 9000, 1)):
        if full.seq_limit("prefill") is not None and T > full.seq_limit("prefill"):
            continue
        a, b = full.at(B, T, "prefill", p), causal.at(B, T, "prefill", p)
        assert a["causal_flops"] == b["flops"] == b["causal_flops"]
        assert a["causal_flops_per_rank"] == b["flops_per_rank"]
        assert a["flops"] - a["causal_flops"] >= 0
        d = full.at(B, T, "decode", p)
        assert d["causal_flops"] == d["flops"]


@pytest.mark.parametrize("name", ["llama3-8b", "gemma2-9b", "llama4-scout", "deepseek-v2-lite",
                                  "deepseek-v3.2-exp", "minimax-m3"])
def test_one_pass_gives_the_causal_passes_attention(name):
    """The full-count pass records each QKᵀ/A·V stage's causal count beside it (poly mode), so no
    second pass runs: its sum equals the attention FLOPs of a pass under the causal convention
    (sliding, chunked, MLA, DSA's selected keys and block-sparse attention included)."""
    from shapecalc.costs.poly import FIT_DTYPES, attention_flops
    from shapecalc.interpret.symbolic import stages

    model = load_preset(name)
    cf = ClosedForm(model)
    regimes = cf.intervals("prefill", 9000)
    for lo, _ in regimes[:3] + regimes[-1:]:  # the first ones and one past every window
        for p in (1, 2):
            regime = cf._regime_for("prefill", p, lo)
            wl = cf.workload(1, lo, "prefill", p, **FIT_DTYPES).model_copy(
                update={"attention_flops": "causal"})
            assert regime.attn_causal() == attention_flops(stages(model, wl, p, poly=True)), (
                name, lo, p)


# -- stateful mixers: a state constant in T, the scan's chunks in T_L = L·⌈T/L⌉ -----------------
@st.composite
def mixer_models(draw):
    n = draw(st.integers(1, 5))
    mixers = draw(st.lists(st.sampled_from(["mamba2", "gated_deltanet", "short_conv",
                                            "attention", "none"]),
                           min_size=n, max_size=n).filter(
        lambda xs: {"mamba2", "gated_deltanet", "short_conv"} & set(xs)))
    scans = {"mamba2", "gated_deltanet"} & set(mixers)  # the short conv has no chunk
    heads, qk = draw(st.sampled_from([2, 4, 6])), draw(st.sampled_from([1, 2]))
    mamba = dict(
        ssm_heads=heads, ssm_head_dim=draw(st.sampled_from([2, 3])),
        ssm_groups=draw(st.sampled_from([g for g in (1, 2, 3) if heads % g == 0])),
        ssm_state=draw(st.sampled_from([1, 4, 5]))) if "mamba2" in mixers else {}
    gdn = dict(gdn_qk_heads=qk, gdn_v_heads=qk * draw(st.sampled_from([1, 2])),
               gdn_qk_dim=draw(st.sampled_from([2, 3])),
               gdn_v_dim=draw(st.sampled_from([2, 5]))) if "gated_deltanet" in mixers else {}
    return ModelConfig(
        vocab_size=draw(st.integers(5, 40)), d_model=draw(st.sampled_from([8, 12])),
        n_layers=n, n_heads=2, head_dim=4, d_ff=draw(st.sampled_from([4, 6])),
        ffn=draw(st.sampled_from(["relu2", "swiglu", "gelu"])), norm="rmsnorm",
        positions=draw(st.sampled_from(["none", "rope"])),
        attn_output_gate=draw(st.booleans()), qk_norm=draw(st.booleans()),
        attn_head_gate=draw(st.booleans()),
        norm_position="pre" if scans else draw(st.sampled_from(["pre", "sandwich"])),
        tie_embeddings=draw(st.booleans()), mixer_types=tuple(mixers),
        ffn_types=tuple(draw(st.sampled_from(["dense", "none"])) for _ in mixers),
        conv_kernel=draw(st.integers(1, 5)),
        scan_chunk=draw(st.sampled_from([1, 3, 8, 16])) if scans else None,
        conv_bias=draw(st.booleans()), **mamba, **gdn)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=mixer_models(), data=st.data())
def test_closed_form_equals_pipeline_on_random_mixer_configs(model, data):
    cf = ClosedForm(model, logits=data.draw(st.sampled_from(["all", "last"])))
    tps = valid_tps(model)
    points = [dict(batch=data.draw(st.integers(1, 9)), seq=data.draw(st.integers(1, 80)),
                   phase=data.draw(st.sampled_from(["prefill", "decode"])),
                   tp=data.draw(st.sampled_from(tps)),
                   pp=data.draw(st.integers(1, model.n_layers)),
                   dtype=data.draw(st.sampled_from(DTYPES)),
                   kv_dtype=data.draw(st.sampled_from(DTYPES)),
                   act_dtype=data.draw(st.sampled_from(DTYPES))) for _ in range(5)]
    assert_equal_at(model, cf, points)


@pytest.mark.parametrize("name", ["llama2-70b", "gemma2-9b", "deepseek-v2-lite"])
def test_points_in_runs_of_equal_batch_and_seq(name):
    """A sweep's inner axes (pp, dtypes) repeat each (B, T): its polynomials are evaluated once
    a run. Every total equals the trace's, and the same points shuffled (no runs) give every
    total of `evaluate`, the activation workspaces alone included."""
    model = load_preset(name)
    cf = ClosedForm(model)
    rng = random.Random(name)
    inner = [(s, d, k) for s in (1, 2) for d in ("bf16", "fp8") for k in ("bf16", "int4")]
    pairs = [(rng.randint(1, 64), rng.randint(1, 6000)) for _ in range(40)]
    points = [dict(batch=b, seq=t, phase="prefill", tp=2, pp=s, dtype=d, kv_dtype=k,
                   act_dtype="bf16") for b, t in pairs for s, d, k in inner]
    cols = {k: np.array([p[k] for p in points]) for k in points[0]}
    args = [cols[k] for k in ("batch", "seq", "phase", "tp", "pp", "dtype", "kv_dtype",
                              "act_dtype")]
    perm = np.random.default_rng(1).permutation(len(points))
    ref = evaluate(cf, *args)
    shuf = evaluate(cf, *(a[perm] for a in args))
    for k in ref:
        assert np.array_equal(ref[k][perm], shuf[k]), k
    keep = np.arange(len(points)) % 5 != 3  # runs of 6 and 7: gathered, not repeated
    uneven = evaluate(cf, *(a[keep] for a in args))
    for k in ref:
        assert np.array_equal(ref[k][keep], uneven[k]), k
    ws = evaluate(cf, *args, workspace=True)
    assert set(ws) == {"workspace_eager_bytes_per_rank", "workspace_flash_bytes_per_rank"}
    for k, v in ws.items():
        assert np.array_equal(v, ref[k]), k
    assert_equal_at(model, cf, points[::7])  # against the trace, one point in seven


@pytest.mark.parametrize("name", ["llama2-70b", "llama4-scout", "qwen3-next-80b-a3b",
                                  "deepseek-v4-flash", "qwen3-30b-a3b"])
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_totals_are_computed_when_read_in_any_order(name, seed):
    """Each total is computed when first read, from the others it needs: read in any order
    (each read alone first, then the rest), every total equals the one read in declared order
    and the scalar path's (`at`, Python ints); nothing is computed before it is read, and the
    arrays handed back are read-only (a total computed later from them cannot change)."""
    model = load_preset(name)
    cf = ClosedForm(model)
    rng = np.random.default_rng(seed)
    B = np.repeat(rng.integers(1, 64, 20), 12)  # runs of 12 equal (B, T): the run path
    T = np.repeat(rng.integers(1, 5000, 20), 12)
    S = np.tile(np.array([1, 2, 4] * 4), 20)
    kv = np.tile(np.array(["bf16", "fp8", "int4"] * 4), 20)
    args = (B, T, "decode" if seed % 2 else "prefill", 2, S, "bf16", kv)
    declared = dict(evaluate(cf, *args))
    lazy = evaluate(cf, *args)
    keys = list(declared)
    first = keys[int(rng.integers(len(keys)))]
    assert np.array_equal(lazy[first], declared[first]), first
    for k in rng.permutation(keys):
        v = lazy[k]
        assert np.array_equal(v, declared[k]), k
        with pytest.raises(ValueError):
            v[0] = 0
    assert list(lazy) == keys
    phase = args[2]
    for i in (0, 119, 239):
        one = cf.at(int(B[i]), int(T[i]), phase, 2, int(S[i]), "bf16", str(kv[i]))
        for k in keys:
            assert int(declared[k][i]) == one[k], (k, i)
    one = cf.at(3, 100, phase, 2)
    assert not one.computed
    one["weight_bytes"]  # computed from the parameter count: those two, nothing else
    assert set(one.computed) == {"weight_bytes", "params"}


def test_a_grids_bound_proves_int64_once():
    """A sweep's chunks pass the grid's largest (B, T, pp): int64 is proven there once; a bound
    too large for int64 falls back to the chunk's own points (still int64, still exact)."""
    model = load_preset("llama2-70b")
    B, T = np.array([1, 2, 3, 4]), np.array([8, 16, 24, 32])
    want = dict(evaluate(ClosedForm(model), B, T, "prefill", 2))
    cf = ClosedForm(model)
    got = evaluate(cf, B, T, "prefill", 2, bound=(256, 4096, 4))
    regime = cf._regime_for("prefill", 2, 8)
    assert regime.memo["int64_safe"] == [(256, 4096, 4)]
    huge = ClosedForm(model)
    far = evaluate(huge, B, T, "prefill", 2, bound=(10**9, 10**9, 4))
    memo = huge._regime_for("prefill", 2, 8).memo
    assert memo["int64_safe"] == [(16, 256, 1)] and memo["int64_unsafe"] == [(10**9, 10**9, 4)]
    evaluate(huge, B * 5, T, "prefill", 2, bound=(10**9, 10**9, 4))  # the bound not tried again
    assert memo["int64_unsafe"] == [(10**9, 10**9, 4)] and len(memo["int64_safe"]) == 2
    for k in want:
        assert got[k].dtype == far[k].dtype == np.int64 and np.array_equal(got[k], want[k])
        assert np.array_equal(far[k], want[k]), k
