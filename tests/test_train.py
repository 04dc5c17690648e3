"""`shapecalc train`: model-state bytes against hand calculations, ZeRO's sharding rule, the batch
arithmetic, Megatron's activation closed form, the PP/DP/TP ledgers, and bad inputs."""

from __future__ import annotations

import json

import pytest

from shapecalc.inputs.sources import load_preset
from shapecalc.interpret.symbolic import stages
from shapecalc.model.config import Workload
from shapecalc.train.backward import step_flops

LLAMA70 = ["train", "--preset", "llama3-70b", "--seq", "8192", "--tp", "8", "--pp", "4",
           "--dp", "2", "--zero", "1", "--gpu", "h100-sxm"]


def _json(cli, *args):
    r = cli(*args, "--json")
    doc = json.loads(r.out)
    # a step that does not fit the GPU exits 1 (README: Exit status), its report printed
    assert r.code == (1 if doc["memory"].get("fits") is False else 0), r.err
    return doc


def test_llama3_70b_model_state_equals_the_hand_calculation(cli):
    """Llama-3-70B: D=8192, H=64, H_kv=8, Dh=128, Dff=28672, V=128256, 80 layers. One TP rank
    (t=8) of one layer holds q and o D·D/8 each, k and v D·(H_kv·Dh)/8 each, the FFN 3·D·Dff/8,
    and both norms' 2·D whole. PP=4: 20 layers per stage; the last stage adds the final norm D and
    its LM-head slice V·D/8. bf16 mixed precision: weights 2 B and gradients 2 B per parameter
    held whole, and the 12 B of fp32 master + AdamW m + v sharded by ZeRO-1 over dp=2: ⌈P/2⌉."""
    D, Hkv, Dh, Dff, V = 8192, 8, 128, 28672, 128256
    layer = 2 * D * D // 8 + 2 * D * Hkv * Dh // 8 + 3 * D * Dff // 8 + 2 * D
    assert layer == 106_971_136
    last = 20 * layer + D + V * D // 8
    first = 20 * layer + V * D // 8
    assert (first, last) == (2_270_756_864, 2_270_765_056)
    doc = _json(cli, *LLAMA70)
    stages_ = doc["memory"]["per_stage"]
    assert [s["params"] for s in stages_] == [first, 20 * layer, 20 * layer, last]
    terms = {t["term"]: t["bytes"] for t in stages_[3]["model_state"]["terms"]}
    assert terms == {"weights": 2 * last, "gradients": 2 * last,
                     "optimizer": 12 * ((last + 1) // 2)}
    assert stages_[3]["model_state"]["bytes"] == 22_707_650_560
    assert doc["training"]["global_batch"] == 2 and doc["training"]["gpus"] == 64
    # the table prints every term of every stage
    r = cli(*LLAMA70)
    assert r.code == 0, r.err
    for word in ("weights", "gradients", "optimizer", "activations", "Megatron", "H100-SXM"):
        assert word in r.out
    assert f"{2 * last:,d}" in r.out and f"{12 * ((last + 1) // 2):,d}" in r.out


@pytest.mark.parametrize(("precision", "per"), [("mixed", (2, 2, 12)), ("fp32", (4, 4, 8)),
                                                ("adam8bit", (2, 2, 6))])
@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_zero_shards_ceil_p_over_dp(cli, precision, per, zero):
    """seed-tiny over dp=3 (its parameter count is not a multiple of 3): a sharded term holds
    ⌈P/dp⌉ parameters' bytes; ZeRO-1 shards the optimizer, 2 also gradients, 3 also weights."""
    doc = _json(cli, "train", "--dp", "3", "--zero", str(zero), "--precision", precision)
    st = doc["memory"]["per_stage"][0]
    P = st["params"]
    assert P % 3 and P == doc["flops"]["params"]
    shard = -(-P // 3)
    sharded = {0: set(), 1: {"optimizer"}, 2: {"optimizer", "gradients"},
               3: {"optimizer", "gradients", "weights"}}[zero]
    got = {t["term"]: t["bytes"] for t in st["model_state"]["terms"]}
    for name, b in zip(("weights", "gradients", "optimizer"), per, strict=True):
        assert got[name] == (shard if name in sharded else P) * b


def test_batch_arithmetic_and_its_check(cli):
    doc = _json(cli, "train", "--micro-batch", "2", "--dp", "4", "--global-batch", "32")
    assert doc["training"]["grad_accum"] == 4
    doc = _json(cli, "train", "--micro-batch", "2", "--dp", "4", "--grad-accum", "3")
    assert doc["training"]["global_batch"] == 24
    assert doc["training"]["tokens_per_step"] == 24 * doc["workload"]["seq"]
    for args in (["--global-batch", "30"], ["--grad-accum", "3", "--global-batch", "32"]):
        r = cli("train", "--micro-batch", "2", "--dp", "4", *args)
        assert r.code == 2 and r.out == ""
        assert len(r.err.strip().splitlines()) == 1 and "global_batch" in r.err


@pytest.mark.parametrize("args,field", [
    (["--zero", "4"], "zero"), (["--precision", "fp8"], "precision"),
    (["--recompute", "some"], "recompute"), (["--dp", "0"], "dp"),
    (["--preset", "mixtral-8x7b", "--ep", "2", "--dp", "3"], "ep"),
    (["--gpu", "nope"], "gpu"), (["--tp", "3"], "tp"),
])
def test_bad_inputs_exit_2_with_one_line(cli, args, field):
    r = cli("train", *args)
    assert r.code == 2, (r.out, r.err)
    assert len(r.err.strip().splitlines()) == 1 and field in r.err and "Traceback" not in r.err


def test_pipeline_bubble_in_flight_and_activation_closed_form(cli):
    """1F1B with p=4 stages and m=6 micro-batches: bubble 3/9; stage i holds min(p−i, m)
    micro-batches. Megatron's per-layer closed form in 16-bit, with sequence parallelism over t:
    (34·s·b·h + 5·a·s²·b)/t, 34·s·b·h/t (selective), 2·s·b·h/t (full)."""
    base = ["train", "--preset", "llama2-7b", "--seq", "1024", "--micro-batch", "2",
            "--tp", "2", "--pp", "4", "--grad-accum", "6"]
    doc = _json(cli, *base)
    pp = doc["communication"]["pp"]
    assert pp["bubble_fraction"] == pytest.approx(3 / 9)
    assert [s["micro_batches_in_flight"] for s in doc["memory"]["per_stage"]] == [4, 3, 2, 1]
    s, b, h, a, t = 1024, 2, 4096, 32, 2
    want = {"none": (34 * s * b * h + 5 * a * s * s * b) // t, "selective": 34 * s * b * h // t,
            "full": 2 * s * b * h // t}
    for how, per_layer in want.items():
        d = _json(cli, *base, "--recompute", how)
        assert d["memory"]["activations"]["bytes_per_layer"] == per_layer
        st0 = d["memory"]["per_stage"][0]
        assert st0["activation_bytes_megatron"] == per_layer * 8 * 4  # 8 layers, 4 in flight
    # the boundary activation [b,s,h] in bf16, forward and backward, m times
    assert pp["boundary_bytes_per_step"] == 2 * 6 * 2 * s * b * h


def test_dp_and_tp_ledgers(cli):
    """Ring collectives: a rank sends (dp−1)·⌈size/dp⌉ per reduce-scatter or all-gather; ZeRO-0
    all-reduces bf16 gradients (2 of them), ZeRO-3 adds a second weight all-gather. TP with
    sequence parallelism: 4 collectives of (t−1)·⌈s·b·h/t⌉ elements per layer each way."""
    base = ["train", "--preset", "llama2-7b", "--seq", "512", "--tp", "2", "--dp", "4"]
    z0 = _json(cli, *base, "--zero", "0")
    P = z0["memory"]["per_stage"][0]["params"]
    ring = 3 * -(-(2 * P) // 4)
    assert z0["communication"]["dp"]["bytes_per_step"] == 2 * ring
    z3 = _json(cli, *base, "--zero", "3")
    assert z3["communication"]["dp"]["bytes_per_step"] == 3 * ring
    tp = z0["communication"]["tp"]
    one = 1 * (512 * 4096 // 2) * 2
    assert tp["forward_bytes_per_layer"] == 4 * one
    # + the vocab-parallel embedding (reduce-scatter, its gradient all-gathered), the LM head's
    # input (all-gather, its gradient reduce-scattered) and the loss's 3 fp32 all-reduces of
    # [s,b] (each 2·(t−1)·⌈s·b/t⌉·4 B); pp = 1: one rank holds all of them
    loss = 3 * 2 * 1 * (512 // 2) * 4
    assert tp["bytes_per_step"] == 2 * 4 * one * 32 + 4 * one + loss


def test_step_flops_and_the_approximations(cli):
    """Exact forward + backward = 3 × the forward's matmuls; 6·N·tokens and (6·N + 12·L·D·T)·tokens
    beside it; selective recompute is exactly the attention core's matmuls, 4·B·H·T²·Dh per layer;
    Megatron's full recompute is the layers' forward."""
    doc = _json(cli, "train", "--preset", "llama2-7b", "--seq", "1024", "--micro-batch", "2")
    fl = doc["flops"]
    assert fl["forward_backward_flops"] == 3 * fl["forward_flops"]
    N, tokens = fl["params"], 2 * 1024
    assert fl["approx_6nt"] == 6 * N * tokens
    assert fl["approx_palm"] == (6 * N + 12 * 32 * 4096 * 1024) * tokens
    m = load_preset("llama2-7b", None)
    st = stages(m, Workload(batch=2, seq=1024))
    sel = step_flops(st, 32, "selective")
    assert sel["recompute_flops"] == 32 * 4 * 2 * 32 * 1024 * 1024 * 128
    assert sel["recompute_formula"] == "4·B·H·T²·Dh·N"
    full = step_flops(st, 32, "full")
    head = 2 * 2 * 1024 * 4096 * 32000
    assert full["recompute_flops"] == fl["forward_flops"] - head
    assert fl["forward_formula"] == (
        "8·B·T·D·H·Dh·N + 4·B·H·T²·Dh·N + 6·B·T·D·Dff·N + 2·B·T·D·N_vocab")
    assert fl["backward_formula"] == (
        "16·B·T·D·H·Dh·N + 8·B·H·T²·Dh·N + 12·B·T·D·Dff·N + 4·B·T·D·N_vocab")


def test_expert_parallel_placement_and_sharding(cli):
    """Mixtral-8x7B, ep=2 over dp=4, ZeRO-2: a rank holds E/ep = 4 whole experts of each of 32
    layers (8·3·D·Dff_e per layer for all 8) and every dense parameter; the dense states shard
    over dp=4, the experts' over the expert-data-parallel group, dp/ep = 2 ranks."""
    D, Dffe, N, E = 4096, 14336, 32, 8
    experts = N * E * 3 * D * Dffe
    total = 46_702_792_704  # Mixtral-8x7B's published count (tests/data/moe_reference.json)
    dense = total - experts
    doc = _json(cli, "train", "--preset", "mixtral-8x7b", "--ep", "2", "--dp", "4", "--zero",
                "2", "--seq", "4096")
    st = doc["memory"]["per_stage"][0]
    assert st["params"] == dense + experts // 2
    shard = -(-dense // 4) + -(-(experts // 2) // 2)
    got = {t["term"]: t["bytes"] for t in st["model_state"]["terms"]}
    assert got == {"weights": 2 * st["params"], "gradients": 2 * shard, "optimizer": 12 * shard}


def test_largest_micro_batch_by_hand(cli):
    """The largest b whose model states plus b's exact activations (what autograd saves, flash
    attention, bf16) fit the GPU: Llama-2-7B (D=4096, H=32, Dh=128, Dff=11008, N_vocab=32000,
    32 layers) at tp 2 with sequence parallelism, T=1024 on an H100-SXM. A rank keeps, per
    sequence: in each layer, two RMSNorms on its T/2 = 512 tokens (x's fp32 copy 4 B, x̂ and
    γ·x̂ 2 B each, an fp32 rsqrt), flash's q and k after RoPE and its output on H/2 = 16 heads,
    the v projection (16·128 columns), the fp32 logsumexp, SwiGLU's four [T, Dff/2]; outside,
    the ids (int64), the final norm, the fp32 log-softmax over N_vocab/2 and the targets; once,
    RoPE's cos and sin [T, Dh] and the loss's 4-byte weight."""
    doc = _json(cli, "train", "--preset", "llama2-7b", "--seq", "1024", "--tp", "2", "--gpu",
                "h100-sxm")
    mem = doc["memory"]
    states = mem["per_stage"][0]["model_state"]["bytes"]
    T, t, D, H, Dh, F, V = 1024, 512, 4096, 16, 128, 5504, 16000
    norm = t * (D * (4 + 2 + 2) + 4)
    layer = 2 * norm + 3 * 2 * H * T * Dh + 4 * H * T + 2 * T * H * Dh + 4 * 2 * T * F
    per_b = 32 * layer + 8 * T + norm + 4 * T * V + 8 * T
    once = 2 * 2 * T * Dh + 4

    def need(b):
        return states + once + b * per_b + (8 if b == 1 else 0)  # B=1: labels [1, T+1]

    want = max(b for b in range(1, 64) if need(b) <= mem["gpu_memory_bytes"])
    assert want >= 2 and mem["largest_micro_batch"] == want
    assert mem["per_stage"][0]["activation_bytes"] == need(1) - states
    tight = _json(cli, "train", "--preset", "llama2-7b", "--seq", "1024", "--tp", "2", "--gpu",
                  "h100-sxm", "--set-gpu", f"memory_bytes={need(1) - 1}")
    assert tight["memory"]["largest_micro_batch"] == 0


def test_expert_parallel_all_to_all(cli):
    """Mixtral-8x7B, ep 2: each of the 32 MoE layers dispatches and combines B·T·k·D bf16
    activations forward, and their gradients backward; × 3 micro-batches."""
    doc = _json(cli, "train", "--preset", "mixtral-8x7b", "--ep", "2", "--dp", "2", "--seq",
                "4096", "--micro-batch", "2", "--grad-accum", "3")
    ep = doc["communication"]["ep"]
    a2a = 2 * (2 * 4096 * 2 * 4096) * 2
    assert ep["forward_bytes_per_layer"] == ep["backward_bytes_per_layer"] == a2a
    assert ep["bytes_per_step"] == 2 * a2a * 32 * 3


def test_interleaved_schedule_keeps_more_chunks_in_flight(cli):
    """Megatron's interleaved 1F1B (apex/megatron fwd_bwd_pipelining_with_interleaving): stage i
    runs (p−i−1)·2 + (v−1)·p warm-up forwards (capped at m·v), then one forward before each
    backward. p=4, m=16, v=5 by hand: stage 0: 6 + 16 + 1 = 23 chunk passes, stage 1: 21,
    stage 2: 19, stage 3: 17, each 1/5 of a micro-batch's saved tensors; v=1: 4, 3, 2, 1."""
    base = ["train", "--preset", "llama3-70b", "--seq", "8192", "--tp", "8", "--pp", "4",
            "--dp", "32", "--global-batch", "512"]
    plain = _json(cli, *base)["memory"]["per_stage"]
    inter = _json(cli, *base, "--virtual-stages", "5")
    stages_v = inter["memory"]["per_stage"]
    assert [s["chunks_in_flight"] for s in plain] == [4, 3, 2, 1]
    assert [s["chunks_in_flight"] for s in stages_v] == [23, 21, 19, 17]
    assert inter["communication"]["pp"]["chunks_in_flight_first_stage"] == 23
    for a, b in zip(plain, stages_v, strict=True):
        # no recompute: a micro-batch's resident bytes are its peak, R; v=1 holds c·R, v=5 c/5·R
        r = a["activation_bytes"] // a["chunks_in_flight"]
        assert a["activation_bytes"] == a["chunks_in_flight"] * r
        assert b["activation_bytes"] == -(-(b["chunks_in_flight"] - 5) * r // 5) + r
    # the first stage: Korthikanti et al.'s factor 1 + (p−1)/(p·v) = 1.15 on p micro-batches
    assert stages_v[0]["activation_bytes"] / plain[0]["activation_bytes"] == pytest.approx(1.15)
    # m = p: warm-up only, all m·v passes in flight on every stage
    few = _json(cli, *base[:-2], "--global-batch", "128", "--virtual-stages", "5")
    assert [s["chunks_in_flight"] for s in few["memory"]["per_stage"]] == [20] * 4
