"""Day-0 support (issue 21, item 6): a config.json whose model_type is not in the reader's table
is measured by transformers on the meta device by trace, fit and compare, labelled as such; the
refusal stays where the reference extra is missing.

The family kept out of the table on purpose is `arcee` (AFM: Llama with a non-gated ReLU² MLP):
its tiny config is counted by hand below. A table family with states (Nemotron-H at reduced
width) is measured the day-0 way too, and equals shapecalc's own totals: the day-0 walk of the
cache finds the conv and recurrent states as well as the keys and values.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import need_torch

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hardware import load_gpu
from shapecalc.inputs.hf import SUPPORTED, load_hf_config
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import Workload

DATA = Path(__file__).parent / "data"
D, H, HKV, DH, F, V, N, T = 64, 4, 2, 16, 96, 320, 2, 16
ARCEE = {"model_type": "arcee", "vocab_size": V, "hidden_size": D, "intermediate_size": F,
         "num_hidden_layers": N, "num_attention_heads": H, "num_key_value_heads": HKV}
# by hand: q and o D×D, k and v D×(H_kv·Dh), up and down D×F (non-gated), two norms a layer;
# the embedding, the untied head and the final norm
LAYER = D * D * 2 + D * HKV * DH * 2 + D * F * 2 + 2 * D
PARAMS = N * LAYER + V * D * 2 + D
MATS = 2 * (D * D * 2 + D * HKV * DH * 2 + D * F * 2)  # per token and layer
# eager attention: QKᵀ and AV over T×T (B=1) a layer; the head on every position
PREFILL = N * (T * MATS + 2 * 2 * H * T * T * DH) + 2 * T * D * V
DECODE = N * (MATS + 2 * 2 * H * (T + 1) * DH) + 2 * D * V  # one token on T cached
KV = N * 2 * HKV * T * DH * 2  # keys and values, bf16


def _one_error_line(r, field):
    assert r.code == 2, (r.code, r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: "), r.err
    assert "Traceback" not in r.err and r.out == ""
    return lines[0]


@pytest.fixture
def arcee(tmp_path):
    path = tmp_path / "arcee" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(ARCEE))
    return path


def test_the_family_is_kept_out_of_the_table():
    assert "arcee" not in SUPPORTED  # on purpose: the day-0 path is tested on it


def test_without_torch_the_refusal_stays_and_says_what_to_install(cli, monkeypatch, arcee):
    for name in ("torch", "transformers"):  # an import of either now fails
        monkeypatch.setitem(sys.modules, name, None)
    for args in (("trace", "--hf-config", str(arcee)),
                 ("fit", "--hf-config", str(arcee), "--gpu", "H100-SXM"),
                 ("compare", str(arcee), "llama3-8b")):
        line = _one_error_line(cli(*args), "model_type")
        assert "'arcee' is not supported" in line
        assert "pip install 'shapecalc[reference]'" in line


def test_trace_measures_it_with_transformers(cli, arcee):
    need_torch()
    r = cli("trace", "--hf-config", str(arcee), "--seq", str(T), "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    t = doc["totals"]
    assert (t["params"], t["prefill_flops"], t["decode_flops"], t["kv_cache_bytes"]) == (
        PARAMS, PREFILL, DECODE, KV) == (90_432, 2_359_296, 147_968, 4_096)
    assert t["flops"] == PREFILL and t["state_cache_bytes"] == 0
    assert t["weight_bytes"] == PARAMS * 2
    assert doc["measured_by"]["label"].startswith("measured by transformers 5.x")
    assert doc["measured_by"]["label"].endswith("no stage formulas")
    assert doc["model"]["model_type"] == "arcee" and "stages" not in doc
    assert [(p["part"], p["tensors"], p["bytes"]) for p in doc["cache"]] == [
        ("keys", N, KV // 2), ("values", N, KV // 2)]
    r = cli("trace", "--hf-config", str(arcee), "--seq", str(T), "--phase", "decode", "--json")
    assert json.loads(r.out)["totals"]["flops"] == DECODE
    r = cli("trace", "--hf-config", str(arcee), "--seq", str(T))  # the table says it too
    assert r.code == 0 and "measured by transformers 5.x" in r.out and "90,432" in r.out


def test_logits_last_is_measured(cli, arcee):
    need_torch()
    r = cli("trace", "--hf-config", str(arcee), "--seq", str(T), "--logits", "last", "--json")
    assert json.loads(r.out)["totals"]["prefill_flops"] == PREFILL - 2 * (T - 1) * D * V


def test_a_table_family_measured_day0_equals_shapecalc(tmp_path):
    """Nemotron-H at reduced width (Mamba-2, attention and MLP-only blocks): params, both steps'
    FLOPs, KV and state bytes, the day-0 way and by shapecalc's formulas."""
    need_torch()
    from shapecalc.reference.day0 import measure

    cases = json.loads((DATA / "mixers_reference.json").read_text())["cases"]
    cfg = next(c for c in cases if c["name"] == "nemotron_h-class-defaults")["hf_config"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    got = measure(cfg, "nemotron", str(path), 2, 40, "bf16", "all")["totals"]
    m = load_hf_config(path)
    pre = build_trace(m, Workload(batch=2, seq=40))["totals"]
    dec = build_trace(m, Workload(batch=2, seq=40, phase="decode"))["totals"]
    assert got["state_cache_bytes"] > 0 and got["kv_cache_bytes"] > 0
    assert (got["params"], got["prefill_flops"], got["decode_flops"], got["kv_cache_bytes"],
            got["state_cache_bytes"]) == (pre["params"], pre["flops"], dec["flops"],
                                          pre["kv_cache_bytes"], pre["state_cache_bytes"])


def test_fit_on_one_gpu(cli, arcee):
    need_torch()
    r = cli("fit", "--hf-config", str(arcee), "--seq", str(T), "--batch", "4", "--gpu",
            "H100-SXM", "--json")
    assert r.code == 0, r.err
    f = json.loads(r.out)["fit"]
    gpu = load_gpu("H100-SXM")
    usable = int(gpu.memory_bytes * 0.9)
    assert f["cache_bytes"] == 4 * KV and f["cache_bytes_per_sequence"] == KV
    assert f["weight_bytes"] == PARAMS * 2 and f["fits"]
    assert f["max_batch"] == (usable - PARAMS * 2) // KV
    assert "activations" in f["not_counted"]
    tight = cli("fit", "--hf-config", str(arcee), "--seq", str(T), "--gpu", "H100-SXM",
                "--set-gpu", f"memory_bytes={PARAMS * 2}", "--json")
    assert tight.code == 1 and json.loads(tight.out)["fit"]["fits"] is False


def test_compare_puts_day0_beside_the_table(cli, arcee):
    need_torch()
    r = cli("compare", str(arcee), "llama3-8b", "--seq", "16,32", "--json")
    assert r.code == 0, r.err
    docs = json.loads(r.out)
    assert [(d["model"]["name"], d["workload"]["seq"]) for d in docs] == [
        ("arcee", 16), ("arcee", 32), ("llama3-8b", 16), ("llama3-8b", 32)]
    assert docs[0]["totals"]["params"] == PARAMS
    assert docs[2]["measured_by"]["label"] == "shapecalc's stage formulas"
    llama = build_trace(load_preset("llama3-8b", None), Workload(batch=1, seq=16))["totals"]
    assert docs[2]["totals"]["prefill_flops"] == llama["flops"]  # shapecalc's own trace


@pytest.mark.parametrize("args, field", [
    (("--tp", "2"), "--tp"), (("--kv-dtype", "fp8"), "--kv-dtype"),
    (("--set", "n_layers=3"), "--set"), (("--dtype", "fp8"), "dtype"),
])
def test_flags_a_measurement_cannot_take_are_refused(cli, arcee, args, field):
    need_torch()
    _one_error_line(cli("trace", "--hf-config", str(arcee), "--seq", "8", *args), field)


def test_fit_refuses_what_it_cannot_take(cli, arcee):
    need_torch()
    base = ("fit", "--hf-config", str(arcee), "--seq", "8", "--gpu", "H100-SXM")
    _one_error_line(cli(*base, "--price", "2"), "--price")
    _one_error_line(cli(*base, "--pp", "2"), "--pp")
    _one_error_line(cli("fit", f"{arcee}@tp=2", "--gpu", "H100-SXM"), "case")


def test_a_quantized_checkpoint_is_refused(cli, tmp_path):
    need_torch()
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**ARCEE, "quantization_config": {"quant_method": "fp8"}}))
    _one_error_line(cli("trace", "--hf-config", str(path), "--seq", "8"),
                    "quantization_config")
