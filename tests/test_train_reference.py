"""A training step's FLOPs against PyTorch: forward and backward matmul FLOPs equal
FlopCounterMode around the forward (all T logits and the loss) and around `loss.backward()`, on
tiny really-run llama, gpt2, qwen2 and mixtral models at several (B, T), with and without
transformers' gradient checkpointing (torch's non-reentrant checkpoint re-runs each layer in the
backward, up to the last tensor it saved).

The numbers in tests/data/train_reference.json were measured with torch 2.13.0 and transformers
5.24.0 by tests/torch_reference/measure_train.py; `test_live_flop_counter` measures again when
torch and transformers are installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapecalc.interpret.symbolic import stages
from shapecalc.model.config import Workload
from shapecalc.model.stage import ATTN_SCORE_ROLES
from shapecalc.train.backward import backward_stages, step_flops

REF = json.loads((Path(__file__).parent / "data" / "train_reference.json").read_text())
CASES = {c["name"]: c for c in REF["cases"]}


def _step(m, run):
    st = stages(m, Workload(batch=run["batch"], seq=run["seq"], dtype="fp32"))
    return step_flops(st, m.n_layers, "torch" if run["checkpointing"] else "none")


def _check(m, case):
    for run in case["runs"]:
        got = _step(m, run)
        assert got["forward_flops"] == run["forward_flops"], run
        assert got["backward_flops"] + got["recompute_flops"] == run["backward_flops"], run


def test_the_reference_covers_the_four_families_and_both_modes():
    assert {c["model_type"] for c in REF["cases"]} == {"llama", "gpt2", "qwen2", "mixtral"}
    assert not REF["errors"]
    for case in REF["cases"]:
        shapes = {(r["batch"], r["seq"]) for r in case["runs"]}
        assert len(shapes) >= 3
        assert {r["checkpointing"] for r in case["runs"]} == {False, True}


@pytest.mark.parametrize("name", sorted(CASES))
def test_step_flops_equal_flop_counter(name, hf_model):
    _check(hf_model(CASES[name]), CASES[name])


@pytest.mark.parametrize("name", sorted(CASES))
def test_backward_is_twice_the_forward_and_recompute_is_what_checkpointing_adds(name, hf_model):
    """Without checkpointing the measured backward is exactly 2× the forward (every input takes a
    gradient); with it, the measured backward grows by exactly shapecalc's torch recompute, which
    is less than Megatron's full recompute (one more forward of every layer) by the layers'
    un-rerun trailing stages, and more than selective recompute."""
    m = hf_model(CASES[name])
    for run in CASES[name]["runs"]:
        if not run["checkpointing"]:
            assert run["backward_flops"] == 2 * run["forward_flops"]
            continue
        plain = next(r for r in CASES[name]["runs"] if not r["checkpointing"]
                     and (r["batch"], r["seq"]) == (run["batch"], run["seq"]))
        st = stages(m, Workload(batch=run["batch"], seq=run["seq"], dtype="fp32"))
        extra = run["backward_flops"] - plain["backward_flops"]
        assert step_flops(st, m.n_layers, "torch")["recompute_flops"] == extra
        full = step_flops(st, m.n_layers, "full")["recompute_flops"]
        sel = step_flops(st, m.n_layers, "selective")["recompute_flops"]
        assert sel < extra <= full


@pytest.mark.parametrize("name", sorted(CASES))
def test_attention_and_weight_gradients_apart(name, hf_model):
    """FlopCounterMode's per-op split of the backward: its bmm are exactly the attention operands'
    gradients (dA and dB of QKᵀ and A·V), its mm the dX and dW of every linear layer."""
    m = hf_model(CASES[name])
    for run in CASES[name]["runs"]:
        if run["checkpointing"]:
            continue
        bw = backward_stages(stages(m, Workload(batch=run["batch"], seq=run["seq"],
                                                dtype="fp32")))
        attn = sum(b.flops * b.repeat for b in bw if b.role in ATTN_SCORE_ROLES)
        assert run["backward_by_op"]["aten.bmm"] == attn
        assert run["backward_by_op"]["aten.mm"] == sum(b.flops * b.repeat for b in bw) - attn


def test_live_flop_counter(hf_model, live_measure):
    """One case at its first (B, T), with and without checkpointing (the whole file: -m slow)."""
    import importlib.util

    path = Path(__file__).parent / "torch_reference" / "measure_train.py"
    spec = importlib.util.spec_from_file_location("measure_train", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    case = CASES["llama_gqa"]
    kwargs = {k: v for k, v in case["hf_config"].items() if k != "model_type"}
    live = mod.measure_case(case["name"], case["model_type"], kwargs, shapes=mod.SHAPES[:1])
    assert live["runs"] == case["runs"][:2]
    _check(hf_model(live), live)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_live_flop_counter_other_families(name, hf_model, live_measure):
    live = live_measure("measure_train", CASES[name])
    _check(hf_model(live), live)
