"""A training step of the stateful token mixers against PyTorch: on tiny really-run Mamba-2
(nemotron_h) and gated DeltaNet (qwen3_5, qwen3_next) models at several (B, T), one past a chunk,
shapecalc's forward and backward matmul FLOPs (train/backward.py with the mixers' backward rules,
interpret/vjp_mamba2.py and vjp_deltanet.py) equal FlopCounterMode around the forward and around
`loss.backward()`, with and without gradient checkpointing; `verify --train` (the executor's
vector-Jacobian products against finite differences, float64) passes on them; a mixer without a
backward rule is refused.

The numbers in tests/data/train_mixers_reference.json were measured with torch 2.13.0 and
transformers 5.24.0 by tests/torch_reference/measure_train_mixers.py; the live test measures again
when torch and transformers are installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapecalc.interpret import vjp
from shapecalc.interpret.mixer_rules import FILES, TRAINABLE
from shapecalc.interpret.symbolic import stages
from shapecalc.model.config import ShapecalcError, Workload
from shapecalc.train import memory
from shapecalc.train.backward import backward_stages, step_flops
from shapecalc.train.verify import train_verify

REF = json.loads((Path(__file__).parent / "data" / "train_mixers_reference.json").read_text())
CASES = {c["name"]: c for c in REF["cases"]}


def _step(m, run):
    st = stages(m, Workload(batch=run["batch"], seq=run["seq"], dtype="fp32"))
    return step_flops(st, m.n_layers, "torch" if run["checkpointing"] else "none")


def _check(m, case):
    for run in case["runs"]:
        got = _step(m, run)
        assert got["forward_flops"] == run["forward_flops"], run
        assert got["backward_flops"] + got["recompute_flops"] == run["backward_flops"], run


def test_the_reference_covers_both_mixers_past_a_chunk_and_both_modes(hf_model):
    assert not REF["errors"]
    assert {c["model_type"] for c in REF["cases"]} == {"nemotron_h", "qwen3_5_text",
                                                       "qwen3_next"}
    for case in REF["cases"]:
        m = hf_model(case)
        assert set(m.mixers) - {"attention", "none"} <= {"mamba2", "gated_deltanet"}
        assert len({(r["batch"], r["seq"]) for r in case["runs"]}) >= 3
        assert {r["checkpointing"] for r in case["runs"]} == {False, True}
        assert max(r["seq"] for r in case["runs"]) > m.scan_chunk  # several chunks


@pytest.mark.parametrize("name", sorted(CASES))
def test_step_flops_equal_flop_counter(name, hf_model):
    _check(hf_model(CASES[name]), CASES[name])


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_backward_by_op(name, hf_model):
    """FlopCounterMode's split of the backward: its convolution_backward is the mixers' conv
    stages' (dX 1×, dW C_conv×: torch's formula ignores the groups), its mm and bmm the rest;
    the whole is not 2× the forward (the solves' bmm, the chunks that read or write no state)."""
    m = hf_model(CASES[name])
    for run in CASES[name]["runs"]:
        if run["checkpointing"]:
            continue
        bw = backward_stages(stages(m, Workload(batch=run["batch"], seq=run["seq"],
                                                dtype="fp32")))
        conv = sum(b.flops * b.repeat for b in bw if b.role.endswith(".conv"))
        ops = run["backward_by_op"]
        assert ops["aten.convolution_backward"] == conv
        assert ops["aten.mm"] + ops["aten.bmm"] == sum(b.flops * b.repeat for b in bw) - conv
        assert run["backward_flops"] != 2 * run["forward_flops"]


def test_every_mixer_rule_has_its_executor_rules():
    assert TRAINABLE == ("attention", "none", "mamba2", "gated_deltanet")
    assert len(FILES) == 2
    assert {"conv1d", "ssd", "gated_norm", "delta_rule"} <= set(vjp.RULES)


def test_a_mixer_without_a_rule_is_refused(hf_model, monkeypatch):
    m = hf_model(CASES["nemotron_h_tiny"])
    memory.check_trainable(m)
    monkeypatch.setattr(memory, "TRAINABLE", ("attention", "none", "gated_deltanet"))
    with pytest.raises(ShapecalcError) as info:
        memory.check_trainable(m)
    assert info.value.field == "model" and "mamba2" in info.value.reason


@pytest.mark.parametrize("name", ["nemotron_h_tiny", "qwen3_5_tiny"])
def test_verify_train_passes(name, hf_model):
    """The executed backward on the reference's tiny model (its vocabulary cut to 64 rows):
    shapes, FLOPs per stage and in total; Mamba-2's past a chunk, with finite differences
    (gated DeltaNet's take seconds: the slow test below)."""
    m = hf_model(CASES[name])
    m = m.model_copy(update={"vocab_size": 64})
    fd = name == "nemotron_h_tiny"
    doc = train_verify(m, Workload(batch=2, seq=m.scan_chunk + 3 if fd else 5), fd=fd)
    assert doc["ok"], [c for c in doc["checks"] if not c["ok"]]
    assert len(doc["checks"]) == 9 + fd


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_verify_train_passes_at_two_ranks_and_past_a_gdn_chunk(name, hf_model):
    m = hf_model(CASES[name]).model_copy(update={"vocab_size": 64})
    for wl in (Workload(batch=1, seq=m.scan_chunk + 3), Workload(batch=2, seq=5, tp=2)):
        doc = train_verify(m, wl)
        assert doc["ok"], [c for c in doc["checks"] if not c["ok"]]


@pytest.mark.slow
def test_live_flop_counter(hf_model, live_measure):
    """nemotron_h_tiny's first (B, T), with and without checkpointing, measured again."""
    import importlib.util

    path = Path(__file__).parent / "torch_reference" / "measure_train_mixers.py"
    spec = importlib.util.spec_from_file_location("measure_train_mixers", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    case = CASES["nemotron_h_tiny"]
    kwargs = {k: v for k, v in case["hf_config"].items() if k != "model_type"}
    model = mod.build(case["model_type"], kwargs, mod.torch.float32, "eager")
    B, T = mod.SHAPES[0]
    live = [mod.step(model, B, T, ck) for ck in (False, True)]
    assert live == case["runs"][:2]


@pytest.mark.parametrize("name", ["nemotron-nano-9b-v2", "qwen3-next-80b-a3b", "qwen3.5-9b"])
def test_train_on_the_mixer_presets(name, cli):
    """`train` plans the mixer presets: FLOPs, memory per rank (its activations the mixers' saved
    tensors too) and the step time; the time and MFU leave out what FlopCounterMode counts and
    no kernel runs (the conv's dW beyond 1×)."""
    r = cli("train", "--preset", name, "--gpu", "h100-sxm", "--json")
    doc = json.loads(r.out)
    assert r.code == (1 if doc["memory"]["fits"] is False else 0), r.err  # 1: does not fit
    ps, t = doc["flops"]["per_step"], doc["time"]
    conv = sum(s["dw_flops"] * s["repeat"] for s in doc["flops"]["stages"]
               if s["role"].endswith(".conv"))
    only = ps["backward_convention_only_flops"]
    assert 0 < only < conv  # C_conv − 1 of every C_conv
    assert t["model_flops_per_step"] == ps["forward_flops"] + ps["backward_flops"] - only
    assert doc["memory"]["peak_bytes"] > 0 and t["step_s"] > 0
    # the memory reads the mixers' saved tensors (their rules), the scan's among them
    saved = doc["memory"]["saved"]
    mixer = sum(x["bytes"] * x["repeat"] for x in saved["tensors"]
                if x["role"].split(".")[0] in ("ssm", "gdn"))
    roles = {x["role"] for x in saved["tensors"] if x["bytes"]}
    assert {"ssm.scores", "ssm.pass"} <= roles or {"gdn.solve", "gdn.intra"} <= roles
    assert 0 < mixer < saved["resident_bytes"] <= doc["memory"]["per_stage"][0]["bytes"]


def _saved_case(name, hf_model):
    from shapecalc.train.activations import saved_bytes
    from shapecalc.train.saved import saved_tensors

    case = CASES[name]
    return hf_model(case), case["saved_runs"], saved_bytes, saved_tensors


def test_mamba2_saved_bytes_equal_autograd_in_fp32(hf_model):
    """Every fp32 run of the tiny Nemotron-H: the saved, held, resident and peak bytes (the
    Mamba-2 mixer's own rule, interpret/vjp_mamba2.saved) at three (B, T), with and without
    checkpointing (peak: a layer recomputed holds its saved tensors)."""
    m, runs, saved_bytes, _ = _saved_case("nemotron_h_tiny", hf_model)
    fp32 = [r for r in runs if r["dtype"] == "fp32"]
    assert len(fp32) == 6
    for r in fp32:
        got = saved_bytes(m, Workload(batch=r["batch"], seq=r["seq"], dtype="fp32"),
                          "torch" if r["checkpointing"] else "none", "eager")
        held = sum(x["bytes"] for x in got["held"] if not x["saved"])
        assert (got["resident_bytes"], got["peak_bytes"], held) == (
            r["resident_bytes"], r["peak_bytes"], r["held_bytes"]), r


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_mamba2_layer_tensors_equal_autograd(dtype, hf_model):
    """The first (Mamba-2) layer's saved tensors, tensor by tensor in bytes, from the in
    projection's input to the out projection's (fp32 copies of Δ, x and z in bf16; the scan in
    fp32; one chunk: x·Δ and the passed states read as views), at one chunk and at nine."""
    from shapecalc.model.plan import layer_plan

    m, runs, _, saved_tensors = _saved_case("nemotron_h_tiny", hf_model)
    kind = layer_plan(m).kind_of[0]
    listed = [x for x in runs if x["dtype"] == dtype and "tensors" in x
              and not x["checkpointing"]]
    assert {x["seq"] // m.scan_chunk for x in listed} == {0, 8}  # one chunk, nine
    for r in listed:
        want = sorted(t["bytes"] for t in r["tensors"]
                      if t["module"].startswith("model.layers.0.mixer"))
        got = sorted(x.bytes for x in saved_tensors(m, Workload(batch=r["batch"], seq=r["seq"],
                                                                dtype=dtype))
                     if x.kind == kind and x.role.startswith("ssm.") and x.bytes)
        assert got == want, r["seq"]


@pytest.mark.parametrize("name", ["qwen3_5_tiny", "qwen3_next_tiny"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_gated_deltanet_layer_tensors_equal_autograd(name, dtype, hf_model):
    """The first (gated DeltaNet) layer's saved tensors, tensor by tensor in bytes (its rule,
    interpret/vjp_deltanet.saved), but one: at one chunk the last chunk's state update (read by
    nothing) is freed with its operand k ⊙ e^{G_L − G} before the forward ends, so shapecalc
    counts what stays, as the measured resident bytes do (the list has it: it was saved). At two
    chunks the layer's bytes in all (the chunks' states and v_new are a storage each)."""
    from shapecalc.model.plan import layer_plan

    m, runs, _, saved_tensors = _saved_case(name, hf_model)
    kind, L = layer_plan(m).kind_of[0], m.scan_chunk
    listed = [x for x in runs if x["dtype"] == dtype and "tensors" in x
              and not x["checkpointing"]]
    assert {-(-x["seq"] // L) for x in listed} == {1, 2}  # one chunk, two
    for r in listed:
        B, T = r["batch"], r["seq"]
        freed = [B * m.gdn_v_heads * L * m.gdn_qk_dim * 4] if T <= L else []  # T_L = L
        want = sorted(t["bytes"] for t in r["tensors"]
                      if t["module"].startswith("model.layers.0.linear_attn"))
        got = sorted(x.bytes for x in saved_tensors(m, Workload(batch=B, seq=T, dtype=dtype))
                     if x.kind == kind and x.role.startswith("gdn.") and x.bytes)
        if T > L:  # per-chunk tensors are one storage each; shapecalc lists them as one
            assert sum(got) == sum(want), T
        else:
            assert sorted([*got, *freed]) == want


@pytest.mark.parametrize("how", ["torch", pytest.param("full", marks=pytest.mark.slow),
                                 pytest.param("selective", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", ["nemotron_h_tiny", pytest.param(
    "qwen3_next_tiny", marks=pytest.mark.slow)])
def test_verify_train_recompute(name, how, hf_model):
    """verify --train's recompute checks on a mixer model: each layer re-run from its kept inputs
    (the mixers' operations too) costs the symbolic recompute FLOPs, and its gradients equal
    those from kept residuals."""
    m = hf_model(CASES[name]).model_copy(update={"vocab_size": 64})
    doc = train_verify(m, Workload(batch=2, seq=5), fd=False, recompute=how)
    assert doc["ok"], [c for c in doc["checks"] if not c["ok"]]
    assert any("recompute" in c["name"] for c in doc["checks"])


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_qwen3_5_saved_bytes_equal_autograd_at_one_sequence(dtype, hf_model):
    """The whole tiny Qwen3.5 step at B = 1, T = 70 (two gated DeltaNet chunks): resident and
    peak bytes equal (its attention layer's output gate, q/k norms of the projections' outputs,
    the 1+γ norms and partial RoPE among them). At B > 1 its cos and sin are [B, T, R] (the
    multimodal RoPE's per-sequence positions), which the rules count once: not built."""
    m, runs, saved_bytes, _ = _saved_case("qwen3_5_tiny", hf_model)
    r = next(x for x in runs if x["dtype"] == dtype and x["batch"] == 1
             and not x["checkpointing"])
    got = saved_bytes(m, Workload(batch=1, seq=r["seq"], dtype=dtype), "none", "eager")
    assert (got["resident_bytes"], got["peak_bytes"]) == (r["resident_bytes"], r["peak_bytes"])
