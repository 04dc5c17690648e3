"""DeepSeek-V4's attention (shared_kv: one K=V head, sinks, the grouped low-rank output
projection, a window on every layer) and its heavily compressed layers (hca: an entry per m′
tokens beside the window, the compressor's buffer a state). Counts equal FlopCounterMode on
transformers' DeepseekV4ForCausalLM module by module (tests/data/compressed_reference.json,
measured by tests/torch_reference/measure_compressed.py); verify runs the compressor for real;
the closed form equals the stages; bad configs exit 2 naming the key."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from shapecalc.check.verify import verify
from shapecalc.costs.trace import build_trace
from shapecalc.interpret import symbolic
from shapecalc.model.config import ModelConfig, Workload

DATA = json.loads((Path(__file__).parent / "data" / "compressed_reference.json").read_text())
RED = DATA["reduced"]["config"]


TYPES = {"sliding_attention": "sliding", "compressed_sparse_attention": "csa",
         "heavily_compressed_attention": "hca"}


def v4(hf: dict, layer_types: list[str], ratio: int = 128) -> ModelConfig:
    """shapecalc's fields for a DeepseekV4Config dict (hash layers, routing, HC, attention)."""
    hash_layers = (hf.get("mlp_layer_types") or ["hash_moe"] * 3).count("hash_moe")
    return ModelConfig(
        vocab_size=hf.get("vocab_size", 129280), d_model=hf.get("hidden_size", 4096),
        n_layers=len(layer_types), n_heads=hf.get("num_attention_heads", 64), n_kv_heads=1,
        head_dim=hf.get("head_dim", 512), d_ff=hf.get("moe_intermediate_size", 2048),
        ffn="swiglu", norm="rmsnorm", positions="rope",
        rotary_dim=int(hf.get("head_dim", 512) * hf.get("partial_rotary_factor", 0.125)),
        attention_sinks=True, shared_kv=True, q_lora_rank=hf.get("q_lora_rank", 1024),
        o_groups=hf.get("o_groups", 8), o_lora_rank=hf.get("o_lora_rank", 1024),
        sliding_window=hf.get("sliding_window", 128), compress_ratio_hca=ratio,
        layer_types=layer_types, **(dict(
            compress_ratio_csa=4, csa_index_heads=hf.get("index_n_heads", 64),
            csa_index_head_dim=hf.get("index_head_dim", 128),
            csa_index_topk=hf.get("index_topk", 512)) if "csa" in layer_types else {}),
        n_experts=hf.get("n_routed_experts", 256),
        experts_per_token=hf.get("num_experts_per_tok", 6),
        d_ff_expert=hf.get("moe_intermediate_size", 2048), n_shared_experts=1,
        router_scoring="sqrtsoftplus", norm_topk_prob=True, routed_scaling_factor=1.5,
        hash_moe_layers=min(hash_layers, len(layer_types)), swiglu_limit=10.0,
        hc_streams=hf.get("hc_mult", 4), hc_sinkhorn_iters=hf.get("hc_sinkhorn_iters", 20))


# what each shapecalc role is in transformers' module tree (one layer's modules)
MODULES = {
    "self_attn.q_a_proj": ("attn.q_a",), "self_attn.q_b_proj": ("attn.q_b",),
    "self_attn.kv_proj": ("attn.kv",), "self_attn.o_a_proj": ("attn.o_a",),
    "self_attn.o_b_proj": ("attn.o_b",), "self_attn": ("attn.scores", "attn.values"),
    "self_attn.compressor.kv_proj": ("attn.hca.kv",),
    "self_attn.compressor.gate_proj": ("attn.hca.gate",), "mlp.gate": ("moe.router",),
    "mlp.experts": ("moe.experts.gate", "moe.experts.up", "moe.experts.down"),
    "mlp.shared_experts.gate_proj": ("moe.shared.gate",),
    "mlp.shared_experts.up_proj": ("moe.shared.up",),
    "mlp.shared_experts.down_proj": ("moe.shared.down",),
    "attn_hc": ("hc.attn.proj",), "ffn_hc": ("hc.ffn.proj",), "": ("hc.attn.merge",
                                                                     "hc.ffn.merge")}
# the reduced reference's layers 0 (sliding) and 2 (hca); its CSA layers are not modelled
LAYERS = {0: "sliding", 2: "hca"}


def _kind_sums(st: list, kind: int, field: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in st:
        if s.kind == kind:
            out[s.role] = out.get(s.role, 0) + getattr(s, field)
    return out


@pytest.mark.parametrize("case", DATA["reduced"]["cases"], ids=lambda c: f"T{c['seq']}")
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_flops_equal_flopcountermode_module_by_module(case, phase):
    m = v4(RED, ["sliding", "hca"])
    st = symbolic.stages(m, Workload(batch=1, seq=case["seq"], phase=phase, dtype="fp32"))
    ref = case[f"{phase}_modules"]
    for layer, kind in LAYERS.items():
        k = 0 if kind == "sliding" else 1
        sums = _kind_sums(st, k, "flops")
        for module, roles in MODULES.items():
            if "compressor" in module and kind == "sliding":
                continue
            name = f"model.layers.{layer}" + (f".{module}" if module else "")
            assert sum(sums.get(r, 0) for r in roles) == ref.get(name, 0), (name, phase)
    head = {s.role: s.flops for s in st if s.group == "head"}
    assert head["head.lm"] == ref["lm_head"] and head["hc.head.proj"] == ref["model.hc_head"]


def test_params_equal_the_meta_count_module_by_module():
    """At full size (DeepseekV4Config's defaults): an hca layer's modules, the embedding, the
    head and the streams' head (the full total needs the CSA layers: not modelled)."""
    full = DATA["full_size"]["class_defaults"]
    ref = full["params_by_module"]
    m = v4(full["config"], ["hca"])
    st = symbolic.stages(m, Workload(batch=1, seq=1))
    sums = _kind_sums(st, 0, "params")
    attn = {"self_attn.q_a_proj": ("attn.q_a",), "self_attn.q_a_norm": ("attn.q_a_norm",),
            "self_attn.kv_norm": ("attn.kv_norm",), "self_attn": ("attn.softmax",),
            "self_attn.compressor": ("attn.hca.pool",),
            "self_attn.compressor.kv_norm": ("attn.hca.norm",),
            "input_layernorm": ("attn.norm",), "post_attention_layernorm": ("ffn.norm",),
            "attn_hc": ("hc.attn.proj", "hc.attn.weights"),
            "ffn_hc": ("hc.ffn.proj", "hc.ffn.weights")}
    table = {**{k: v for k, v in MODULES.items() if k not in ("self_attn", "")}, **attn}
    for module, roles in table.items():
        assert sum(sums.get(r, 0) for r in roles) == ref[f"model.layers.2.{module}"], module
    glob = {s.role: s.params for s in st if s.kind is None}
    assert glob["embed"] == ref["model.embed_tokens"] and glob["head.lm"] == ref["lm_head"]
    assert glob["head.norm"] == ref["model.norm"]
    assert glob["hc.head.proj"] + glob["hc.head.weights"] == ref["model.hc_head"]


@pytest.mark.parametrize("case", DATA["reduced"]["cases"], ids=lambda c: f"T{c['seq']}")
def test_cache_bytes_tensor_by_tensor(case):
    """The hca layer's entries and buffer equal transformers' tensors; its window holds
    min(T, W) tokens where transformers' DynamicSlidingWindowLayer keeps W − 1 (the key the
    next decode reads is kept: as vLLM); a sliding layer's K=V is one tensor, which transformers
    stores twice (keys and values)."""
    T = case["seq"]
    m = v4(RED, [TYPES[t] for t in RED["layer_types"]])  # kinds: sliding 0, csa 1, hca 2
    st = symbolic.stages(m, Workload(batch=1, seq=T, dtype="bf16"))
    ours: dict = {}
    for s in st:
        if s.op in ("kv_cache", "state_cache"):
            ours[(s.kind, s.name)] = ours.get((s.kind, s.name), 0) + s.bytes
    ref = {i: {t["name"]: t["bytes"] for t in layer} for i, layer in
           enumerate(case["cache_bf16"])}
    W, dh = RED["sliding_window"], RED["head_dim"]
    extra = 2 * dh if T >= W else 0  # the one token transformers drops
    for kind, layer, parts in ((2, 2, ("compressor",)), (1, 1, ("compressor", "indexer"))):
        for part in parts:
            name = "compressor" if part == "compressor" else "indexer compressor"
            r = ref[layer]
            assert ours[(kind, f"KV cache write ({name} entries)")] == r[f"compressed_kv.{part}"]
            assert ours[(kind, f"{name} buffer (kv, gate)")] == (
                r[f"buffer_kv.{part}"] + r[f"buffer_gate.{part}"])
            if kind == 1:  # the overlap: kv in bf16, its biased gate in fp32
                assert ours[(kind, f"{name} overlap kv")] == r[f"overlap_kv.{part}"]
                assert ours[(kind, f"{name} overlap gate")] == r[f"overlap_gate.{part}"]
        assert ours[(kind, "KV cache write")] == ref[layer]["window"] + extra
    assert ours[(0, "KV cache write")] == ref[0]["window"] + extra == ref[0]["values"] + extra
    every = sum(t["bytes"] for layer in case["cache_bf16"] for t in layer)
    total = build_trace(m, Workload(batch=1, seq=T, dtype="bf16"))["totals"]
    ours_all = total["kv_cache_bytes"] + total["state_cache_bytes"]
    assert ours_all == every - ref[0]["values"] + 4 * extra  # each layer's window


def _small(topk: int = 3) -> ModelConfig:
    m = v4({**RED, "sliding_window": 8, "vocab_size": 64, "index_topk": topk},
           ["sliding", "csa", "hca"], 4)
    return m.model_copy(update={"compress_ratio_csa": 2})


@pytest.mark.parametrize("T", [1, 3, 8, 9, 21])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_verify_runs_the_compressors_and_the_indexer(T, phase):
    r = verify(_small(), Workload(batch=2, seq=T, phase=phase, dtype="fp32"),
               precision="float64")
    assert not [c for c in r["checks"] if not c["ok"]]


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_tensor_parallel_splits_the_heads_and_the_output_groups(phase):
    """tp = 2: q_b by columns (each rank its heads, their sinks), the K=V head, compressors and
    indexer replicated, the output's g/p groups per rank and o_b by rows, then all-reduced;
    the p ranks equal one rank (verify)."""
    r = verify(_small(), Workload(batch=2, seq=11, phase=phase, dtype="fp32", tp=2, pp=2),
               precision="float64")
    assert not [c for c in r["checks"] if not c["ok"]]
    st = symbolic.stages(_small(), Workload(batch=1, seq=11, phase=phase, tp=2), p=2)
    oa = next(s for s in st if s.role == "attn.o_a")
    assert oa.params == 4 * 16 * 12 // 2 and oa.shape[-1] == 12  # g/p = 1 group of d_g


def test_the_selection_masks_what_it_does_not_pick():
    """Past K_sel closed entries the indexer's choice changes the output; below it, not."""
    import numpy as np

    from shapecalc.interpret.numeric import step
    from shapecalc.interpret.weights import Weights

    def logits(topk: int, T: int) -> np.ndarray:
        m = _small(topk)
        ids = np.arange(T)[None] % 64
        return step(m, Workload(batch=1, seq=T, dtype="fp32"), Weights(m, dtype=np.float64),
                    ids).full
    assert not np.allclose(logits(2, 21), logits(9, 21))  # 10 entries closed by the end
    assert np.allclose(logits(9, 5), logits(12, 5))  # 2 entries: both picked either way


@pytest.mark.slow
def test_closed_form_equals_the_stages():
    from shapecalc.costs.closed import ClosedForm
    from tests.test_closed import assert_equal_at

    m = _small()
    rng = random.Random(2)
    points = [dict(batch=rng.randint(1, 5), seq=rng.randint(1, 40),
                   phase=rng.choice(["prefill", "decode"]), tp=rng.choice([1, 2]),
                   pp=rng.randint(1, 3),
                   dtype="bf16", kv_dtype=rng.choice(["bf16", "fp8", "int4"]), act_dtype="fp32")
              for _ in range(10)]
    assert_equal_at(m, ClosedForm(m), points)


def test_decode_reads_window_and_entries():
    """Decode at T reads min(T+1, W) window keys and ⌊(T+1)/m′⌋ entries."""
    m = v4(RED, ["sliding", "hca"])
    for T in (5, 127, 4095, 131071):
        st = symbolic.stages(m, Workload(batch=1, seq=T, phase="decode"))
        qk = {s.kind: s.shape[-1] for s in st if s.role == "attn.scores"}
        assert qk == {0: min(T + 1, 128), 1: min(T + 1, 128) + (T + 1) // 128}


@pytest.mark.parametrize(("sets", "field"), [
    (["layer_types=[\"csa\",\"csa\"]"], "layer_types"),
    (["compress_ratio_hca=0"], "compress_ratio_hca"),
    (["compress_ratio_hca=4"], "compress_ratio_hca"),  # without shared_kv
    (["csa_index_topk=0"], "csa_index_topk"),
])
def test_bad_configs_exit_2_naming_the_key(cli, sets, field):
    r = cli("trace", *[a for s in sets for a in ("--set", s)])
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err
    assert field in r.err


def test_ratio_larger_than_the_window_and_tp_are_refused(cli, tmp_path):
    m = v4({**RED, "sliding_window": 8}, ["sliding", "hca"], 8)
    cfg = tmp_path / "m.json"
    cfg.write_text(json.dumps({**m.model_dump(), "compress_ratio_hca": 16}))
    r = cli("trace", "--config", str(cfg))
    assert r.code == 2 and "compress_ratio_hca" in r.err and "window" in r.err
    cfg.write_text(json.dumps({**_small().model_dump(), "compress_ratio_csa": 9}))
    r = cli("trace", "--config", str(cfg))
    assert r.code == 2 and "compress_ratio_csa" in r.err and "window" in r.err
    cfg.write_text(json.dumps({**_small().model_dump(), "csa_index_heads": None}))
    r = cli("trace", "--config", str(cfg))
    assert r.code == 2 and "csa_index_heads" in r.err
    cfg.write_text(json.dumps(m.model_dump()))  # H = 4 heads, g = 2 output groups
    r = cli("trace", "--config", str(cfg), "--tp", "4")
    assert r.code == 2 and "tp" in r.err and "output groups" in r.err
    assert build_trace(m, Workload(batch=1, seq=9))["totals"]["kv_cache_bytes"] > 0


@pytest.mark.parametrize("case", DATA["reduced"]["cases"], ids=lambda c: f"T{c['seq']}")
def test_whole_model_equals_flopcountermode(case):
    """The reduced model, every layer (sliding, csa, hca): params, prefill and decode FLOPs."""
    m = v4(RED, [TYPES[t] for t in RED["layer_types"]])
    for phase in ("prefill", "decode"):
        doc = build_trace(m, Workload(batch=1, seq=case["seq"], phase=phase, dtype="fp32"))
        assert doc["totals"]["flops"] == case[f"{phase}_flops"], phase
        # the breakdown's compressors: every module under a compressor (the indexer's too)
        comp = sum(v for k, v in case[f"{phase}_modules"].items() if ".compressor" in k)
        assert doc["totals"]["flops_breakdown"]["compressors"] == comp
    assert doc["totals"]["params"] == case["params"]


@pytest.mark.parametrize("layout", ["class_defaults", "flash_layout"])
def test_full_size_params_equal_the_meta_count(layout):
    full = DATA["full_size"][layout]
    m = v4(full["config"], [TYPES[t] for t in full["layer_types"]])
    assert build_trace(m, Workload(batch=1, seq=1))["totals"]["params"] == full["params_meta"]


def _read(tmp_path, cfg: dict) -> ModelConfig:
    from shapecalc.inputs.hf import load_hf_config

    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "deepseek_v4", **cfg}))
    return load_hf_config(p)


@pytest.mark.parametrize("case", DATA["reduced"]["cases"], ids=lambda c: f"T{c['seq']}")
def test_the_reader_at_reduced_width_equals_flopcountermode(case, tmp_path):
    m = _read(tmp_path, RED)
    for phase in ("prefill", "decode"):
        doc = build_trace(m, Workload(batch=1, seq=case["seq"], phase=phase, dtype="fp32"))
        assert doc["totals"]["flops"] == case[f"{phase}_flops"], phase
    assert doc["totals"]["params"] == case["params"]


@pytest.mark.parametrize("layout", ["class_defaults", "flash_layout"])
def test_the_reader_at_full_size_equals_the_meta_count(layout, tmp_path):
    full = DATA["full_size"][layout]
    m = _read(tmp_path, full["config"])
    assert build_trace(m, Workload(batch=1, seq=1))["totals"]["params"] == full["params_meta"]


def test_the_preset_is_its_config_json():
    from shapecalc.inputs.hf import load_hf_config
    from shapecalc.inputs.sources import load_preset

    hf = load_hf_config(Path(__file__).parent / "data" / "hf" / "deepseek-v4-flash.json")
    assert hf.model_dump(exclude={"name"}) == load_preset("deepseek-v4-flash").model_dump(
        exclude={"name"})
    flash = DATA["full_size"]["flash_layout"]
    assert build_trace(hf, Workload(batch=1, seq=1))["totals"]["params"] == flash["params_meta"]


@pytest.mark.parametrize(("cfg", "key"), [
    ({"num_key_value_heads": 2}, "num_key_value_heads"),
    ({"compress_ratios": [0, 8] + [4] * 41}, "compress_ratios"),
    ({"mlp_layer_types": ["moe", "hash_moe"] + ["moe"] * 41}, "mlp_layer_types"),
    ({"hc_mult": 0}, "hc_streams"),
    ({"index_topk": 0}, "csa_index_topk"),
    ({"compress_rates": {"compressed_sparse_attention": 4,
                         "heavily_compressed_attention": 256}}, "compress_ratio_hca"),
])
def test_bad_config_json_exits_2_naming_the_key(cli, tmp_path, cfg, key):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "deepseek_v4", **cfg}))
    r = cli("trace", "--hf-config", str(p))
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and key in r.err, r.err


@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize("T", [1, 3, 7, 8, 9, 16, 40])
def test_the_sparse_kernel_convention_by_hand(phase, T):
    """Each query t reads min(t+1, W) window keys, hca's ⌊(t+1)/m′⌋ closed entries, csa's
    min(K_sel, ⌊(t+1)/m⌋): summed by hand over the queries, against the trace's
    flops_sparse_kernel (eager flops with QKᵀ and A·V over exactly those keys)."""
    from shapecalc.model.compressed import sparse_kernel_keys

    m = _small(3)  # W = 8, m = 2, m′ = 4, K_sel = 3
    queries = [T] if phase == "decode" else range(T)
    win = sum(min(t + 1, 8) for t in queries)
    want = {"sliding": win, "csa": win + sum(min(3, (t + 1) // 2) for t in queries),
            "hca": win + sum((t + 1) // 4 for t in queries)}
    assert sparse_kernel_keys(m, T, phase) == want
    doc = build_trace(m, Workload(batch=2, seq=T, phase=phase))["totals"]
    st = symbolic.stages(m, Workload(batch=2, seq=T, phase=phase))
    eager = sum(s.flops * s.repeat for s in st if s.role in ("attn.scores", "attn.values"))
    H, dh = m.n_heads, m.dh
    assert doc["flops_sparse_kernel"] == doc["flops"] - eager + sum(
        4 * 2 * H * want[t] * dh for t in m.layer_types)
    assert build_trace(ModelConfig(**{**_small().model_dump(), "shared_kv": False,
                                      **{k: None for k in ("o_groups", "o_lora_rank",
                                         "compress_ratio_hca", "compress_ratio_csa",
                                         "csa_index_heads", "csa_index_head_dim",
                                         "csa_index_topk", "q_lora_rank")},
                                      "layer_types": None, "sliding_window": None}),
                       Workload(batch=1, seq=4))["totals"]["flops_sparse_kernel"] is None


@pytest.mark.slow
def test_fit_at_128k_sizes_the_window_and_the_entries_by_hand(cli):
    """fit at T = 131,072 (B200, pp = 8): the fullest stage holds layers 20–25 (3 csa, 3 hca).
    Each layer's window: ⌈128/16⌉ blocks of 16 tokens × Dh × 2 bytes; a csa layer's entries
    ⌊T/4⌋·(Dh + D_I)·2, an hca layer's ⌊T/128⌋·Dh·2; the csa overlaps are states."""
    r = cli("fit", "--preset", "deepseek-v4-flash", "--seq", "131072", "--gpu", "B200",
            "--pp", "8", "--json")
    doc = json.loads(r.out)
    T, dh, di = 131072, 512, 128
    window = 128 // 16 * 16 * dh * 2
    csa, hca = T // 4 * (dh + di) * 2, T // 128 * dh * 2
    assert doc["pp_stage"] == 4
    assert doc["memory_per_rank"]["kv_cache"] == 6 * window + 3 * csa + 3 * hca == 129_761_280
    overlap = 4 * dh * (2 + 4) + 4 * di * (2 + 4)  # kv in bf16, the biased gate in fp32
    assert doc["memory_per_rank"]["state_cache"] == 3 * overlap
