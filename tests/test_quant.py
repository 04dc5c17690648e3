"""Quantized checkpoints, by hand: each format's tensors on small matrices (the arithmetic written
out), a tiny model traced tensor by tensor, per rank and per pipeline stage, the closed form and
fit reading the same bytes, and every bad input refused in one line naming its key."""

from __future__ import annotations

import json

import pytest

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hardware import load_gpu
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import ModelConfig, ShapecalcError, Workload, make_workload
from shapecalc.model.quant import source_fields, weight_format
from shapecalc.model.quantization import Quantization, nbytes, pieces
from shapecalc.plan.cases import closed_form_for
from shapecalc.plan.fit import fit
from shapecalc.plan.memory import stage_bytes
from shapecalc.plan.options import PlanOptions


def total(q: Quantization, out: int, inp: int, experts: int | None = None) -> int:
    return sum(nbytes(shape, dt) for _, shape, dt, _ in pieces(q, "w", out, inp, experts))


# ── each format on one small matrix ──────────────────────────────────────────────────────────────


def test_fp8_blocks_by_hand():
    q = Quantization(format="fp8-block", block=(128, 128))
    # [300, 200]: 60,000 e4m3 bytes; ⌈300/128⌉ = 3 × ⌈200/128⌉ = 2 fp32 scale_inv = 24 bytes
    assert total(q, 300, 200) == 300 * 200 + 3 * 2 * 4 == 60_024
    shapes = {s: sh for s, sh, _, _ in pieces(q, "w", 300, 200)}
    assert shapes == {"weight": (300, 200), "weight_scale_inv": (3, 2)}
    # 8 experts: 8 × each
    assert total(q, 300, 200, 8) == 8 * 60_024
    # per tensor (weight_block_size null): one fp32 scale; static activations: one more
    assert total(Quantization(format="fp8-block"), 300, 200) == 60_000 + 4
    assert total(Quantization(format="fp8-block", block=(128, 128), static_activations=True),
                 300, 200) == 60_024 + 4
    # ue8m0 scales stored as e8m0 bytes: 6 × 1
    assert total(Quantization(format="fp8-block", block=(128, 128), scale_dtype="e8m0"),
                 300, 200) == 60_000 + 6


def test_mxfp4_by_hand():
    q = Quantization(format="mxfp4")
    # [64, 96]: 96/32 = 3 blocks a row; blocks [64, 3, 16] uint8 = 3,072 (64·96/2), e8m0 scales
    # [64, 3] = 192
    assert total(q, 64, 96) == 64 * 3 * 16 + 64 * 3 == 3_264
    assert total(q, 64, 96, 4) == 4 * 3_264
    with pytest.raises(ShapecalcError, match="32 does not divide the input width 100"):
        total(q, 64, 100)


def test_nvfp4_by_hand():
    q = Quantization(format="nvfp4")
    # [32, 48]: weight [32, 24] uint8 = 768; e4m3 weight_scale [32, 3] = 96; fp32
    # weight_scale_2 and input_scale: 4 + 4
    assert total(q, 32, 48) == 768 + 96 + 4 + 4 == 872
    with pytest.raises(ShapecalcError, match="16 does not divide the input width 40"):
        total(q, 32, 40)


def test_gptq_by_hand():
    q = Quantization(format="gptq", bits=4, group_size=32)
    # [out 64, in 128], 8 values an int32: qweight [16, 64] = 4,096; qzeros [128/32 = 4, 64/8 = 8]
    # = 128; fp16 scales [4, 64] = 512; g_idx [128] int32 = 512
    assert total(q, 64, 128) == 4_096 + 128 + 512 + 512 == 5_248
    # 8 bits, 4 values an int32: qweight [32, 64] = 8,192; qzeros [4, 16] = 256
    assert total(Quantization(format="gptq", bits=8, group_size=32), 64, 128) == (
        8_192 + 256 + 512 + 512)
    # group_size -1 (null): one group per row
    assert total(Quantization(format="gptq", bits=4), 64, 128) == 4_096 + 32 + 128 + 512
    with pytest.raises(ShapecalcError, match="group_size 32 does not divide the input width 100"):
        total(q, 64, 100)


def test_awq_by_hand():
    q = Quantization(format="awq", bits=4, group_size=32)
    # gemm: qweight [in 128, out/8 = 8] int32 = 4,096; qzeros [4, 8] = 128; fp16 scales [4, 64]
    # = 512; no g_idx
    assert total(q, 64, 128) == 4_096 + 128 + 512 == 4_736


def test_bnb_nf4_by_hand():
    # [64, 100]: 6,400 values; packed weight [3,200, 1]; 100 blocks of 64
    plain = Quantization(format="bnb-nf4", double_quant=False)
    state = '{"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [64, 100]}'
    # fp32 absmax 100·4 = 400, the 16-value fp32 code book 64, the quant_state JSON
    assert total(plain, 64, 100) == 3_200 + 400 + 64 + len(state)
    q = Quantization(format="bnb-nf4")  # double quantization, as QLoRA runs it
    # uint8 absmax 100; nested fp32 absmax ⌈100/256⌉ = 1 → 4; nested code book 256·4 = 1,024;
    # the offset is written with repr: a float32 mean takes 20 characters, as this one does
    state2 = ('{"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [64, 100], '
              '"nested_blocksize": 256, "nested_dtype": "float32", '
              '"nested_offset": 0.019336700439453125}')
    assert total(q, 64, 100) == 3_200 + 100 + 4 + 1_024 + 64 + len(state2)


def test_bnb_int8_by_hand():
    # LLM.int8: int8 [64, 100] = 6,400; fp32 SCB per row 256; the weight_format byte
    assert total(Quantization(format="bnb-int8"), 64, 100) == 6_400 + 256 + 1


# ── a tiny model, tensor by tensor ───────────────────────────────────────────────────────────────

FP8 = Quantization(format="fp8-block", block=(128, 128))
TINY = dict(vocab_size=1000, d_model=256, n_layers=2, n_heads=2, d_ff=384, ffn="swiglu",
            norm="rmsnorm", positions="rope")


def tiny(**q) -> ModelConfig:
    return ModelConfig(**TINY, quantization=q.get("quantization", FP8))


def test_a_tiny_fp8_model_by_hand():
    m = tiny()
    # a layer: 2 bf16 norms 2·256·2 = 1,024; q, k, v, o [256, 256]: 65,536 + 2·2 scales ·4 = 65,552
    # each; gate, up [384, 256] and down [256, 384]: 98,304 + 3·2 ·4 = 98,328 each
    layer = 1_024 + 4 * 65_552 + 3 * 98_328
    # the embedding, the final norm and the LM head stay bf16
    whole = 2 * layer + 1000 * 256 * 2 + 256 * 2 + 1000 * 256 * 2
    doc = build_trace(m, Workload(batch=1, seq=4, dtype="fp8", pp=2))
    t = doc["totals"]
    assert t["weight_bytes"] == whole == 2_140_944
    assert t["weight_format"].startswith("fp8-block")
    assert sum(x["bytes"] for x in t["weight_tensors"]) == whole
    assert sum(t["weight_bytes_breakdown"].values()) == whole
    assert t["weight_bytes_breakdown"]["scales"] == 2 * (4 * 16 + 3 * 24)
    # two stages: a layer and the embedding; a layer, the final norm and the head
    assert doc["parallel"]["pp"]["weight_bytes_per_stage"] == [
        layer + 512_000, layer + 512 + 512_000]
    # tp = 2, one rank: q, k, v [256 → 128] 32,768 + 1·2·4; o [128 → 256] 32,768 + 2·1·4; gate,
    # up [256 → 192] 49,152 + 2·2·4; down [192 → 256] 49,152 + 2·2·4; norms whole; the vocab
    # tables ⌈1000/2⌉ = 500 rows
    rank_layer = 1_024 + 4 * 32_776 + 3 * 49_168
    rank = build_trace(m, Workload(batch=1, seq=4, dtype="fp8", tp=2))["parallel"]["tp"]
    assert rank["weight_bytes_per_rank"] == 2 * rank_layer + 2 * 500 * 256 * 2 + 512 == 1_071_776


def test_closed_form_and_fit_read_the_same_bytes():
    m = tiny()
    gpu, opts = load_gpu("h100-sxm"), PlanOptions()
    for tp, pp in ((1, 1), (2, 1), (2, 2), (1, 2)):
        wl = Workload(batch=2, seq=64, dtype="fp8", tp=tp, pp=pp)
        doc = build_trace(m, wl)
        cf = closed_form_for(m, wl)
        got = cf.at(2, 64, "prefill", tp, pp, "fp8")
        assert got["weight_bytes"] == doc["totals"]["weight_bytes"]
        assert got["weight_bytes_per_rank"] == doc["parallel"]["tp"]["weight_bytes_per_rank"]
        stages = stage_bytes(cf, tp, pp, got, 8, 16)
        if tp == 1:  # the trace's pipeline ledger is the whole model's
            assert [w for _, w, _ in stages] == doc["parallel"]["pp"]["weight_bytes_per_stage"]
        if pp == 1:
            assert stages[0][1] == doc["parallel"]["tp"]["weight_bytes_per_rank"]
        assert fit(m, wl, gpu, opts)["memory_per_rank"]["weights"] == max(
            (w + kv, w) for _, w, kv in stages)[1]


def test_experts_under_expert_parallelism():
    m = load_preset("gpt-oss-20b-mxfp4")
    one = build_trace(m, Workload(batch=1, seq=4, dtype="mxfp4"))
    ep = build_trace(m, Workload(batch=1, seq=4, dtype="mxfp4", ep=4))["parallel"]["ep"]
    experts = sum(x["bytes"] for x in one["totals"]["weight_tensors"]
                  if ".mlp.experts." in x["name"])
    assert ep["expert_weight_bytes_per_rank"] == experts // 4
    assert ep["weight_bytes_per_rank"] == one["totals"]["weight_bytes"] - experts + experts // 4


def test_keep_leaves_modules_at_their_width():
    t = build_trace(load_preset("gpt-oss-20b-mxfp4"),
                    Workload(batch=1, seq=4, dtype="mxfp4"))["totals"]
    quantized = {x["name"].split(".", 3)[3].rsplit(".", 1)[0] for x in t["weight_tensors"]
                 if x["part"] == "data"}
    # modules_to_not_convert: self_attn, router, embedding, lm_head; only the experts are mxfp4
    assert quantized == {"mlp.experts.gate_proj", "mlp.experts.up_proj", "mlp.experts.down_proj"}
    # `--dtype mxfp4` on the preset at width quantizes every matrix of the layers instead
    plain = build_trace(load_preset("gpt-oss-20b"), Workload(batch=1, seq=4, dtype="mxfp4"))
    assert plain["totals"]["weight_bytes"] < t["weight_bytes"]


def test_a_layer_index_in_keep():
    keep = Quantization(format="fp8-block", block=(128, 128), keep=("model.layers.0.mlp",))
    whole = build_trace(tiny(), Workload(batch=1, seq=4, dtype="fp8"))["totals"]["weight_bytes"]
    kept = build_trace(tiny(quantization=keep), Workload(batch=1, seq=4, dtype="fp8"))
    # layer 0's gate, up and down stay bf16: 3 × (98,304·2) instead of 3 × 98,328
    assert kept["totals"]["weight_bytes"] == whole + 3 * (2 * 98_304 - 98_328)


# ── the dtype a checkpoint sets, and the refusals ───────────────────────────────────────────────


def test_the_checkpoint_sets_the_dtype_and_a_conflict_is_refused(cli):
    r = cli("trace", "--preset", "deepseek-v3-fp8", "--seq", "8", "--json")
    assert r.code == 0 and r.json()["workload"]["dtype"] == "fp8"
    for flags in (["--dtype", "bf16"], ["--mode", "bf16"]):
        r = cli("trace", "--preset", "deepseek-v3-fp8", "--seq", "8", *flags)
        assert r.code == 2 and r.err.count("\n") == 1 and r.err.startswith("error: dtype:"), r.err
        assert "--set quantization=null" in r.err
    # the override, explicit: the weights planned as plain bf16
    r = cli("trace", "--preset", "deepseek-v3-fp8", "--seq", "8", "--dtype", "bf16",
            "--set", "quantization=null", "--json")
    assert r.code == 0 and r.json()["totals"]["weight_bytes"] == 2 * r.json()["totals"]["params"]
    with pytest.raises(ShapecalcError) as e:
        weight_format(load_preset("gpt-oss-20b-mxfp4"), "bf16")
    assert e.value.field == "dtype"
    assert source_fields(load_preset("gpt-oss-20b-mxfp4"), {}) == {"dtype": "mxfp4"}


def test_a_format_is_no_cache_or_activation_width():
    for field in ("kv_dtype", "act_dtype"):
        with pytest.raises(ShapecalcError) as e:
            make_workload({field: "nvfp4"})
        assert e.value.field == field


BASE = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 256, "intermediate_size": 384,
        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2}


@pytest.mark.parametrize("quant,key", [
    ({"quant_method": "hqq"}, "quantization_config.quant_method"),
    ({"quant_method": "fp8", "weight_block_size": [128]}, "quantization_config.weight_block_size"),
    ({"quant_method": "fp8", "fmt": "e5m2"}, "quantization_config.fmt"),
    ({"quant_method": "fp8", "weight_block_size": [128, 128], "new_knob": 1},
     "quantization_config.new_knob"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 100}, "quantization.group_size"),
    ({"quant_method": "gptq", "bits": 3, "group_size": 128}, "quantization.bits"),
    ({"quant_method": "gptq", "bits": "four"}, "quantization_config.bits"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemv"},
     "quantization_config.version"),
    ({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.attention"]},
     "quantization.keep"),
    ({"quant_method": "mxfp4", "modules_to_not_convert": "lm_head"},
     "quantization_config.modules_to_not_convert"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 32},
     "quantization_config.group_size"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "fp4"},
     "quantization_config.bnb_4bit_quant_type"),
    ({"quant_method": "bitsandbytes"}, "quantization_config.load_in_4bit"),
    ("fp8", "quantization_config"),
])
def test_bad_quantization_configs_exit_2(cli, tmp_path, quant, key):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**BASE, "quantization_config": quant}))
    r = cli("trace", "--hf-config", str(path))
    assert r.code == 2 and r.err.count("\n") == 1, r.err
    assert r.err.startswith(f"error: {key}"), r.err


def test_a_block_that_does_not_fit_exits_2(cli, tmp_path):
    # mxfp4's 32-blocks along an input width of 200 (the FFN's down projection)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**BASE, "intermediate_size": 200,
                                "quantization_config": {"quant_method": "mxfp4"}}))
    r = cli("trace", "--hf-config", str(path))
    assert r.code == 2 and "32 does not divide the input width 200" in r.err, r.err


def test_every_format_reads_from_a_config(tmp_path):
    from shapecalc.inputs.hf import load_hf_config

    cases = {
        "fp8": ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8-block"),
        "mxfp4": ({"quant_method": "mxfp4"}, "mxfp4"),
        "nvfp4": ({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
                   "exclude_modules": ["lm_head"], "kv_cache_quant_algo": "FP8"}, "nvfp4"),
        "gptq": ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True,
                  "sym": True}, "gptq"),
        "awq": ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
                 "version": "gemm"}, "awq"),
        "nf4": ({"quant_method": "bitsandbytes", "load_in_4bit": True,
                 "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True}, "bnb-nf4"),
        "int8": ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "bnb-int8"),
    }
    for name, (quant, fmt) in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({**BASE, "torch_dtype": "float16",
                                    "quantization_config": quant}))
        m = load_hf_config(path)
        assert m.quantization is not None and m.quantization.format == fmt, name
        assert m.quantization.wide == "fp16"
        t = build_trace(m, Workload(batch=1, seq=4, **source_fields(m, {})))["totals"]
        assert t["weight_bytes"] == sum(x["bytes"] for x in t["weight_tensors"]), name
        # the LM head and embedding stay fp16: 2 · 1000·256·2
        top = [x for x in t["weight_tensors"] if "layers" not in x["name"]]
        assert sum(x["bytes"] for x in top) == 2 * 1000 * 256 * 2 + 256 * 2, name
    nv = load_hf_config(tmp_path / "nvfp4.json")
    assert nv.quantization is not None and nv.quantization.kv_scales


def test_a_sweep_runs_each_dtypes_weights(cli):
    r = cli("sweep", "gpt-oss-20b", "--dtype", "bf16,mxfp4", "--seq", "128", "--format", "jsonl")
    rows = [json.loads(x) for x in r.out.splitlines()]
    by = {x["dtype"]: x["weight_bytes"] for x in rows}
    trace = build_trace(load_preset("gpt-oss-20b"), Workload(seq=128, dtype="mxfp4"))
    assert by["mxfp4"] == trace["totals"]["weight_bytes"]
    assert by["bf16"] == 2 * rows[0]["params"]


def test_fp4_modes_and_the_blackwell_peak(cli):
    b200 = load_gpu("b200")
    assert b200.peak("nvfp4") == b200.peak("mxfp4") == 2 * b200.peak("fp8")
    assert b200.peak("nf4") is None  # no tensor core multiplies NF4
    r = cli("fit", "--preset", "gpt-oss-20b", "--mode", "nvfp4", "--gpu", "b200", "--json")
    a = r.json()["assumptions"]
    assert (a["compute_dtype"], a["peak_flops"]) == ("nvfp4", b200.peak("nvfp4"))
    assert a["widths"]["weights"] == "nvfp4" and a["widths"]["activations"] == "bf16"
    # weight-only formats keep 16-bit GEMMs; W4A4 needs an fp4 peak that Hopper does not have
    r = cli("fit", "--preset", "gpt-oss-20b", "--mode", "mxfp4", "--gpu", "h100-sxm", "--json")
    assert r.json()["assumptions"]["compute_dtype"] == "bf16"
    r = cli("fit", "--preset", "gpt-oss-20b", "--mode", "nvfp4", "--gpu", "h100-sxm")
    assert r.code == 2 and r.err.startswith("error: compute-dtype:")
    r = cli("trace", "--preset", "gpt-oss-20b", "--mode", "nf4", "--seq", "8", "--json")
    assert r.json()["totals"]["weight_format"].startswith("bnb-nf4")


@pytest.mark.parametrize("name", ["qwen3-8b-fp8", "llama3.1-8b-awq"])
def test_serving_a_static_batch_of_a_checkpoint_is_fit(name):
    """serve's iteration cost reads the checkpoint's bytes as fit does: a static batch of B
    prompts costs fit's expected TTFT, a decode step fit's time per token, exactly."""
    from shapecalc.plan.perf import perf_params
    from shapecalc.serve.cost import IterationCost

    gpu, m = load_gpu("h100-sxm"), load_preset(name)
    wl = Workload(seq=1, logits="last", **source_fields(m, {}))
    cf = closed_form_for(m, wl)
    peak = gpu.peak(wl.compute)
    cost = IterationCost(cf, gpu, perf_params(gpu), wl, peak)
    doc = fit(m, wl.model_copy(update={"batch": 8, "seq": 512}), gpu, PlanOptions())
    assert cost.prefill(8, 512) == doc["expected"]["ttft_s"]
    assert cost.decode(8, 512) == doc["expected"]["decode_s_per_token"]
    # and the plain width's weights would make decode slower: the bytes are the format's
    plain = m.model_copy(update={"quantization": None})
    wide = fit(plain, wl.model_copy(update={"batch": 8, "seq": 512, "dtype": "bf16"}), gpu,
               PlanOptions(compute_dtype=wl.compute))
    assert wide["expected"]["decode_s_per_token"] > doc["expected"]["decode_s_per_token"]


def test_train_refuses_a_quantized_checkpoint(cli):
    r = cli("train", "--preset", "qwen3-8b-fp8", "--seq", "1024")
    assert r.code == 2 and r.err.startswith("error: quantization:")
    assert cli("train", "--preset", "qwen3-8b-fp8", "--seq", "1024", "--set",
               "quantization=null").code == 0
