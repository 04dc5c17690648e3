"""The layouts of the classic families, each one mechanism: GPT-2, Falcon (old and new decoder),
OPT, GPT-NeoX, GPT-J, Phi (phi-2), StableLM, Cohere (Command-R) and Granite.

The later ones differ from Llama in a few places: partial rotary (RoPE on the first R of each head's
Dh), a parallel residual (one norm or two), per-head q/k LayerNorms, Granite's multipliers, Cohere's
logit scale. Absent keys take the class defaults in their entries (hf_families.py); a key that
changes shapes or costs in a way shapecalc does not model is refused in one line, naming the key.
"""

from __future__ import annotations

from typing import Any

from ..model.config import ShapecalcError
from .hf_base import HF, Fields, layout, mechanism
from .hf_llama import rotary_factor, rotary_fields


def _whole_rope(h: HF, mt: str) -> None:
    """Families whose attention turns the whole head: a partial factor would not fit it."""
    if rotary_factor(h, 1.0) != 1.0:
        raise ShapecalcError("partial_rotary_factor", f"transformers' {mt} applies RoPE to the "
                             "whole head; a partial factor is not supported there")


def _dims(h: HF) -> Fields:
    heads = h.need("num_attention_heads", "H")
    return dict(
        vocab_size=h.need("vocab_size", "N_vocab"),
        d_model=h.need("hidden_size", "D"),
        n_layers=h.need("num_hidden_layers", "N"),
        n_heads=heads,
        d_ff=h.need("intermediate_size", "Dff"),
    )


def _kv(h: HF, heads: int) -> int:
    kv = h.get("num_key_value_heads")  # absent or null: H (each class's __init__ does this)
    return heads if kv is None else kv


def _head_dim(h: HF, f: Fields) -> int:
    """`getattr(config, "head_dim", D/H)`: a config.json head_dim, else D/H."""
    return h.get("head_dim") or f["d_model"] // f["n_heads"]


def _gpt_neox(h: HF) -> Fields:
    f = _dims(h)
    bias = bool(h.get("attention_bias"))  # query_key_value and dense
    dh = f["d_model"] // f["n_heads"]
    parallel = bool(h.get("use_parallel_residual"))
    f.update(
        ffn=h.act("hidden_act", gated=False),
        norm="layernorm",
        positions="rope",
        max_positions=h.get("max_position_embeddings"),
        tie_embeddings=h.get("tie_word_embeddings"),
        qkv_bias=bias,
        attn_out_bias=bias,
        ffn_bias=True,  # dense_h_to_4h, dense_4h_to_h
        fused_qkv=True,  # query_key_value
        # parallel: x + attn(ln1(x)) + mlp(ln2(x)); else the usual sequential block
        parallel_block=parallel,
        parallel_norms=2 if parallel else 1,
        **rotary_fields(h, dh, 0.25, "rotary_pct"),
    )
    return f


def _gptj(h: HF) -> Fields:
    d = h.need("n_embd", "D")
    heads = h.need("n_head", "H")
    dh = d // heads
    r = h.get("rotary_dim")
    if r is None:
        raise ShapecalcError("rotary_dim", "null: transformers' GPT-J then builds a D-wide "
                             "rotary table that does not fit a head; give R")
    if r > dh or r % 2:
        raise ShapecalcError("rotary_dim", f"R={r} must be even and at most Dh={dh}")
    return dict(
        vocab_size=h.need("vocab_size", "N_vocab"),
        d_model=d,
        n_layers=h.need("n_layer", "N"),
        n_heads=heads,
        d_ff=h.get("n_inner") or 4 * d,
        ffn=h.act("activation_function", gated=False),
        norm="layernorm",
        positions="rope",
        max_positions=h.get("n_positions", h.get("max_position_embeddings")),
        tie_embeddings=h.get("tie_word_embeddings"),
        ffn_bias=True,  # fc_in, fc_out; q, k, v and out_proj have none
        lm_head_bias=True,
        parallel_block=True,  # x + attn(ln_1(x)) + mlp(ln_1(x))
        rotary_dim=None if r == dh else r,
        rope_interleaved=True,  # rotate_every_two
    )


def _phi(h: HF) -> Fields:
    f = _dims(h)
    dh = _head_dim(h, f)
    f.update(
        n_kv_heads=_kv(h, f["n_heads"]),
        head_dim=dh,
        ffn=h.act("hidden_act", gated=False),
        norm="layernorm",
        positions="rope",
        max_positions=h.get("max_position_embeddings"),
        tie_embeddings=h.get("tie_word_embeddings"),
        qkv_bias=True,
        attn_out_bias=True,  # dense
        ffn_bias=True,  # fc1, fc2
        lm_head_bias=True,
        parallel_block=True,  # x + attn(ln(x)) + mlp(ln(x))
        **rotary_fields(h, dh, 0.5),  # PhiConfig's default factor is 0.5
    )
    return f


def _stablelm(h: HF) -> Fields:
    f = _dims(h)
    dh = f["d_model"] // f["n_heads"]  # the attention always uses D/H
    if h.get("head_dim") not in (None, dh):
        raise ShapecalcError("head_dim", f"{h.get('head_dim')}: StableLM's attention uses "
                             f"D/H={dh}, its rotary table the key: not modelled")
    f.update(
        n_kv_heads=h.get("num_key_value_heads") or f["n_heads"],  # class default 32
        ffn=h.act("hidden_act", gated=True),
        norm="layernorm",
        positions="rope",
        max_positions=h.get("max_position_embeddings"),
        tie_embeddings=h.get("tie_word_embeddings"),
        qkv_bias=bool(h.get("use_qkv_bias")),
        qk_norm_per_head=bool(h.get("qk_layernorm")),  # a LayerNorm (no β) per head
        parallel_block=bool(h.get("use_parallel_residual")),  # one input_layernorm
        **rotary_fields(h, dh, 0.25),
    )
    return f


def _cohere(h: HF) -> Fields:
    f = _cohere_body(h, "cohere")
    f["qk_norm_per_head"] = bool(h.get("use_qk_norm"))  # γ of [H, Dh] and [H_kv, Dh]
    return f


def _cohere2(h: HF) -> Fields:
    # Cohere2Attention builds no q/k norms whatever use_qk_norm says (the family ignores it)
    return _cohere_body(h, "cohere2")


def _cohere_body(h: HF, mt: str) -> Fields:
    _whole_rope(h, mt)
    f = _dims(h)
    scale = h.get("logit_scale")
    if scale is None:
        raise ShapecalcError("logit_scale", "null: transformers' Cohere multiplies the logits "
                             "by it")
    bias = bool(h.get("attention_bias"))
    f.update(
        n_kv_heads=_kv(h, f["n_heads"]),
        head_dim=_head_dim(h, f),
        ffn=h.act("hidden_act", gated=True),
        norm="layernorm",
        norm_bias=False,  # CohereLayerNorm: γ only
        positions="rope",
        rope_interleaved=True,  # repeat_interleave'd frequencies, pairs rotated
        max_positions=h.get("max_position_embeddings"),
        tie_embeddings=h.get("tie_word_embeddings"),
        qkv_bias=bias,
        attn_out_bias=bias,
        parallel_block=True,  # x + attn(ln(x)) + mlp(ln(x))
        logit_scale=float(scale),
    )
    return f


def _granite(h: HF) -> Fields:
    _whole_rope(h, "granite")
    f = _dims(h)
    bias = bool(h.get("attention_bias"))
    # GraniteModel applies all four, also at their default 1.0
    mult = {k: h.number(k, 1.0) for k in ("embedding_multiplier", "attention_multiplier",
                                               "residual_multiplier", "logits_scaling")}
    f.update(
        n_kv_heads=_kv(h, f["n_heads"]),
        head_dim=_head_dim(h, f),
        ffn=h.act("hidden_act", gated=True),
        norm="rmsnorm",
        positions="rope",
        max_positions=h.get("max_position_embeddings"),
        tie_embeddings=h.get("tie_word_embeddings"),
        qkv_bias=bias,
        attn_out_bias=bias,
        ffn_bias=bool(h.get("mlp_bias")),
        embedding_multiplier=mult["embedding_multiplier"],
        attention_multiplier=mult["attention_multiplier"],  # replaces 1/√Dh
        residual_multiplier=mult["residual_multiplier"],
        logit_scale=1 / mult["logits_scaling"],  # logits / logits_scaling
    )
    return f


@mechanism("layer_rope_theta")
def layer_rope_theta(h: HF, f: Fields) -> None:
    # Granite SWA: each layer's RoPE θ, 0 for a layer that applies none (absent: the global θ on
    # every layer). θ changes no count; shapecalc keeps one θ for the full layers and one for
    # the sliding ones (the executor's angles), so θs that differ within a kind are refused
    thetas = h.get("layer_rope_theta")
    if thetas is None:
        return
    n = f["n_layers"]
    if not isinstance(thetas, list) or not all(
            isinstance(t, (int, float)) and not isinstance(t, bool) and t >= 0 for t in thetas):
        raise ShapecalcError("layer_rope_theta", f"must list a θ ≥ 0 per layer, not {thetas!r}")
    if len(thetas) < n:  # layer i reads entry i: a longer list builds
        raise ShapecalcError("layer_rope_theta", f"lists {len(thetas)} layers, but "
                             f"num_hidden_layers is {n}")
    kinds = f["layer_types"] or ("sliding" if f["sliding_window"] is not None else "full",) * n
    by_kind = {k: {float(t) for t, kk in zip(thetas[:n], kinds, strict=True) if kk == k and t}
               for k in ("full", "sliding")}
    for k, ts in by_kind.items():
        if len(ts) > 1:
            raise ShapecalcError("layer_rope_theta", f"gives the {k} layers θs {sorted(ts)}: "
                                 "one θ per kind of layer is modelled")
    full, local = (next(iter(by_kind[k]), None) for k in ("full", "sliding"))
    base = full or local
    f.update(nope_layers=tuple(i for i in range(n) if not thetas[i]) or None)
    if base is not None:
        f.update(rope_base=base, rope_base_local=local if local not in (None, base) else None)


def _gpt2(h: HF) -> dict[str, Any]:
    if h.get("add_cross_attention"):
        raise ShapecalcError("add_cross_attention", "cross-attention is not decoder-only")
    d = h.need("n_embd", "D")
    return dict(
        vocab_size=h.need("vocab_size", "N_vocab"),
        d_model=d,
        n_layers=h.need("n_layer", "N"),
        n_heads=h.need("n_head", "H"),
        d_ff=h.get("n_inner") or 4 * d,
        ffn=h.act("activation_function", gated=False),
        norm="layernorm",
        positions="learned",
        max_positions=h.get("n_positions"),
        tie_embeddings=h.get("tie_word_embeddings"),  # HF counts the tied matrix once
        qkv_bias=True,
        attn_out_bias=True,
        ffn_bias=True,
        fused_qkv=True,  # c_attn: one [D, 3D] Conv1D
    )

def _falcon(h: HF) -> dict[str, Any]:
    if h.get("alibi"):
        raise ShapecalcError("alibi", "ALiBi attention biases are not supported (rope Falcon only)")
    d = h.need("hidden_size", "D")
    heads = h.need("num_attention_heads", "H")
    new = bool(h.get("new_decoder_architecture"))
    parallel = bool(h.get("parallel_attn"))
    norms = h.get("num_ln_in_parallel_attn") or (2 if new else 1)
    if new and not parallel:
        raise ShapecalcError(
            "parallel_attn", "false with new_decoder_architecture: transformers versions disagree"
        )
    if not new and parallel and norms == 2:
        raise ShapecalcError(
            "num_ln_in_parallel_attn", "2 without new_decoder_architecture: transformers' Falcon "
            "then builds ln_attn/ln_mlp but its forward reads input_layernorm"
        )
    if new:
        kv = h.get("num_kv_heads", h.get("n_head_kv")) or heads
    else:  # the old decoder: multi_query → one KV head, else full MHA (qkv is [D, 3D])
        kv = 1 if h.get("multi_query") else heads
    bias = bool(h.get("bias"))
    return dict(
        vocab_size=h.need("vocab_size", "N_vocab"),
        d_model=d,
        n_layers=h.need("num_hidden_layers", "N"),
        n_heads=heads,
        n_kv_heads=kv,
        d_ff=h.get("ffn_hidden_size") or 4 * d,
        ffn=h.act("activation", gated=False),
        norm="layernorm",
        positions="rope",
        max_positions=h.get("max_position_embeddings"),
        tie_embeddings=h.get("tie_word_embeddings"),
        qkv_bias=bias,
        attn_out_bias=bias,
        ffn_bias=bias,
        fused_qkv=True,  # query_key_value
        parallel_block=parallel,
        parallel_norms=norms if parallel else 1,  # new decoder: ln_attn and ln_mlp (2)
    )

def _opt(h: HF) -> dict[str, Any]:
    d = h.need("hidden_size", "D")
    proj = h.get("word_embed_proj_dim") or d
    if proj != d:
        raise ShapecalcError(
            "word_embed_proj_dim",
            f"{proj} differs from hidden_size {d}: OPT's project_in/project_out "
            "matrices cannot be represented",
        )
    if not h.get("layer_norm_elementwise_affine"):
        raise ShapecalcError("layer_norm_elementwise_affine", "norms without γ, β are unsupported")
    pre = bool(h.get("do_layer_norm_before"))
    if pre and h.get("_remove_final_layer_norm"):
        raise ShapecalcError("_remove_final_layer_norm", "pre-norm without ln_f is unsupported")
    bias = bool(h.get("enable_bias"))
    return dict(
        vocab_size=h.need("vocab_size", "N_vocab"),
        d_model=d,
        n_layers=h.need("num_hidden_layers", "N"),
        n_heads=h.need("num_attention_heads", "H"),
        d_ff=h.need("ffn_dim", "Dff"),
        ffn=h.act("activation_function", gated=False),
        norm="layernorm",
        norm_position="pre" if pre else "post",  # post: HF OPT then has no final layer norm
        positions="learned",
        # OPTLearnedPositionalEmbedding keeps 2 extra rows (offset 2, a fairseq legacy), so the
        # table has max_position_embeddings + 2 rows; positions 0..max_position_embeddings-1
        # are the usable ones.
        max_positions=(h.get("max_position_embeddings") or 2048) + 2,
        tie_embeddings=h.get("tie_word_embeddings"),
        qkv_bias=bias,
        attn_out_bias=bias,
        ffn_bias=bias,
    )


gpt_neox = layout(_gpt_neox, "attention_bias", "hidden_act", "hidden_size", "intermediate_size",
              "max_position_embeddings", "num_attention_heads", "num_hidden_layers",
              "partial_rotary_factor", "rope_parameters.partial_rotary_factor",
              "rope_scaling.partial_rotary_factor", "rotary_pct", "tie_word_embeddings",
              "use_parallel_residual", "vocab_size")
gptj = layout(_gptj, "activation_function", "hidden_size", "max_position_embeddings", "n_embd",
              "n_head", "n_inner", "n_layer", "n_positions", "num_attention_heads",
              "num_hidden_layers", "rotary_dim", "tie_word_embeddings", "vocab_size")
phi = layout(_phi, "head_dim", "hidden_act", "hidden_size", "intermediate_size",
              "max_position_embeddings", "num_attention_heads", "num_hidden_layers",
              "num_key_value_heads", "partial_rotary_factor", "qk_layernorm",
              "rope_parameters.partial_rotary_factor", "rope_scaling.partial_rotary_factor",
              "tie_word_embeddings", "vocab_size")
stablelm = layout(_stablelm, "head_dim", "hidden_act", "hidden_size", "intermediate_size",
              "max_position_embeddings", "num_attention_heads", "num_hidden_layers",
              "num_key_value_heads", "partial_rotary_factor", "qk_layernorm",
              "rope_parameters.partial_rotary_factor", "rope_scaling.partial_rotary_factor",
              "tie_word_embeddings", "use_parallel_residual", "use_qkv_bias", "vocab_size")
cohere = layout(_cohere, "attention_bias", "head_dim", "hidden_act", "hidden_size",
              "intermediate_size", "logit_scale", "max_position_embeddings", "num_attention_heads",
              "num_hidden_layers", "num_key_value_heads", "partial_rotary_factor",
              "rope_parameters.partial_rotary_factor", "rope_scaling.partial_rotary_factor",
              "tie_word_embeddings", "use_qk_norm", "vocab_size")
cohere2 = layout(_cohere2, "attention_bias", "head_dim", "hidden_act", "hidden_size",
              "intermediate_size", "logit_scale", "max_position_embeddings", "num_attention_heads",
              "num_hidden_layers", "num_key_value_heads", "partial_rotary_factor",
              "rope_parameters.partial_rotary_factor", "rope_scaling.partial_rotary_factor",
              "tie_word_embeddings", "vocab_size")
granite = layout(_granite, "attention_bias", "attention_multiplier", "embedding_multiplier",
              "head_dim", "hidden_act", "hidden_size", "intermediate_size", "logits_scaling",
              "max_position_embeddings", "mlp_bias", "num_attention_heads", "num_hidden_layers",
              "num_key_value_heads", "partial_rotary_factor", "residual_multiplier",
              "rope_parameters.partial_rotary_factor", "rope_scaling.partial_rotary_factor",
              "tie_word_embeddings", "vocab_size")
gpt2 = layout(_gpt2, "activation_function", "add_cross_attention", "n_embd", "n_head", "n_inner",
              "n_layer", "n_positions", "tie_word_embeddings", "vocab_size")
falcon = layout(_falcon, "activation", "alibi", "bias", "ffn_hidden_size", "hidden_size",
              "max_position_embeddings", "multi_query", "n_embed", "n_head", "n_head_kv", "n_layer",
              "new_decoder_architecture", "num_attention_heads", "num_hidden_layers",
              "num_kv_heads", "num_ln_in_parallel_attn", "parallel_attn", "tie_word_embeddings",
              "vocab_size")
opt = layout(_opt, "_remove_final_layer_norm", "activation_function", "do_layer_norm_before",
              "enable_bias", "ffn_dim", "hidden_size", "layer_norm_elementwise_affine",
              "max_position_embeddings", "num_attention_heads", "num_hidden_layers",
              "tie_word_embeddings", "vocab_size", "word_embed_proj_dim")
