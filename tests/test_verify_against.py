"""`shapecalc verify --against transformers` (check/against.py, shapecalc/reference/).

Without torch (every run, CI's included): shapecalc against the stored meta-device records of
tiny models (tests/data/against_reference.json, written by `tests/torch_reference/harness.py
against`): every total and every module agrees, with each convention converted; a perturbed
formula is named at its module; each record equals its family's real-tensor numbers; the
refusals (torch missing, bad inputs) are one line and exit 2.

With torch and transformers (skipped without them unless SHAPECALC_REQUIRE_TORCH=1): every preset
with a stored config.json passes through the CLI at T=16 and T=300 (the largest ones `slow`), a
perturbed formula is named live, and the stored records are measured again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import need_torch
from newer_presets import preset, preset_names

from shapecalc.check.against import compare, workload
from shapecalc.costs.trace import build_trace
from shapecalc.inputs import sources
from shapecalc.inputs.hf import load_hf_config
from shapecalc.interpret.symbolic import SymbolicOps
from shapecalc.model.config import Workload
from shapecalc.reference.modules import ROOT, Places, first_difference
from shapecalc.reference.stored import stored_config

DATA = Path(__file__).parent / "data"
AGAINST = json.loads((DATA / "against_reference.json").read_text())["cases"]
FILES = {"flops": "flop_reference.json"}  # family → its file, where not <family>_reference.json
INSTALL = "pip install 'shapecalc[reference]'"


def _model(tmp_path, name):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(AGAINST[name]["hf_config"]))
    return load_hf_config(path)


def _compare(tmp_path, name):
    rec = AGAINST[name]["measured"]
    m = _model(tmp_path, name)
    return compare(m, workload(m, rec["batch"], rec["seq"], rec["dtype"]), rec, name)


def _family_case(name):
    fam = AGAINST[name]["family"]
    doc = json.loads((DATA / FILES.get(fam, f"{fam}_reference.json")).read_text())
    return next(c for c in doc["cases"] if c["name"] == name)


# the conventions each stored case converts (a substring of each note)
CONVENTIONS = {
    "mistral_gqa_sliding4": ["transformers keeps 3 tokens after the prefill, shapecalc (vLLM) 4"],
    "gemma3_text_5to1_w3": ["transformers keeps 2 tokens after the prefill, shapecalc (vLLM) 3"],
    "gpt_oss_e8_k3_sliding4": ["transformers keeps 3 tokens after the prefill, shapecalc (vLLM) 4"],
    "falcon_new_two_norms": ["caches K and V of all 4 query heads; shapecalc the 2 KV heads"],
    "deepseek_v3_qlora_e8_k2": ["MLA: shapecalc's latent form"],
    "llama4_c4_t10": ["chunked_attention layers: transformers keeps 3 tokens after the prefill, "
                      "shapecalc (vLLM) 2", "the decode query reads 3 keys in shapecalc, 4 in "
                      "transformers", "Llama 4: each token through its top-k experts only"],
}


@pytest.mark.parametrize("name", sorted(AGAINST))
def test_every_total_and_every_module_agrees(tmp_path, name):
    doc = _compare(tmp_path, name)
    assert doc["ok"], [c for c in doc["checks"] if not c["ok"]]
    assert [c["quantity"] for c in doc["checks"]] == [
        "params", "prefill_flops", "decode_flops", "kv_cache_bytes"]
    for c in doc["checks"]:  # not only the totals: each module's own count
        assert c["first_difference"] is None, c
    assert len(doc["conventions"]) == len(CONVENTIONS.get(name, []))
    for want in CONVENTIONS.get(name, []):
        assert any(want in note for note in doc["conventions"]), (want, doc["conventions"])


@pytest.mark.parametrize("name", sorted(AGAINST))
def test_the_meta_device_record_equals_the_real_tensors(name):
    """The meta device (batched_mm experts, a cached prefill) counts what the family measured
    on real weights (the eager experts loop, an uncached prefill): totals and modules alike."""
    rec, case = AGAINST[name]["measured"], _family_case(name)
    tag = "routed_" if "routed_prefill_flops" in case else ""  # Llama 4: the routed forward
    assert rec["params"] == case["params" if "params" in case else "num_parameters"]
    assert rec["prefill"]["flops"] == case[f"{tag}prefill_flops"]
    assert rec["decode"]["flops"] == case[f"{tag}decode_flops"]
    for phase in ("prefill", "decode"):
        if f"{tag}{phase}_modules" in case:
            assert rec[phase]["modules"] == case[f"{tag}{phase}_modules"], phase
    raw = next(case[k] for k in ("kv_cache_bytes", "kv_cache_bytes_hf", "kv_cache_bytes_prefill",
                                 "hf_kv_bytes_after_prefill") if k in case)
    assert rec["cache_bytes"] == raw == sum(layer["bytes"] for layer in rec["cache"])


def _perturb(monkeypatch, role):
    """One formula wrong: the linear of `role` reads one input column more (D+1: its FLOPs and
    parameters grow, its output shape does not)."""
    linear = SymbolicOps.linear

    def off(self, x, r, name, d_in, d_out, bias, split):
        return linear(self, x, r, name, d_in + 1 if r == role else d_in, d_out, bias, split)

    monkeypatch.setattr(SymbolicOps, "linear", off)


@pytest.mark.parametrize(("name", "role", "module"), [
    ("llama_gqa", "attn.q", "model.layers.0.self_attn.q_proj"),
    ("gpt2", "ffn.down", "transformer.h.0.mlp.c_proj"),
    ("qwen2_moe_e12_k4_shared", "moe.shared.up", "model.layers.0.mlp.shared_expert.up_proj"),
    ("deepseek_v3_qlora_e8_k2", "attn.kv_b", "model.layers.0.self_attn.kv_b_proj"),
    ("gemma3_text_5to1_w3", "head.lm", "lm_head"),
])
def test_a_perturbed_formula_is_named_at_its_module(tmp_path, monkeypatch, name, role, module):
    _perturb(monkeypatch, role)
    doc = _compare(tmp_path, name)
    assert not doc["ok"]
    bad = {c["quantity"]: c for c in doc["checks"] if not c["ok"]}
    # a tied LM head has no parameters of its own: only its FLOPs change
    assert set(bad) == ({"prefill_flops", "decode_flops"} if role == "head.lm" else
                        {"params", "prefill_flops", "decode_flops"})
    for c in bad.values():
        assert c["first_difference"]["module"] == module, c
        assert c["detail"].startswith(f"first differs at {module}: shapecalc ")
        where = c["first_difference"]
        assert where["shapecalc"] != where["transformers"]


def test_a_wrong_window_is_named_at_its_layer(tmp_path):
    """A sliding window one token short (W−1, as transformers' cache holds it): the cache and the
    decode step's keys differ, from the first sliding layer's attention on."""
    name = "gpt_oss_e8_k3_sliding4"
    rec, m = AGAINST[name]["measured"], _model(tmp_path, name)
    m = m.model_copy(update={"sliding_window": m.sliding_window - 1})
    doc = compare(m, workload(m, rec["batch"], rec["seq"], "fp32"), rec, name)
    bad = {c["quantity"]: c for c in doc["checks"] if not c["ok"]}
    assert set(bad) == {"decode_flops", "kv_cache_bytes"}
    for c in bad.values():
        assert c["first_difference"]["module"] == "model.layers.0.self_attn", c


def test_a_layer_transformers_lacks_is_named_at_the_layers(tmp_path):
    """One layer more than the config.json's: every quantity differs at the layers' list."""
    name = "llama_gqa"
    rec, m = AGAINST[name]["measured"], _model(tmp_path, name)
    m = m.model_copy(update={"n_layers": m.n_layers + 1})
    doc = compare(m, workload(m, rec["batch"], rec["seq"], "fp32"), rec, name)
    assert not any(c["ok"] for c in doc["checks"])
    assert {c["first_difference"]["module"] for c in doc["checks"]} == {"model.layers"}


def test_first_difference_walks_the_tree_in_forward_order():
    order = ["(model)", "m", "m.a", "m.a.x", "m.a.y", "m.b", "m.b.x", "head"]
    theirs = {"m.a.x": 1, "m.a.y": 2, "m.b.x": 3, "head": 4}
    assert first_difference(theirs, dict(theirs), order) is None
    assert first_difference(theirs, {**theirs, "m.b.x": 5}, order) == "m.b.x"
    assert first_difference(theirs, {**theirs, "m.a.y": 0, "head": 6}, order) == "m.a.y"
    # shapecalc counts a module as one where transformers splits it: compared at that grain
    assert first_difference(theirs, {"m.a": 3, "m.b.x": 3, "head": 4}, order) is None
    assert first_difference(theirs, {"m.a": 4, "m.b.x": 3, "head": 4}, order) == "m.a"
    # differences that cancel in a subtree are still found
    assert first_difference(theirs, {**theirs, "m.a.x": 2, "m.a.y": 1}, order) == "m.a.x"
    assert first_difference({ROOT: 1}, {}, order) == ROOT


def test_places_join_siblings_and_tell_a_roles_stages_apart():
    """OLMo-hybrid's q, k, v apart in transformers, one gdn.qkv stage in shapecalc: one joint,
    compared on their sum; ZAYA's two scaled residuals each in their own module."""
    L = "m.layers.0"
    mods = ["m", "m.layers", L, *(f"{L}.linear_attn{s}" for s in ("", ".q_proj", ".k_proj",
                                                                  ".v_proj", ".o_proj")),
            f"{L}.post_attention_residual_scale", f"{L}.post_mlp_residual_scale"]
    places = Places(mods, "m.layers")
    joint = places.module("gdn.qkv", 0)
    assert joint == f"{L}.linear_attn.q_proj+k_proj+v_proj"
    theirs = {f"{L}.linear_attn.q_proj": 2, f"{L}.linear_attn.k_proj": 2,
              f"{L}.linear_attn.v_proj": 4, f"{L}.linear_attn.o_proj": 4}
    assert places.join(theirs) == {joint: 8, f"{L}.linear_attn.o_proj": 4}
    order = [places.joined.get(n, n) for n in mods]
    assert first_difference(places.join(theirs), {joint: 8, f"{L}.linear_attn.o_proj": 4},
                            order) is None
    assert first_difference(places.join(theirs), {joint: 7, f"{L}.linear_attn.o_proj": 5},
                            order) == joint
    assert [places.module("residual", 0, n) for n in (0, 1)] == [
        f"{L}.post_attention_residual_scale", f"{L}.post_mlp_residual_scale"]
    # siblings of which one is missing are no joint: the mixer holds the stage
    assert Places([m for m in mods if not m.endswith("v_proj")], "m.layers").module(
        "gdn.qkv", 0) == f"{L}.linear_attn"


# -- the command, without torch ------------------------------------------------------------------
def _one_error_line(r, field):
    assert r.code == 2, (r.code, r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: "), r.err
    assert "Traceback" not in r.err and r.out == ""
    return lines[0]


def test_without_torch_it_says_what_to_install(cli, monkeypatch):
    for name in ("torch", "transformers"):  # an import of either now fails
        monkeypatch.setitem(sys.modules, name, None)
    r = cli("verify", "--hf-config", str(DATA / "hf" / "llama3.2-1b.json"), "--against",
            "transformers")
    line = _one_error_line(r, "against")
    assert line.endswith(INSTALL) and "torch and transformers" in line


HF = str(DATA / "hf" / "llama3.2-1b.json")


@pytest.mark.parametrize(("args", "field"), [
    (["--hf-config", HF, "--against", "torch"], "against"),
    (["--hf-config", HF, "--against", "transformers", "--tp", "2"], "tp"),
    (["--hf-config", HF, "--against", "transformers", "--phase", "decode"], "phase"),
    (["--hf-config", HF, "--against", "transformers", "--kv-dtype", "fp8"], "kv_dtype"),
    (["--preset", "deepseek-v2-lite", "--against", "transformers", "--mla-form", "absorbed"],
     "mla_form"),
    (["--hf-config", HF, "--against", "transformers", "--set", "d_model=64"], "set"),
    (["--hf-config", HF, "--against", "transformers", "--layers", "1"], "layers"),
    (["--hf-config", HF, "--against", "transformers", "--train"], "train"),
    (["--hf-config", HF, "--against", "transformers", "--dtype", "fp8"], "dtype"),
    (["--hf-config", HF, "--against", "transformers", "--batch", "0"], "batch"),
    (["--hf-config", HF, "--against", "transformers", "--seq", "-1"], "seq"),
    (["--hf-config", "no-such.json", "--against", "transformers"], "hf-config"),
    (["--preset", "gpt2", "--against", "transformers", "--seq", "1024"], "seq"),  # T+1 > 1024
    (["--preset", "no-such", "--against", "transformers"], "preset"),
    (["--preset", "seed-tiny", "--against", "transformers"], "preset"),
    (["--against", "transformers"], "against"),
    (["--config", str(Path(__file__)), "--against", "transformers"], "against"),
])
def test_bad_input_is_one_line_naming_the_field(cli, args, field):
    """Every input is checked before torch is needed: the same line with or without it."""
    _one_error_line(cli("verify", *args), field)


def test_a_user_preset_has_no_stored_config(cli, tmp_path):
    (tmp_path / "llama3.2-1b.toml").write_text(
        (sources.presets_dirs()[-1] / "llama3.2-1b.toml").read_text())
    r = cli("verify", "--preset", "llama3.2-1b", "--presets-dir", str(tmp_path), "--against",
            "transformers")
    _one_error_line(r, "preset")


def test_presets_and_their_stored_configs():
    """Each built-in preset but the seeds has its config.json (phi3-mini's is the 4k one's),
    and but the shipped quantized forms (a [quantization] table over another preset's model)."""
    have = {n for n in sources.list_presets() if stored_config(n) is not None}
    quantized = {n for n in sources.list_presets() if sources.load_preset(n).quantization}
    assert set(sources.list_presets()) - have == {"seed-tiny", "seed-classroom", *quantized}
    assert len(quantized) == 5
    assert stored_config("phi3-mini").name == "phi3-mini-4k.json"
    assert stored_config("published") is None  # the table of counts, not a config


def test_startup_does_not_import_torch():
    code = (
        "import sys, atexit\n"
        "atexit.register(lambda: sys.stderr.write(str(sorted(m for m in ('torch', 'transformers')"
        " if m in sys.modules))))\n"
        "sys.argv = ['shapecalc', 'verify', '--help']\n"
        "from shapecalc.cli import main\nmain()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and "--against" in r.stdout
    assert r.stderr.strip().endswith("[]"), r.stderr


# -- with torch ----------------------------------------------------------------------------------
STORED = [n for n in preset_names() if stored_config(n) is not None]


def _quick() -> set[str]:
    """The default run's presets: of each model_type the smallest, where it has at most 3 B
    parameters (a meta-device forward of a second or so); every other preset, and T=300, is
    `slow` (pytest -m slow). Every family's module paths and conventions are checked in the
    default run anyway, on the stored tiny records above."""
    best: dict[str, tuple[int, str]] = {}
    for n in STORED:
        kind = json.loads(stored_config(n).read_text())["model_type"]
        params = build_trace(preset(n), Workload(batch=1, seq=1))["totals"]["params"]
        best[kind] = min(best.get(kind, (params, n)), (params, n))
    return {n for params, n in best.values() if params <= 3 * 10**9}


QUICK = _quick()
LIVE = [pytest.param(n, t, marks=[] if n in QUICK and t == 16 else [pytest.mark.slow])
        for n in STORED for t in (16, 300)]


@pytest.mark.parametrize(("preset", "seq"), LIVE)
def test_every_preset_with_a_config_passes(cli, preset, seq):
    need_torch()
    r = cli("verify", "--preset", preset, "--against", "transformers", "--seq", str(seq),
            "--json")
    assert r.code == 0, (r.err, r.out[-2000:])
    doc = r.json()
    assert doc["ok"] and doc["workload"] == {"batch": 1, "seq": seq, "dtype": "bf16"}
    for c in doc["checks"]:
        assert c["first_difference"] is None, c


def test_sliding_windows_at_t300_full_size(cli):
    """gpt-oss-20b's sliding layers (W=128 < T=300) at full size: the one convention named."""
    need_torch()
    r = cli("verify", "--preset", "gpt-oss-20b", "--against", "transformers", "--seq", "300",
            "--json")
    assert r.code == 0, r.err
    assert r.json()["conventions"] == [
        "sliding_attention layers: transformers keeps 127 tokens after the prefill, shapecalc "
        "(vLLM) 128"]


def test_live_perturbed_formula_is_named(cli, monkeypatch):
    need_torch()
    _perturb(monkeypatch, "attn.q")
    r = cli("verify", "--preset", "llama3.2-1b", "--against", "transformers")
    assert r.code == 1, r.err
    assert r.out.count("first differs at model.layers.0.self_attn.q_proj") == 3
    assert "3 check(s) failed" in r.out
    r = cli("verify", "--preset", "llama3.2-1b", "--against", "transformers", "--json")
    bad = [c for c in r.json()["checks"] if not c["ok"]]
    assert {c["first_difference"]["module"] for c in bad} == {"model.layers.0.self_attn.q_proj"}


def test_a_forward_the_meta_device_cannot_run_is_refused(cli):
    """Phi-3.5-MoE's LongRoPE reads its largest position id (Tensor.item()): one line, exit 2."""
    need_torch()
    r = cli("verify", "--hf-config", str(DATA / "hf" / "phi3.5-moe.json"), "--against",
            "transformers")
    assert "does not run on the meta device" in _one_error_line(r, "against")


@pytest.mark.parametrize("name", sorted(AGAINST))
def test_stored_records_measured_again(name):
    need_torch()
    from shapecalc.reference.measure import measure_config

    rec = AGAINST[name]["measured"]
    live = measure_config(AGAINST[name]["hf_config"], rec["batch"], rec["seq"], rec["dtype"])
    assert live == rec


def test_the_shapecalc_side_is_the_trace(tmp_path):
    """The totals checked are `trace`'s, at the prefill of B×T and the decode after it."""
    name = "llama_gqa"
    doc, m = _compare(tmp_path, name), _model(tmp_path, name)
    rec = AGAINST[name]["measured"]
    wl = Workload(batch=rec["batch"], seq=rec["seq"], dtype="fp32")
    pre, dec = (build_trace(m, wl.model_copy(update={"phase": p}))["totals"]
                for p in ("prefill", "decode"))
    got = {c["quantity"]: c["shapecalc"] for c in doc["checks"]}
    assert got == {"params": pre["params"], "prefill_flops": pre["flops"],
                   "decode_flops": dec["flops"], "kv_cache_bytes": pre["kv_cache_bytes"]}


def test_a_stateful_mixer_model_is_compared_state_bytes_too(cli):
    """LFM2's short convs: transformers' cache holds conv states (and no keys) in those layers;
    the live measurement reads every cache tensor, and the states are a check of their own."""
    need_torch()
    r = cli("verify", "--preset", "lfm2-1.2b", "--against", "transformers", "--seq", "16",
            "--json")
    assert r.code == 0, (r.err, r.out[-2000:])
    check = next(c for c in json.loads(r.out)["checks"] if c["quantity"] == "state_cache_bytes")
    assert check["ok"] and check["shapecalc"] == check["transformers"] > 0
