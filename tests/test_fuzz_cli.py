"""The command line's contract under hostile input, drawn by hypothesis: every draw exits 0 (or
1, a negative verdict: "does not fit", a missed SLO, nothing found) with valid output — JSON
without inf or nan, nothing on stderr but `note:` lines — or exits 2 with one `error: …` line on
stderr, nothing on stdout, and no traceback.

argv is drawn from the categories of issue 12's hostile inputs: commands × numeric flags × values
(0, negative, 10³⁰, 2⁶³, nan, inf, floats, unicode digits, empty), model fields through --set
(booleans as counts, nulls, non-finite floats), parallel degrees, block sizes, preset names that
look like paths or hold NUL and newlines, cases with @ fields, grids, and planning overrides
(--utilization, efficiencies, --set-gpu, --perf); and serve's and train's flags with the same
kinds of values (serve_or_train). Runs in-process (cli/app.main with captured
streams): the default profile draws FUZZ_EXAMPLES argv in ~15 s; `pytest -m slow` draws 20× more.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shapecalc.cli import main

FUZZ_EXAMPLES = int(os.environ.get("FUZZ_N", "60"))  # FUZZ_N=2000: a longer hunt
STEP_TIMEOUT_S = 30  # one draw; a hang fails the test instead of stalling the suite

INTS = ["0", "-1", "1", "2", "3", "4", "8", "16", "1000000000000000000000000000000",
        "9223372036854775807", "9223372036854775808", "nan", "inf", "-inf", "1.5", "1e3", "٣",
        "３", "", " ", "1_0", "0x10", "true"]
FLOATS = ["0", "-1", "0.5", "1", "2", "1e-300", "1e300", "1e999", "nan", "inf", "-inf", "٣",
          "０.5", "", "true", "0.9"]
GRIDS = ["1", "1,2", "2,4", "0", "1..8", "1..8x2", "1..64+8", "8..1", "1..3x1", "1,,2", "a",
         "1..100000", "1..100000000", "9223372036854775808", "1..9223372036854775807x2", "٣",
         "1,３", "-1", "1.5"]
SMALL_PRESETS = ["seed-tiny", "seed-classroom"]
PRESETS = [*SMALL_PRESETS, "gpt2", "llama3-8b", "mixtral-8x7b", "gemma2-9b", "deepseek-v2-lite"]
BAD_PRESETS = ["", "../../etc/passwd", "/etc/passwd", "a\nb", "a\x00b", "x" * 300, "gpt2 ",
               "GPT2", "llama3-8b@", "@tp=2"]
FIELDS = ["n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab_size", "head_dim",
          "max_positions", "rope_base", "sliding_window", "qkv_bias", "norm", "name"]
VALUES = ["true", "false", "null", "0", "-1", "1", "2", "4", "64", "1.5", "1e30",
          "1000000000000000000000000000000", "NaN", "Infinity", "1e999", '"8"', "٣", "[]",
          "{}", '"x"', "", "rmsnorm"]
GPU_SETS = ["memory_bytes=-1", "memory_bytes=0", "memory_bytes=1", "memory_bytes=1e999",
            "memory_bytes=80GiB", "hbm_bandwidth=1e-300", "hbm_bandwidth=1", "hbm_bandwidth=nan",
            "peak_flops.bf16=1e-300", "peak_flops.bf16=0", "link_bandwidth=1e300",
            "peak_flops.fp8=-5", "nope=1", "memory_bytes"]
PERF = ["layer_overhead_s=1e308", "layer_overhead_s=-1", "gemm_efficiency=0",
        "gemm_efficiency=2", "allreduce_latency_s=nan", "nope=1", "layer_overhead_s=x",
        "gemm_half_tokens=1e7", "layer_overhead_s=１e-5", "layer_overhead_s=1e-5"]


def flag(name: str, values: list[str]) -> st.SearchStrategy[list[str]]:
    return st.sampled_from(values).map(lambda v: [name, v])


WORKLOAD = [flag("--batch", INTS), flag("--seq", INTS), flag("--tp", INTS), flag("--pp", INTS),
            flag("--ep", INTS), flag("--block-size", INTS),
            flag("--dtype", ["bf16", "fp8", "int4", "fp64", "", "bfloat16"]),
            flag("--kv-dtype", ["fp8", "int3"]), flag("--phase", ["decode", "train"]),
            flag("--logits", ["last", "first"]), flag("--mode", ["fp8", "int4-wo", "x"])]
SETS = st.tuples(st.sampled_from(FIELDS), st.sampled_from(VALUES)).map(
    lambda fv: ["--set", f"{fv[0]}={fv[1]}"])
PLANNING = [flag("--utilization", FLOATS), flag("--compute-efficiency", FLOATS),
            flag("--memory-efficiency", FLOATS), flag("--link-efficiency", FLOATS),
            flag("--price", FLOATS), flag("--max-batched-tokens", INTS),
            flag("--set-gpu", GPU_SETS), flag("--perf", PERF)]
GRID_FLAGS = [flag("--batch", GRIDS), flag("--seq", GRIDS), flag("--tp", GRIDS),
              flag("--pp", GRIDS), flag("--dtype", ["bf16,fp8", "fp8", "x"])]
CASE_FIELDS = ["tp=2", "tp=3", "tp=0", "seq=0", "seq=1e30", "batch=9223372036854775808",
               "n_layers=true", "d_model=٣", "kv_dtype=fp8", "pp=100", "block_size=0", "x=1",
               "tp=", "="]


def model_source(presets: list[str]) -> st.SearchStrategy[list[str]]:
    return st.one_of(
        st.sampled_from(presets).map(lambda p: ["--preset", p]),
        st.sampled_from(BAD_PRESETS).map(lambda p: ["--preset", p]),
        st.just([]),
    )


def case(presets: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(presets),
        st.sampled_from(BAD_PRESETS),
        st.tuples(st.sampled_from(presets), st.lists(st.sampled_from(CASE_FIELDS), min_size=1,
                                                     max_size=2)).map(
            lambda pc: f"{pc[0]}@{','.join(pc[1])}"),
    )


def extras(options: list[st.SearchStrategy[list[str]]], most: int = 3
           ) -> st.SearchStrategy[list[str]]:
    return st.lists(st.one_of(*options), max_size=most).map(lambda xs: [a for x in xs for a in x])


GPU = st.sampled_from([["--gpu", "H100-SXM"], ["--gpu", "h100-sxm"], ["--gpu", ""],
                       ["--gpu", "../x"], []])


@st.composite
def argv(draw: st.DrawFn) -> list[str]:
    cmd = draw(st.sampled_from(["trace", "trace", "verify", "explain", "fit", "compare", "sweep",
                                "presets", "hardware"]))
    json_flag = draw(st.sampled_from([["--json"], ["--json"], []]))
    if cmd == "trace":
        return ["trace", *draw(model_source(PRESETS)), *draw(extras([*WORKLOAD, SETS])),
                *json_flag]
    if cmd == "verify":  # small models only: a real width runs for seconds to minutes
        small = [flag("--batch", INTS), flag("--seq", INTS), flag("--tp", INTS),
                 flag("--pp", INTS), flag("--block-size", INTS), flag("--layers", INTS),
                 flag("--seed", INTS), flag("--memory-budget", FLOATS),
                 flag("--precision", ["float64", "float16", "int8"]),
                 flag("--phase", ["decode"])]
        sets = st.tuples(st.sampled_from(["d_model", "n_heads", "n_kv_heads", "d_ff",
                                          "qkv_bias", "vocab_size"]),
                         st.sampled_from(VALUES)).map(lambda fv: ["--set", f"{fv[0]}={fv[1]}"])
        return ["verify", *draw(model_source(SMALL_PRESETS)), *draw(extras([*small, sets])),
                *json_flag]
    if cmd == "explain":
        return ["explain", *draw(model_source(SMALL_PRESETS)),
                *draw(extras([flag("--seq", INTS), flag("--seed", INTS), SETS], 2)), *json_flag]
    if cmd == "fit":
        src = draw(st.one_of(case(PRESETS).map(lambda c: [c]), model_source(PRESETS)))
        return ["fit", *src, *draw(GPU), *draw(extras([*WORKLOAD, *PLANNING, SETS])),
                *json_flag]
    if cmd in ("compare", "sweep"):
        cases = draw(st.lists(case(PRESETS), min_size=1, max_size=2))
        fmt = ["--json"] if cmd == "compare" and json_flag else []
        return [cmd, *cases, *draw(GPU), *draw(extras([*GRID_FLAGS, *PLANNING, *WORKLOAD[4:]])),
                *fmt]
    if cmd == "presets":
        return ["presets", "show", draw(st.sampled_from([*PRESETS, *BAD_PRESETS])), *json_flag]
    return ["hardware", draw(st.sampled_from(["H100-SXM", "", "../../etc/passwd", "a\nb"])),
            *draw(extras([flag("--set-gpu", GPU_SETS)], 2)), *json_flag]


SERVE_VALUES = ["0", "-1", "1", "2", "1e-308", "nan", "inf", "1e308", "abc", "", "2.5",
                "99999999999999999999", "1,2", "uniform:1,5", "lognormal:10,0.5", "gamma:2",
                "poisson", "50ms", "ttft=1s", "itl=5ms", "ttft=1", "least-loaded", "1:1"]
SERVE_FLAGS = ["--rate", "--requests", "--replicas", "--concurrency", "--prompt-tokens",
               "--output-tokens", "--arrivals", "--slo", "--kv-blocks", "--max-num-seqs",
               "--max-batched-tokens", "--seed", "--tp", "--pp", "--ep", "--utilization",
               "--price", "--shared-prefix", "--router", "--spec-k", "--pd", "--perf",
               "--ep-mode", "--redundant-experts"]
TRAIN_FLAGS = ["--seq", "--micro-batch", "--grad-accum", "--global-batch", "--tp", "--pp",
               "--dp", "--cp", "--ep", "--zero", "--recompute", "--precision", "--framework",
               "--train-tokens", "--power-limit", "--price", "--lora-rank", "--lora-targets",
               "--virtual-stages", "--gpus", "--fw-term", "--perf"]
TRAIN_VALUES = [*SERVE_VALUES, "full", "selective", "megatron", "hf", "q,v", "8", "64"]


@st.composite
def serve_or_train(draw: st.DrawFn) -> list[str]:
    """serve (a few requests: each is simulated) or train with up to three hostile flags."""
    if draw(st.booleans()):
        base = ["serve", "--preset", draw(st.sampled_from(["llama3-8b", "mixtral-8x7b"])),
                "--gpu", "H100-SXM", "--requests", "8"]
        flags, values, more = SERVE_FLAGS, SERVE_VALUES, ["--find-rate", "--find-gpus", "--json"]
    else:
        base = ["train", "--preset", draw(st.sampled_from(["llama3-8b", "seed-tiny"])),
                *draw(st.sampled_from([[], ["--gpu", "H100-SXM"]]))]
        flags, values, more = TRAIN_FLAGS, TRAIN_VALUES, ["--search", "--json"]
    picked = draw(st.lists(st.sampled_from(flags), min_size=1, max_size=3, unique=True))
    extra = [a for f in picked for a in (f, draw(st.sampled_from(values)))]
    return [*base, *extra, *draw(st.lists(st.sampled_from(more), max_size=1))]


class _Timeout(Exception):
    pass


def _alarm(*_: object) -> None:
    raise _Timeout


def run(args: list[str]) -> tuple[int, str, str]:
    """`shapecalc ARGS` in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    old = sys.argv
    sys.argv = ["shapecalc", *args]
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(STEP_TIMEOUT_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except _Timeout:
        pytest.fail(f"no answer within {STEP_TIMEOUT_S} s: {args!r}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        sys.argv = old
    return code, out.getvalue(), err.getvalue()


def _strict(text: str) -> object:
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def check_contract(args: list[str]) -> None:
    code, out, err = run(args)
    assert "Traceback" not in err, (args, err)
    if code == 2:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, err)
        assert out == "", (args, out[:200])
        return
    # exit 1 is a negative verdict (docs/reference/exit-status.md): fit's "does not fit", and
    # compare's and sweep's with --gpu when nothing fits; its report is printed all the same
    assert code == 0 or (code == 1 and (args[0] in ("fit", "serve", "train") or (
        args[0] in ("compare", "sweep") and "--gpu" in args))), (args, code, err)
    assert all(line.startswith("note: ") for line in err.splitlines()), (args, err)
    assert out, args
    if args[0] == "sweep":  # JSON Lines: each row an object
        for line in out.splitlines():
            assert isinstance(_strict(line), dict), (args, line)
    elif "--json" in args:
        _strict(out)


FUZZ = settings(max_examples=FUZZ_EXAMPLES,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@FUZZ
@given(argv())
def test_every_draw_keeps_the_contract(args):
    check_contract(args)


@pytest.mark.slow
@settings(FUZZ, max_examples=20 * FUZZ_EXAMPLES)
@given(argv())
def test_every_draw_keeps_the_contract_many(args):
    check_contract(args)


@settings(FUZZ, max_examples=FUZZ_EXAMPLES // 2)
@given(serve_or_train())
def test_serve_and_train_keep_the_contract(args):
    check_contract(args)


@pytest.mark.slow
@settings(FUZZ, max_examples=10 * FUZZ_EXAMPLES)
@given(serve_or_train())
def test_serve_and_train_keep_the_contract_many(args):
    check_contract(args)
