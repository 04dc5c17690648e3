"""GPT-NeoX, GPT-J, Phi, StableLM, Cohere, Granite and Falcon's new decoder:
tests/data/classic_reference.json (read by tests/test_classic_reference.py).
"""

from __future__ import annotations

from .family import Family

B, T = 5, 7
D, H, HKV, V, MAXPOS, L = 64, 4, 2, 1000, 256, 3

# Sizes differ between the symbols of a case (D=64, Dh=16 or 24, R, Dff) so that a formula that
# swaps two of them gives a different number.
CASES = [
    ("gpt_neox_parallel", "gpt_neox", dict(
        hidden_size=D, num_attention_heads=H, num_hidden_layers=L, vocab_size=V,
        max_position_embeddings=MAXPOS, intermediate_size=176, rotary_pct=0.25,
        use_parallel_residual=True, attention_bias=True, tie_word_embeddings=False)),
    ("gpt_neox_sequential", "gpt_neox", dict(
        hidden_size=D, num_attention_heads=H, num_hidden_layers=L, vocab_size=V,
        max_position_embeddings=MAXPOS, intermediate_size=176, rotary_pct=0.5,
        use_parallel_residual=False, attention_bias=False, tie_word_embeddings=False)),
    ("gptj", "gptj", dict(
        n_embd=D, n_head=H, n_layer=L, vocab_size=V, n_positions=MAXPOS, n_inner=176,
        rotary_dim=8, tie_word_embeddings=False, bos_token_id=V - 1, eos_token_id=V - 1)),
    ("phi_gqa_head24", "phi", dict(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=HKV, head_dim=24,
        num_hidden_layers=L, vocab_size=V, max_position_embeddings=MAXPOS,
        intermediate_size=176, partial_rotary_factor=0.5, qk_layernorm=False,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)),
    ("stablelm_parallel_qknorm", "stablelm", dict(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=HKV, num_hidden_layers=L,
        vocab_size=V, max_position_embeddings=MAXPOS, intermediate_size=176,
        partial_rotary_factor=0.25, qk_layernorm=True, use_parallel_residual=True,
        use_qkv_bias=False, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)),
    ("stablelm_sequential_qkv_bias", "stablelm", dict(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=H, num_hidden_layers=L,
        vocab_size=V, max_position_embeddings=MAXPOS, intermediate_size=176,
        partial_rotary_factor=0.25, qk_layernorm=False, use_parallel_residual=False,
        use_qkv_bias=True, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)),
    ("cohere_qknorm_head24", "cohere", dict(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=HKV, head_dim=24,
        num_hidden_layers=L, vocab_size=V, max_position_embeddings=MAXPOS,
        intermediate_size=176, logit_scale=0.125, use_qk_norm=True, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2, pad_token_id=0)),
    ("granite_gqa_head24", "granite", dict(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=HKV, head_dim=24,
        num_hidden_layers=L, vocab_size=V, max_position_embeddings=MAXPOS,
        intermediate_size=176, embedding_multiplier=12.0, attention_multiplier=0.0078125,
        residual_multiplier=0.22, logits_scaling=8.0, tie_word_embeddings=True)),
    ("falcon_new_two_norms", "falcon", dict(
        hidden_size=D, num_attention_heads=H, num_kv_heads=HKV, num_hidden_layers=L,
        vocab_size=V, max_position_embeddings=MAXPOS, ffn_hidden_size=176,
        new_decoder_architecture=True, parallel_attn=True, bias=False, alibi=False,
        tie_word_embeddings=True)),
    ("falcon_new_one_norm", "falcon", dict(
        hidden_size=D, num_attention_heads=H, num_kv_heads=HKV, num_hidden_layers=L,
        vocab_size=V, max_position_embeddings=MAXPOS, ffn_hidden_size=176,
        new_decoder_architecture=True, parallel_attn=True, num_ln_in_parallel_attn=1,
        bias=True, alibi=False, tie_word_embeddings=False)),
]

NOTES = {
    "gptj": "rotate_every_two on the first rotary_dim=8 of Dh=16 (interleaved pairs); one ln_1 "
    "shared by attention and MLP; lm_head has a bias.",
    "phi_gqa_head24": "head_dim=24 != D/H; R = int(24 * 0.5) = 12.",
    "stablelm_parallel_qknorm": "q/k LayerNorm per head (StableLmLayerNormPerHead, no bias): "
    "H*Dh and H_kv*Dh weights; one input_layernorm for the parallel block.",
    "cohere_qknorm_head24": "CohereLayerNorm has no bias; q_norm/k_norm weights are [H, Dh] and "
    "[H_kv, Dh]; logits * logit_scale.",
    "granite_gqa_head24": "embedding_multiplier, attention_multiplier (replaces 1/sqrt(Dh)), "
    "residual_multiplier and logits / logits_scaling are elementwise: no matmul FLOPs.",
    "falcon_new_two_norms": "new_decoder_architecture broadcasts K and V to every query head "
    "before caching: the cache holds H heads per layer although the model computes H_kv.",
    "falcon_new_one_norm": "num_ln_in_parallel_attn=1: one input_layernorm; bias=true on every "
    "linear.",
}

# Each real config.json: the publisher's figure, exact where one is published.
PUBLISHED = {
    "pythia-1.4b": dict(params_published=1_414_647_808, figure="1.4B",
                        source="EleutherAI/pythia README, table of total params "
                        "(1,414,647,808)"),
    "gpt-neox-20b": dict(params_published=20_554_567_680, figure="20B",
                         source="EleutherAI/gpt-neox-20b model card, number of parameters "
                         "20,554,567,680 (also the GPT-NeoX-20B paper)"),
    "gpt-j-6b": dict(params_published=None, figure="6,053,381,344",
                     source="EleutherAI/gpt-j-6b model card, n_parameters 6053381344: it counts "
                     "the Mesh Transformer JAX checkpoint, 2,498,560 more than the transformers "
                     "model (not asserted; the meta-device sum is)"),
    "phi-2": dict(params_published=None, figure="2.7B",
                  source="microsoft/phi-2 model card (2.7 billion parameters)"),
    "stablelm-2-1.6b": dict(params_published=None, figure="1.6B",
                            source="stabilityai/stablelm-2-1_6b model card (1.6 billion)"),
    "stablelm-2-12b": dict(params_published=None, figure="12.1B",
                           source="stabilityai/stablelm-2-12b model card (12.1 billion)"),
    "command-r-v01": dict(params_published=None, figure="35B",
                          source="CohereForAI/c4ai-command-r-v01 model card (35 billion)"),
    "granite-3.3-8b": dict(params_published=None, figure="8B",
                           source="ibm-granite/granite-3.3-8b-instruct model card (8B; the Hub "
                           "shows 8.17B)"),
    "falcon-40b": dict(params_published=None, figure="40B",
                       source="tiiuae/falcon-40b model card (40B)"),
}

HOW = (
    "cases: as the flops family measures (AutoModelForCausalLM.from_config(cfg, "
    "attn_implementation='eager', dtype=float32), torch.manual_seed(0), eval, no_grad, CPU, "
    "FlopCounterMode): "
    "prefill = model(ids[B,T], use_cache=False), prefill_last = the same with logits_to_keep=1, "
    "decode = one token per sequence on the cache of a T-token prefill run outside the counter. "
    "kv_cache_bytes_hf = sum of keys.numel()*element_size() + values over the cache's layers "
    "after that prefill (float32); kv_cache_heads_hf and kv_cache_tokens_hf the heads and tokens "
    "each layer holds. rotary_dim = 2*len(inv_freq) of the model's rotary embedding (GPT-J: "
    "pos_embd_dim). published: each config.json built with AutoModelForCausalLM.from_config under "
    "torch.device('meta'); params_meta = sum(p.numel()) (tied weights once)."
)


def _show(c: dict) -> str:
    return (f"prefill={c['prefill_flops']:>10,d} decode={c['decode_flops']:>9,d} "
            f"kv={c['kv_cache_bytes_hf']:>7,d} R={c['rotary_dim']}")


FAMILY = Family(
    name="classic", out="tests/data/classic_reference.json", cases=CASES, notes=NOTES, how=HOW,
    show=_show, batch=B, seq=T, vocab=V, threads=1,
    record=["name", "model_type", "hf_config", "batch", "seq", "prefill_flops",
            "prefill_last_flops", "decode_flops", "prefill_ops", "prefill_last_ops", "decode_ops",
            "params", "rotary_dim", ("kv_cache_bytes_hf", "kv_cache_bytes"),
            # the heads and tokens the layers keep (sorted, each once)
            ("kv_cache_heads_hf", lambda g: sorted({k[1] for k, _ in g["kv_cache_shapes"]})),
            ("kv_cache_tokens_hf", lambda g: sorted({k[2] for k, _ in g["kv_cache_shapes"]})),
            "note"],
    published=PUBLISHED,
    published_record=["file", ("params_meta", "text"), "rotary_dim", "params_published", "figure",
                      "source"],
)
