"""Hostile input found on a fifth pass (issue 25's "every flag is either used or refused", and
counts that agree with their nouns): one test per root cause, each refusal exit 2 with one line
naming the flag.

Root causes: --arrivals was checked only when it differed from its default, so `--arrivals
poisson` beside a trace or --concurrency shaped nothing, silently; --router was checked per
candidate deployment inside a search (a search with `--router bogus` printed an empty frontier
and exited 1) and not at all under --find-rate on one replica; --seed was taken where nothing is
drawn (a trace, fixed lengths at t=0); some counts kept a fixed plural ("1 GPUs" in train's
header, "× 1 micro-batches", "1 sequences", "1 tokens"); and calibrate read a record's
concurrency and a load record's arrival shape as documentation, and its simulation sizes
unnamed."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from test_hostile_round4 import _refused

SERVE = ("serve", "--preset", "llama3-8b", "--gpu", "H100-SXM", "--requests", "5")


@pytest.fixture
def trace_file(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,100,10\n",
                 encoding="utf-8")
    return str(p)


# -- --arrivals: refused where no gaps are drawn, even at its default value when typed -----------
def test_arrivals_beside_a_trace_is_refused(cli, trace_file):
    for shape in ("poisson", "gamma:2"):
        _refused(cli(*SERVE[:5], "--trace", trace_file, "--arrivals", shape), "arrivals",
                 "a trace fixes the arrivals", "leave out --arrivals")


def test_arrivals_without_a_rate_is_refused(cli):
    """No --rate: every request arrives at t=0 (or a closed loop): poisson shapes nothing."""
    _refused(cli(*SERVE, "--arrivals", "poisson"), "arrivals", "give --rate")
    _refused(cli(*SERVE, "--concurrency", "2", "--arrivals", "poisson"), "arrivals",
             "give --rate")
    assert cli(*SERVE, "--rate", "2", "--arrivals", "poisson").code == 0


# -- --router: one check, before any search -------------------------------------------------------
def test_an_unknown_router_is_refused_before_a_search(cli):
    r = cli(*SERVE, "--rate", "2", "--find-gpus", "--slo", "ttft=1s", "--router", "bogus")
    _refused(r, "router", "'bogus' is not one of round-robin, least-loaded")


def test_a_router_under_find_rate_on_one_replica_is_refused(cli):
    _refused(cli(*SERVE, "--find-rate", "--slo", "ttft=1s", "--router", "least-loaded"),
             "router", "one replica")
    r = cli(*SERVE, "--find-rate", "--slo", "ttft=1s", "--router", "least-loaded",
            "--replicas", "2", "--json")
    assert r.code in (0, 1), r.err  # used: a verdict, not a refusal


# -- --seed: taken only where something is drawn ---------------------------------------------------
def test_a_seed_where_nothing_is_drawn_is_refused(cli, trace_file):
    _refused(cli(*SERVE[:5], "--trace", trace_file, "--seed", "3"), "seed", "none is drawn")
    _refused(cli(*SERVE, "--seed", "3"), "seed", "none is drawn")  # fixed lengths at t=0
    a = cli(*SERVE, "--seed", "3", "--rate", "2", "--json")
    b = cli(*SERVE, "--seed", "4", "--rate", "2", "--json")
    assert a.code == b.code == 0 and a.out != b.out  # drawn arrivals: the seed is used
    assert cli(*SERVE, "--seed", "3", "--prompt-tokens", "uniform:10,100").code == 0


# -- counts agree with their nouns -----------------------------------------------------------------
def test_train_counts_are_singular_at_one(cli):
    out = cli("train", "--preset", "llama3-8b").out
    head = " ".join(out.split())
    assert "global batch 1 sequence of T=2048" in head and "(1 GPU)" in head, head[:300]
    assert "(× 1 micro-batch)" in head and "1 GPUs" not in head and "1 sequences" not in head
    many = " ".join(cli("train", "--preset", "llama3-8b", "--grad-accum", "4").out.split())
    assert "global batch 4 sequences" in many and "(× 4 micro-batches)" in many


def test_a_trace_of_one_token_says_token(cli):
    out = cli("trace", "--preset", "llama3-8b", "--seq", "1").out
    assert "KV cache (bf16, 1 token)" in out and "1 tokens" not in out


# -- calibrate: a record's numbers that the fit would replace are refused --------------------------
DATA = Path(__file__).resolve().parent / "data"


def _records(tmp_path, name, pick, change):
    recs = json.loads((DATA / name).read_text(encoding="utf-8"))["records"]
    rec = copy.deepcopy(next(r for r in recs if pick(r)))
    change(rec)
    p = tmp_path / "records.json"
    p.write_text(json.dumps({"records": [rec]}), encoding="utf-8")
    return str(p)


@pytest.mark.parametrize(("kind", "value", "words"), [
    ("ttft", 4, "ttft is modelled at batch 1"),
    ("tpot", 8, "tpot is modelled at batch 1"),
    ("throughput_fixed_batch", 8, "modelled at batch 64"),
    ("throughput_max_concurrency", 64, "fit's largest batch"),
    ("ttft", -1, "must be in [1,"),
    ("ttft", True, "True is not an integer"),
    ("ttft", 1.0, "1.0 is not an integer"),
])
def test_a_record_concurrency_the_fit_would_replace_is_refused(cli, tmp_path, kind, value,
                                                                 words):
    """A concurrency was documentation: a TTFT measured at 4 concurrent users was fitted as a
    batch-1 TTFT, silently."""
    path = _records(tmp_path, "serving-measurements.json",
                    lambda r: r["metric_type"] == kind and (r.get("batch") or 64) == 64,
                    lambda r: r.__setitem__("concurrency", value))
    _refused(cli("calibrate", path), "calibrate", "concurrency", words)


def test_a_record_concurrency_that_matches_or_describes_is_kept(cli, tmp_path):
    for value in (1, "one user at a time"):
        path = _records(tmp_path, "serving-measurements.json",
                        lambda r: r["metric_type"] == "ttft",
                        lambda r, v=value: r.__setitem__("concurrency", v))
        assert cli("calibrate", path).code == 0


@pytest.mark.parametrize(("change", "words"), [
    (lambda r: r["workload"].__setitem__("arrival", "gamma:4"), "simulates Poisson arrivals"),
    (lambda r: r["shapecalc"].__setitem__("replicas", 10**9),
     "shapecalc.replicas: must be in [1, 4,096]"),
    (lambda r: r["workload"].__setitem__("requests", 10**12),
     "workload.requests: must be in [1, 1,000,000]"),
    (lambda r: r["workload"].__setitem__("rate", 1e-9), "workload.rate / shapecalc.replicas"),
])
def test_a_load_record_is_checked_where_the_simulation_would_change_it(cli, tmp_path, change,
                                                                       words):
    """A Server record's `arrival` was documentation (any shape simulated as Poisson), and its
    sizes reached the simulator unnamed (`rate: … got 7.5e-08` for 10⁹ replicas)."""
    path = _records(tmp_path, "serving-load-measurements.json",
                    lambda r: "rate" in r["workload"], change)
    line = _refused(cli("calibrate", path, "--check"), "calibrate", words)
    assert "record mlperf41-h100x8-llama2-70b-server" in line


# -- preset folders: a suffix in any case is a preset (and so a twin) ------------------------------
PRESETS = Path(__file__).resolve().parent.parent / "presets"


@pytest.mark.parametrize("twin", ["m.Toml", "m.JSON"])
def test_a_preset_twin_in_another_case_is_refused(cli, tmp_path, twin):
    """`*.toml` globbing is case-sensitive: m.Toml beside m.toml was silently left out."""
    text = (PRESETS / "models" / "llama3-8b.toml").read_text(encoding="utf-8")
    (tmp_path / "m.toml").write_text(text, encoding="utf-8")
    (tmp_path / twin).write_text(text if twin.endswith("oml") else "{}", encoding="utf-8")
    _refused(cli("presets", "--presets-dir", str(tmp_path)), "presets-dir",
             "name the same preset 'm'; keep one")


def test_an_upper_case_suffix_is_read(cli, tmp_path):
    text = (PRESETS / "models" / "llama3-8b.toml").read_text(encoding="utf-8")
    (tmp_path / "up.TOML").write_text(text, encoding="utf-8")
    r = cli("trace", "--presets-dir", str(tmp_path), "--preset", "up", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["model"]["name"] == "up"
    gpu = tmp_path / "g.TOML"
    gpu.write_text((PRESETS / "hardware" / "H100-SXM.toml").read_text(encoding="utf-8"),
                   encoding="utf-8")
    assert cli("fit", "--preset", "llama3-8b", "--gpu", str(gpu), "--json").code == 0


# -- compare and sweep without --gpu: the options of the --gpu columns shape nothing ---------------
@pytest.mark.parametrize("cmd", [("compare", "llama3-8b", "llama2-7b"),
                                 ("sweep", "llama3-8b", "--batch", "1,2", "--format", "csv")])
@pytest.mark.parametrize(("flag", "value"), [
    ("--utilization", "0.8"), ("--compute-efficiency", "0.5"), ("--memory-efficiency", "0.5"),
    ("--link-efficiency", "0.5"), ("--price", "2"), ("--compute-dtype", "fp8"),
    ("--attention", "eager"), ("--max-batched-tokens", "2048"),
    ("--perf", "layer_overhead_s=1e-5"),
])
def test_a_gpu_option_without_gpu_is_refused(cli, cmd, flag, value):
    """Each was taken and ignored: the rows without --gpu have no memory fit, times or cost."""
    _refused(cli(*cmd, flag, value), flag[2:], "give --gpu NAME or leave out " + flag)
    assert cli(*cmd, flag, value, "--gpu", "H100-SXM").code in (0, 1)  # used: a verdict


@pytest.mark.parametrize("cmd", [("compare", "llama3-8b", "llama2-7b"), ("sweep", "llama3-8b"),
                                 ("train", "--preset", "llama3-8b")])
def test_a_hardware_dir_without_gpu_is_refused(cli, tmp_path, cmd, monkeypatch):
    _refused(cli(*cmd, "--hardware-dir", str(tmp_path)), "hardware-dir",
             "is where --gpu NAME is looked up")
    monkeypatch.setenv("SHAPECALC_HARDWARE", str(tmp_path))  # a standing setting, not a flag
    assert cli(*cmd).code == 0


# -- explain's worked examples and schema: no flag taken that changes nothing ----------------------
@pytest.mark.parametrize("args", [(), ("--scan",), ("--example", "topk")])
def test_a_seed_for_a_worked_example_is_refused(cli, args):
    """The worked examples' numbers are written out (the design notes'): --seed changed nothing."""
    _refused(cli("explain", *args, "--seed", "3"), "seed", "give --preset or --config")
    a, b = (cli("explain", "--preset", "seed-tiny", "--seed", s).out for s in ("3", "4"))
    assert a != b  # with a model it draws its weights


def test_schema_with_a_name_and_all_is_refused(cli):
    _refused(cli("schema", "trace", "--all"), "all", "not both")


def test_verify_layers_zero_names_the_range(cli):
    _refused(cli("verify", "--preset", "seed-tiny", "--layers", "0"), "layers",
             "K=0 must be between 1 and N=1")


def test_a_sweep_says_the_workload_error_not_skipped_tps(cli):
    """A flag for another kind of model failed check at every tp: the sweep reported every tp
    skipped as 'not a valid degree' instead of the flag."""
    _refused(cli("sweep", "llama3-8b", "--mla-form", "absorbed"), "mla_form",
             "Multi-head Latent Attention")
    _refused(cli("sweep", "llama3-8b", "--tp", "3"), "grid", "tp is not a valid degree")


# -- a request trace: larger than a config may be, its rows bounded before they are parsed ------
def test_a_trace_past_a_configs_10_mib_is_read(tmp_path):
    """The one reader capped every file at a config's 10 MiB: a trace can hold serve's 10⁶
    requests (~70 MB as JSON Lines), and said 'a config' of it."""
    from shapecalc.inputs.files import MAX_BYTES, read_text
    from shapecalc.model.config import ShapecalcError
    from shapecalc.serve.workload import read_trace

    p = tmp_path / "t.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,100,10\n"
                 + (" " * 1023 + "\n") * (MAX_BYTES // 1024 + 1), encoding="utf-8")  # blank
    assert [(r.arrival, r.prompt) for r in read_trace(p)] == [(0.0, 100), (0.5, 100)]
    with pytest.raises(ShapecalcError, match="more than the 10 MiB such a file may have"):
        read_text(p, "config")


def test_a_trace_with_too_many_rows_is_refused_before_parsing(cli, tmp_path, monkeypatch):
    from shapecalc.serve import workload

    monkeypatch.setattr(workload, "MAX_REQUESTS", 3)
    for name, head, row in (("t.csv", "arrival_s,prompt_tokens,output_tokens\n", "0,9,9\n"),
                            ("t.jsonl", "", '{"arrival_s": 0, "prompt_tokens": 9, '
                                            '"output_tokens": 9}\n')):
        p = tmp_path / name
        p.write_text(head + row * 3 + "\n\n", encoding="utf-8")  # blank lines are not rows
        assert len(workload.read_trace(p)) == 3
        p.write_text(head + row * 4, encoding="utf-8")
        _refused(cli(*SERVE[:5], "--trace", str(p)), "trace", "has 4 rows, more than the 3")


# -- a config.json value of the wrong kind or size: one line, whatever reader computes with it ----
HF_DATA = DATA / "hf"


def _hf(tmp_path, src, key, value):
    cfg = json.loads((HF_DATA / f"{src}.json").read_text(encoding="utf-8"))
    cfg[key] = value
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg), encoding="utf-8")
    return ("trace", "--hf-config", str(p), "--json")


@pytest.mark.parametrize(("src", "key", "value", "words"), [
    # readers listed every layer's kind before N was bounded: MemoryError, OverflowError
    ("afmoe", "num_hidden_layers", 10**30, "is more than the 100,000"),
    ("lfm2-1.2b", "num_hidden_layers", 10**30, "is more than the 100,000"),
    ("phi3.5-moe", "num_hidden_layers", 10**30, "is more than the 100,000"),
    # a family's name is looked up (hashed): a list was transformers' TypeError
    ("gpt2-large", "model_type", ["gpt2"], "must be a family's name"),
    ("mixtral-8x22b", "model_type", {"a": "mixtral"}, "must be a family's name"),
    ("deepseek-v4-flash", "compress_ratios", [[0, 4]], "DeepSeek-V4's ratios are 0, 4 and 128"),
    ("qwen3-30b-a3b", "mlp_only_layers", 1.5, "must be a list of integers"),
    ("granite-3.3-8b", "logits_scaling", None, "must be a finite number"),
    # the net under every reader: a value it computes with, named by its key
    ("gpt-neox-20b", "rotary_pct", [0.25], "[0.25] is not a value shapecalc can read here"),
    ("deepseek-v4-flash", "num_hash_layers", [3], "[3] is not a value shapecalc can read"),
    ("mistral-small-4", "qk_rope_head_dim", None, "None is not a value shapecalc can read"),
    ("mpt-7b", "d_model", None, "None is not a value shapecalc can read"),
    ("stablelm-2-12b", "partial_rotary_factor", {"a": 0.25}, "is not a value shapecalc can"),
])
def test_a_config_value_of_the_wrong_kind_is_one_line(cli, tmp_path, src, key, value, words):
    _refused(cli(*_hf(tmp_path, src, key, value)), key, words)


@pytest.mark.parametrize("src", ["llama3-8b", "qwen3-30b-a3b", "deepseek-v3", "gemma3-1b",
                                 "jamba-mini-1.5", "lfm2-1.2b", "gpt-oss-20b", "mpt-7b",
                                 "falcon-h1-7b", "kimi-linear-48b-a3b"])
def test_every_key_of_a_config_mutated_keeps_the_contract(cli, tmp_path, src):
    """Each key of a real config replaced by a string, a list, null, 0, -1 or 10³⁰: the
    trace runs (the key is neutral) or is refused in one line; never a traceback."""
    cfg = json.loads((HF_DATA / f"{src}.json").read_text(encoding="utf-8"))
    mutations = [lambda v: str(v), lambda v: [v], lambda v: None, lambda v: 0, lambda v: -1,
                 lambda v: 10**30]
    for i, key in enumerate(k for k, v in cfg.items() if isinstance(v, (int, float, list))):
        r = cli(*_hf(tmp_path, src, key, mutations[i % len(mutations)](cfg[key])))
        assert "Traceback" not in r.err, (key, r.err)
        if r.code:
            assert r.code == 2 and r.out == "" and len(r.err.splitlines()) == 1, (key, r.err)
