"""Tiny llama, mistral, qwen2, gpt2, gemma, phi3, falcon and opt models:
tests/data/flop_reference.json (read by tests/test_reference.py).
"""

from __future__ import annotations

from .family import Family

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


def _show(c: dict) -> str:
    last = "null" if c["prefill_last_flops"] is None else format(c["prefill_last_flops"], ",d")
    return (f"prefill={c['prefill_flops']:>12,d} prefill_last={last:>12} "
            f"decode={c['decode_flops']:>10,d} kv={c['kv_cache_bytes']:,d}")


FAMILY = Family(
    name="flops", out="tests/data/flop_reference.json", cases=CASES, notes=NOTES, how=HOW,
    show=_show, batch=B, seq=T, vocab=V, threads=4,
    record=["name", "model_type", "hf_config", "batch", "seq", "prefill_flops",
            "prefill_last_flops", "decode_flops", "prefill_ops", "prefill_last_ops", "decode_ops",
            ("num_parameters", "params"), "kv_cache_bytes", "kv_cache_bytes_window_W",
            "kv_cache_shapes", "note"],
)
