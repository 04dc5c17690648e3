"""LoRA/QLoRA's step time and cost (train/lora_time.py through train/time.py's step model): the
work split by hand on the reference's tiny Llama, the step's terms by hand on one case, the
refusals one line each."""

from __future__ import annotations

import json

import pytest

from shapecalc.interpret.symbolic import stages
from shapecalc.model.config import Workload
from shapecalc.train.lora import LoraSpec, parse_targets
from shapecalc.train.lora_time import dequant_bytes, lora_work
from tests.test_lora import CASES, LLAMA

H100_BF16, H100_HBM = 989.5e12, 3.35e12  # presets/hardware/H100-SXM.toml
GEMM_EFF, MEM_EFF, HALF = 0.59, 0.8424, 24.17  # time.py's FITTED H100; perf_defaults.py


def test_work_split_by_hand_tiny_llama():
    """B=2, T=7 (m = 14), r=4, every projection. A layer's base linears forward: q, o 2·14·64·64
    = 114,688 each, k, v 2·14·64·32 = 57,344 each, gate, up, down 2·14·64·176 = 315,392 each:
    1,290,240; backward their dX only, the same 1,290,240 (no dW). Adapters: 2·14·4·(d_in +
    d_out) over (128 + 96 + 96 + 128 + 240·3 = 1,168): 130,816 forward, 2× that (dX and dW)
    261,632 backward. The head: 2·14·64·1000 = 1,792,000 forward and its dX. The first layer's
    q, k, v take no dX (114,688 + 57,344 + 57,344 = 229,376) nor their lora_A's
    dX (3 × 2·14·64·4 = 21,504): 250,880 off the first stage."""
    wl = Workload(batch=2, seq=7, dtype="bf16", phase="prefill", logits="all")
    spec = LoraSpec(4, parse_targets("q,k,v,o,gate,up,down"), 8)
    w = lora_work(LLAMA, wl, spec, "flash")
    assert (w[0].gemm_fwd, w[0].gemm_bwd) == (1_290_240, 1_290_240)
    assert (w[0].ad_fwd, w[0].ad_bwd) == (130_816, 261_632)
    assert (w["head"].gemm_fwd, w["head"].gemm_bwd) == (1_792_000, 1_792_000)
    assert w["embedding"].gemm_bwd == -250_880
    assert w[0].attn_bwd == 2 * w[0].attn_fwd  # both operands of QKᵀ and A·V take gradients


def test_checkpointed_work_by_hand_tiny_llama():
    """--recompute torch (every layer takes gradients): the backward adds each layer's forward
    up to its last saved tensor. Every projection targeted: down's lora_B saves last, so every
    base linear re-runs (1,290,240 + 1,290,240 dX = 2,580,480) and every adapter but down's
    lora_B (down's A·x 2·14·176·4 = 19,712 re-runs, its B·(A·x) 2·14·4·64 = 7,168 does not):
    261,632 + 130,816 − 7,168 = 385,280. q, v only: the base's
    down (315,392) is the last saver and is not re-run: 1,290,240 + 974,848 = 2,265,088; the
    adapters 2 × (2·14·4·(128 + 96)) = 50,176 + their re-run 25,088 = 75,264. The first layer
    then takes every gradient: nothing is taken off."""
    wl = Workload(batch=2, seq=7, dtype="bf16", phase="prefill", logits="all")
    every = lora_work(LLAMA, wl, LoraSpec(4, parse_targets("q,k,v,o,gate,up,down"), 8),
                      "flash", "torch")
    assert (every[0].gemm_bwd, every[0].ad_bwd, every["embedding"].gemm_bwd) == (
        2_580_480, 385_280, 0)
    qv = lora_work(LLAMA, wl, LoraSpec(4, ("q", "v"), 8), "flash", "torch")
    assert (qv[0].gemm_bwd, qv[0].ad_bwd, qv["embedding"].gemm_bwd) == (2_265_088, 75_264, 0)


def test_qlora_dequant_bytes_by_hand_tiny_llama():
    """A layer's linears hold 64·64·2 + 64·32·2 + 64·176·3 = 46,080 weights: the bf16 copy
    bitsandbytes writes is 2 × 46,080 = 92,160 B beside the NF4 bytes it reads (the layer's
    stored bytes, model/quant.py's count); timed twice a layer (forward, dX)."""
    from shapecalc.model.quant_tensors import weight_sums
    from shapecalc.model.quantization import DTYPE_FORMATS

    wl = Workload(batch=2, seq=7, dtype="bf16", phase="prefill", logits="all")
    st = stages(LLAMA, wl, 1)
    stored = weight_sums(LLAMA, st, DTYPE_FORMATS["nf4"], 1).layers[0]
    assert dequant_bytes(LLAMA, st)[0] == stored + 92_160
    base = lora_work(LLAMA, wl, LoraSpec(4, ("q", "v"), 8), "flash")[0]
    nf4 = lora_work(LLAMA, wl, LoraSpec(4, ("q", "v"), 8, base="nf4"), "flash")[0]
    assert nf4.mem_fwd - base.mem_fwd == nf4.mem_bwd - base.mem_bwd == stored + 92_160


def _run(cli, tmp_path, *args: str) -> dict:
    cfg = tmp_path / "m.json"
    cfg.write_text(json.dumps(CASES["llama_gqa"]["hf_config"]))
    r = cli("train", "--hf-config", str(cfg), "--seq", "7", "--micro-batch", "2",
            "--lora-rank", "4", "--gpu", "h100-sxm", "--json", *args)
    assert r.code == 0, r.err
    return r.json()


def test_step_terms_by_hand(cli, tmp_path):
    """The tiny Llama on one H100 (bf16 989.5 TFLOP/s at 0.59; HBM 3.35 TB/s at 0.8424): the
    GEMMs are 3 layers × 2 × 1,290,240 + 2 × 1,792,000 − 250,880 = 11,074,560 FLOPs at the GEMM
    rate (the first layer's missing dX taken off at that rate) and the adapters' 3 × 392,448 =
    1,177,344 at r/(r + 24.17) = 4/28.17 of it; the optimizer step reads and writes 28 B of
    each of the 4·1,168·3 = 14,016 adapter parameters: 392,448 B at the HBM rate, added to the
    one micro-batch's time."""
    doc = _run(cli, tmp_path, "--price", "2")
    tm = doc["time"]
    g_rate = H100_BF16 * GEMM_EFF
    eff = 4 / (4 + HALF)
    gemm = 11_074_560 / g_rate + 1_177_344 / (g_rate * eff)
    assert tm["per_stage"][0]["gemm_s"] == pytest.approx(gemm, rel=1e-12)
    assert tm["lora"]["adapter_efficiency"] == pytest.approx(eff, rel=1e-12)
    opt = 14_016 * 28 / (H100_HBM * MEM_EFF)
    assert tm["lora"]["optimizer_s"] == pytest.approx(opt, rel=1e-12)
    assert tm["step_s"] == pytest.approx(tm["per_stage"][0]["micro_batch_s"] + opt, rel=1e-12)
    # MFU: the doc's FLOPs (base forward and dX, adapters' forward and backward) per step
    f = doc["flops"]["per_step"]
    assert tm["mfu"] == pytest.approx((f["forward_flops"] + f["backward_flops"])
                                      / (H100_BF16 * tm["step_s"]), rel=1e-12)
    # $ a step at $2 a GPU-hour on one GPU
    assert tm["cost"]["per_step"] == pytest.approx(2 / 3600 * tm["step_s"], rel=1e-12)


def test_train_tokens_price_the_run(cli, tmp_path):
    """--train-tokens 1e6 at 14 tokens a step: ceil(1e6 / 14) = 71,429 steps."""
    tm = _run(cli, tmp_path, "--train-tokens", "1e6", "--price", "3")["time"]
    assert tm["steps"] == 71_429
    assert tm["cost"]["total"] == pytest.approx(tm["gpu_hours"] * 3, rel=1e-12)


@pytest.mark.parametrize("args,flag", [
    (["--recompute", "full", "--price", "2"], "recompute"),
    (["--zero", "3", "--dp", "2", "--train-tokens", "1e9"], "zero"),
    (["--tp", "2"], "tp"),
    (["--pp", "2"], "pp"),
    (["--compile"], "compile"),  # LoRA's time is eager peft's
])
def test_refusals_one_line(cli, tmp_path, args, flag):
    cfg = tmp_path / "m.json"
    cfg.write_text(json.dumps(CASES["llama_gqa"]["hf_config"]))
    r = cli("train", "--hf-config", str(cfg), "--seq", "8", "--lora-rank", "4", "--gpu",
            "h100-sxm", *args)
    assert r.code == 2 and not r.out
    assert len(r.err.strip().splitlines()) == 1 and flag in r.err
