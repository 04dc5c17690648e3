"""Hugging Face readers for the classic families: GPT-NeoX, GPT-J, Phi (phi-2), StableLM, Cohere
(Command-R) and Granite. (Falcon, old and new decoder, is read in hf.py.)

Each differs from Llama in a few places: partial rotary (RoPE on the first R of each head's Dh),
a parallel residual (one norm or two), per-head q/k LayerNorms, Granite's multipliers, Cohere's
logit scale. Absent keys take the class default of transformers 5.x; a key that changes shapes or
costs in a way shapecalc does not model is refused in one line, naming the key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..model.config import ShapecalcError

if TYPE_CHECKING:
    from .hf import _HF

Fields = dict[str, Any]


def _factor(h: _HF, default: float, *legacy: str) -> float:
    """partial_rotary_factor as transformers 5.x resolves it: rope_parameters (or rope_scaling)
    first, then the top-level key (or a legacy name such as GPT-NeoX's rotary_pct), then the
    class default."""
    nested = [(h.cfg.get(k) or {}).get("partial_rotary_factor")
              for k in ("rope_parameters", "rope_scaling") if isinstance(h.cfg.get(k), dict)]
    h.read.update(f"{k}.partial_rotary_factor" for k in ("rope_parameters", "rope_scaling"))
    for value in (*nested, *(h.get(k) for k in ("partial_rotary_factor", *legacy))):
        if value is not None:
            return float(value)
    return default


def _partial(h: _HF, dh: int, default: float, *legacy: str) -> Fields:
    """rotary_dim R = int(Dh · partial_rotary_factor), as the rotary embedding computes it."""
    r = int(dh * _factor(h, default, *legacy))
    if r <= 0 or r % 2:
        raise ShapecalcError("partial_rotary_factor", f"gives R={r} rotated dims of Dh={dh}; "
                             "RoPE needs an even R > 0")
    return dict(rotary_dim=None if r == dh else r)


def _whole_rope(h: _HF, mt: str) -> None:
    """Families whose attention turns the whole head: a partial factor would not fit it."""
    if _factor(h, 1.0) != 1.0:
        raise ShapecalcError("partial_rotary_factor", f"transformers' {mt} applies RoPE to the "
                             "whole head; a partial factor is not supported there")


def _dims(h: _HF) -> Fields:
    heads = h.need("num_attention_heads", "H")
    return dict(
        vocab_size=h.need("vocab_size", "N_vocab"),
        d_model=h.need("hidden_size", "D"),
        n_layers=h.need("num_hidden_layers", "N"),
        n_heads=heads,
        d_ff=h.need("intermediate_size", "Dff"),
    )


def _kv(h: _HF, heads: int) -> int:
    kv = h.get("num_key_value_heads")  # absent or null: H (each class's __init__ does this)
    return heads if kv is None else kv


def _head_dim(h: _HF, f: Fields) -> int:
    """`getattr(config, "head_dim", D/H)`: a config.json head_dim, else D/H."""
    return h.get("head_dim") or f["d_model"] // f["n_heads"]


def _gpt_neox(h: _HF) -> Fields:
    f = _dims(h)
    bias = bool(h.get("attention_bias", True))  # query_key_value and dense
    dh = f["d_model"] // f["n_heads"]
    parallel = bool(h.get("use_parallel_residual", True))
    f.update(
        ffn=h.act("hidden_act", "gelu", gated=False),
        norm="layernorm",
        positions="rope",
        max_positions=h.get("max_position_embeddings", 2048),
        tie_embeddings=h.get("tie_word_embeddings", False),
        qkv_bias=bias,
        attn_out_bias=bias,
        ffn_bias=True,  # dense_h_to_4h, dense_4h_to_h
        fused_qkv=True,  # query_key_value
        # parallel: x + attn(ln1(x)) + mlp(ln2(x)); else the usual sequential block
        parallel_block=parallel,
        parallel_norms=2 if parallel else 1,
        **_partial(h, dh, 0.25, "rotary_pct"),
    )
    return f


def _gptj(h: _HF) -> Fields:
    d = h.need("n_embd", "D", "hidden_size")
    heads = h.need("n_head", "H", "num_attention_heads")
    dh = d // heads
    r = h.get("rotary_dim", 64)
    if r is None:
        raise ShapecalcError("rotary_dim", "null: transformers' GPT-J then builds a D-wide "
                             "rotary table that does not fit a head; give R")
    if r > dh or r % 2:
        raise ShapecalcError("rotary_dim", f"R={r} must be even and at most Dh={dh}")
    return dict(
        vocab_size=h.need("vocab_size", "N_vocab"),
        d_model=d,
        n_layers=h.need("n_layer", "N", "num_hidden_layers"),
        n_heads=heads,
        d_ff=h.get("n_inner") or 4 * d,
        ffn=h.act("activation_function", "gelu_new", gated=False),
        norm="layernorm",
        positions="rope",
        max_positions=h.get("n_positions", h.get("max_position_embeddings", 2048)),
        tie_embeddings=h.get("tie_word_embeddings", False),
        ffn_bias=True,  # fc_in, fc_out; q, k, v and out_proj have none
        lm_head_bias=True,
        parallel_block=True,  # x + attn(ln_1(x)) + mlp(ln_1(x))
        rotary_dim=None if r == dh else r,
        rope_interleaved=True,  # rotate_every_two
    )


def _phi(h: _HF) -> Fields:
    if h.get("qk_layernorm", False):
        raise ShapecalcError("qk_layernorm", "Phi's q/k LayerNorm (γ and β of Dh, shared by the "
                             "heads) is not modelled")
    f = _dims(h)
    dh = _head_dim(h, f)
    f.update(
        n_kv_heads=_kv(h, f["n_heads"]),
        head_dim=dh,
        ffn=h.act("hidden_act", "gelu_new", gated=False),
        norm="layernorm",
        positions="rope",
        max_positions=h.get("max_position_embeddings", 2048),
        tie_embeddings=h.get("tie_word_embeddings", False),
        qkv_bias=True,
        attn_out_bias=True,  # dense
        ffn_bias=True,  # fc1, fc2
        lm_head_bias=True,
        parallel_block=True,  # x + attn(ln(x)) + mlp(ln(x))
        **_partial(h, dh, 0.5),  # PhiConfig's default factor is 0.5
    )
    return f


def _stablelm(h: _HF) -> Fields:
    f = _dims(h)
    dh = f["d_model"] // f["n_heads"]  # the attention always uses D/H
    if h.get("head_dim") not in (None, dh):
        raise ShapecalcError("head_dim", f"{h.get('head_dim')}: StableLM's attention uses "
                             f"D/H={dh}, its rotary table the key: not modelled")
    f.update(
        n_kv_heads=h.get("num_key_value_heads", 32) or f["n_heads"],  # class default 32
        ffn=h.act("hidden_act", "silu", gated=True),
        norm="layernorm",
        positions="rope",
        max_positions=h.get("max_position_embeddings", 4096),
        tie_embeddings=h.get("tie_word_embeddings", False),
        qkv_bias=bool(h.get("use_qkv_bias", False)),
        qk_norm_per_head=bool(h.get("qk_layernorm", False)),  # a LayerNorm (no β) per head
        parallel_block=bool(h.get("use_parallel_residual", False)),  # one input_layernorm
        **_partial(h, dh, 0.25),
    )
    return f


def _cohere(h: _HF) -> Fields:
    _whole_rope(h, "cohere")
    f = _dims(h)
    scale = h.get("logit_scale", 0.0625)
    if scale is None:
        raise ShapecalcError("logit_scale", "null: transformers' Cohere multiplies the logits "
                             "by it")
    bias = bool(h.get("attention_bias", False))
    f.update(
        n_kv_heads=_kv(h, f["n_heads"]),
        head_dim=_head_dim(h, f),
        ffn=h.act("hidden_act", "silu", gated=True),
        norm="layernorm",
        norm_bias=False,  # CohereLayerNorm: γ only
        positions="rope",
        rope_interleaved=True,  # repeat_interleave'd frequencies, pairs rotated
        max_positions=h.get("max_position_embeddings", 8192),
        tie_embeddings=h.get("tie_word_embeddings", True),
        qkv_bias=bias,
        attn_out_bias=bias,
        qk_norm_per_head=bool(h.get("use_qk_norm", False)),  # γ of [H, Dh] and [H_kv, Dh]
        parallel_block=True,  # x + attn(ln(x)) + mlp(ln(x))
        logit_scale=float(scale),
    )
    return f


def _granite(h: _HF) -> Fields:
    _whole_rope(h, "granite")
    f = _dims(h)
    bias = bool(h.get("attention_bias", False))
    # GraniteModel applies all four, also at their default 1.0
    mult = {k: float(h.get(k, 1.0)) for k in ("embedding_multiplier", "attention_multiplier",
                                               "residual_multiplier", "logits_scaling")}
    f.update(
        n_kv_heads=_kv(h, f["n_heads"]),
        head_dim=_head_dim(h, f),
        ffn=h.act("hidden_act", "silu", gated=True),
        norm="rmsnorm",
        positions="rope",
        max_positions=h.get("max_position_embeddings", 2048),
        tie_embeddings=h.get("tie_word_embeddings", False),
        qkv_bias=bias,
        attn_out_bias=bias,
        ffn_bias=bool(h.get("mlp_bias", False)),
        embedding_multiplier=mult["embedding_multiplier"],
        attention_multiplier=mult["attention_multiplier"],  # replaces 1/√Dh
        residual_multiplier=mult["residual_multiplier"],
        logit_scale=1 / mult["logits_scaling"],  # logits / logits_scaling
    )
    return f


READERS: dict[str, Callable[[_HF], Fields]] = {
    "cohere": _cohere,
    "gpt_neox": _gpt_neox,
    "gptj": _gptj,
    "granite": _granite,
    "phi": _phi,
    "stablelm": _stablelm,
}
