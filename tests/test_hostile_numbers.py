"""Issue 12's hostile numbers, one test per category: each bad input exits 2 with one line naming
the field (no traceback, nothing on stdout), each extreme but valid one gives exact numbers or
valid JSON, and nothing hangs or grows without bound."""

from __future__ import annotations

import json
import time

import pytest

from shapecalc.check import budget
from shapecalc.check.budget import WORK_BUDGET_S, estimate, plan_layers, work_seconds
from shapecalc.inputs import sources
from shapecalc.model.config import MAX_LAYERS, Workload
from tests.test_errors import _one_clean_line

BIG = "9223372036854775808"  # 2⁶³
TOP = "9223372036854775807"  # 2⁶³ − 1, the largest count
HUGE = "1" + "0" * 30  # 10³⁰


def _strict_json(text: str):
    def refuse(constant):
        raise AssertionError(f"{constant} in JSON")

    return json.loads(text, parse_constant=refuse)


def _error(cli, *args, field):
    line = _one_clean_line(cli(*args))
    assert line.startswith(f"error: {field}"), line
    return line


# -- tracebacks -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "field"), [
    (["verify", "--memory-budget", "nan"], "memory-budget"),
    (["verify", "--memory-budget", "inf"], "memory-budget"),
    (["verify", "--memory-budget", "1e300"], "memory-budget"),
    (["verify", "--memory-budget", "-1"], "memory-budget"),
    (["verify", "--seed", "-1"], "Invalid value for '--seed'"),
    (["explain", "--preset", "seed-tiny", "--seed", "-1"], "Invalid value for '--seed'"),
    (["fit", "--preset", "llama3-8b", "--gpu", "H100-SXM", "--batch", BIG], "batch"),
    (["fit", "--preset", "llama3-8b", "--gpu", "H100-SXM", "--seq", HUGE], "seq"),
    (["sweep", "llama3-8b", "--batch", BIG], "batch"),
    (["sweep", "llama3-8b", "--gpu", "H100-SXM", "--seq", BIG], "seq"),
    (["sweep", f"llama3-8b@batch={BIG}", "--gpu", "H100-SXM"], "batch"),
    (["compare", "llama3-8b", "--gpu", "H100-SXM", "--batch", BIG], "batch"),
    (["trace", "--batch", BIG], "batch"),
    (["fit", "--preset", "llama3-8b", "--gpu", "H100-SXM", "--max-batched-tokens", HUGE],
     "max-batched-tokens"),
    (["fit", "--preset", "llama3-8b", "--gpu", "H100-SXM", "--set-gpu", "hbm_bandwidth=1e-300"],
     "gpu.hbm_bandwidth"),
    (["fit", "--preset", "llama3-8b", "--gpu", "H100-SXM", "--set-gpu",
      "peak_flops.bf16=1e-300"], "gpu.peak_flops.bf16"),
    (["sweep", "llama3-8b", "--gpu", "H100-SXM", "--set-gpu", "link_bandwidth=0.5"],
     "gpu.link_bandwidth"),
    (["fit", "--preset", "llama3-8b", "--gpu", "H100-SXM", "--set-gpu", "memory_bytes=1e999"],
     "set-gpu"),
])
def test_former_tracebacks_are_one_line(cli, args, field):
    _error(cli, *args, field=field)


HF = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 128,
      "max_position_embeddings": 512, "hidden_act": "silu", "tie_word_embeddings": False}


@pytest.mark.parametrize(("key", "value"), [
    ("num_attention_heads", 0),  # was ZeroDivisionError
    ("hidden_act", ["silu"]),  # was TypeError (unhashable list)
    ("attention_bias", "false"),  # bool("false") turned the biases on
    ("mlp_bias", 1),
    ("num_hidden_layers", True),  # true was one layer
    ("hidden_size", "64"),  # a string: 4·D would repeat it
    ("intermediate_size", 1.5),
    ("tie_word_embeddings", None),
    ("max_position_embeddings", "512"),
    ("vocab_size", None),
])
def test_malformed_hf_values_are_refused_naming_the_key(cli, tmp_path, key, value):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**HF, key: value}))
    _error(cli, "trace", "--hf-config", str(path), field=key)


def test_hf_oddities_that_change_nothing_still_load(cli, tmp_path):
    """rope_scaling dicts and null optional keys change no count: the same totals as without."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(HF))
    base = cli("trace", "--hf-config", str(path), "--json").json()["totals"]
    path.write_text(json.dumps({**HF, "rope_scaling": {"type": "linear", "factor": 2.0},
                                "head_dim": None, "rms_norm_eps": None}))
    r = cli("trace", "--hf-config", str(path), "--json")
    assert r.code == 0, r.err
    assert r.json()["totals"] == base
    path.write_text(json.dumps({**HF, "model_type": "llama9"}))
    _error(cli, "trace", "--hf-config", str(path), field="model_type")
    path.write_text(json.dumps({"model_type": "llava", "text_config": {**HF, "hidden_act": 3}}))
    _error(cli, "trace", "--hf-config", str(path), field="hidden_act")


# -- exact past int64, and never inf in JSON ------------------------------------------------------
def test_sweep_with_a_gpu_stays_exact_where_batch_times_seq_passes_int64(cli):
    """B·T = 2⁷⁰: NumPy's int64 wrapped it to 0 ('batch, seq, tp and pp must be ≥ 1'); the
    row now equals fit's scalar (Python int) answer."""
    B, T = str(2**40), str(2**30)
    r = cli("sweep", "llama3-8b", "--gpu", "H100-SXM", "--batch", B, "--seq", T)
    assert r.code == 1, r.err  # its one row does not fit (README: Exit status)
    row = _strict_json(r.out)
    f = cli("fit", "--preset", "llama3-8b", "--gpu", "H100-SXM", "--batch", B, "--seq", T,
            "--json")
    assert f.code == 1, f.err  # it does not fit, and says so
    doc = _strict_json(f.out)
    assert row["mem_activations"] == doc["memory_per_rank"]["activations"]
    assert row["mem_kv_cache"] == doc["memory_per_rank"]["kv_cache"] == 2**40 * 2**30 * 131072
    assert row["prefill_s"] == doc["times"]["prefill_s"]
    top = cli("sweep", "llama3-8b", "--gpu", "H100-SXM", "--batch", TOP, "--seq", TOP)
    assert top.code == 1 and _strict_json(top.out)["batch"] == 2**63 - 1


@pytest.mark.parametrize("cmd", [
    ["fit", "--preset", "llama3-8b", "--gpu", "H100-SXM", "--json"],
    ["compare", "llama3-8b", "--gpu", "H100-SXM", "--json"],
    ["sweep", "llama3-8b", "--gpu", "H100-SXM"],
])
def test_times_past_float_range_are_null_not_inf(cli, cmd):
    # 2⁴⁰ sequences' prefill (~3.6·10²⁵ FLOPs) at 10⁻³⁰⁰ of the peak: past 1.8·10³⁰⁸ s
    r = cli(*cmd, "--compute-efficiency", "1e-300", "--batch", str(2**40))
    assert r.code in (0, 1) and r.err == "", r.err
    text = r.out
    docs = [_strict_json(x) for x in text.splitlines()] if cmd[0] == "sweep" else [
        _strict_json(text)]
    assert "null" in text and docs


# -- hangs ----------------------------------------------------------------------------------------
def test_verify_of_the_largest_preset_without_layers_is_refused_at_once(cli):
    t = time.perf_counter()
    line = _error(cli, "verify", "--preset", "llama3.1-405b", field="layers")
    assert time.perf_counter() - t < 10
    assert "--layers 1" in line and f"{WORK_BUDGET_S:.0f} s" in line


def test_many_tiny_layers_run_a_bounded_number_of_them():
    deep = sources.load_preset("seed-tiny").model_copy(update={"n_layers": MAX_LAYERS})
    wl = Workload(batch=2, seq=4)
    K, _, resident = plan_layers(deep, wl, None, "float32", budget.DEFAULT_BUDGET)
    assert 1 <= K < MAX_LAYERS and resident
    assert work_seconds(deep, wl, K) <= WORK_BUDGET_S < work_seconds(deep, wl, K + 1)
    # given explicitly, K is the user's: no time bound (memory still is)
    assert plan_layers(deep, wl, MAX_LAYERS, "float32", budget.DEFAULT_BUDGET)[0] == MAX_LAYERS


def test_the_time_bound_is_the_same_on_every_machine(monkeypatch):
    model = sources.load_preset("llama3-8b")
    wl = Workload(batch=2, seq=16)
    plans = set()
    for have in (8 << 30, 1 << 40):
        monkeypatch.setattr(budget, "available_memory", lambda have=have: have)
        plans.add(plan_layers(model, wl, None, "float32", budget.DEFAULT_BUDGET))
    assert len(plans) == 1


@pytest.mark.parametrize(("args", "field"), [
    (["trace", "--set", "n_layers=100000000"], "n_layers"),
    (["verify", "--set", "n_layers=100000000"], "n_layers"),
    (["compare", "seed-tiny", "--batch", "1..100000"], "compare"),
    (["compare", "seed-tiny", "gpt2", "--batch", "1..16", "--seq", "1..16"], "compare"),
    (["sweep", "seed-tiny", "--batch", "1..10000000", "--seq", "1..100"], "grid"),
])
def test_inputs_that_hung_are_refused_at_once(cli, args, field):
    t = time.perf_counter()
    _error(cli, *args, field=field)
    assert time.perf_counter() - t < 10


# -- memory ---------------------------------------------------------------------------------------
def test_verify_estimate_counts_the_paged_blocks(cli):
    model = sources.load_preset("llama3.2-1b")
    small, wide = (Workload(batch=2, seq=16, block_size=b) for b in (16, 10**8))
    assert estimate(model, wide, 1) > estimate(model, small, 1) + 10**8 * 2 * 2 * 8 * 64 * 4
    line = _error(cli, "verify", "--preset", "llama3.2-1b", "--layers", "1", "--block-size",
                  str(10**8), field="memory")
    assert "budget" in line


def test_a_big_sweep_is_streamed_not_built():
    from shapecalc.plan import sweep as sweeping
    from shapecalc.plan.cases import Case

    axes = sweeping.SweepAxes(batch=list(range(1, 10_001)), seq=list(range(1, 1_001)), tp=[1],
                              pp=[1], dtype=["bf16"], kv_dtype=[None], phase=["prefill"])
    grid = sweeping.SweepGrid(Case("seed-tiny", sources.load_preset("seed-tiny")), axes, {})
    assert grid.rows == 10**7
    first = next(grid.chunks())  # the rows in near-equal chunks of at most CHUNK_POINTS
    assert 0.99 * sweeping.CHUNK_POINTS < len(first) <= sweeping.CHUNK_POINTS


# -- silently wrong models ------------------------------------------------------------------------
def test_booleans_are_not_counts(cli, tmp_path):
    _error(cli, "trace", "--set", "n_layers=true", field="n_layers")
    line = _error(cli, "trace", "--set", "d_model=true", field="d_model")  # not n_heads
    assert "boolean" in line
    fields = {"vocab_size": 10, "d_model": 8, "n_layers": True, "n_heads": 2, "d_ff": 8,
              "positions": "none"}
    toml = tmp_path / "m.toml"
    toml.write_text("\n".join(f"{k} = {json.dumps(v)}" for k, v in fields.items()))
    _error(cli, "trace", "--config", str(toml), field="n_layers")
    js = tmp_path / "m.json"
    js.write_text(json.dumps({**fields, "n_layers": 1, "rope_base": 1e999}))
    _error(cli, "trace", "--config", str(js), field="rope_base")  # inf is no size
    js.write_text(json.dumps({**fields, "n_layers": 1, "workload": {"batch": False}}))
    _error(cli, "trace", "--config", str(js), field="batch")


def test_empty_preset_and_zero_seq_are_refused(cli):
    _error(cli, "trace", "--preset", "", field="preset")
    _error(cli, "verify", "--preset", "", field="preset")
    _error(cli, "fit", "--preset", "", "--gpu", "H100-SXM", field="preset")
    _error(cli, "explain", "--preset", "seed-tiny", "--seq", "0", field="seq")


def test_a_case_field_and_a_flag_follow_one_rule_everywhere(cli):
    """`llama3-8b@tp=2 --tp 4`: the case's @ field wins, in compare, sweep and fit alike."""
    args = ("--batch", "1", "--seq", "128")
    c = cli("compare", "llama3-8b@tp=2", "--tp", "4", *args, "--json").json()
    s = json.loads(cli("sweep", "llama3-8b@tp=2", "--tp", "4", *args).out)
    f = cli("fit", "llama3-8b@tp=2", "--tp", "4", *args, "--gpu", "H100-SXM", "--json").json()
    assert c[0]["workload"]["tp"] == s["tp"] == f["workload"]["tp"] == 2
    # a case file's [workload] yields to the flags, as --config's does
    wanted = cli("fit", "llama3-8b", "--tp", "4", *args, "--gpu", "H100-SXM", "--json").json()
    assert wanted["workload"]["tp"] == 4


# -- numeric flags --------------------------------------------------------------------------------
NUMERIC = ["--batch", "--seq", "--tp", "--pp", "--ep", "--block-size"]


@pytest.mark.parametrize("value", ["0", "-1", HUGE, BIG, "nan", "inf", "1.5", "1e3", "", "x"])
@pytest.mark.parametrize("flag", NUMERIC)
def test_numeric_flags_refuse_what_is_not_a_count(cli, flag, value):
    r = cli("trace", "--preset", "llama3-8b", flag, value, "--json")
    line = _one_clean_line(r)
    name = flag.lstrip("-").replace("-", "_")
    assert name in line or flag in line, line


UNICODE_DIGITS = ["٣", "３", "१", "1٣"]  # Arabic-Indic, fullwidth, Devanagari, mixed


@pytest.mark.parametrize("value", UNICODE_DIGITS)
@pytest.mark.parametrize(("args", "flag"), [
    (["trace", "--preset", "llama3-8b", "--json", "--batch"], "--batch"),
    (["trace", "--preset", "llama3-8b", "--json", "--tp"], "--tp"),
    (["verify", "--seed"], "--seed"),  # an IntRange
    (["train", "--preset", "seed-tiny", "--json", "--dp"], "--dp"),
    (["fit", "--preset", "llama3-8b", "--gpu", "H100-SXM", "--json", "--batch"], "--batch"),
    (["verify", "--memory-budget"], "--memory-budget"),  # a float
    (["fit", "--preset", "llama3-8b", "--gpu", "H100-SXM", "--json", "--utilization"],
     "--utilization"),
])
def test_unicode_digits_are_refused(cli, args, flag, value):
    """int() and float() read '٣' and '３' as 3: a flag refuses them, naming itself, and keeps
    click's message for every other bad value."""
    line = _one_clean_line(cli(*args, value))
    assert f"'{flag}'" in line and "digits must be ASCII 0-9" in line, line


@pytest.mark.parametrize(("args", "field"), [
    (["compare", "llama3-8b", "--batch", "1,٣"], "batch"),  # a grid
    (["sweep", "llama3-8b", "--seq", "1..３"], "seq"),
    (["compare", "llama3-8b@batch=３"], "batch"),  # a case's field
    (["trace", "--preset", "seed-tiny", "--set", "n_layers=٣"], "n_layers"),
    (["fit", "--preset", "llama3-8b", "--gpu", "H100-SXM", "--perf", "layer_overhead_s=１e-5"],
     "perf.layer_overhead_s"),
    (["train", "--preset", "seed-tiny", "--gpu", "H100-SXM", "--perf", "gemm_efficiency=٠.٥"],
     "perf.gemm_efficiency"),
    (["serve", "--preset", "llama3-8b", "--gpu", "H100-SXM", "--prompt-tokens", "uniform:1,٣"],
     "prompt-tokens"),
    (["serve", "--preset", "llama3-8b", "--gpu", "H100-SXM", "--slo", "ttft=１s"], "slo"),
])
def test_unicode_digits_in_values_are_refused(cli, args, field):
    _error(cli, *args, field=field)


def test_ascii_digits_still_work_and_other_messages_stay(cli):
    assert cli("trace", "--preset", "llama3-8b", "--batch", "3", "--json").code == 0
    line = _one_clean_line(cli("trace", "--preset", "llama3-8b", "--batch", "x"))
    assert line == "error: Invalid value for '--batch' / '-b': 'x' is not a valid int."


# -- --perf: bounded terms --------------------------------------------------------------------
@pytest.mark.parametrize(("value", "reason"), [
    ("layer_overhead_s=1e308", "must be in [0, 1] s"),
    ("prefill_layer_overhead_s=2", "must be in [0, 1] s"),
    ("allreduce_latency_s=-1e-6", "must be in [0, 1] s"),
    ("gemm_half_tokens=1e7", "must be in [0, 1e+06] tokens"),
    ("allreduce_latency_s=nan", "must be a finite number"),
    ("layer_overhead_s=inf", "must be a finite number"),
    ("gemm_efficiency=0", "must be in (0, 1]"),
    ("memory_efficiency=1.5", "must be in (0, 1]"),
])
@pytest.mark.parametrize("cmd", [["fit", "--preset", "llama3-8b", "--json"],
                                 ["sweep", "llama3-8b"], ["compare", "llama3-8b", "--json"]])
def test_perf_terms_are_bounded(cli, cmd, value, reason):
    name = value.split("=")[0]
    line = _error(cli, *cmd, "--gpu", "H100-SXM", "--perf", value, field=f"perf.{name}")
    assert reason in line, line


def test_perf_bounds_hold_in_a_profile_too(cli, tmp_path):
    """A GPU profile's [perf] table and --set-gpu perf.NAME are held to the same ranges."""
    _error(cli, "fit", "--preset", "llama3-8b", "--gpu", "H100-SXM", "--set-gpu",
           "perf.layer_overhead_s=5", field="perf.layer_overhead_s")
    ok = cli("fit", "--preset", "llama3-8b", "--gpu", "H100-SXM", "--json", "--perf",
             "layer_overhead_s=1", "--perf", "gemm_half_tokens=1e6", "--perf",
             "allreduce_latency_s=0")  # the limits themselves are in range
    assert ok.code == 0, ok.err


# -- parallel degrees -----------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "field"), [
    (["--tp", "3"], "tp"),  # does not divide H
    (["--tp", "64"], "tp"),  # more ranks than heads
    (["--pp", "33"], "pp"),  # more stages than layers
    (["--block-size", "0"], "block_size"),
    (["--ep", "2"], "ep"),  # a dense model
])
@pytest.mark.parametrize("cmd", [["trace", "--preset", "llama3-8b"],
                                 ["fit", "--preset", "llama3-8b", "--gpu", "H100-SXM"],
                                 ["verify", "--preset", "seed-classroom"]])
def test_parallel_degrees(cli, cmd, args, field):
    if cmd[0] == "verify" and args[1] in ("33",):
        args = ["--pp", "100"]
    _error(cli, *cmd, *args, field=field)


def test_sweep_skips_invalid_degrees_and_refuses_a_grid_without_one(cli):
    r = cli("sweep", "llama3-8b", "--tp", "1,3")
    assert r.code == 0 and r.err.startswith("note: ") and len(r.out.splitlines()) == 1
    _error(cli, "sweep", "llama3-8b", "--tp", "3", field="grid")


# -- preset names ---------------------------------------------------------------------------------
NAMES = ["../../etc/passwd", "/etc/passwd", "a\nb", "a\x00b", "x" * 5000, "presets/models/gpt2"]


@pytest.mark.parametrize("name", NAMES, ids=["dotdot", "abs", "newline", "nul", "long", "path"])
@pytest.mark.parametrize("cmd", [["trace", "--preset"], ["presets", "show"],
                                 ["fit", "--gpu", "H100-SXM", "--preset"]])
def test_preset_names_that_are_not_names(cli, cmd, name):
    _error(cli, *cmd, name, field="preset")  # one line, whatever the name holds


@pytest.mark.parametrize("cmd", [["trace", "--hf-config"], ["trace", "--config"],
                                 ["fit", "--preset", "llama3-8b", "--gpu"], ["compare"]])
def test_paths_too_long_to_look_up(cli, cmd):
    field = {"--hf-config": "hf-config", "--config": "config", "--gpu": "gpu"}.get(cmd[-1], "")
    _error(cli, *cmd, "x" * 5000 + ".json", field=field)  # the OS cannot stat it: one line


# -- planning overrides ---------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "field"), [
    (["--utilization", "0"], "utilization"),
    (["--utilization", "2"], "utilization"),
    (["--utilization", "nan"], "utilization"),
    (["--compute-efficiency", "0"], "compute-efficiency"),
    (["--memory-efficiency", "-1"], "memory-efficiency"),
    (["--link-efficiency", "inf"], "link-efficiency"),
    (["--price", "-1"], "price"),
    (["--max-batched-tokens", "-5"], "max-batched-tokens"),
    (["--set-gpu", "memory_bytes=-1"], "set-gpu"),
    (["--set-gpu", "memory_bytes=0"], "set-gpu"),
    (["--set-gpu", "hbm_bandwidth=nan"], "set-gpu"),
])
@pytest.mark.parametrize("cmd", [["fit", "--preset", "llama3-8b"], ["compare", "llama3-8b"],
                                 ["sweep", "llama3-8b"]])
def test_planning_overrides(cli, cmd, args, field):
    line = _error(cli, *cmd, "--gpu", "H100-SXM", *args, field=field)
    if "memory_bytes=-1" in args:
        assert "positive" in line

