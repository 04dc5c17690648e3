"""The training step-time model (shapecalc/train/time.py) against published figures
(tests/data/train_mfu.json), a step time by hand, its properties, and the CP and TP
vocab-parallel ledgers (shapecalc/train/ledgers.py) by hand."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from shapecalc.inputs.hardware import load_gpu
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import ModelConfig, Workload
from shapecalc.train.report import build_train
from shapecalc.train.time import FITTED, TrainPerf, perf_for

DATA = json.loads((Path(__file__).parent / "data" / "train_mfu.json").read_text())
ROWS = DATA["rows"]
CHECKED = [r for r in ROWS if r["checked"]]
H100_BF16 = 989.5e12  # presets/hardware/H100-SXM.toml, dense
A100_BF16 = 312e12


def _model(setup: dict) -> ModelConfig:
    if "preset" in setup:
        return load_preset(setup["preset"], None)
    return ModelConfig(**{**load_preset(setup["base_preset"], None).model_dump(),
                          **setup["model"]})


def run_row(row: dict, perf: TrainPerf | None = None) -> dict:
    """The row's setup through `train`'s builder: its `time` block."""
    s = row["setup"]
    gpu = load_gpu(s["gpu"], None, None)
    perf = replace(perf or perf_for(gpu), net_bandwidth=s["net_bandwidth"])
    wl = Workload(batch=s["micro_batch"], seq=s["seq"], tp=s["tp"], pp=s["pp"],
                  attention_flops=s["attention_flops"])
    doc = build_train(_model(s), wl, dp=s["dp"], zero=s["zero"], precision=s["precision"],
                      recompute=s["recompute"], grad_accum=s["grad_accum"], global_batch=None,
                      cp=s["cp"], virtual=s["virtual_stages"], attention=s["attention"],
                      gpu=gpu, perf=perf)
    assert doc["training"]["gpus"] == s["tp"] * s["cp"] * s["pp"] * s["dp"]
    return doc["time"]


def _published(row: dict) -> float:
    """The published utilisation from the achieved TFLOP/s per GPU over the dense bf16 peak (the
    rounded percents of the tables agree to ±0.5 %)."""
    peak = H100_BF16 if row["setup"]["gpu"] == "H100-SXM" else A100_BF16
    value = row["published"]["tflops_per_gpu"] * 1e12 / peak
    assert abs(value - row["published"][row["compare"]]) < 0.006
    return value


def test_every_row_cites_its_source_with_a_quote():
    assert {r["id"].split("-")[0] for r in ROWS} == {"llama3", "megatron", "palm"}
    for r in ROWS:
        for key in ("source", "url", "where", "quote", "verified", "verified_via", "published"):
            assert r[key] not in (None, ""), (r["id"], key)
        assert r["url"].startswith("https://arxiv.org/abs/")
        if r["checked"]:
            assert set(r["setup"]) >= {"gpu", "tp", "cp", "pp", "dp", "seq", "micro_batch",
                                       "grad_accum", "recompute", "precision", "attention"}
    palm = next(r for r in ROWS if r["id"].startswith("palm"))
    assert not palm["checked"] and not palm["verified"] and palm["why_unchecked"]
    assert palm["published"] == {"mfu": 0.462, "hfu": 0.578}


@pytest.mark.parametrize("row", [r for r in CHECKED if r["id"].startswith("llama3")],
                         ids=lambda r: r["id"])
def test_llama3_405b_mfu_in_the_published_band(row):
    """Llama 3 405B on H100 (Table 4): each estimate within 5 % of its row, and inside the
    paper's 38–43 % band (as rounded percents: 37.5 % to 43.5 %, 430 TFLOP/s being 43.46 %)."""
    t = run_row(row)
    assert t["mfu"] == pytest.approx(_published(row), rel=0.05)
    assert 0.375 <= t["mfu"] < 0.435
    # MFU is model FLOPs over GPUs × peak × time, and so are the achieved TFLOP/s per GPU
    assert t["model_tflops_per_gpu"] * 1e12 == pytest.approx(t["mfu"] * H100_BF16)
    assert t["hfu"] == t["mfu"]  # no recompute in these runs


def test_megatron_table1_hfu_within_ten_percent():
    """Megatron-LM's Table 1 (GPT 1.7B to 1T on A100, teraFLOP/s by Eq. 3, which counts the
    recompute: compared with HFU): every row within 10 %, the median within 3 %."""
    ratios = []
    for row in (r for r in CHECKED if r["id"].startswith("megatron")):
        t = run_row(row)
        ratios.append(t["hfu"] / _published(row))
        assert t["hfu"] > t["mfu"]
    assert len(ratios) == 10
    assert all(0.9 <= r <= 1.1 for r in ratios), ratios
    assert 0.97 <= statistics.median(ratios) <= 1.03


def _loss(rows: list[dict], g: float, a: float) -> float:
    """The fit's objective: the mean squared log error per source, summed over sources."""
    by: dict[str, list[float]] = {}
    for r in rows:
        t = run_row(r, TrainPerf(gemm_efficiency=g, attention_efficiency=a))
        by.setdefault(r["source"], []).append(math.log(t[r["compare"]] / _published(r)))
    return sum(sum(x * x for x in v) / len(v) for v in by.values())


@pytest.mark.parametrize("gpu", ["H100-SXM", "A100-80GB", None])
def test_the_fitted_efficiencies_are_the_fit(gpu):
    """Each GPU's (gemm_efficiency, attention_efficiency), and TrainPerf's defaults over every
    row, are a minimum of the fit on the 0.01 grid: no neighbour does better."""
    rows = [r for r in CHECKED if gpu is None or r["setup"]["gpu"] == gpu]
    d = TrainPerf()
    g0, a0 = FITTED[gpu] if gpu else (d.gemm_efficiency, d.attention_efficiency)
    best = _loss(rows, g0, a0)
    for dg in (-0.01, 0, 0.01):
        for da in (-0.01, 0, 0.01):
            if dg or da:
                assert _loss(rows, round(g0 + dg, 2), round(a0 + da, 2)) >= best


def _train(**kw):
    m = load_preset(kw.pop("preset", "llama2-7b"), None)
    wl = Workload(batch=kw.pop("batch", 1), seq=kw.pop("seq", 1024), tp=kw.pop("tp", 1),
                  pp=kw.pop("pp", 1))
    gpu = load_gpu(kw.pop("gpu", "H100-SXM"), None, None)
    args = {"dp": 1, "zero": 0, "precision": "mixed", "recompute": "none", "grad_accum": None,
            "global_batch": None, **kw}
    return build_train(m, wl, gpu=gpu, perf=kw.pop("perf", None) or perf_for(gpu),
                       **{k: v for k, v in args.items() if k != "perf"})


def test_step_time_by_hand():
    """Llama-2-7B (D 4096, H 32 of 128, Dff 11008, V 32000, 32 layers), one sequence of
    T = 1024 on one H100, no recompute, FlashAttention: no communication, no bubble.
    GEMMs: forward per layer 2·T·(4·D² + 3·D·Dff), the head 2·T·D·V; backward twice that.
    Attention (the causal lower triangle): QKᵀ and A·V each B·H·T·(T+1)·Dh, backward twice.
    Memory-bound: per layer the two norms and two residual adds [T,D], RoPE of q and k [T,D]
    each, SiLU and gate⊙up [T,Dff]; plus the embedding's and the final norm's [T,D]; bf16,
    read + write forward (2×), two reads + a write backward (3×)."""
    T, D, H, Dh, Dff, V, N = 1024, 4096, 32, 128, 11008, 32000, 32
    gemm = 3 * (N * 2 * T * (4 * D * D + 3 * D * Dff) + 2 * T * D * V)
    attn = 3 * N * 2 * H * T * (T + 1) * Dh
    mem = 5 * 2 * (N * (6 * T * D + 2 * T * Dff) + 2 * T * D)
    g, a = FITTED["H100-SXM"]
    p = TrainPerf()
    want = (gemm / (H100_BF16 * g) + attn / (H100_BF16 * a)
            + mem / (3.35e12 * p.memory_efficiency))
    t = _train()["time"]
    assert t["step_s"] == pytest.approx(want, rel=1e-12)
    assert t["bubble_fraction"] == 0 and t["dp_exposed_s"] == 0
    st = t["per_stage"][0]
    assert st["tp_s"] == st["cp_exposed_s"] == st["pp_s"] == st["ep_s"] == 0


def test_rates_follow_from_the_step_time(cli):
    doc = json.loads(cli("train", "--preset", "llama3-8b", "--seq", "4096", "--dp", "8",
                         "--global-batch", "256", "--gpu", "h100-sxm", "--recompute", "full",
                         "--train-tokens", "15e12", "--json").out)
    t, tr, fl = doc["time"], doc["training"], doc["flops"]["per_step"]
    assert t["tokens_per_s"] == pytest.approx(tr["tokens_per_step"] / t["step_s"])
    assert t["tokens_per_day"] == pytest.approx(t["tokens_per_s"] * 86400)
    assert t["tokens_per_s_per_gpu"] == pytest.approx(t["tokens_per_s"] / tr["gpus"])
    assert t["days"] == pytest.approx(15e12 / t["tokens_per_s"] / 86400)
    assert t["gpu_hours"] == pytest.approx(t["days"] * 24 * tr["gpus"])
    assert t["steps"] == -(-15 * 10**12 // tr["tokens_per_step"])
    model = fl["forward_flops"] + fl["backward_flops"]
    assert t["mfu"] == pytest.approx(model / (tr["gpus"] * H100_BF16 * t["step_s"]))
    assert t["hfu"] == pytest.approx((model + fl["recompute_flops"])
                                     / (tr["gpus"] * H100_BF16 * t["step_s"]))
    assert t["hfu"] > t["mfu"]


def test_time_falls_with_more_gpus_at_fixed_work():
    """The same global batch of 256 sequences on 16, 32 and 64 data-parallel ranks (each group
    spanning nodes: the gradient reduce-scatter at the network's bandwidth)."""
    steps = [_train(dp=dp, global_batch=256)["time"]["step_s"] for dp in (16, 32, 64)]
    assert steps[0] > steps[1] > steps[2]
    # and on more tensor-parallel ranks (the same micro-batches, TP's collectives added)
    assert _train(tp=2)["time"]["step_s"] < _train(tp=1)["time"]["step_s"]


def test_bubble_grows_with_p_and_shrinks_with_v():
    b = [_train(pp=p, grad_accum=8)["time"] for p in (1, 2, 4, 8)]
    assert [x["bubble_fraction"] for x in b] == [0, 1 / 9, 3 / 11, 7 / 15]
    assert all(x["micro_batch_slots"] == 8 + p - 1 for x, p in zip(b, (1, 2, 4, 8), strict=True))
    v = _train(pp=4, grad_accum=8, virtual=2)["time"]
    assert v["bubble_fraction"] == 3 / 19 and v["micro_batch_slots"] == 8 + 3 / 2
    assert v["step_s"] < b[2]["step_s"]


def test_cp_ledger_and_split_by_hand():
    """Llama-3-8B (H_kv 8 of Dh 128, 32 layers), T = 8192 over cp = 4 and tp = 2: a rank holds
    2048 tokens; its K (or V) chunk is [1, 2048, 8/2 · 128] bf16 = 2,097,152 B; per layer the
    forward passes K and V (cp−1) = 3 times, the backward K, V, dK and dV: twice that."""
    doc = _train(preset="llama3-8b", seq=8192, tp=2, cp=4, grad_accum=2)
    cp = doc["communication"]["cp"]
    chunk = 2048 * 4 * 128 * 2
    assert cp["chunk_bytes"] == chunk and cp["tokens_per_rank"] == 2048
    assert cp["forward_bytes_per_layer"] == 2 * 3 * chunk
    assert cp["backward_bytes_per_layer"] == 4 * 3 * chunk
    assert cp["bytes_per_step"] == 6 * 3 * chunk * 32 * 2
    assert doc["training"]["gpus"] == 8
    # TP's collectives carry the rank's 2048 tokens: (t−1)·⌈2048·4096/2⌉ elements, bf16
    assert doc["communication"]["tp"]["collective_bytes"] == 1 * 2048 * 4096 // 2 * 2
    # a rank's activations and FLOPs are 1/cp of the whole sequence's
    one = _train(preset="llama3-8b", seq=8192, tp=2, grad_accum=2)
    assert doc["memory"]["activations"]["bytes_per_layer"] * 4 == \
        one["memory"]["activations"]["bytes_per_layer"]
    s4, s1 = doc["time"]["per_stage"][0], one["time"]["per_stage"][0]
    assert s4["gemm_s"] * 4 == pytest.approx(s1["gemm_s"])
    assert s4["attention_s"] * 4 == pytest.approx(s1["attention_s"])
    # recompute re-runs the attention core, and with it the forward's ring passes
    sel = _train(preset="llama3-8b", seq=8192, tp=2, cp=4, recompute="selective")
    assert sel["communication"]["cp"]["recompute_bytes_per_layer"] == 2 * 3 * chunk


def test_tp_vocab_parallel_ledger_by_hand():
    """Llama-2-7B over tp = 4, pp = 2, T = 1024: the first stage's rank adds the embedding's
    reduce-scatter (forward) and all-gather (backward) of [s,b,h]; the last stage's the LM
    head's input all-gather and reduce-scatter, and the cross-entropy's three fp32
    all-reduces of [s,b] (max, sum of exps, target logit), each 2·(t−1)·⌈s·b/t⌉·4 B."""
    from shapecalc.train.ledgers import tp_ledger

    one = 3 * (1024 * 4096 // 4) * 2
    first = tp_ledger(1, 1024, 4096, 4, 16, 1, 2, True, False)
    last = tp_ledger(1, 1024, 4096, 4, 16, 1, 2, False, True)
    assert first["forward_bytes_per_micro_batch"] == 4 * one * 16 + one
    assert first["backward_bytes_per_micro_batch"] == 4 * one * 16 + one
    loss = 3 * 2 * 3 * 256 * 4
    assert last["loss_forward_bytes"] == loss and last["loss_backward_bytes"] == 0
    assert last["forward_bytes_per_micro_batch"] == 4 * one * 16 + one + loss
    assert last["backward_bytes_per_micro_batch"] == 4 * one * 16 + one
    doc = _train(tp=4, pp=2, grad_accum=3)
    assert doc["communication"]["tp"]["bytes_per_step"] in (
        3 * (8 * one * 16 + 2 * one), 3 * (8 * one * 16 + 2 * one + loss))


def test_eager_attention_is_slower_and_counts_the_whole_square():
    flash, eager = (_train(seq=4096, attention=a)["time"] for a in ("flash", "eager"))
    f, e = flash["per_stage"][0], eager["per_stage"][0]
    assert e["memory_bound_s"] > f["memory_bound_s"]  # scale, mask and softmax written
    assert e["attention_s"] > f["attention_s"]  # the whole [T,T], not its lower triangle
    assert eager["step_s"] > flash["step_s"]


@pytest.mark.parametrize("args,field", [
    (["--cp", "3", "--seq", "1024"], "cp"), (["--cp", "0"], "cp"),
    (["--virtual-stages", "2"], "virtual_stages"),
    (["--pp", "2", "--virtual-stages", "0"], "virtual_stages"),
    (["--train-tokens", "1e12"], "train-tokens"),
    (["--gpu", "h100-sxm", "--train-tokens", "lots"], "train-tokens"),
    (["--gpu", "h100-sxm", "--train-tokens", "0"], "train-tokens"),
    (["--gpu", "h100-sxm", "--train-tokens", "1.5"], "train-tokens"),
    (["--gpu", "h100-sxm", "--train-tokens", "\uff13"], "train-tokens"),
    (["--gpu", "h100-sxm", "--train-tokens", "1e\u0661\u0662"], "train-tokens"),
    (["--gpu", "h100-sxm", "--attention", "sdpa"], "attention"),
    (["--gpu", "h100-sxm", "--perf", "speed=2"], "perf"), (["--perf", "net_bandwidth=1e9"], "perf"),
    (["--gpu", "h100-sxm", "--perf", "gemm_efficiency=1.5"], "perf.gemm_efficiency"),
    (["--gpu", "h100-sxm", "--perf", "net_bandwidth=0"], "perf.net_bandwidth"),
])
def test_bad_inputs_exit_2_with_one_line(cli, args, field):
    r = cli("train", *args)
    assert r.code == 2, (r.out, r.err)
    assert r.out == "" and len(r.err.strip().splitlines()) == 1
    assert field in r.err and "Traceback" not in r.err


def test_text_shows_the_step_time_and_days(cli):
    r = cli("train", "--preset", "llama3-8b", "--seq", "4096", "--tp", "2", "--cp", "2",
            "--pp", "2", "--grad-accum", "4", "--gpu", "h100-sxm", "--train-tokens", "1e12")
    assert r.code == 0, r.err
    for text in ("Step time", "MFU", "HFU", "tokens/day", "days", "GPU-hours", "CP (cp=2",
                 "vocab-parallel", "left out: the optimizer step"):
        assert text in r.out, text


@pytest.mark.parametrize("cp", [1, 2])
def test_llama3_70b_model_state_of_every_stage_by_hand(cli, cp):
    """The must-show command (`train --preset llama3-70b --seq 8192 --tp 8 --pp 4 --dp 2
    --zero 1 --gpu h100-sxm`), every pipeline stage. By hand: one TP rank of a layer holds q and
    o D·D/8 each, k and v D·H_kv·Dh/8 each, the SwiGLU FFN 3·D·Dff/8, both norms 2·D; 20 layers
    a stage; the first adds its V/8 rows of the embedding, the last the final norm D and its
    V/8 rows of the LM head. Mixed precision: bf16 weights and gradients 2 B each held whole,
    fp32 master + AdamW m + v 12 B sharded by ZeRO-1 over the dp·cp ranks (with cp = 2 the
    weights are replicated over cp, and Megatron's distributed optimizer shards over dp·cp)."""
    D, Hkv, Dh, Dff, V = 8192, 8, 128, 28672, 128256
    layer = 2 * D * D // 8 + 2 * D * Hkv * Dh // 8 + 3 * D * Dff // 8 + 2 * D
    stages = [20 * layer + V * D // 8, 20 * layer, 20 * layer, 20 * layer + D + V * D // 8]
    args = ["train", "--preset", "llama3-70b", "--seq", "8192", "--tp", "8", "--pp", "4",
            "--dp", "2", "--zero", "1", "--gpu", "h100-sxm", "--cp", str(cp)]
    doc = json.loads(cli(*args, "--json").out)
    assert doc["training"]["gpus"] == 64 * cp
    text = cli(*args).out
    for st, P in zip(doc["memory"]["per_stage"], stages, strict=True):
        terms = {t["term"]: t["bytes"] for t in st["model_state"]["terms"]}
        want = {"weights": 2 * P, "gradients": 2 * P, "optimizer": 12 * -(-P // (2 * cp))}
        assert terms == want
        assert st["model_state"]["bytes"] == sum(want.values())
        for b in want.values():  # the text prints every term of every stage
            assert f"{b:,d}" in text


def test_ep_ledger_by_hand(cli):
    """Mixtral-8x7B (k = 2, D = 4096, 32 MoE layers), T = 4096 over cp = 2 and tp = 2 (sequence
    parallel): a rank dispatches its own 4096/2/2 = 1024 tokens, each to k experts, and
    combines them back: 2 · 1024 · 2 · 4096 bf16 values per layer forward, as many backward."""
    doc = json.loads(cli("train", "--preset", "mixtral-8x7b", "--seq", "4096", "--tp", "2",
                         "--cp", "2", "--ep", "2", "--dp", "2", "--gpu", "h100-sxm",
                         "--json").out)
    ep = doc["communication"]["ep"]
    a2a = 2 * (1024 * 2 * 4096) * 2
    assert ep["forward_bytes_per_layer"] == ep["backward_bytes_per_layer"] == a2a
    assert ep["bytes_per_step"] == 2 * a2a * 32
    assert doc["time"]["per_stage"][0]["ep_s"] > 0


def _worked_plan() -> list[tuple[list[str], list[str]]]:
    """The worked training plan (docs/guides/training.md): each `$ shapecalc train …` command
    (`...` standing for the first command's arguments) and the output lines printed under it."""
    text = (Path(__file__).parents[1] / "docs" / "guides" / "training.md").read_text(
        encoding="utf-8")
    section = text.split("## A worked training plan", 1)[1].split("\n## ", 1)[0]
    lines = section.splitlines()
    runs: list[tuple[list[str], list[str]]] = []
    base: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if not line.startswith("$ shapecalc train"):
            i += 1
            continue
        cmd = line
        while cmd.endswith("\\"):
            i += 1
            cmd = cmd[:-1] + " " + lines[i].strip()
        args = cmd.split()[3:]
        if args and args[0] == "...":
            args = base + args[1:]
        base = base or args
        out = []
        i += 1
        while i < len(lines) and lines[i].startswith("    ") and \
                not lines[i].strip().startswith("$"):
            out.append(lines[i].strip())
            i += 1
        runs.append((args, out))
    return runs


def test_the_readme_worked_plan_is_real_output(cli):
    """Every output line the README's worked training plan shows is printed by its command
    (after a change to the numbers, re-run the commands and paste their lines)."""
    runs = _worked_plan()
    assert len(runs) == 4 and all(out for _, out in runs)
    for args, shown in runs:
        r = cli("train", *args)
        # a plan the README shows not fitting exits 1 (README: Exit status), its report printed
        assert r.code == (1 if "NOT fit" in r.out else 0), r.err
        printed = {x.strip() for x in r.out.splitlines()}
        for line in shown:
            assert line in printed, (args, line)
