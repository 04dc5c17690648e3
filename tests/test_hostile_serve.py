"""Issue 25's second hostile corpus, `serve`: one test per root cause. A trace file goes through
the shared safe reader (inputs/files.py); every count and rate through the one bounded check
(inputs/numbers.py); the simulator's times are relative to the first arrival; serve runs the
same model-against-parallelism checks as trace."""

from __future__ import annotations

import json
import os

import pytest
from test_errors import _one_clean_line

from shapecalc.inputs.numbers import bounded, bounded_int
from shapecalc.model.errors import ShapecalcError
from shapecalc.serve import workload as W

SERVE = ("serve", "--preset", "llama3-8b", "--gpu", "H100-SXM")
ROW = '"prompt_tokens": 100, "output_tokens": 4'


def _refused(cli, *args, field, word=""):
    line = _one_clean_line(cli(*SERVE, *args))
    assert line.startswith(f"error: {field}"), line
    assert word in line, line
    return line


# -- the trace file: the one safe reader ----------------------------------------------------------
@pytest.mark.parametrize(("name", "body", "word"), [
    ("dup.jsonl", f'{{"arrival_s": 0, "arrival_s": 1, {ROW}}}\n', "duplicate key 'arrival_s'"),
    ("bool.jsonl", f'{{"arrival_s": true, {ROW}}}\n', "True"),
    ("boolp.jsonl", '{"arrival_s": 0, "prompt_tokens": true, "output_tokens": 4}\n',
     "prompt_tokens must be an integer"),
    ("str.jsonl", '{"arrival_s": "0", "prompt_tokens": 10, "output_tokens": 4}\n', "'0'"),
    ("strp.jsonl", '{"arrival_s": 0, "prompt_tokens": "10", "output_tokens": 4}\n', "'10'"),
    ("header.csv", "arrival_s,prompt_tokens,output_tokens\n", "no requests"),
    ("inf.csv", "arrival_s,prompt_tokens,output_tokens\ninf,10,5\n", "arrival_s"),
    ("float.jsonl", '{"arrival_s": 0, "prompt_tokens": 2.7, "output_tokens": 4}\n',
     "prompt_tokens must be an integer"),
    ("deep.jsonl", "[" * 100_000 + "]" * 100_000 + "\n", "nested"),
    ("nan.jsonl", f'{{"arrival_s": NaN, {ROW}}}\n', "arrival_s"),
    ("extra.jsonl", f'{{"arrival_s": 0, "arival_s": 1, {ROW}}}\n', "unknown column 'arival_s'"),
    ("dup.csv", "arrival_s,prompt_tokens,output_tokens,arrival_s\n0,10,5,1\n",
     "duplicate column 'arrival_s'"),
    ("ragged.csv", "arrival_s,prompt_tokens,output_tokens\n0,10\n", "cells"),
    ("true.csv", "arrival_s,prompt_tokens,output_tokens\ntrue,10,5\n", "not a number"),
    ("span.jsonl", f'{{"arrival_s": 0, {ROW}}}\n{{"arrival_s": 1e300, {ROW}}}\n', "span"),
    ("bin.jsonl", b"\xff\xfe{}", "UTF-16"),
])
def test_trace_files_are_read_safely(cli, tmp_path, name, body, word):
    p = tmp_path / name
    p.write_bytes(body if isinstance(body, bytes) else body.encode())
    _refused(cli, "--trace", str(p), field="trace", word=word)


def test_trace_never_waits_on_a_fifo_or_reads_a_device(cli, tmp_path):
    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)
    _refused(cli, "--trace", str(fifo), field="trace", word="FIFO")
    _refused(cli, "--trace", "/dev/zero", field="trace", word="device")


# -- times relative to the first arrival ----------------------------------------------------------
def test_epoch_nanosecond_arrivals_give_the_same_ttft(cli, tmp_path):
    """Arrivals 1 ns apart at 1.7e18 (epoch ns) are the same requests as at 0 and 1e-9: as
    absolute floats they collapsed and every TTFT came out 0.0."""
    docs = []
    for t0 in (0, 1_700_000_000_000_000_000):
        p = tmp_path / f"t{t0}.jsonl"
        p.write_text(f'{{"arrival_s": {t0}, {ROW}}}\n{{"arrival_s": {t0 + 1}, {ROW}}}\n')
        r = cli(*SERVE, "--trace", str(p), "--json")
        assert r.code == 0, r.err
        docs.append(json.loads(r.out))
    assert docs[0]["ttft_s"]["p50"] > 0
    assert docs[0]["ttft_s"] == docs[1]["ttft_s"]
    reqs = W.read_trace(p)
    assert [r.arrival for r in reqs] == [0.0, 1.0]


# -- the bounded parser: counts and rates ---------------------------------------------------------
@pytest.mark.parametrize(("args", "field"), [
    (("--requests", "1000000000000"), "requests"),  # hung: 10¹² requests drawn
    (("--requests", "0"), "requests"),
    (("--replicas", "1000000000000"), "replicas"),  # a MemoryError: 10¹² schedulers
    (("--rate", "1", "--arrivals", "gamma:1e-300"), "arrivals"),  # 1/CV² overflowed
    (("--rate", "1", "--arrivals", "gamma:nan"), "arrivals"),
    (("--rate", "1e-308", "--requests", "3"), "rate"),  # gaps of 1e308 s: inf, an assertion
    (("--rate", "inf"), "rate"),
    (("--slo", ""), "slo"),  # given but empty: was taken as no SLO
    (("--slo", " "), "slo"),
    (("--kv-blocks", "0"), "kv-blocks"),  # blamed the GPU
    (("--kv-blocks", "-5"), "kv-blocks"),
])
def test_counts_and_rates_are_bounded(cli, args, field):
    _refused(cli, *args, field=field)


def test_serve_runs_traces_parallelism_checks(cli):
    """--ep 3 on 8 experts ran; trace refuses it. serve now runs the same check."""
    line = _one_clean_line(cli("serve", "--preset", "mixtral-8x7b", "--gpu", "H100-SXM",
                               "--ep", "3"))
    assert line.startswith("error: ep") and "E=8" in line


def test_bounded_refuses_bools_floats_and_nan():
    for v in (True, 2.7, float("nan"), "3"):
        with pytest.raises(ShapecalcError):
            bounded_int(v, "x", 1, 10)
    for v in (True, float("nan"), float("inf"), 1e-300):
        with pytest.raises(ShapecalcError):
            bounded(v, "x", 1e-3, 1e9)
    assert bounded_int(10, "x", 1, 10) == 10 and bounded(1.0, "x", 1e-3, 1e9) == 1.0
