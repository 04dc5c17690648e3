"""Hostile input to this round's flags and commands (issue 25's mechanisms applied to --pd,
--draft, --emit, --ep-mode, --slo METRIC_pQ, length caps, --fw-term and calibrate-train): one
test per root cause, each case exit 2 with one line naming the flag or field.

Root causes: a one-value option given twice kept the last (cli/once.py, every command);
calibrate-train read its records unchecked (train/train_records.py); --fw-term had one range
for switches, counts and fractions; the speculative scheduler kept no prefill tokens per
iteration (serve/why.py crashed on a missed SLO); --emit launched the given plan after a search
that found none, or after --find-rate; bounds left open (lognormal MEAN, --redundant-experts)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from test_errors import _one_clean_line

SERVE = ("serve", "--preset", "llama3-8b", "--gpu", "H100-SXM", "--requests", "5")
MOE = ("serve", "--preset", "mixtral-8x7b", "--gpu", "H100-SXM", "--requests", "5", "--ep", "2")
DRAFT = ("--draft", "draft", "--draft-preset", "llama3.2-1b", "--spec-k", "2")
TRAIN = ("train", "--preset", "llama3-8b")
DATA = Path(__file__).resolve().parent / "data" / "training-measurements.json"
RECORD = json.loads(DATA.read_text(encoding="utf-8"))["records"][0]  # korthikanti-22b, tp 8


def _refused(r, field, *words):
    line = _one_clean_line(r)
    assert line.startswith(f"error: {field}"), line
    for w in words:
        assert w in line, line
    return line


# -- a one-value option is given once (cli/once.py) -----------------------------------------------
@pytest.mark.parametrize(("args", "flag", "values"), [
    ((*SERVE, *DRAFT, "--acceptance", "0.7", "--acceptance", "0.5"), "acceptance",
     "('0.7', '0.5')"),
    ((*SERVE, "--slo", "mlperf-server", "--slo=mlperf-interactive"), "slo",
     "('mlperf-server', 'mlperf-interactive')"),
    ((*SERVE, "--pd", "1:1", "--pd", "2:1"), "pd", "('1:1', '2:1')"),
    ((*SERVE, "--emit", "vllm", "--emit", "sglang"), "emit", "'vllm', 'sglang'"),
    ((*SERVE, "-o", "/dev/null/a", "--output", "/dev/null/b"), "output",
     "('/dev/null/a', '/dev/null/b')"),  # never written, whatever happens
    ((*TRAIN, "--framework", "megatron", "--framework", "hf"), "framework", "'megatron', 'hf'"),
    (("fit", "--preset", "llama3-8b", "--gpu", "H100-SXM", "--tp", "2", "--tp=4"), "tp",
     "('2', '4')"),
])
def test_a_one_value_option_given_twice_is_refused(cli, args, flag, values):
    """click kept the last value silently: `--acceptance 0.7 --acceptance 0.5` ran 0.5."""
    _refused(cli(*args), flag, f"--{flag} is given more than once", values)


def test_a_router_for_one_replica_is_refused_only_when_given(cli):
    """cli/once.given: `--router least-loaded` on one replica routed nothing, silently; its
    default (round-robin) is not a flag the user gave."""
    _refused(cli(*SERVE, "--router", "least-loaded"), "router", "one replica")
    assert cli(*SERVE, "--router", "least-loaded", "--replicas", "2").code == 0
    assert cli(*SERVE).code == 0


def test_repeatable_options_and_flags_still_repeat(cli):
    r = cli("trace", "--preset", "seed-tiny", "--set", "n_layers=2", "--set", "d_ff=64",
            "--json", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["model"]["n_layers"] == 2


# -- calibrate-train: every record field checked, the record named
def _pop(*path):
    def f(r):
        for p in path[:-1]:
            r = r[p]
        r.pop(path[-1])
    return f


def _put(v, *path):
    def f(r):
        for p in path[:-1]:
            r = r[p]
        r[path[-1]] = v
    return f


@pytest.mark.parametrize(("change", "words"), [
    (_pop("layout"), ("layout: missing",)),  # KeyError
    (_pop("layout", "tp"), ("layout.tp: missing",)),
    (_pop("shapecalc", "net_bandwidth"), ("shapecalc.net_bandwidth: missing",)),
    (_pop("compare"), ("compare: missing",)),
    (_put(True, "layout", "tp"), ("layout.tp", "True is not an integer")),  # ran as tp 1
    (_put(2.5, "layout", "pp"), ("layout.pp", "2.5")),
    (_put(0, "layout", "dp"), ("layout.dp", "got 0")),
    (_put(7, "layout", "zero"), ("layout.zero", "[0, 3]")),
    (_put(-1, "seq"), ("seq", "got -1")),
    (_put(2**63, "micro_batch"), ("micro_batch",)),
    (_put(float("nan"), "measured", "step_s"), ("measured.step_s", "nan")),
    (_put(0, "measured", "step_s"), ("measured.step_s", "got 0")),
    (_put("1.1", "measured", "step_s"), ("measured.step_s", "'1.1' is not a number")),
    (_put(1100, "measured", "step_ms"), ("measured.step_ms", "unknown figure")),  # unit ignored
    (_put(["stepp_s"], "compare"), ("compare", "'stepp_s'")),  # silently not compared
    (_put(True, "shapecalc", "net_bandwidth"), ("shapecalc.net_bandwidth", "True")),
    (_put("x", "shapecalc", "set_gpu"), ("shapecalc.set_gpu",)),
    (_put(True, "model", "set", "d_model"), ("d_model", "boolean")),  # pydantic's traceback
    (_put(3, "model", "set", "wingspan"), ("wingspan", "unknown field")),
    (_put("bogus", "shapecalc", "attention_flops"), ("attention_flops", "'bogus'")),
    (_put(3, "layout", "tp"), ("tp: p=3 does not divide",)),  # trace's refusal, now named
])
def test_calibrate_train_checks_every_record_field(cli, tmp_path, change, words):
    rec = copy.deepcopy(RECORD)
    change(rec)
    p = tmp_path / "records.json"
    p.write_text(json.dumps({"records": [rec]}))
    line = _refused(cli("calibrate-train", str(p), "--check"), "file", *words)
    assert "'korthikanti-22b-selective'" in line or "record 0" in line, line


def test_calibrate_train_refuses_a_repeated_id_and_a_non_object(cli, tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"records": [RECORD, RECORD]}))
    _refused(cli("calibrate-train", str(p), "--check"), "file", "id is given twice")
    p.write_text(json.dumps({"records": [3]}))
    _refused(cli("calibrate-train", str(p), "--check"), "file", "record 0", "not a JSON object")


# -- --fw-term: each term by its kind and range
@pytest.mark.parametrize(("term", "words"), [
    ("allocator_reserve=1e308", ("must be in [0, 1]",)),  # OverflowError in int()
    ("dropout=1e308", ("must be in [0, 1]",)),
    ("comm_buffer_bytes=1.5", ("whole number",)),
    ("comm_buffer_bytes=9223372036854775808", ("must be in",)),
    ("fused_ce=2", ("(0 off, 1 on)",)),
    ("fused_ce=0.5", ("whole number",)),
    ("prefetch_blocks=nan", ("nan",)),
])
def test_fw_terms_have_their_own_kind_and_range(cli, term, words):
    key = term.partition("=")[0]
    _refused(cli(*TRAIN, "--framework", "megatron", "--fw-term", term), f"fw-term.{key}", *words)


def test_a_power_limit_above_the_tdp_is_refused(cli):
    """min(1, W/TDP) clamped 10,000 W to H100 SXM's 700 W silently."""
    _refused(cli(*TRAIN, "--gpu", "H100-SXM", "--framework", "megatron", "--power-limit",
                 "10000"), "power-limit", "above H100-SXM's 700 W TDP")


def test_sac_layer_every_is_a_layer_count(cli):
    base = (*TRAIN, "--framework", "torchtitan", "--recompute", "selective", "--fw-term")
    _refused(cli(*base, "sac_layer_every=2.5"), "fw-term.sac_layer_every", "whole number")
    _refused(cli(*base, "sac_layer_every=1000000000000"), "fw-term.sac_layer_every",
             "at most the model's 32 layers")  # llama3-8b: 32 blocks


# -- speculative decoding: a missed SLO says why (no crash)
def test_a_speculative_run_that_misses_its_slo_says_why(cli):
    """The speculative scheduler kept durations and decode counts per iteration but no prefill
    tokens, so why.py's zip(durs, toks, ptoks, strict=True) raised on every missed SLO."""
    r = cli(*SERVE, *DRAFT, "--slo", "ttft=1ms,itl=1ms", "--json")
    assert r.code == 1, r.err  # a negative verdict, not a traceback
    doc = json.loads(r.out)
    assert doc["slo_met"] is False and doc["slo_missed"]


# -- --emit: a deployment, only when one is there
@pytest.mark.parametrize("flag", [("--ep-mode", "low-latency"), ("--redundant-experts", "2")])
def test_emit_refuses_what_no_emitted_flag_sets(cli, flag):
    """The launch line left DeepEP's mode and EPLB's copies out: the engine ran its default."""
    _refused(cli(*MOE, "--emit", "sglang", *flag), flag[0][2:], "--emit does not set it")


def test_emit_is_refused_after_find_rate_and_when_find_pd_finds_nothing(cli):
    _refused(cli(*SERVE, "--emit", "vllm", "--find-rate", "--slo", "ttft=1s,itl=50ms"), "emit",
             "--find-rate")
    _refused(cli(*SERVE, "--emit", "dynamo", "--find-pd", "--rate", "1000", "--slo",
                 "ttft=1ms,itl=1ms"), "emit", "no plan to emit")  # it launched the given 1:1


# -- bounds and words
@pytest.mark.parametrize(("args", "field", "words"), [
    ((*SERVE, "--slo", "ttft_p99=nan"), "slo", ("finite number",)),  # "e.g. ttft_p99=nanms"
    ((*SERVE, "--slo", "ttft_p99=1h"), "slo", ("'1h' is not a time",)),
    ((*SERVE, "--slo", "ttft_p99=1e999ms"), "slo", ("finite number",)),
    ((*SERVE, "--prompt-tokens", "lognormal:1e308,0.5"), "prompt-tokens", ("MEAN ≤ 2⁶³−1",)),
    ((*MOE, "--redundant-experts", "1000000000000"), "redundant-experts", ("[0, 8]",)),
    ((*MOE, "--ep-mode", ""), "ep-mode", ("''",)),  # ran as the default
    ((*SERVE, *DRAFT, "--seed", "-1"), "Invalid value for '--seed'", ("x>=0",)),  # numpy raised
    ((*SERVE, "--draft", "draft", "--draft-preset", "llama3.2-1b", "--draft-config", "x.toml",
      "--spec-k", "2"), "draft-config", ("not both",)),
])
def test_bounds_and_refusals_say_what(cli, args, field, words):
    _refused(cli(*args), field, *words)


@pytest.mark.parametrize(("args", "field", "meant"), [
    ((*SERVE, "--draft", "eagle", "--spec-k", "2"), "draft", "eagle3"),
    ((*SERVE, "--emit", "vlm"), "emit", "vllm"),
    ((*SERVE, "--dataset", "sharegp"), "dataset", "sharegpt"),
    ((*SERVE, "--slo", "mlperf-serve"), "slo", "mlperf-server"),
    ((*MOE, "--ep-mode", "low_latency"), "ep-mode", "low-latency"),
    ((*TRAIN, "--framework", "megatro"), "framework", "megatron"),
    ((*TRAIN, "--framework", "megatron", "--fp8", "te_delayed"), "fp8", "te-delayed"),
])
def test_an_unknown_choice_gets_a_suggestion(cli, args, field, meant):
    """model/suggest.not_one_of: every new choice flag names the close one, as --preset does."""
    _refused(cli(*args), field, f"(did you mean {meant!r}")


def test_a_draft_configs_own_field_is_named(cli, tmp_path):
    p = tmp_path / "draft.toml"
    p.write_text('vocab_size = 10\nd_model = 8\nn_layers = 1\nn_heads = 2\nd_ff = 8\n'
                 'positions = "none"\nwingspan = 3\n')
    _refused(cli(*SERVE, "--draft", "draft", "--draft-config", str(p), "--spec-k", "2"),
             "draft-config", "wingspan: unknown field")
