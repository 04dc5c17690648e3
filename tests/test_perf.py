"""The expected-time model (plan/perf.py) and its calibration (plan/calibrate.py) against the
published measurements in tests/data/serving-measurements.json (a copy of
shared/calibration/serving-measurements.json: 15 records, each with its source and quote)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shapecalc.inputs.hardware import load_gpu
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import Workload
from shapecalc.plan import calibrate as cal
from shapecalc.plan.fit import fit
from shapecalc.plan.options import PlanOptions
from shapecalc.plan.perf import PerfParams
from shapecalc.plan.perf_defaults import DATA, PARAMS

DATA_FILE = Path(__file__).parent / "data" / "serving-measurements.json"
GiB = 2**30


@pytest.fixture(scope="module")
def cases():
    return cal.load_cases(DATA_FILE)


def test_the_lower_bound_holds_on_every_published_measurement(cases):
    rep = cal.report(cases, PerfParams(**PARAMS))
    assert len(rep["records"]) == 15
    for r in rep["records"]:
        assert r["bound_holds"], r
        # and the expected estimate lies between the bound and the far side
        if r["rate"]:
            assert r["lower_bound"] >= r["expected"]
        else:
            assert r["lower_bound"] <= r["expected"]
    # every tpot is compared as a time, whatever unit its record gives
    tpot = [r for r in rep["records"] if r["metric_type"] == "tpot"]
    assert {r["unit"] for r in tpot} == {"ms", "s/token"} and not any(r["rate"] for r in tpot)


def test_the_shipped_defaults_match_the_measurements(cases):
    s = cal.report(cases, PerfParams(**PARAMS))["summary"]
    for kind in cal.TYPES:
        assert 0.9 <= s[kind]["median"] <= 1.1, (kind, s[kind])
    assert s["all"]["rms_log"] <= 0.25
    # the roofline bound alone is ~2× off: the model does better than a constant factor would
    bound = [r["measured"] / r["lower_bound"] for r in cal.report(cases, PerfParams(**PARAMS))[
        "records"]]
    assert max(bound) / min(bound) > 4


def test_the_shipped_defaults_are_the_fit(cases):
    """Nobody edits perf_defaults.py by hand: the fit from the fixed start reproduces it."""
    assert DATA.startswith("tests/data/serving-measurements.json (15 records")
    fitted = cal.fit_params(cases).as_dict()
    assert fitted == pytest.approx(PARAMS, rel=2e-3)


def test_records_resolve_to_presets_profiles_and_engine_dtypes():
    assert cal.preset_for("Llama-3.3-70B-Instruct") == "llama3.3-70b"
    assert cal.preset_for("Mistral-7B-v0.1") == "mistral-7b"
    assert cal.preset_for("Llama-3.1-8B-Instruct (FP8)") == "llama3.1-8b"
    assert cal.gpu_for("H100 SXM 80GB", None) == "H100-SXM"
    assert cal.gpu_for("H100 80GB", None) == "H100-SXM"
    assert cal.gpu_for("A100 SXM 80GB (power-limited to 330 W)", None) == "A100-80GB"
    assert cal.gpu_for("GeForce RTX 4090 24GB", None) == "RTX-4090"
    assert cal.dtypes_for("fp8") == ("fp8", "bf16", "fp8", "fp8")
    assert cal.dtypes_for("int4 (EXL2 4.0 bits per weight)") == ("int4", "fp16", "fp16", "fp16")


def test_one_step_by_hand():
    """Decode of llama2-7b, B=1, T=127, H100, fp16: each term from its formula."""
    model, gpu = load_preset("llama2-7b"), load_gpu("H100-SXM")
    p = PerfParams(**PARAMS)
    doc = fit(model, Workload(batch=1, seq=127, dtype="fp16", logits="last"), gpu,
              PlanOptions(max_batched_tokens=8192))
    D, N, V, Dff = 4096, 32, 32000, 11008
    per_layer = 4 * D * D + 3 * D * Dff + 2 * D
    weights = 2 * (N * per_layer + D + V * D + 1 * D)  # layers, final norm, head, one row
    kv = 2 * N * 2 * D * 128  # K and V of 128 tokens, fp16
    flops = doc["expected"]["decode_terms_s"]["compute"] * (
        989.5e12 * p.gemm_efficiency / (1 + p.gemm_half_tokens))
    assert flops == pytest.approx(2 * (N * (per_layer - 2 * D) + V * D) + 4 * N * D * 128,
                                  rel=1e-3)
    mem = (weights / p.memory_efficiency + kv / p.attention_efficiency) / 3.35e12
    t = doc["expected"]["decode_terms_s"]
    assert t["memory"] == pytest.approx(mem, rel=1e-12)
    assert t["overhead"] == pytest.approx(N * p.layer_overhead_s)
    assert t["communication"] == 0
    assert doc["expected"]["decode_s_per_token"] == pytest.approx(
        max(t["compute"], t["memory"]) + t["overhead"])


PRESETS = ["llama3-8b", "llama2-70b", "mistral-7b", "mixtral-8x7b", "qwen3-30b-a3b", "gpt2",
           "seed-tiny", "deepseek-v2-lite", "llama4-scout"]


@settings(max_examples=25)
@given(name=st.sampled_from(PRESETS), gpu=st.sampled_from(["H100-SXM", "A100-80GB", "L40S",
                                                            "RTX-4090", "H200", "MI300X"]),
       batch=st.integers(1, 256), seq=st.integers(1, 32768), tp=st.sampled_from([1, 2, 4, 8]),
       dtype=st.sampled_from(["bf16", "fp8", "int4"]))
def test_expected_is_never_below_the_bound(name, gpu, batch, seq, tp, dtype):
    model = load_preset(name)
    if model.max_positions is not None:
        seq = min(seq, model.max_positions - 1)
    if model.n_heads % tp or (model.kv_heads % tp and tp % model.kv_heads):
        tp = 1
    wl = Workload(batch=batch, seq=seq, tp=tp, dtype=dtype, act_dtype="bf16", logits="last")
    hw = load_gpu(gpu)
    opts = PlanOptions(compute_dtype="bf16", max_batched_tokens=8192)
    try:
        doc = fit(model, wl, hw, opts)
    except Exception as e:  # a tp the model refuses: not this test's subject
        assert type(e).__name__ == "ShapecalcError"
        return
    for at in (doc, doc["at_max_batch"]):
        if at is None:
            continue
        e, b = at["expected"], at["lower_bound"]
        assert e["ttft_s"] >= b["ttft_s"]
        if b["decode_s_per_token"] is not None:
            assert e["decode_s_per_token"] >= b["decode_s_per_token"]
            assert e["tokens_per_s_per_gpu"] <= b["tokens_per_s_per_gpu"]


def test_fit_plans_at_the_largest_batch_with_chunked_prefill(cli):
    r = cli("fit", "--preset", "llama3-70b", "--gpu", "h100-sxm", "--tp", "4", "--seq", "8192",
            "--json")
    assert r.code == 0
    doc = r.json()
    C = 85_520_809_984
    R = C - math.floor(C * 0.9)
    W = doc["memory_per_rank"]["weights"]
    A = 2 * 8192 * 8192 * 2  # the [8192, D] residual stream (> the FFN's Dff/p = 7168), twice
    per_seq = 8192 * 80 * 2 * 2 * 128 * 2  # 2 KV heads a rank
    assert doc["memory_per_rank"]["activations"] == A
    assert doc["max_batch"] == (C - R - W - A) // per_seq == 61
    mx = doc["at_max_batch"]
    assert mx["batch"] == 61
    assert mx["expected"]["tokens_per_s"] == pytest.approx(
        61 / mx["expected"]["decode_s_per_token"])
    assert mx["lower_bound"]["tokens_per_s"] > mx["expected"]["tokens_per_s"]
    table = cli("fit", "--preset", "llama3-70b", "--gpu", "h100-sxm", "--tp", "4", "--seq",
                "8192").out
    assert "B=1 expected" in table and "B=61 (largest) expected" in table
    assert "tokens/s per GPU" in table


def test_fit_exits_1_when_it_does_not_fit(cli):
    r = cli("fit", "--preset", "llama3-70b", "--gpu", "h100-sxm", "--json")
    assert r.code == 1 and r.json()["verdict"] == "does not fit (memory)"
    r = cli("fit", "--preset", "llama3-8b", "--gpu", "h100-sxm", "--seq", "9000", "--json")
    assert r.code == 1 and r.json()["verdict"] == "does not fit (context)"
    assert r.json()["fits"] is False


def test_terms_come_from_the_profile_then_set_gpu_then_perf(cli):
    base = ["fit", "--preset", "llama3-8b", "--gpu", "h100-sxm", "--seq", "1024", "--json"]
    a = cli(*base).json()
    assert a["perf_terms"] == PARAMS
    b = cli(*base, "--set-gpu", "perf.layer_overhead_s=1e-3").json()
    assert b["perf_terms"]["layer_overhead_s"] == 1e-3
    assert b["expected"]["decode_terms_s"]["overhead"] == pytest.approx(32e-3)
    c = cli(*base, "--set-gpu", "perf.layer_overhead_s=1e-3", "--perf", "layer_overhead_s=0").json()
    assert c["expected"]["decode_terms_s"]["overhead"] == 0
    bad = cli(*base, "--perf", "speed=2")
    assert bad.code == 2 and bad.err.startswith("error: perf: expected NAME=VALUE")


def test_calibrate_writes_a_profile_that_reproduces_your_measurements(cli, tmp_path):
    """Your own H100 measurements (here: the published H100 records, 1.3× slower) → a profile;
    a second run with that profile reproduces them: median measured ÷ expected 1 ± 0.1."""
    doc = json.loads(DATA_FILE.read_text())
    mine = []
    for r in doc["records"]:
        if "H100" in r["gpu"]:
            slow = 1.3 if r["unit"] in ("ms", "s") else 1 / 1.3
            mine.append({**r, "value": r["value"] * slow})
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"records": mine}))
    out = tmp_path / "profiles"
    r = cli("calibrate", str(path), "--write", str(out), "--json")
    assert r.code == 0, r.err
    assert (out / "H100-SXM.toml").is_file()
    assert cli("hardware", "H100-SXM", "--hardware-dir", str(out)).code == 0
    before = cli("calibrate", str(path), "--check", "--json").json()["summary"]["all"]["median"]
    after = cli("calibrate", str(path), "--check", "--hardware-dir", str(out), "--json").json()
    assert not 0.9 <= before <= 1.1
    assert 0.9 <= after["summary"]["all"]["median"] <= 1.1
    fitted = cli("fit", "--preset", "llama3-8b", "--gpu", "H100-SXM", "--hardware-dir", str(out),
                 "--json").json()["perf_terms"]
    assert fitted != PARAMS


def test_deployment_modes_say_which_bytes_are_at_which_width(cli):
    """--mode fp8 is W8A8 as engines run it: fp8 weights at the fp8 peak, bf16 activations,
    all-reduces and KV cache; int4-wo keeps 16-bit GEMMs; fp8-kv halves only the cache."""
    base = ["fit", "--preset", "llama3-8b", "--gpu", "h100-sxm", "--seq", "4096", "--tp", "2",
            "--json"]
    bf16 = cli(*base, "--mode", "bf16").json()
    fp8 = cli(*base, "--mode", "fp8").json()
    assert fp8["assumptions"]["widths"] == {"weights": "fp8", "activations": "bf16",
                                            "all_reduce": "bf16", "kv_cache": "bf16",
                                            "compute": "fp8"}
    assert fp8["assumptions"]["peak_flops"] == 1979e12
    mb, mf = bf16["memory_per_rank"], fp8["memory_per_rank"]
    assert mf["weights"] * 2 == mb["weights"] and mf["kv_cache"] == mb["kv_cache"]
    assert mf["activations"] == mb["activations"]  # activations stay bf16
    # the all-reduce stays 16-bit: the same communication in prefill
    assert fp8["times"]["prefill_comm_s"] == bf16["times"]["prefill_comm_s"]
    int4 = cli(*base, "--mode", "int4-wo").json()
    assert int4["assumptions"]["compute_dtype"] == "bf16"
    assert int4["memory_per_rank"]["weights"] * 4 == mb["weights"]
    kv8 = cli(*base, "--mode", "fp8-kv").json()["memory_per_rank"]
    assert kv8["kv_cache"] * 2 == mb["kv_cache"] and kv8["weights"] == mb["weights"]
    # explicit flags win over the mode
    both = cli(*base, "--mode", "fp8", "--kv-dtype", "fp8").json()["assumptions"]["widths"]
    assert both["kv_cache"] == "fp8" and both["activations"] == "bf16"
    # --dtype is the weights' width, run as engines run it: fp8 is W8A8 (as --mode fp8),
    # int8/int4 weight-only, 16- and 32-bit all at that width; the KV cache is fp8 only if asked
    for dtype, mode in (("fp8", "fp8"), ("int4", "int4-wo"), ("int8", "int8-wo"),
                        ("bf16", "bf16")):
        plain = cli(*base, "--dtype", dtype).json()
        assert plain["assumptions"]["widths"] == cli(*base, "--mode", mode).json()[
            "assumptions"]["widths"], dtype
    fp32 = cli(*base, "--dtype", "fp32").json()["assumptions"]["widths"]
    assert set(fp32.values()) == {"fp32"} and fp32["compute"] == "fp32"
    a8 = cli(*base, "--dtype", "fp8", "--act-dtype", "fp8").json()["assumptions"]["widths"]
    assert a8["activations"] == a8["all_reduce"] == a8["kv_cache"] == "fp8"
    tr = cli("trace", "--preset", "llama3-8b", "--mode", "int8-wo", "--json").json()
    assert tr["widths"] == {"weights": "int8", "activations": "bf16", "all_reduce": "bf16",
                            "kv_cache": "bf16"}
    bad = cli(*base, "--mode", "fp4")
    assert bad.code == 2 and bad.err.startswith("error: mode: 'fp4' is not one of")
    near = cli(*base, "--mode", "int4")
    assert near.code == 2 and "(did you mean 'int4-wo'?)" in near.err


def test_compare_and_sweep_take_the_mode_too(cli):
    c = cli("compare", "llama3-8b", "--gpu", "h100-sxm", "--mode", "fp8", "--json").json()[0]
    assert (c["workload"]["dtype"], c["workload"]["act_dtype"]) == ("fp8", "bf16")
    assert c["fit"]["assumptions"]["compute_dtype"] == "fp8"
    assert c["widths"] == {"weights": "fp8", "activations": "bf16", "all_reduce": "bf16",
                           "kv_cache": "bf16"}
    table = cli("compare", "llama3-8b", "llama3-8b@dtype=fp8", "--gpu", "h100-sxm").out
    assert "w fp8 act bf16 KV bf16" in table  # the column says which bytes are at which width
    # sweep's dtype axis runs each weight width as engines do: fp8 with bf16 activations and KV
    rows = [json.loads(x) for x in cli("sweep", "llama3-8b", "--gpu", "h100-sxm", "--dtype",
                                       "bf16,fp8,int4", "--batch", "1", "--seq", "128",
                                       "--phase", "decode").out.splitlines()]
    assert [(r["dtype"], r["act_dtype"], r["kv_dtype"]) for r in rows] == [
        ("bf16", "bf16", "bf16"), ("fp8", "bf16", "bf16"), ("int4", "bf16", "bf16")]
    fits = {d: cli("fit", "llama3-8b", "--gpu", "h100-sxm", "--dtype", d, "--batch", "1",
                   "--seq", "128", "--json").json() for d in ("fp8", "int4")}
    for r in rows[1:]:
        f = fits[r["dtype"]]
        assert r["expected_decode_s_per_token"] == pytest.approx(
            f["expected"]["decode_s_per_token"], rel=1e-9)
    rows = cli("sweep", "llama3-8b", "--gpu", "h100-sxm", "--mode", "fp8-kv", "--batch", "1",
               "--seq", "128").out.splitlines()
    row = json.loads(rows[0])
    assert (row["dtype"], row["act_dtype"], row["kv_dtype"]) == ("bf16", "bf16", "fp8")
