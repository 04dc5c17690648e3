"""LoRA and QLoRA fine-tuning (train/lora.py, `train --lora-rank`) against autograd with peft:
the trainable parameters, FlopCounterMode's forward and backward FLOPs and the bytes
saved_tensors_hooks records, on tiny llama and qwen2 models wrapped by peft 0.21.2, fp32 and bf16,
eager and flash (sdpa) attention, four adapter sets (every projection; q,v; down; every
projection with lora_dropout 0.1) at three (B, T). The numbers in tests/data/lora_reference.json
were measured with torch 2.13.0, transformers 5.24.0 and peft 0.21.2 by
tests/torch_reference/measure_lora.py; the live test (-m slow) measures one case again.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from shapecalc.interpret.symbolic import stages
from shapecalc.model.config import ModelConfig, Workload
from shapecalc.train.lora import (
    LoraSpec,
    lora_flops,
    lora_saved,
    parse_targets,
    targeted,
    trainable,
)

REF = json.loads((Path(__file__).parent / "data" / "lora_reference.json").read_text())
CASES = {c["name"]: c for c in REF["cases"]}
# the reference's tiny Llama (D=64, H=4, H_kv=2, Dh=16, Dff=176, N=3, N_vocab=1000)
LLAMA = ModelConfig(vocab_size=1000, d_model=64, n_layers=3, n_heads=4, n_kv_heads=2,
                    head_dim=16, d_ff=176, ffn="swiglu", norm="rmsnorm", positions="rope")


def _ours(m: ModelConfig, run: dict) -> dict:
    spec = LoraSpec(run["rank"], parse_targets(run["targets"]), run["alpha"], run["dropout"])
    wl = Workload(batch=run["batch"], seq=run["seq"], dtype=run["dtype"], phase="prefill",
                  logits="all")
    st = stages(m, wl, 1)
    ad = targeted(m, st, spec)
    how = "torch" if run["checkpointing"] else "none"
    got = {"trainable_params": trainable(ad, spec.rank)}
    if "forward_flops" in run:  # FlopCounterMode around backward() counts the recompute too
        f = lora_flops(st, ad, spec.rank, m.n_layers, how)
        got.update(forward_flops=f["forward_flops"],
                   backward_flops=f["backward_flops"] + f["recompute_flops"])
    s = lora_saved(m, wl, run["attention"], spec, ad, how)
    held = sum(x["bytes"] for x in s["held"] if not x["saved"])
    got.update(saved_bytes=s["resident_bytes"] - held, held_bytes=held,
               resident_bytes=s["resident_bytes"], peak_bytes=s["peak_bytes"],
               adapter_dtype=s["adapter_dtype"])
    return got


def _check(m: ModelConfig, run: dict) -> None:
    got = _ours(m, run)
    want = {k: run[k] for k in got}
    want["adapter_dtype"] = {"float32": "fp32", "bfloat16": "bf16"}[run["adapter_dtype"]]
    assert got == want, run


def test_the_reference_covers_models_dtypes_attention_targets_and_dropout():
    assert not REF["errors"]
    assert {c["model_type"] for c in REF["cases"]} == {"llama", "qwen2"}
    for case in REF["cases"]:
        runs = case["runs"]
        assert {(r["dtype"], r["attention"]) for r in runs} == {
            (d, a) for d in ("fp32", "bf16") for a in ("eager", "flash")}
        assert {(r["targets"], r["dropout"] > 0, r["checkpointing"]) for r in runs} == {
            ("q,k,v,o,gate,up,down", False, False), ("q,v", False, False),
            ("down", False, False), ("q,k,v,o,gate,up,down", True, False),
            ("q,k,v,o,gate,up,down", False, True)}
        assert len({(r["batch"], r["seq"]) for r in runs}) == 3
        assert all(r["resident_bytes"] == r["peak_bytes"] == r["saved_bytes"] for r in runs
                   if not r["checkpointing"])


@pytest.mark.parametrize("name,targets,dropout,ck", [
    (n, t, p, c) for n in sorted(CASES) for t, p, c in (
        ("q,k,v,o,gate,up,down", 0.0, False), ("q,v", 0.0, False), ("down", 0.0, False),
        ("q,k,v,o,gate,up,down", 0.1, False), ("q,k,v,o,gate,up,down", 0.0, True))])
def test_equal_to_autograd_with_peft(name, targets, dropout, ck, hf_model):
    """Every run of the adapter set (and with gradient checkpointing: the saved tensors, the
    checkpoint's held arguments, resident and peak bytes, the recompute inside the backward)."""
    m = hf_model(CASES[name])
    runs = [r for r in CASES[name]["runs"]
            if (r["targets"], r["dropout"], r["checkpointing"]) == (targets, dropout, ck)]
    assert len(runs) == 12
    for run in runs:
        _check(m, run)


def test_trainable_parameters_by_hand_llama3_8b():
    """Llama-3-8B (D=4096, H_kv·Dh=1024, Dff=14336, 32 layers), r=16 on every projection: per
    layer q 16·(4096+4096) = 131,072, k and v 16·(4096+1024) = 81,920 each, o 131,072, gate, up
    and down 16·(4096+14336) = 294,912 each: 1,310,720; × 32 = 41,943,040 (what peft's
    print_trainable_parameters reports for this model and config)."""
    from shapecalc.inputs.sources import load_preset

    m = load_preset("llama3-8b")
    st = stages(m, Workload(batch=1, seq=8, phase="prefill", logits="all"), 1)
    spec = LoraSpec(16, parse_targets("q,k,v,o,gate,up,down"), 32)
    assert trainable(targeted(m, st, spec), 16) == 32 * (2 * 131_072 + 2 * 81_920 + 3 * 294_912)


def test_flops_by_hand_tiny_llama():
    """B=2, T=7 (m = 14 rows), r=4, every projection, fp32. Forward: the base's
    3·(114,688·2 + 57,344·2 + 12,544·2 + 315,392·3) + the head's 1,792,000 = 5,737,984, and the
    adapters' 2·14·4·(d_in + d_out) summed (128 + 96 + 96 + 128 + 240·3 = 1,168): 130,816 a
    layer, 392,448 in all: 6,130,432. Backward: no dW for the base; the layers after the first
    differentiate every input (linears 1,290,240, the two bmm ×2 50,176, the adapters 2 × their
    forward 261,632); the first layer's q, k, v read a tensor that takes no gradient: no base
    dX (229,376) and no dX_A (3 × 2·14·64·4 = 21,504); the head's dX 1,792,000."""
    wl = Workload(batch=2, seq=7, dtype="fp32", phase="prefill", logits="all")
    st = stages(LLAMA, wl, 1)
    spec = LoraSpec(4, parse_targets("q,k,v,o,gate,up,down"), 8)
    f = lora_flops(st, targeted(LLAMA, st, spec), 4, 3)
    assert f["forward_flops"] == 5_737_984 + 392_448
    later = 1_290_240 + 50_176 + 261_632
    first = (1_290_240 - 229_376) + 50_176 + (261_632 - 21_504)
    assert f["backward_flops"] == 2 * later + first + 1_792_000
    assert f["backward_dw_flops"] == 0


@pytest.mark.parametrize("args,flag", [
    (["--lora-rank", "0"], "lora-rank"),
    (["--lora-rank", "-3"], "lora-rank"),
    (["--lora-rank", "65"], "lora-rank"),  # over k's width H_kv·Dh = 32 … and Dh·H = 64
    (["--lora-rank", "4", "--lora-targets", "q_a"], "lora-targets"),
    (["--lora-rank", "4", "--lora-targets", "w1"], "lora-targets"),
    (["--lora-targets", "q"], "lora-targets"),
    (["--paged-optimizer"], "paged-optimizer"),
    (["--lora-rank", "4", "--recompute", "full"], "recompute"),
    (["--lora-rank", "4", "--lora-base", "int4"], "lora-base"),
])
def test_bad_lora_input_exits_2_naming_the_flag(cli, args, flag, tmp_path):
    cfg = tmp_path / "m.json"
    cfg.write_text(json.dumps(CASES["llama_gqa"]["hf_config"]))
    r = cli("train", "--hf-config", str(cfg), "--seq", "8", *args)
    assert r.code == 2 and not r.out
    assert len(r.err.strip().splitlines()) == 1 and flag in r.err


@pytest.mark.parametrize("command", ["trace", "fit"])
def test_lora_flags_on_a_command_that_does_not_train(cli, command):
    r = cli(command, "--preset", "llama3-8b", "--lora-rank", "8")
    assert r.code == 2 and "--lora-rank" in r.err and not r.out


def test_qlora_model_state_by_hand(cli):
    """Llama-3-8B, r=16 on every projection, QLoRA (NF4 base), paged AdamW: the adapters'
    41,943,040 params hold fp32 weights 4 B and gradients 4 B (335,544,320 B); AdamW's m and v,
    8 B each param (335,544,320 B), page to CPU RAM and leave the GPU's total."""
    r = cli("train", "--preset", "llama3-8b", "--seq", "64", "--lora-rank", "16",
            "--lora-base", "nf4", "--paged-optimizer", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    terms = {t["term"]: t["bytes"] for t in doc["memory"]["per_stage"][0]["model_state"]["terms"]}
    assert terms["adapter_weights"] == terms["gradients"] == 41_943_040 * 4
    assert terms["optimizer"] == doc["lora"]["paged_bytes"] == 41_943_040 * 8
    assert doc["memory"]["per_stage"][0]["model_state"]["bytes"] == sum(terms.values()) - (
        41_943_040 * 8)
    assert doc["lora"]["base_format"].startswith("bnb-nf4") and "double" in doc["lora"][
        "base_format"]


@pytest.mark.slow
def test_live_one_case(hf_model):
    """llama_gqa, bf16, eager, every projection, the first (B, T), measured again."""
    from conftest import _load, need_torch

    need_torch()
    if importlib.util.find_spec("peft") is None:
        pytest.skip("peft not installed")
    mod = _load("measure_lora")
    case = CASES["llama_gqa"]
    kwargs = {k: v for k, v in case["hf_config"].items() if k != "model_type"}
    live = mod.measure_case(case["name"], case["model_type"], kwargs, shapes=mod.SHAPES[:1],
                            dtypes=("bf16",), attentions=("eager",), adapters=mod.ADAPTERS[:1],
                            checkpointing=(False,))
    stored = [r for r in case["runs"] if (r["dtype"], r["attention"], r["targets"], r["dropout"])
              == ("bf16", "eager", "q,k,v,o,gate,up,down", 0.0) and not r["checkpointing"]
              and (r["batch"], r["seq"]) == tuple(mod.SHAPES[0])]
    assert [{k: v for k, v in r.items() if k != "tensors"} for r in live["runs"]] == [
        {k: v for k, v in r.items() if k != "tensors"} for r in stored]
    for run in live["runs"]:
        _check(hf_model(live), run)


PUBLISHED = json.loads((Path(__file__).parent / "data" / "lora_published.json").read_text())


def _state(cli, preset: str, sets: list[str], *args: str) -> dict:
    flags = [x for s in sets for x in ("--set", s)]
    r = cli("train", "--preset", preset, *flags, "--seq", "512", "--lora-base", "nf4",
            "--paged-optimizer", *args, "--json")
    assert r.code in (0, 1), r.err
    return r.json()


@pytest.mark.parametrize("rec", PUBLISHED["records"], ids=lambda r: r["name"])
def test_published_qlora_footprints(cli, rec):
    """The whole step with gradient checkpointing (--recompute torch, as both ran): the NF4
    base, the fp32 adapters and their gradients, one dequantised weight and the activations
    (the paged AdamW states off the GPU) is under the published bound; for 65B it is within 20%
    of it (the base alone is 34.5 GB), and without checkpointing it does not fit (the saved
    tensors at T = 512 are 34 GB). docs/guides/training.md explains the rest term by term."""
    ranks = {"qlora-65b-48gb": ("64", "16", "0.05", "q,k,v,o,gate,up,down"),
             "torchtune-llama2-7b-10gb": ("8", "16", "0", "q,v")}[rec["name"]]
    r, alpha, p, targets = ranks
    args = ("--lora-rank", r, "--lora-alpha", alpha, "--lora-dropout", p, "--lora-targets",
            targets)
    doc = _state(cli, rec["model"]["preset"], rec["model"]["set"], *args, "--recompute", "torch")
    total = doc["memory"]["peak_bytes"]
    assert total < rec["bound_bytes"]
    if rec["name"] == "qlora-65b-48gb":
        assert 0.8 * rec["bound_bytes"] < total
        eager = _state(cli, rec["model"]["preset"], rec["model"]["set"], *args)
        assert eager["memory"]["peak_bytes"] > rec["bound_bytes"]


def test_bf16_base_and_zero3_by_hand(cli):
    """Llama-3-8B's 8,030,261,248 parameters frozen in bf16: 2 B each = 16,060,522,496 B; with
    --dp 4 --zero 3 every term is sharded: ⌈16,060,522,496 / 4⌉ = 4,015,130,624 B of base, and
    the adapters ⌈41,943,040 / 4⌉ = 10,485,760 params × 4 B."""
    base = cli("train", "--preset", "llama3-8b", "--seq", "64", "--lora-rank", "16", "--json")
    terms = {t["term"]: t for t in base.json()["memory"]["per_stage"][0]["model_state"]["terms"]}
    assert terms["weights"]["bytes"] == 8_030_261_248 * 2 and not terms["weights"]["sharded"]
    z3 = cli("train", "--preset", "llama3-8b", "--seq", "64", "--lora-rank", "16", "--dp", "4",
             "--zero", "3", "--json")
    terms = {t["term"]: t for t in z3.json()["memory"]["per_stage"][0]["model_state"]["terms"]}
    assert terms["weights"]["bytes"] == 4_015_130_624
    assert terms["adapter_weights"]["bytes"] == 10_485_760 * 4


def test_checkpointed_flops_by_hand_tiny_llama():
    """Under torch's checkpoint (B=2, T=7, r=4, every projection) the first layer is as the
    others (its input takes a gradient), and each layer is re-run up to its last saved tensor:
    the base's stages but the down projection 1,315,328 − 315,392 = 999,936, the adapters but
    down's 130,816 − 26,880 = 103,936, and down's base 315,392 and lora_A 2·14·176·4 = 19,712
    (its lora_B, which saves A·x last, stops the re-run): 1,438,976 a layer."""
    wl = Workload(batch=2, seq=7, dtype="fp32", phase="prefill", logits="all")
    st = stages(LLAMA, wl, 1)
    spec = LoraSpec(4, parse_targets("q,k,v,o,gate,up,down"), 8)
    f = lora_flops(st, targeted(LLAMA, st, spec), 4, 3, "torch")
    assert f["recompute_flops"] == 3 * (999_936 + 103_936 + 315_392 + 19_712)
    assert f["backward_flops"] == 3 * (1_290_240 + 50_176 + 261_632) + 1_792_000


def test_routed_experts_are_not_targets_as_in_peft(cli):
    """Qwen3-30B-A3B has only routed experts (fused tensors peft's target_modules does not
    reach): gate matches nothing and exits 2, and the default adapts its attention only;
    DeepSeek-V2-Lite's gate, up and down adapt its dense first layer and its shared experts
    only, as peft would."""
    r = cli("train", "--preset", "qwen3-30b-a3b", "--seq", "64", "--lora-rank", "8",
            "--lora-targets", "q,gate")
    assert r.code == 2 and "lora-targets" in r.err and "fused" in r.err
    assert len(r.err.strip().splitlines()) == 1
    r = cli("train", "--preset", "qwen3-30b-a3b", "--seq", "64", "--lora-rank", "8", "--json")
    assert r.code == 0 and r.json()["lora"]["targets"] == ["q", "k", "v", "o"]  # the default
    r = cli("train", "--preset", "deepseek-v2-lite", "--seq", "64", "--lora-rank", "8",
            "--lora-targets", "q,kv_a,kv_b,o,gate,up,down", "--recompute", "torch", "--json")
    assert r.code == 0, r.err
    roles = {a["role"] for a in r.json()["lora"]["adapted_linears"]}
    assert roles == {"attn.q", "attn.kv_a", "attn.kv_b", "attn.out", "ffn.gate", "ffn.up",
                     "ffn.down", "moe.shared.gate", "moe.shared.up", "moe.shared.down"}
