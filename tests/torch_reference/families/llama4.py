"""Llama 4 text models: tests/data/llama4_reference.json (read by tests/test_llama4_reference.py).

Each case is measured twice: as transformers runs it (`hf_*`: Llama4TextMoe runs every expert on
every token, its input scaled by a router score that is 0 for the experts not chosen) and with
the routed MoE forward engines run (`routed_*`: shapecalc.reference.measure.route_llama4, each
token through its top-k experts only), whose logits the harness asserts equal transformers'.
The chunked layers' cache after the prefill is recorded as transformers keeps it, next to the
current chunk vLLM keeps.
"""

from __future__ import annotations

from typing import Any

from .family import Family

B, C, V = 5, 4, 1000
_TINY = dict(
    hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
    num_hidden_layers=4, vocab_size=V, max_position_embeddings=256, intermediate_size=32,
    intermediate_size_mlp=96, num_local_experts=6, num_experts_per_tok=2,
    interleave_moe_layer_step=2, attention_chunk_size=C, use_qk_norm=True,
    attn_temperature_tuning=True, tie_word_embeddings=False,
)
# (name, T, config): T = 11 ≡ C−1 (mod C), where transformers' chunked cache (C−1 tokens) holds
# exactly the current chunk, so its decode reads the same keys as vLLM's; T = 10, where it holds
# one token more, which the chunk mask then hides.
SEQ_CASES = [
    ("llama4_c4_t11", 11, _TINY),
    ("llama4_c4_t10", 10, _TINY),
    ("llama4_all_moe_k1_t11", 11, dict(_TINY, interleave_moe_layer_step=1, num_experts_per_tok=1,
                                       use_qk_norm=False)),
]
CASES = [(name, "llama4_text", kwargs) for name, _, kwargs in SEQ_CASES]
SEQ = {name: t for name, t, _ in SEQ_CASES}

PUBLISHED = {
    "llama4-scout": dict(
        repo="meta-llama/Llama-4-Scout-17B-16E", figure="17B active, 109B total parameters",
        source="Meta, Llama 4 model card (Apr 2025) and 'The Llama 4 herd' blog post. The 109B "
        "counts the vision encoder and projector: the whole Llama4ForConditionalGeneration is "
        "params_meta_full; shapecalc counts the text model (params_meta)."),
    "llama4-maverick": dict(
        repo="meta-llama/Llama-4-Maverick-17B-128E", figure="17B active, 400B total parameters",
        source="Meta, Llama 4 model card (Apr 2025) and 'The Llama 4 herd' blog post. The text "
        "model (params_meta) is 400.7B; with the vision encoder and projector "
        "(params_meta_full) 401.6B."),
}

HOW = (
    "cases: tiny llama4_text models, AutoModelForCausalLM.from_config(cfg, "
    "attn_implementation='eager', dtype=torch.float32) after torch.manual_seed(0); every router "
    "weight redrawn from N(0,1) (torch.Generator seed 1). eval(), no_grad, CPU, B=5, T=seq, "
    "attention_chunk_size C=4. FLOPs: FlopCounterMode(display=False).get_total_flops() (matmuls "
    "only, 2*m*k*n). prefill: model(ids[B,T], use_cache=False); prefill_last: logits_to_keep=1; "
    "decode: model(next[B,1], cache=<DynamicCache of a prefill>, use_cache=True). hf_*: "
    "transformers' own Llama4TextMoe, which runs every expert on every token (its input times a "
    "router score that is 0 for the experts not chosen): moe_dense_extra_flops = "
    "2*(E-k)*B*Tq*3*D*Dff_e per MoE layer more than the routed work. routed_*: the same model "
    "with Llama4TextMoe's forward replaced by shapecalc.reference.measure.route_llama4's (each "
    "token through its top-k experts only, input scaled by sigmoid of the top-k logit, as vLLM "
    "runs it; one (token, expert) pair a row with its expert's weights gathered, as "
    "transformers' batched_mm experts do, so the routed FLOPs sit on feed_forward.experts); its "
    "logits equal transformers' (asserted). hf_kv_*_after_prefill: the DynamicCache after the "
    "prefill "
    "(chunked_attention layers are DynamicSlidingWindowLayer(sliding_window=C): they keep the "
    "last min(T, C-1) tokens); vllm_kv_*: the tokens of the current chunk, ((T-1) mod C)+1, on "
    "chunked layers (vLLM's chunked local attention frees the blocks before the chunk). "
    "decode_keys_chunked: keys a decode query multiplies on a chunked layer: transformers "
    "min(T, C-1)+1 (the chunk mask hides the ones of the chunk before), vLLM (T mod C)+1; "
    "decode_attention_extra_flops: what the difference costs in QK^T and AV over the chunked "
    "layers. published: each config.json in tests/data/hf read with AutoConfig.from_pretrained; "
    "params_meta = the text model (AutoModelForCausalLM.from_config(cfg.text_config): "
    "Llama4ForCausalLM) on the meta device; params_meta_full = Llama4ForConditionalGeneration(cfg) "
    "on the meta device, with params_vision_model and params_projector its parts."
)


def _show(c: dict) -> str:
    return (f"hf prefill={c['hf_prefill_flops']:,d} "
            f"routed prefill={c['routed_prefill_flops']:,d} "
            f"routed decode={c['routed_decode_flops']:,d} params={c['params']:,d}")


def _dense_extra(g: dict[str, Any]) -> dict[str, int]:
    """What the dense experts add: E − k more expert FFNs per token and MoE layer."""
    cfg, T = g["config"], g["seq"]
    E, k, D, F = (cfg.num_local_experts, cfg.num_experts_per_tok, cfg.hidden_size,
                  cfg.intermediate_size)
    return {ph: 2 * (E - k) * B * tq * 3 * D * F * len(cfg.moe_layers)
            for ph, tq in (("prefill", T), ("prefill_last", T), ("decode", 1))}


def _chunked(g: dict[str, Any]) -> list[bool]:
    return [t == "chunked_attention" for t in g["config"].layer_types]


def _vllm_tokens(g: dict[str, Any]) -> list[int]:
    """The current chunk's tokens after the prefill (vLLM frees the blocks before it)."""
    T = g["seq"]
    return [(T - 1) % C + 1 if c else T for c in _chunked(g)]


def _decode_keys(g: dict[str, Any]) -> dict[str, int]:
    """Keys a decode query multiplies on a chunked layer."""
    T = g["seq"]
    return {"transformers": min(T, C - 1) + 1, "vllm": T % C + 1}


def _decode_extra(g: dict[str, Any]) -> int:
    """What transformers' extra keys cost in QKᵀ and A·V over the chunked layers."""
    cfg, keys = g["config"], _decode_keys(g)
    return (sum(_chunked(g)) * 2 * 2 * B * cfg.num_attention_heads * cfg.head_dim
            * (keys["transformers"] - keys["vllm"]))


def _vllm_bytes(g: dict[str, Any]) -> int:
    cfg = g["config"]
    return sum(_vllm_tokens(g)) * 2 * B * cfg.num_key_value_heads * cfg.head_dim * 4


def _routed(model: Any) -> None:
    from shapecalc.reference.measure import route_llama4  # the harness's shapecalc, at run time

    assert route_llama4(model)


_STEPS = ("prefill", "prefill_last", "decode")
FAMILY = Family(
    name="llama4", out="tests/data/llama4_reference.json", cases=CASES, how=HOW, show=_show,
    batch=B, seq=SEQ, vocab=V, probes=("redraw_routers",),
    variants=(("hf", None), ("routed", _routed)),
    record=["name", "model_type", "hf_config", "batch", "seq", ("chunk", lambda g: C),
            ("layer_types", lambda g: list(g["config"].layer_types)),
            ("no_rope_layers", lambda g: list(g["config"].no_rope_layers)),
            ("moe_layers", lambda g: list(g["config"].moe_layers)),
            *(f"{tag}_{step}_{q}" for tag in ("hf", "routed") for q in ("flops", "modules")
              for step in _STEPS),
            ("moe_dense_extra_flops", _dense_extra),
            ("hf_cache_layers", lambda g: [x["kind"] for x in g["hf_kv_cache_layers"]]),
            ("hf_kv_tokens_after_prefill", lambda g: [x["tokens"] for x in
                                                      g["hf_kv_cache_layers"]]),
            ("hf_kv_bytes_after_prefill", "hf_kv_cache_bytes"),
            ("vllm_kv_tokens_after_prefill", _vllm_tokens),
            ("vllm_kv_bytes_after_prefill", _vllm_bytes),
            ("decode_keys_chunked", _decode_keys),
            ("decode_attention_extra_flops", _decode_extra), "params", "params_meta"],
    published=PUBLISHED,
    published_record=["file", "repo", "model_type", "text_model_type", "text_class",
                      ("params_meta", "text"), ("params_meta_full", "whole"),
                      ("params_vision_model", "vision_model"),
                      ("params_projector", "multi_modal_projector"),
                      ("params_published", lambda g: None),  # Meta publishes rounded figures
                      "figure", "source"],
)
