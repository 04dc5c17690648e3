"""Block-sparse attention (MiniMax-M3's text model: a block indexer picks each query's top K_blk
blocks of S_blk keys per KV group) against PyTorch and by hand: parameters equal transformers'
meta-device count at full size; prefill and decode FLOPs equal FlopCounterMode (full size on
the meta device with batched_mm experts; reduced width on real tensors) at B=1, T=16 and T=4096
(past K_blk·S_blk = 2048), logits on every position, in the eager convention (transformers');
the KV bytes equal every tensor transformers' cache holds after the prefill (keys, values and
the block indexer's idx_keys). The sparse kernel's convention is checked by hand (8 keys in
blocks of 2, top 2 blocks); the executor runs the block scoring and top-k for real.

tests/data/block_sparse_reference.json was measured with torch 2.13.0 and transformers 5.24.0 by
tests/torch_reference/measure_block_sparse.py; with torch installed, `test_live` measures
again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from reference_cases import load_case as _load
from reference_cases import totals as _totals

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.inputs.sources import load_preset, published
from shapecalc.interpret.numeric import step
from shapecalc.interpret.symbolic import stages as symbolic_stages
from shapecalc.interpret.weights import Weights
from shapecalc.model.block_sparse import block_keys, block_pairs
from shapecalc.model.config import ModelConfig, ShapecalcError, Workload

DATA = Path(__file__).parent / "data"
REF = json.loads((DATA / "block_sparse_reference.json").read_text())
CASES = {c["name"]: c for c in REF["cases"]}


@pytest.mark.parametrize("name", sorted(CASES))
def test_params_equal_the_meta_device_count(tmp_path, name):
    case = CASES[name]
    assert _totals(_load(tmp_path, case["hf_config"]), 1)["params"] == case["full"]["params_meta"]


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("width", ["full", "reduced"])
def test_flops_equal_flopcountermode(tmp_path, name, width):
    case = CASES[name]
    if width not in case:
        pytest.skip("measured at full size only")
    part = case[width]
    m = _load(tmp_path, case["hf_config"] if width == "full" else part["hf_config"])
    dtype = "bf16" if width == "full" else "fp32"
    for s in part["steps"]:
        assert _totals(m, s["seq"], dtype=dtype)["flops"] == s["prefill"], s["seq"]
        assert _totals(m, s["seq"], dtype=dtype, phase="decode")["flops"] == s["decode"], s["seq"]
    if m.block_sparse:  # the last T reaches past the selected blocks: the selection selects
        assert part["steps"][-1]["seq"] > m.index_topk_blocks * m.index_block_size


@pytest.mark.parametrize("name", sorted(CASES))
def test_cache_bytes_equal_transformers_cache(tmp_path, name):
    case = CASES[name]
    m = _load(tmp_path, case["hf_config"])
    for s in case["full"]["steps"]:
        assert _totals(m, s["seq"])["kv_cache_bytes"] == s["cache_after_prefill"]["bytes"]
    if "reduced" in case:
        r = case["reduced"]
        m = _load(tmp_path, r["hf_config"])
        for s in r["steps"]:
            want = s["cache_after_prefill_bf16"]
            assert "idx_keys" in want["parts"]
            assert _totals(m, s["seq"])["kv_cache_bytes"] == want["bytes"]


def test_preset_equals_its_config():
    want = load_preset("minimax-m3")
    got = load_hf_config(DATA / "hf" / "minimax-m3.json")
    for attr in want.model_dump(exclude={"name"}):
        assert getattr(got, attr) == getattr(want, attr), attr
    meta = CASES["minimax-m3"]["full"]["params_meta"]
    assert _totals(want, 1)["params"] == meta == published("minimax-m3")["params"]
    # the class defaults (no layer sparse) and the Hub's layout differ by 57 block indexers
    # (q 6144·512, k 6144·128, two norms of 128) and 3 dense MLPs in place of MoE blocks
    D, dense, e, s = 6144, 12288, 3072, 3072
    moe = 128 * 3 * D * e + 128 * D + 3 * D * s
    defaults = CASES["minimax_m3_vl class defaults"]["full"]["params_meta"]
    assert meta - defaults == 57 * (D * 512 + D * 128 + 256) + 3 * (3 * D * dense - moe)


def _tiny(**kw) -> ModelConfig:
    base = dict(name="tiny-msa", vocab_size=64, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2,
                head_dim=8, d_ff=48, norm="rmsnorm", ffn="swiglu", positions="rope",
                qk_norm=True, norm_plus_one=True, index_topk_blocks=2, index_block_size=2,
                index_local_blocks=1, block_index_heads=2, block_index_head_dim=8)
    return ModelConfig(**{**base, **kw})


def _role(m: ModelConfig, wl: Workload, role: str) -> int:
    return sum(s.flops * s.repeat for s in symbolic_stages(m, wl, 1) if s.role == role)


def test_sparse_kernel_by_hand():
    """8 keys in blocks of 2, the top 2 blocks: query t reads t+1 keys while t < 4, then its own
    block up to t and one earlier block of 2 (3 or 4 keys): 1+2+3+4+3+4+3+4 = 24 pairs, over
    H = 4 heads of Dh = 8, for QKᵀ and A·V each."""
    m, H, Dh = _tiny(), 4, 8
    assert [block_keys(2, 2, t) for t in range(8)] == [1, 2, 3, 4, 3, 4, 3, 4]
    assert block_pairs(2, 2, 0, 8) == 24
    for flops in ("full", "causal"):  # the kernel reads the keys in reach either way
        wl = Workload(seq=8, selection="sparse", attention_flops=flops)
        assert _role(m, wl, "attn.scores") == _role(m, wl, "attn.values") == 2 * H * 24 * Dh
    # decode after 8 tokens: the new token (position 8) opens block 4: itself and one block
    dec = Workload(seq=8, selection="sparse", phase="decode")
    assert _role(m, dec, "attn.scores") == 2 * H * 3 * Dh
    # eager (transformers) scores all 8 keys; the indexer scores all 8 in both conventions
    eager = Workload(seq=8)
    assert _role(m, eager, "attn.scores") == 2 * H * 8 * 8 * Dh
    HI, DI = 2, 8
    for wl in (eager, Workload(seq=8, selection="sparse")):
        assert _role(m, wl, "attn.index_scores") == 2 * HI * 8 * 8 * DI
    # a causal count scores each query against its t+1 keys: 36 pairs
    causal = Workload(seq=8, attention_flops="causal")
    assert _role(m, causal, "attn.index_scores") == 2 * HI * 36 * DI


def test_dense_below_the_selected_blocks_selected_above():
    """T ≤ K_blk·S_blk: every block is selected (the sparse count is the causal dense one);
    past it, each query reads (K_blk−1)·S_blk + (t mod S_blk) + 1 keys."""
    m = _tiny(index_topk_blocks=4, index_block_size=4)
    for T in (8, 16, 17, 40, 41):
        wl = Workload(seq=T, selection="sparse")
        want = sum(min(t + 1, 3 * 4 + t % 4 + 1) for t in range(T))
        assert block_pairs(4, 4, 0, T) == want
        assert _role(m, wl, "attn.scores") == 2 * 4 * want * 8


@pytest.mark.parametrize("local", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_conventions_give_the_same_logits(local):
    """The executor runs the indexer, the block pooling and the top-K_blk for real: eager (the
    block mask on the dense scores) and sparse (the kernel's selected keys only) compute the
    same attention; with one block selected the output changes."""
    m = _tiny(n_layers=2, index_local_blocks=local, block_sparse_layers=(1,))
    ids = np.random.default_rng(0).integers(0, 64, (2, 11))
    out = {}
    for sel in ("eager", "sparse"):
        wl = Workload(batch=2, seq=11, selection=sel, dtype="fp32")
        out[sel] = step(m, wl, Weights(m, dtype=np.float64), ids).full
    assert np.allclose(out["eager"], out["sparse"], rtol=1e-9, atol=1e-12)
    wide = _tiny(n_layers=2, index_topk_blocks=8, block_sparse_layers=(1,))
    wl = Workload(batch=2, seq=11, dtype="fp32")
    dense = step(wide, wl, Weights(m, dtype=np.float64), ids).full
    assert not np.allclose(dense, out["eager"])


@pytest.mark.slow
@pytest.mark.parametrize("kw", [dict(rotary_dim=4, block_sparse_layers=(1,)),
                                # D_I wider than Dh (RoPE turns R of it), blocks of 3, 2 kept
                                dict(block_index_head_dim=16, block_index_heads=4,
                                     index_block_size=3, index_local_blocks=2)])
def test_verify_passes_at_reduced_width(kw):
    from shapecalc.check.verify import verify
    m = _tiny(n_layers=2, **kw)
    for sel in ("eager", "sparse"):
        for phase in ("prefill", "decode"):
            doc = verify(m, Workload(batch=2, seq=9, selection=sel, phase=phase, dtype="fp32"))
            assert doc["ok"], [c for c in doc["checks"] if not c["ok"]]


@pytest.mark.parametrize("field,value", [("index_topk_blocks", 0), ("index_block_size", -1),
                                         ("index_local_blocks", 3), ("block_index_heads", 3),
                                         ("block_index_head_dim", 4)])
def test_bad_fields_name_the_field(field, value):
    with pytest.raises(Exception, match=field):
        _tiny(rotary_dim=6, **{field: value})


@pytest.mark.parametrize("key,value", [
    ("sparse_block_size", 0), ("sparse_topk_blocks", 0), ("sparse_topk_blocks", -2),
    ("sparse_num_index_heads", 0), ("sparse_index_dim", 2.5), ("sparse_local_block", 0)])
def test_bad_configs_name_the_key(tmp_path, key, value):
    cfg = json.loads(json.dumps(CASES["minimax-m3"]["reduced"]["hf_config"]))
    cfg["text_config"]["sparse_attention_config"][key] = value
    with pytest.raises(ShapecalcError, match=key):
        _load(tmp_path, cfg)


@pytest.mark.parametrize("key,value", [("index_topk_blocks", 0), ("index_block_size", -8),
                                       ("layer_types", ["full_attention", "sparse"]),
                                       ("n_shared_experts", 2), ("use_qk_norm", False)])
def test_bad_flat_keys_name_the_key(tmp_path, key, value):
    cfg = json.loads(json.dumps(CASES["minimax-m3"]["reduced"]["hf_config"]))
    text = cfg["text_config"]
    del text["sparse_attention_config"]
    text.update({"layer_types": ["full_attention", "minimax_m3_sparse", "minimax_m3_sparse"],
                 key: value})
    with pytest.raises(ShapecalcError, match=key):
        _load(tmp_path, cfg)


@pytest.mark.slow
def test_cli_exits_2_naming_the_key(tmp_path):
    cfg = json.loads(json.dumps(CASES["minimax-m3"]["reduced"]["hf_config"]))
    cfg["text_config"]["sparse_attention_config"]["sparse_block_size"] = 0
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    r = subprocess.run([sys.executable, "-m", "shapecalc", "trace", "--hf-config", str(path)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "sparse_block_size" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_workload_refusals():
    with pytest.raises(ShapecalcError, match="padding_mask"):
        build_trace(_tiny(), Workload(seq=8, padding_mask=True))


def test_tensor_parallel_cache_and_counts():
    """Under tensor parallelism the indexer is replicated (transformers' tp_plan leaves it out):
    each rank caches its KV heads and the whole indexer key, scores all H_I heads, and its H/p
    query heads read their groups' selected blocks."""
    from shapecalc.model.parallel import kv_bytes_per_token
    m = _tiny()  # H = 4, H_kv = 2, Dh = 8, D_I = 8, H_I = 2
    for p in (1, 2, 4):  # H_kv = 2 < p = 4: each rank holds one KV head (vLLM's replication)
        assert kv_bytes_per_token(m, "bf16", p) == (2 * max(1, 2 // p) * 8 + 8) * 2
        wl = Workload(seq=8, selection="sparse", tp=p)
        per_rank = sum(s.flops * s.repeat for s in symbolic_stages(m, wl, p)
                       if s.role == "attn.scores")
        assert per_rank == 2 * (4 // p) * 24 * 8
        idx = sum(s.flops * s.repeat for s in symbolic_stages(m, wl, p)
                  if s.role == "attn.index_scores")
        assert idx == 2 * 2 * 8 * 8 * 8


@pytest.mark.slow
def test_verify_passes_under_tensor_and_pipeline_parallelism():
    from shapecalc.check.verify import verify
    m = _tiny(n_layers=2, block_sparse_layers=(1,), block_index_heads=1)
    for sel in ("eager", "sparse"):
        for tp, pp in ((2, 1), (4, 2)):
            wl = Workload(batch=2, seq=9, selection=sel, dtype="fp32", tp=tp, pp=pp)
            doc = verify(m, wl)
            assert doc["ok"], [c for c in doc["checks"] if not c["ok"]]


@pytest.mark.slow
def test_live(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "measure_block_sparse",
        Path(__file__).parent / "torch_reference" / "measure_block_sparse.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import torch
    torch.manual_seed(0)
    r = CASES["minimax-m3"]["reduced"]
    small, scfg = mod._build(r["hf_config"], "cpu", torch.float32, False)
    got = mod._steps(small, scfg.vocab_size, 40, False)
    want = r["steps"][-1]
    assert (got["prefill"], got["decode"]) == (want["prefill"], want["decode"])


@pytest.mark.slow
def test_closed_form_across_the_block_cuts():
    """The sweep's closed form cuts at every multiple of S_blk (⌈T′/S_blk⌉ blocks, a query's
    place in its block) and at K_blk·S_blk, as at a chunk C and a window W: equal to the
    pipeline on both sides, in both conventions."""
    from shapecalc.costs.closed import ClosedForm
    from tests.test_closed import assert_equal_at
    m = _tiny(n_layers=3, index_topk_blocks=3, index_block_size=4, block_sparse_layers=(1, 2),
              n_experts=4, experts_per_token=2, ffn_types=("dense", "moe", "moe"))
    points = [dict(batch=b, seq=t, phase=ph, tp=tp, pp=pp, dtype="bf16", kv_dtype="bf16",
                   act_dtype="bf16")
              for ph in ("prefill", "decode") for t in (1, 3, 4, 5, 11, 12, 13, 14, 17, 30)
              for b in (1, 3) for tp, pp in ((1, 1), (2, 3))]
    for selection in ("eager", "sparse"):
        for flops in ("full", "causal"):
            cf = ClosedForm(m, selection=selection, attention_flops=flops)
            assert_equal_at(m, cf, points)


@pytest.mark.slow
@pytest.mark.parametrize("selection", ["eager", "sparse"])
def test_verify_passes_on_the_preset_at_reduced_width(selection):
    """The minimax-m3 preset at reduced width (tests/test_presets_verify.reduced: every width
    divided by 16, heads and layers kept), its first 4 layers (dense, then block-sparse with
    MoE), blocks of 2 and the top 2 so that T = 9 reaches past them, at tp 2."""
    from shapecalc.check.verify import verify
    from shapecalc.model.plan import layer_plan
    from tests.test_presets_verify import reduced
    m = reduced(load_preset("minimax-m3")).model_copy(
        update={"index_block_size": 2, "index_topk_blocks": 2})
    wl = Workload(batch=1, seq=9, tp=2, selection=selection)
    doc = verify(m, wl, layers=layer_plan(m).covering())
    assert doc["ok"], [c["name"] for c in doc["checks"] if not c["ok"]]


def test_kv_bytes_per_token_and_the_python_api():
    """A token adds, in bf16, K and V of 4 heads of 128 on each of the 60 layers and the block
    indexer's key of 128 on the 57 sparse ones; past the 2048 selected keys the kernel reads
    fewer keys than transformers' dense scores."""
    from shapecalc import api
    from shapecalc.model.parallel import kv_bytes_per_token
    m = load_preset("minimax-m3")
    assert kv_bytes_per_token(m, "bf16") == (60 * 2 * 4 * 128 + 57 * 128) * 2 == 137_472
    tot = _totals(m, 131_072, phase="decode")
    assert tot["kv_cache_bytes"] == 131_073 * 137_472
    assert tot["selected_attention"]["indexer_cache_bytes"] == 131_073 * 57 * 128 * 2
    eager, sparse = (api.trace("minimax-m3", seq=8192, selection=s).totals for s in
                     ("eager", "sparse"))
    assert sparse.selected_attention.convention == "sparse"
    assert (sparse.selected_attention.top_blocks, sparse.selected_attention.block_size) == (16, 128)
    assert sparse.flops < eager.flops == sparse.selected_attention.flops["eager"]
