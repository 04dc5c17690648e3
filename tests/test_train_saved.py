"""The exact activation memory against PyTorch: what shapecalc says autograd saves for the backward
(train/saved.py) equals what `torch.autograd.graph.saved_tensors_hooks` records around a training
step's forward and loss, on tiny really-run llama (GQA; MHA with biases, tied), qwen2, gpt2 and
mixtral models at three (B, T), in fp32 and bf16, eager and flash (SDPA's CPU flash kernel)
attention, without and with transformers' gradient checkpointing: the saved bytes (parameters
apart, shared storage once), the checkpoint's held arguments, the resident and the peak bytes.

The numbers in tests/data/train_saved_reference.json were measured with torch 2.13.0 and
transformers 5.24.0 by tests/torch_reference/measure_train_saved.py; the live tests measure again
when torch and transformers are installed.
"""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shapecalc.model.config import ModelConfig, ShapecalcError, Workload
from shapecalc.train.activations import saved_bytes
from shapecalc.train.saved import saved_tensors

REF = json.loads((Path(__file__).parent / "data" / "train_saved_reference.json").read_text())
CASES = {c["name"]: c for c in REF["cases"]}
# the reference's tiny Llama (D=64, H=4, H_kv=2, Dh=16, Dff=176, N=3, N_vocab=1000)
LLAMA = ModelConfig(vocab_size=1000, d_model=64, n_layers=3, n_heads=4, n_kv_heads=2,
                    head_dim=16, d_ff=176, ffn="swiglu", norm="rmsnorm", positions="rope")


def _wl(run: dict) -> Workload:
    return Workload(batch=run["batch"], seq=run["seq"], dtype=run["dtype"])


def _ours(m: ModelConfig, run: dict) -> dict:
    return saved_bytes(m, _wl(run), "torch" if run["checkpointing"] else "none",
                       run["attention"])


def _check(m: ModelConfig, run: dict) -> None:
    got = _ours(m, run)
    held = sum(x["bytes"] for x in got["held"] if not x["saved"])
    assert got["resident_bytes"] - held == run["saved_bytes"], run
    assert held == run["held_bytes"], run
    assert got["resident_bytes"] == run["resident_bytes"], run
    assert got["peak_bytes"] == run["peak_bytes"], run


def test_the_reference_covers_families_shapes_dtypes_attention_and_checkpointing():
    assert not REF["errors"]
    assert {c["model_type"] for c in REF["cases"]} == {"llama", "gpt2", "qwen2", "mixtral"}
    for case in REF["cases"]:
        runs = case["runs"]
        shapes = {(r["batch"], r["seq"]) for r in runs}
        assert len(shapes) >= 3 and all(b != t for b, t in shapes)
        assert {(r["dtype"], r["attention"], r["checkpointing"]) for r in runs} == {
            (d, a, c) for d in ("fp32", "bf16") for a in ("eager", "flash") for c in (False, True)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_saved_bytes_equal_saved_tensors_hooks(name, hf_model):
    m = hf_model(CASES[name])
    for run in CASES[name]["runs"]:
        _check(m, run)


def _multiset(tensors: list[dict]) -> Counter:
    return Counter((t["dtype"], t["bytes"]) for t in tensors)


@pytest.mark.parametrize("name", sorted(CASES))
def test_tensor_by_tensor(name, hf_model):
    """The first layer's and the outside tensors, one by one (dtype and storage bytes): each
    measured storage is one of shapecalc's counted tensors. Mixtral's experts run per expert on
    its own rows (sizes that depend on the routing): those are compared in total."""
    m = hf_model(CASES[name])
    for run in CASES[name]["runs"]:
        if run["checkpointing"] or "tensors" not in run:
            continue
        mine = [t for t in _ours(m, run)["tensors"] if t["bytes"] and t["kind"] in (None, 0)]
        mine = [{"dtype": t["dtype"].replace("bf16", "bfloat16").replace("fp32", "float32"),
                 "bytes": t["bytes"], "experts": t["role"].startswith("moe.experts")}
                for t in mine]
        theirs = [dict(t, experts=".experts" in t["module"]) for t in run["tensors"]]
        for part in (False, True):
            a = [t for t in mine if t["experts"] == part]
            b = [t for t in theirs if t["experts"] == part]
            if part:
                assert sum(t["bytes"] for t in a) == sum(t["bytes"] for t in b), run["dtype"]
            else:
                assert _multiset(a) == _multiset(b), (run["dtype"], run["attention"])


def test_one_llama_layer_by_hand():
    """One layer of the tiny Llama, fp32, eager, B=2, T=7 (B·T = 14 rows), written out:
    attention norm: x, x̂ = x·rsqrt, and γ·x̂ (read by q, k, v), [14,64] each, rsqrt [14,1];
    q (a contiguous copy for the bmm), k and v repeated to H=4 heads: [2,4,7,16] = 896 each;
    softmax [2,4,7,7] = 392; merged heads for WO [14,64]; FFN norm: x, x̂, γ·x̂ and rsqrt;
    SwiGLU: gate, SiLU(gate), up, their product: [14,176] = 2464 each. 4 bytes an element."""
    d, rows, heads, scores, ff = 64, 14, 896, 392, 2464
    layer = 4 * (3 * rows * d + rows + 3 * heads + scores + rows * d
                 + 3 * rows * d + rows + 4 * ff)
    assert layer == 76944
    r = saved_bytes(LLAMA, Workload(batch=2, seq=7, dtype="fp32"))
    assert r["per_layer"] == {"0": layer}
    # the same in the seeds' symbols: six [B,T,D] of the norms, two rsqrt, q, k, v and the
    # merged heads, the softmax, SwiGLU's four
    assert r["per_layer_none_formula"] == {
        "0": "24·B·T·D + 8·B·T + 16·B·H·T·Dh + 4·B·H·T² + 16·B·T·Dff"}
    # outside: ids [2,7] int64, cos and sin [7,16]; final norm: x, x̂, rsqrt, γ·x̂ (the head's
    # input); the loss: fp32 log-probabilities [14,1000], targets [14] int64, a 4-byte weight
    outside = 8 * 14 + 2 * 4 * 7 * 16 + 4 * (3 * rows * d + rows) + 4 * 14 * 1000 + 8 * 14 + 4
    assert r["outside_bytes"] == outside
    assert r["resident_bytes"] == outside + 3 * layer == 298764
    # bf16: each of the two norms keeps an fp32 copy of x (4 bytes), the fp32 rsqrt, x̂ and γ·x̂
    # (2 each); q, k, v, merged heads and the four SwiGLU tensors in 2 bytes; the softmax in fp32
    # and its bf16 cast for A·V
    bf = saved_bytes(LLAMA, Workload(batch=2, seq=7, dtype="bf16"))["per_layer"]["0"]
    norms = 2 * (4 * rows * d + 4 * rows + 2 * rows * d + 2 * rows * d)
    assert bf == norms + 2 * (3 * heads + rows * d) + (4 + 2) * scores + 2 * 4 * ff == 43680


def test_the_convention_and_the_parameters_apart():
    r = saved_bytes(LLAMA, Workload(batch=2, seq=7, dtype="fp32"))
    assert r["convention"] == "autograd, transformers eager"
    params = r["params_saved"]
    assert params and all(p["param"] and p["bytes"] == 0 for p in params)
    assert not any(t["param"] for t in r["tensors"])


def test_bad_choices_name_the_field():
    with pytest.raises(ShapecalcError, match="attention"):
        saved_tensors(LLAMA, Workload(batch=1, seq=4), "paged")
    with pytest.raises(ShapecalcError, match="recompute"):
        saved_bytes(LLAMA, Workload(batch=1, seq=4), "some")


@given(b=st.integers(1, 6), t=st.integers(2, 40), dtype=st.sampled_from(["fp32", "bf16"]))
def test_properties(b, t, dtype):
    """Affine in B (B ≥ 2: one row's labels are a view of the padded [1, T+1]; RoPE's cos and
    sin and the loss's weight do not grow with B); selective ≤ none, full ≤ selective; flash
    keeps no [T,T] term: its bytes grow linearly in T, eager's do not."""
    def res(bb, tt, how="none", attn="eager"):
        return saved_bytes(LLAMA, Workload(batch=bb, seq=tt, dtype=dtype), how,
                           attn)["resident_bytes"]

    if b >= 2:
        assert res(3 * b, t) - res(2 * b, t) == res(2 * b, t) - res(b, t)
    assert res(b, t, "full") <= res(b, t, "selective") <= res(b, t, "none")
    assert res(b, t, "selective", "flash") == res(b, t, "none", "flash")
    f = [res(2, x, "none", "flash") for x in (t, t + 1, t + 2)]
    assert f[2] - f[1] == f[1] - f[0]
    e = [res(2, x) for x in (t, t + 1, t + 2)]
    assert e[2] - e[1] > e[1] - e[0]  # eager's [T,T] softmax: a T² term


def _module():
    path = Path(__file__).parent / "torch_reference" / "measure_train_saved.py"
    spec = importlib.util.spec_from_file_location("measure_train_saved", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("dtype,attention", [("bf16", "eager"), ("fp32", "flash")])
def test_live_saved_tensors_hooks(dtype, attention, hf_model, live_measure):
    """llama_gqa at its first (B, T), with and without checkpointing (all: -m slow)."""
    mod = _module()
    case = CASES["llama_gqa"]
    kwargs = {k: v for k, v in case["hf_config"].items() if k != "model_type"}
    live = mod.measure_case(case["name"], case["model_type"], kwargs, shapes=mod.SHAPES[:1],
                            dtypes=(dtype,), attentions=(attention,))
    stored = [r for r in case["runs"] if (r["dtype"], r["attention"]) == (dtype, attention)
              and (r["batch"], r["seq"]) == tuple(mod.SHAPES[0])]
    assert live["runs"] == stored
    for run in live["runs"]:
        _check(hf_model(live), run)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_live_every_case(name, hf_model, live_measure):
    live = live_measure("measure_train_saved", CASES[name])
    m = hf_model(live)
    for run in live["runs"]:
        _check(m, run)


def test_tensor_parallel_rule_by_hand():
    """tp=2 with sequence parallelism, the tiny Llama, fp32, eager, B=2, T=7: inside the
    tensor-parallel region a rank keeps H/2 = 2 heads (H_kv/2 = 1, repeated to 2), Dff/2 = 88
    and N_vocab/2 = 500 columns at all T = 7 tokens; outside it (norms, the linears' inputs) its
    ⌈7/2⌉ = 4 tokens; the ids, cos, sin and targets are replicated."""
    wl = Workload(batch=2, seq=7, dtype="fp32", tp=2)
    r = saved_bytes(LLAMA, wl, tp=2)
    norm = 4 * (3 * 2 * 4 * 64 + 2 * 4)  # x, x̂, γ·x̂ [2,4,64] and rsqrt [2,4,1]
    attn = 4 * (4 * 2 * 2 * 7 * 16 + 2 * 2 * 7 * 7)  # q, k, v, merged heads; softmax [2,2,7,7]
    ffn = 4 * 4 * 2 * 7 * 88
    assert r["per_layer"] == {"0": 2 * norm + attn + ffn} == {"0": 40016}
    outside = 8 * 14 + 2 * 4 * 7 * 16 + norm + 4 * 14 * 500 + 8 * 14 + 4
    assert r["outside_bytes"] == outside
    assert r["resident_bytes"] == outside + 3 * 40016
    # the whole model's over 2 ranks: the replicated and the odd T's ⌈7/2⌉ make a rank's more
    # than half
    assert 2 * r["resident_bytes"] > saved_bytes(LLAMA, wl.model_copy(update={"tp": 1}))[
        "resident_bytes"]


def test_recompute_peaks_by_hand():
    """Full recompute of the tiny Llama (fp32, eager, B=2, T=7): each layer keeps its input
    [2,7,64] (3584 B); the peak is while the last layer goes back: the ids, the three inputs
    and that layer's recomputed tensors (76,944 B less its input, already held), the head's and
    the loss's freed by then — or the resident bytes, if more. Selective: the resident bytes
    without the [T,T] softmax (1568 B a layer), and at the peak one layer's softmax again."""
    wl = Workload(batch=2, seq=7, dtype="fp32")
    full = saved_bytes(LLAMA, wl, "full")
    head = 4 * (3 * 14 * 64 + 14) + 4 * 14 * 1000 + 8 * 14 + 4
    assert full["head_bytes"] == head
    assert full["resident_bytes"] == 112 + 3 * 3584 + head
    assert full["peak_bytes"] == max(full["resident_bytes"], 112 + 3 * 3584 + 76944 - 3584)
    sel = saved_bytes(LLAMA, wl, "selective")
    assert sel["resident_bytes"] == 298764 - 3 * 1568
    assert sel["peak_bytes"] == sel["resident_bytes"]  # the head is more than one softmax
    torch = saved_bytes(LLAMA, wl, "torch", "eager")
    held = {x["name"]: x["bytes"] for x in torch["held"]}
    assert held == {"attention mask": 4 * 2 * 49, "cos": 448, "sin": 448, "position ids": 56}
    assert torch["resident_bytes"] == full["resident_bytes"] + sum(held.values())


def test_train_report_reads_the_exact_count(cli):
    """`train`: per pipeline stage, (in-flight − 1) micro-batches resident + one at its peak
    (saved_bytes of that stage's layers), Megatron's closed form beside it under its own key."""
    from shapecalc.inputs.sources import load_preset

    out = cli("train", "--preset", "llama2-7b", "--seq", "1024", "--micro-batch", "2", "--tp",
              "2", "--pp", "4", "--grad-accum", "6", "--recompute", "selective", "--attention",
              "eager", "--json")
    assert out.code == 0, out.err
    doc = json.loads(out.out)
    mem = doc["memory"]
    st0 = mem["per_stage"][0]
    one = saved_bytes(load_preset("llama2-7b"), Workload(batch=2, seq=1024, dtype="bf16",
                                                        tp=2), "selective", "eager", tp=2,
                      layers=range(8), first=True, last=False)
    assert st0["micro_batches_in_flight"] == 4
    assert st0["activation_bytes"] == 3 * one["resident_bytes"] + one["peak_bytes"]
    assert st0["activation_resident_bytes"] == 4 * one["resident_bytes"]
    assert st0["activation_bytes_megatron"] == mem["activations"]["bytes_per_layer"] * 8 * 4
    assert st0["bytes"] == st0["model_state"]["bytes"] + st0["activation_bytes"]
    saved = mem["saved"]
    assert saved["convention"] == "autograd, transformers eager" and saved["tp_rule"]
    assert saved["pipeline_stages"][0]["peak_bytes"] == one["peak_bytes"]
    text = cli("train", "--preset", "llama2-7b", "--seq", "1024", "--tp", "2").out
    assert "exact (what autograd saves)" in text and "Megatron" in text
    assert "flash attention keeps no [T,T] tensor" in text


def test_the_difference_from_megatron_is_explained(cli):
    """Megatron's full recompute keeps each layer's input [s,b,h]: equal to the exact per-layer
    count (bf16, tp 2: 2·s·b·h/t); without recompute the reasons are listed."""
    base = ("train", "--preset", "llama2-7b", "--seq", "1024", "--tp", "2", "--json")
    full = json.loads(cli(*base, "--recompute", "full").out)["memory"]
    assert full["saved"]["per_layer"] == {"0": full["activations"]["bytes_per_layer"]}
    assert full["saved"]["per_layer"]["0"] == 2 * 1024 * 1 * 4096 // 2  # 2·s·b·h/t bytes
    assert "both keep each layer's input" in full["saved"]["difference"]
    none = json.loads(cli(*base, "--attention", "eager").out)["memory"]["saved"]["difference"]
    assert "four [s,b,Dff] tensors" in none and "6 bytes a score" in none
