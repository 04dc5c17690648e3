"""The layouts, each one mechanism, of BLOOM, MPT (ALiBi), GPT-BigCode (StarCoder 1, SantaCoder: MQA
with a fused c_attn) and StarCoder2 (sliding window, biases, LayerNorm, a plain GELU MLP).

Each returns the ModelConfig fields of its family from a config.json. Absent keys take the class
defaults in their entries (hf_families.py), which also hold the refusals that need no arithmetic. A
key that changes what the model computes, and that shapecalc does not model (or that transformers'
class silently ignores, so that its count would not be the checkpoint's), is refused in one line
naming the key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..model.config import ShapecalcError
from .hf_base import HF, Fields, layout


def _refuse_if(h: HF, key: str, ok: Callable[[Any], bool], why: str,
               default: Any = None) -> None:
    value = h.get(key, default)
    if not ok(value):
        raise ShapecalcError(key, f"{value!r}: {why}")


def _bloom(h: HF) -> Fields:
    # BloomModel: word_embeddings, word_embeddings_layernorm (γ, β), blocks of LayerNorm →
    # fused query_key_value [D, 3D] (+bias) → ALiBi scores → dense [D, D] (+bias), LayerNorm →
    # dense_h_to_4h [D, 4D] (+bias) → tanh GELU → dense_4h_to_h (+bias); ln_f; lm_head tied.
    d = h.need("hidden_size", "D")
    _refuse_if(h, "n_inner", lambda v: v in (None, 4 * d),
               f"transformers' BloomMLP is 4·hidden_size = {4 * d} wide whatever n_inner says")
    slices = h.get("pretraining_tp")
    if h.get("slow_but_exact") and slices > 1:
        raise ShapecalcError("slow_but_exact", "true with pretraining_tp > 1: the output "
                             "projections run in slices without their biases, not modelled")
    return dict(
        vocab_size=h.get("vocab_size"),
        d_model=d,
        n_layers=h.get("n_layer", h.get("num_hidden_layers")),
        n_heads=h.get("n_head", h.get("num_attention_heads")),
        d_ff=4 * d,
        ffn="gelu",  # BloomGelu: the tanh approximation
        norm="layernorm",
        positions="alibi",
        tie_embeddings=h.get("tie_word_embeddings"),
        qkv_bias=True, attn_out_bias=True, ffn_bias=True,
        fused_qkv=True,  # query_key_value, per head [q k v] interleaved: same numbers
        embedding_norm=True,
    )


# MPT's attn_config: the value transformers' MptAttention (and ALiBi as shapecalc computes it)
# assumes for each key, and why another value is refused
_MPT_ATTN: dict[str, tuple[Any, str]] = {
    "alibi": (True, "transformers' MptModel always adds ALiBi and has no position table"),
    "alibi_bias_max": (8, "ALiBi slopes are computed with 8 (BLOOM's and MPT's default)"),
    "attn_type": ("multihead_attention", "transformers' MptAttention is multi-head whatever "
                  "attn_type says (its Wqkv is [D, 3D])"),
    "clip_qkv": (None, "clamping q, k, v is an elementwise stage shapecalc does not model"),
    "qk_ln": (False, "transformers' MptAttention has no q/k LayerNorm (the checkpoint's q_ln, "
              "k_ln would be dropped), and shapecalc does not model one"),
    "prefix_lm": (False, "a bidirectional prefix is not a causal decoder"),
    "attn_uses_sequence_id": (False, "masking by sequence id is not modelled"),
}


def _mpt(h: HF) -> Fields:
    # MptModel: wte, blocks of LayerNorm without β → Wqkv [D, 3D] → ALiBi scores (softmax_scale)
    # → out_proj [D, D], LayerNorm without β → up_proj [D, 4D] → exact GELU → down_proj; norm_f
    # without β; lm_head tied. No biases anywhere, no position table.
    d = h.get("d_model", h.get("hidden_size"))
    heads = h.get("n_heads", h.get("num_attention_heads"))
    attn = h.get("attn_config") or {}
    if not isinstance(attn, dict):
        raise ShapecalcError("attn_config", f"{attn!r} is not an object")
    for key, (want, why) in _MPT_ATTN.items():
        if attn.get(key, want) != want:
            raise ShapecalcError(f"attn_config.{key}", f"{attn[key]!r}: {why}")
    scale = attn.get("softmax_scale")
    if scale is not None and abs(scale - (d // heads) ** -0.5) > 1e-12 * scale:
        raise ShapecalcError("attn_config.softmax_scale", f"{scale!r}: scores are scaled by "
                             f"1/√Dh = {(d // heads) ** -0.5:.6g}; another scale is not modelled")
    _refuse_if(h, "expansion_ratio", lambda v: v == 4,
               f"transformers' MptMLP is 4·d_model = {4 * d} wide whatever expansion_ratio says",
               4)
    # learned_pos_emb is unread: with ALiBi neither MosaicML's nor transformers' MPT has a
    # position table; embedding_fraction scales gradients only.
    return dict(
        vocab_size=h.get("vocab_size"),
        d_model=d,
        n_layers=h.get("n_layers", h.get("num_hidden_layers")),
        n_heads=heads,
        d_ff=4 * d,
        ffn="gelu",
        norm="layernorm",
        norm_bias=False,
        positions="alibi",
        max_positions=h.get("max_seq_len"),  # transformers' ALiBi table is this long
        tie_embeddings=h.get("tie_word_embeddings"),
    )


def _gpt_bigcode(h: HF) -> Fields:
    # GPT-2's layout (learned positions, LayerNorm, biases, c_fc/c_proj) with multi_query: one
    # K/V head, so c_attn is [D, D + 2·Dh]; the cache holds one K and one V head per token.
    if h.get("add_cross_attention"):
        raise ShapecalcError("add_cross_attention", "cross-attention is not decoder-only")
    d = h.need("n_embd", "D")
    heads = h.need("n_head", "H")
    kv = 1 if h.get("multi_query") else heads
    # transformers 5.x writes num_key_value_heads, derived from multi_query (a given one is
    # overwritten): one that disagrees is refused
    _refuse_if(h, "num_key_value_heads", lambda v: v in (None, kv),
               f"contradicts multi_query={h.get('multi_query', True)} (H_kv = {kv}), which "
               "transformers' GPTBigCodeConfig derives it from")
    return dict(
        vocab_size=h.get("vocab_size"),
        d_model=d,
        n_layers=h.need("n_layer", "N"),
        n_heads=heads,
        n_kv_heads=kv,
        d_ff=h.get("n_inner") or 4 * d,
        ffn=h.act("activation_function", gated=False),
        norm="layernorm",
        positions="learned",
        max_positions=h.get("n_positions", h.get("max_position_embeddings")),
        tie_embeddings=h.get("tie_word_embeddings"),
        qkv_bias=True, attn_out_bias=True, ffn_bias=True,
        fused_qkv=True,  # c_attn: [D, (H + 2·H_kv)·Dh]
    )


def _starcoder2(h: HF) -> Fields:
    # Starcoder2Model: LayerNorm (γ, β) → q, k, v, o with use_bias → RoPE → sliding-window
    # attention on every layer → LayerNorm → c_fc → GELU → c_proj (use_bias); norm; lm_head.
    bias = bool(h.get("use_bias"))
    d = h.get("hidden_size")
    heads = h.get("num_attention_heads")
    return dict(
        vocab_size=h.get("vocab_size"),
        d_model=d,
        n_layers=h.get("num_hidden_layers"),
        n_heads=heads,
        n_kv_heads=h.get("num_key_value_heads"),
        head_dim=h.get("head_dim") or None,
        d_ff=h.get("intermediate_size"),
        ffn=h.act("hidden_act", gated=False),
        norm="layernorm",
        norm_bias=True,  # nn.LayerNorm whatever use_bias says
        positions="rope",
        max_positions=h.get("max_position_embeddings"),
        sliding_window=h.get("sliding_window"),
        tie_embeddings=h.get("tie_word_embeddings"),
        qkv_bias=bias, attn_out_bias=bias, ffn_bias=bias,
    )


bloom = layout(_bloom, "apply_residual_connection_post_layernorm", "hidden_size", "n_embed",
              "n_head", "n_inner", "n_layer", "num_attention_heads", "num_hidden_layers",
              "pretraining_tp", "slow_but_exact", "tie_word_embeddings", "vocab_size")
mpt = layout(_mpt, "attn_config", "d_model", "expansion_ratio", "hidden_size", "logit_scale",
              "max_seq_len", "n_heads", "n_layers", "no_bias", "norm_type", "num_attention_heads",
              "num_hidden_layers", "tie_word_embeddings", "vocab_size")
gpt_bigcode = layout(_gpt_bigcode, "activation_function", "add_cross_attention", "hidden_size",
              "max_position_embeddings", "multi_query", "n_embd", "n_head", "n_inner", "n_layer",
              "n_positions", "num_attention_heads", "num_hidden_layers", "num_key_value_heads",
              "scale_attn_weights", "tie_word_embeddings", "vocab_size")
starcoder2 = layout(_starcoder2, "head_dim", "hidden_act", "hidden_size", "intermediate_size",
              "max_position_embeddings", "mlp_type", "norm_type", "num_attention_heads",
              "num_hidden_layers", "num_key_value_heads", "sliding_window", "tie_word_embeddings",
              "use_bias", "vocab_size")
