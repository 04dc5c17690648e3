"""The NumPy executor: the same forward() as the symbolic side, with real arrays."""

from __future__ import annotations

import numpy as np
import pytest

from shapecalc.check.verify import _expand
from shapecalc.interpret import symbolic
from shapecalc.interpret.caches import ContiguousKV, PagedKV
from shapecalc.interpret.numeric import step
from shapecalc.interpret.storage import decode, encode, measure, pack_int4
from shapecalc.interpret.weights import Weights
from shapecalc.model.config import ModelConfig, Workload

F64 = np.float64
FIELDS = ("name", "op", "group", "shape", "flops", "elementwise_flops", "params", "bytes")


def toy(**kw) -> ModelConfig:
    base = dict(vocab_size=37, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=24,
                ffn="swiglu", norm="rmsnorm", positions="rope")
    return ModelConfig(**{**base, **kw})


def ids_for(m: ModelConfig, B: int, T: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, m.vocab_size, (B, T))


def rows(stages):
    return [tuple(getattr(s, f) for f in FIELDS) for s in stages]


@pytest.mark.parametrize("p", [1, 2, 4])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_every_stage_matches_symbolic(p, phase):
    m = toy(qkv_bias=True, attn_out_bias=True, ffn_bias=True, lm_head_bias=True, n_kv_heads=1,
            vocab_size=39)  # MQA: replicated KV heads; a vocabulary p does not divide
    wl = Workload(batch=2, seq=5, tp=p, phase=phase, dtype="bf16", kv_dtype="int4")
    w = Weights(m, 0, F64, p=p)
    cache = ContiguousKV(wl.kv, None, F64)
    if phase == "decode":
        step(m, wl.model_copy(update={"phase": "prefill"}), w, ids_for(m, 2, 5), cache=cache)
    got = step(m, wl, w, ids_for(m, 2, 1 if phase == "decode" else 5), cache=cache)
    assert rows(got.stages) == rows(_expand(symbolic.stages(m, wl, p), m.n_layers))


def test_decode_from_the_cache_equals_the_full_forward():
    m = toy(sliding_window=4, positions="rope")
    T = 7
    wl = Workload(batch=3, seq=T, dtype="fp32")
    w = Weights(m, 1, F64)
    ids = ids_for(m, 3, T + 1)
    cache = ContiguousKV("fp32", m.sliding_window, F64)
    step(m, wl, w, ids[:, :T], cache=cache)
    assert cache.held == 4  # the window: the cache keeps W tokens
    dec = step(m, wl.model_copy(update={"phase": "decode"}), w, ids[:, T:], cache=cache)
    full = step(m, wl.model_copy(update={"seq": T + 1}), w, ids)
    np.testing.assert_allclose(dec.logits, full.logits, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("window", [None, 5])
def test_paged_cache_equals_contiguous_and_uses_the_block_table(window):
    m = toy(sliding_window=window, positions="learned", max_positions=32)
    T, bs = 9, 4
    wl = Workload(batch=2, seq=T, dtype="fp32", block_size=bs)
    w = Weights(m, 2, F64)
    ids = ids_for(m, 2, T + 1)
    dec_wl = wl.model_copy(update={"phase": "decode"})
    flat = ContiguousKV("fp32", window, F64)
    paged = PagedKV("fp32", window, F64, bs, 2, T + 1, seed=3)
    out = []
    for cache in (flat, paged):
        step(m, wl, w, ids[:, :T], cache=cache)
        out.append(step(m, dec_wl, w, ids[:, T:], cache=cache))
    np.testing.assert_array_equal(out[0].logits, out[1].logits)
    tokens = T + 1 if window is None else window
    assert paged.blocks == 2 * -(-tokens // bs)
    # second seed §9 (the paged KV cache): token i is in block i // block_size, slot i % block_size
    if window is None:
        pool, codes = paged.pools[0], flat.codes[0]  # [blocks, slot, R, 2, H_kv, Dh]
        for i in (0, 3, 4, 9):
            phys = paged.table[1, i // bs]
            np.testing.assert_array_equal(pool[phys, i % bs, :, :, :, :], codes[:, :, 1, :, i])
        assert sorted(paged.table.ravel().tolist()) != paged.table.ravel().tolist()  # shuffled


@pytest.mark.parametrize(("heads", "kv", "p"), [(4, 4, 2), (4, 2, 4), (4, 1, 4), (8, 2, 2)])
def test_tensor_parallel_ranks_equal_one_rank(heads, kv, p):
    m = toy(n_heads=heads, n_kv_heads=kv, d_model=16, head_dim=4, qkv_bias=True,
            attn_out_bias=True, ffn_bias=True, fused_qkv=heads == 8, vocab_size=41)
    wl = Workload(batch=2, seq=6, dtype="fp32")
    w = Weights(m, 4, F64, p=p)
    one = step(m, wl, w, ids_for(m, 2, 6), p=1)
    many = step(m, wl.model_copy(update={"tp": p}), w, ids_for(m, 2, 6), p=p)
    np.testing.assert_allclose(many.logits, one.logits, rtol=1e-10, atol=1e-12)
    ar = [s for s in many.stages if s.op == "allreduce" and s.group == "block"]
    assert len(ar) == 2 * m.n_layers and all(s.bytes == 2 * 6 * 16 * 4 for s in ar)


def test_causal_mask_hides_the_future():
    m = toy()
    wl = Workload(batch=2, seq=8, dtype="fp32")
    w = Weights(m, 5, F64)
    ids = ids_for(m, 2, 8)
    changed = ids.copy()
    changed[:, 5:] = (changed[:, 5:] + 1) % m.vocab_size
    a, b = step(m, wl, w, ids), step(m, wl, w, changed)
    np.testing.assert_allclose(a.full[:, :5], b.full[:, :5], rtol=1e-12, atol=1e-14)
    assert not np.allclose(a.full[:, 5:], b.full[:, 5:])


@pytest.mark.parametrize("positions", ["rope", "learned", "sinusoidal"])
def test_padding_mask_gives_unpadded_results(positions):
    m = toy(positions=positions, max_positions=16 if positions == "learned" else None)
    T, L = 8, 5
    w = Weights(m, 6, F64)
    rows_ = ids_for(m, 2, T)
    valid = np.ones((2, T), dtype=bool)
    valid[1, : T - L] = False  # row 1: three pads on the left
    wl = Workload(batch=2, seq=T, dtype="fp32", padding_mask=True)
    padded = step(m, wl, w, rows_, valid=valid)
    alone = step(m, Workload(batch=1, seq=L, dtype="fp32"), w, rows_[1:, T - L:])
    np.testing.assert_allclose(padded.full[1, T - L:], alone.full[0], rtol=1e-10, atol=1e-12)
    no_mask = step(m, wl.model_copy(update={"padding_mask": False}), w, rows_, valid=valid)
    assert not np.allclose(no_mask.full[1, T - L:], alone.full[0])  # the mask does the work


def test_matmul_count_does_not_grow_with_tokens_heads_or_batch():
    """BLAS does the loops: the number of matmul calls depends on the layers only."""
    counts = set()
    for B, T, H in ((1, 2, 2), (3, 9, 4)):
        m = toy(n_heads=H, n_kv_heads=H, d_model=16)
        counts.add(len(step(m, Workload(batch=B, seq=T), Weights(m), ids_for(m, B, T)).gemms))
    assert len(counts) == 1


def test_streamed_weights_equal_resident_ones():
    m = toy(fused_qkv=True, qkv_bias=True, tie_embeddings=True, n_kv_heads=1)
    for p in (1, 4):
        wl = Workload(batch=2, seq=5, tp=p)
        a = step(m, wl, Weights(m, 0, F64, p=p), ids_for(m, 2, 5))
        b = step(m, wl, Weights(m, 0, F64, p=p, resident=False, chunk_bytes=200),
                 ids_for(m, 2, 5))
        np.testing.assert_allclose(a.logits, b.logits, rtol=1e-12, atol=1e-15)
        assert rows(a.stages) == rows(b.stages)


def test_storage_dtypes_measure_what_they_store():
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    assert measure(x, "fp32") == 60 and measure(x, "bf16") == 30 and measure(x, "int4") == 8
    bf = encode(x, "bf16")
    assert bf.dtype == np.uint16
    np.testing.assert_allclose(decode(bf, "bf16", np.float32), x, rtol=2**-8)
    assert pack_int4(np.array([1, -1, 7], dtype=np.int8)).tolist() == [0xF1, 0x07]
