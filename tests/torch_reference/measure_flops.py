#!/usr/bin/env python3
"""Measure reference matmul FLOPs of tiny Hugging Face causal LMs with PyTorch's
``torch.utils.flop_counter.FlopCounterMode`` and write ``tests/data/flop_reference.json``.

Run manually (the test suite only reads the JSON, it never imports this file):

    pip install torch==2.13.0 transformers==5.24.0
    python tests/torch_reference/measure_flops.py [--out PATH]

Models are built from configs with random weights (no downloads), float32, eager
attention, ``model.eval()`` and ``torch.no_grad()``.

Three measurements per case:
  * prefill       -- ``model(input_ids[B,T], use_cache=False)``: logits for all T positions.
  * prefill_last  -- same with ``logits_to_keep=1``: LM head only on the last position
                     (null if the forward does not accept ``logits_to_keep``).
  * decode        -- a T-token prefill with ``use_cache=True`` is run OUTSIDE the counter;
                     then only the forward of one new token per sequence
                     (``input_ids[B,1]``, ``cache=...`` / ``past_key_values=...``, ``use_cache=True``) is counted.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import tempfile
import traceback

import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig, AutoModelForCausalLM

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO_ROOT, "tests", "data", "flop_reference.json")

# Sizes are chosen so that no two symbols coincide:
#   D=64, H=4, Dh=16, Hkv=2 (or 1), I=176, L=3, V=1000, B=5, T=7.
B, T = 5, 7
D, H, DH, HKV, I, L, V, MAXPOS = 64, 4, 16, 2, 176, 3, 1000, 256

# the keys every llama-style config (llama, mistral, qwen2, gemma, phi3) shares
BASE = dict(
    hidden_size=D,
    num_attention_heads=H,
    intermediate_size=I,
    num_hidden_layers=L,
    vocab_size=V,
    max_position_embeddings=MAXPOS,
)

CASES = [
    ("llama_gqa", "llama", dict(BASE, num_key_value_heads=HKV, head_dim=DH,
                                tie_word_embeddings=False, attention_bias=False, mlp_bias=False)),
    ("llama_mha_bias_tied", "llama", dict(BASE, num_key_value_heads=H, head_dim=DH,
                                          tie_word_embeddings=True, attention_bias=True,
                                          mlp_bias=False)),
    ("mistral_gqa", "mistral", dict(BASE, num_key_value_heads=HKV, head_dim=DH,
                                    tie_word_embeddings=False, sliding_window=None)),
    ("mistral_gqa_sliding4", "mistral", dict(BASE, num_key_value_heads=HKV, head_dim=DH,
                                             tie_word_embeddings=False, sliding_window=4)),
    ("qwen2_gqa", "qwen2", dict(BASE, num_key_value_heads=HKV, tie_word_embeddings=False,
                                use_sliding_window=False)),
    ("gpt2", "gpt2", dict(n_embd=D, n_head=H, n_layer=L, n_positions=64, n_inner=None,
                          vocab_size=V, bos_token_id=V - 1, eos_token_id=V - 1,
                          tie_word_embeddings=True)),
    ("gemma_mqa", "gemma", dict(BASE, num_key_value_heads=1, head_dim=DH,
                                tie_word_embeddings=True)),
    ("phi3_gqa", "phi3", dict(BASE, num_key_value_heads=HKV, original_max_position_embeddings=MAXPOS,
                              tie_word_embeddings=False, sliding_window=None, bos_token_id=1,
                              eos_token_id=2, pad_token_id=0)),
    ("falcon_7b_style", "falcon", dict(hidden_size=D, num_attention_heads=H, num_hidden_layers=L,
                                       vocab_size=V, max_position_embeddings=MAXPOS,
                                       ffn_hidden_size=I, multi_query=True, parallel_attn=True,
                                       new_decoder_architecture=False, bias=False, alibi=False,
                                       tie_word_embeddings=True)),
    ("opt", "opt", dict(hidden_size=D, ffn_dim=I, num_attention_heads=H, num_hidden_layers=L,
                        vocab_size=V, max_position_embeddings=MAXPOS, do_layer_norm_before=True,
                        word_embed_proj_dim=D, enable_bias=True, tie_word_embeddings=True)),
]

# Per-case remarks stored next to the numbers (facts checked against transformers 5.24.0).
NOTES = {
    "llama_mha_bias_tied": "attention_bias=true puts a bias on q,k,v,o (counted as aten.addmm, bias add "
    "itself not counted); the tied LM head still costs 2*B*T*D*V.",
    "mistral_gqa_sliding4": "Eager prefill still computes the full TxT Q.K^T and A.V (the window is only "
    "a mask: no FLOPs saved). The DynamicCache uses DynamicSlidingWindowLayer, which "
    "keeps only the last sliding_window-1=3 keys/values after prefill, so the decode "
    "token attends over 4 keys, not T+1=8. (transformers 4.51.3 kept all 8 and "
    "warned that sliding window is not implemented for eager.)",
    "qwen2_gqa": "Qwen2 has bias on q,k,v (not o) by default: aten.addmm.",
    "gpt2": "n_inner null means 4*n_embd=256. Conv1D layers run as aten.addmm (2*m*k*n, bias not counted). "
    "The LM head is tied to wte and has no bias: aten.mm.",
    "gemma_mqa": "Gemma ties embeddings by default; the sqrt(D) embedding scale is elementwise (not counted).",
    "phi3_gqa": "Fused qkv_proj (D -> (H+2*Hkv)*Dh = 128) and gate_up_proj (D -> 2*I = 352): same FLOPs as "
    "llama_gqa.",
    "falcon_7b_style": "multi_query=true with new_decoder_architecture=false gives ONE KV head whatever "
    "num_kv_heads says (to_dict reports 4); fused query_key_value D -> (H+2)*Dh = 96; "
    "ffn_hidden_size=176; no biases.",
    "opt": "enable_bias: every linear has a bias (aten.addmm); word_embed_proj_dim == hidden_size so there is "
    "no project_in/project_out; learned positions cost no FLOPs.",
}


def _jsonable(obj):
    """True if obj survives json.dumps."""
    try:
        json.dumps(obj)
        return True
    except (TypeError, ValueError):
        return False


def config_to_json_dict(cfg) -> dict:
    """Complete, re-readable config.json dict: cfg.to_dict() minus non-serialisable entries."""
    d = cfg.to_dict()
    out = {k: v for k, v in d.items() if _jsonable(v)}
    out["model_type"] = cfg.model_type
    # Runtime-only keys that are not part of a config.json.
    for k in ("_attn_implementation_autoset", "_name_or_path"):
        out.pop(k, None)
    return out


def check_roundtrip(cfg, d: dict) -> None:
    """Save d as config.json, re-read it with AutoConfig, and compare the key sizes."""
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(d, f)
        cfg2 = AutoConfig.from_pretrained(tmp)
    assert cfg2.model_type == cfg.model_type
    a = {k: v for k, v in cfg.to_dict().items() if _jsonable(v)}
    b = {k: v for k, v in cfg2.to_dict().items() if _jsonable(v)}
    for k in ("_attn_implementation_autoset", "transformers_version", "_name_or_path"):
        a.pop(k, None)
        b.pop(k, None)
    diff = {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
    if diff:
        raise AssertionError(f"config round-trip mismatch on keys {sorted(diff)}")


def count(fn):
    """Run fn under FlopCounterMode; return (total_flops, {op: flops} of the Global scope)."""
    fc = FlopCounterMode(display=False)
    with fc:
        fn()
    ops = {str(op): int(n) for op, n in fc.get_flop_counts().get("Global", {}).items()}
    return int(fc.get_total_flops()), dict(sorted(ops.items()))


def cache_bytes(cache) -> tuple[int, list[list[int]]]:
    """Bytes of every tensor a transformers cache holds, and each layer's tensor shapes."""
    total, shapes = 0, []
    for layer in cache.layers:
        tensors = [t for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
                   if t is not None]
        total += sum(t.numel() * t.element_size() for t in tensors)
        shapes.append([list(t.shape) for t in tensors])
    return total, shapes


def window_cache_bytes(cfg, cache, seq: int) -> int:
    """What the same cache holds when each layer transformers gives a sliding-window cache keeps
    min(T, W) tokens (vLLM's convention, and shapecalc's) instead of its W-1: per layer, its bytes
    per token x the tokens it would keep."""
    total = 0
    for layer in cache.layers:
        held = layer.keys.shape[-2]
        per_token = 2 * layer.keys.numel() * layer.keys.element_size() // held
        sliding = type(layer).__name__ == "DynamicSlidingWindowLayer"
        total += (min(seq, cfg.sliding_window) if sliding else seq) * per_token
    return total


def forward_steps(model, count_fn, vocab: int, at_cache=None) -> dict:
    """The counted forwards of a measure script on a built model, on seeded token ids [B,T] and
    [B,1]: 'prefill' (all T logits, no cache), 'prefill_last' (logits_to_keep=1; None where the
    forward lacks that argument) and 'decode' (one token on the cache of a use_cache=True prefill
    run outside the counter), each what `count_fn` returns. Also 'out' (their outputs), 'kv' and
    'kv_window' (cache_bytes and window_cache_bytes of the cache before the decode), 'at_cache'
    (what `at_cache(cache)` returns then), the 'cache' after the decode, and the ids."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (B, T), generator=g)
    next_ids = torch.randint(0, vocab, (B, 1), generator=g)
    params = inspect.signature(model.forward).parameters
    # transformers 5.x renamed `past_key_values` to `cache` (argument and output field)
    cache_kw = "cache" if "cache" in params else "past_key_values"
    res: dict = {"out": {}, "ids": ids, "next_ids": next_ids, "prefill_last": None}
    out = res["out"]
    with torch.no_grad():
        res["prefill"] = count_fn(lambda: out.setdefault("p", model(ids, use_cache=False)))
        assert out["p"].logits.shape == (B, T, vocab), out["p"].logits.shape
        if "logits_to_keep" in params:
            res["prefill_last"] = count_fn(
                lambda: out.setdefault("pl", model(ids, use_cache=False, logits_to_keep=1)))
            assert out["pl"].logits.shape == (B, 1, vocab), out["pl"].logits.shape
        pre = model(ids, use_cache=True)
        cache = getattr(pre, "cache", None) if cache_kw == "cache" else pre.past_key_values
        assert cache is not None
        res["kv"] = cache_bytes(cache)
        res["kv_window"] = window_cache_bytes(model.config, cache, T)
        res["at_cache"] = at_cache(cache) if at_cache else None
        res["decode"] = count_fn(
            lambda: out.setdefault("d", model(next_ids, use_cache=True, **{cache_kw: cache})))
        assert out["d"].logits.shape == (B, 1, vocab), out["d"].logits.shape
    res["cache"] = cache
    return res


def measure_case(name: str, model_type: str, kwargs: dict) -> dict:
    cfg = AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(0)
    # transformers >= 4.56 calls the dtype argument `dtype`; older versions `torch_dtype`.
    major_minor = tuple(int(x) for x in transformers.__version__.split(".")[:2])
    dtype_kw = "dtype" if major_minor >= (4, 56) else "torch_dtype"
    model = AutoModelForCausalLM.from_config(
        cfg, attn_implementation="eager", **{dtype_kw: torch.float32}
    )
    model.eval()
    cfg = model.config  # the config actually used (attn implementation resolved, etc.)
    steps = forward_steps(model, count, cfg.vocab_size)
    prefill_flops, prefill_ops = steps["prefill"]
    prefill_last_flops, prefill_last_ops = steps["prefill_last"] or (None, None)
    decode_flops, decode_ops = steps["decode"]
    (kv_hf, kv_shapes), kv_window = steps["kv"], steps["kv_window"]

    hf_config = config_to_json_dict(cfg)
    check_roundtrip(cfg, hf_config)
    n_params = sum(p.numel() for p in model.parameters())  # tied weights counted once

    return {
        "name": name,
        "model_type": model_type,
        "hf_config": hf_config,
        "batch": B,
        "seq": T,
        "prefill_flops": prefill_flops,
        "prefill_last_flops": prefill_last_flops,
        "decode_flops": decode_flops,
        "prefill_ops": prefill_ops,
        "prefill_last_ops": prefill_last_ops,
        "decode_ops": decode_ops,
        "num_parameters": int(n_params),
        "kv_cache_bytes": kv_hf,
        "kv_cache_bytes_window_W": kv_window,
        "kv_cache_shapes": kv_shapes,
        "note": NOTES.get(name, ""),
    }


HOW = (
    "Each model is built with AutoModelForCausalLM.from_config(cfg, attn_implementation='eager', "
    "dtype=torch.float32) after torch.manual_seed(0) (random weights, no checkpoint), put in eval() "
    "and run under torch.no_grad() on CPU. FLOPs are torch.utils.flop_counter.FlopCounterMode"
    "(display=False).get_total_flops(), which counts only matmul-like aten ops (mm, addmm, bmm, "
    "baddbmm, convolution, SDPA kernels) as 2*m*k*n (bias adds, softmax, norms, activations, rotary "
    "elementwise products are NOT counted); *_ops is get_flop_counts()['Global'] (op name -> flops). "
    "prefill: model(input_ids[B,T], use_cache=False), logits for all T positions (logits_to_keep=0). "
    "prefill_last: same call with logits_to_keep=1 (LM head on the last position only; null if the "
    "forward lacks that argument). decode: model(input_ids[B,T], use_cache=True) is run outside the "
    "counter to fill the KV cache (a DynamicCache), then only model(next_ids[B,1], cache=<that cache> "
    "(past_key_values in older versions), use_cache=True) is counted, so each query attends over "
    "the keys held by the cache (T+1 with a full cache). hf_config is cfg.to_dict() of the built model (JSON-serialisable entries, with "
    "model_type) and re-reads via AutoConfig.from_pretrained on a directory holding it as config.json. "
    "num_parameters counts unique parameter tensors (tied embeddings once). kv_cache_bytes: sum of "
    "numel*element_size of every tensor in cache.layers[i].keys/.values after the use_cache=True "
    "prefill (float32), kv_cache_shapes each layer's; kv_cache_bytes_window_W: the same cache if "
    "each layer transformers gives a DynamicSlidingWindowLayer kept min(T, W) tokens (vLLM's "
    "convention, which shapecalc reports) instead of its W-1."
)


def run(argv, description: str, default_out: str, cases, measure_case, show, how: str, *,
        published=None, extra: dict | None = None, threads: int = 2) -> int:
    """Every measure_*.py's main: measure each (name, model_type, kwargs) case (a failing case is
    recorded in `errors`, the others still run), then `published()` (stem -> meta-device counts)
    if given, and write one JSON document: versions, `how`, `extra`, cases, errors, published.
    `show(case)` is the line printed per case. Exits 1 when a case failed."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", default=default_out)
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, min(threads, os.cpu_count() or 1)))
    done, errors = [], []
    for name, model_type, kwargs in cases:
        try:
            case = measure_case(name, model_type, kwargs)
            done.append(case)
            print(f"{name:28s} {show(case)}")
        except Exception as exc:  # record and go on: the file says which case failed and why
            traceback.print_exc()
            errors.append({"name": name, "model_type": model_type,
                           "error": f"{type(exc).__name__}: {exc}"})
    doc = {"torch": torch.__version__, "transformers": transformers.__version__,
           "python": sys.version.split()[0], "how": how, **(extra or {}), "cases": done,
           "errors": errors}
    if published is not None:
        doc["published"] = published()
        for stem, p in doc["published"].items():
            print(f"{stem:28s} params_meta={p['params_meta']:,d}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out} ({len(done)} cases, {len(errors)} errors)")
    return 1 if errors else 0


def main(argv=None) -> int:
    def show(c: dict) -> str:
        last = "null" if c["prefill_last_flops"] is None else format(c["prefill_last_flops"], ",d")
        return (f"prefill={c['prefill_flops']:>12,d} prefill_last={last:>12} "
                f"decode={c['decode_flops']:>10,d} kv={c['kv_cache_bytes']:,d}")

    return run(argv, __doc__.splitlines()[0], DEFAULT_OUT, CASES, measure_case, show, HOW,
               threads=4)


if __name__ == "__main__":
    sys.exit(main())
