"""The mechanisms of the Llama-like families: the shared body (widths, heads, KV heads, positions,
tied embeddings), the gated activation, biases, sliding windows (one for every layer, or per layer
from layer_types as Qwen and gpt-oss write them), q/k norms.

Each is a function over the reader and the fields read so far; its defaults are the family's
(hf_families.py), so one mechanism serves every family whose class defaults differ.
"""

from __future__ import annotations

from ..model.config import ShapecalcError
from .hf_base import HF, Fields, Mechanism, mechanism

_KINDS = {"sliding_attention": "sliding", "full_attention": "full"}


@mechanism("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
           "intermediate_size", "head_dim", "num_key_value_heads")
def llama(h: HF, f: Fields) -> None:
    # the body every Llama-like shares: RMSNorm, RoPE (rope_scaling changes no shape), and the
    # widths; head_dim null or absent: D/H; num_key_value_heads absent: the class default, null: H
    heads = h.need("num_attention_heads", "H")
    f.update(
        vocab_size=h.need("vocab_size", "N_vocab"),
        d_model=h.need("hidden_size", "D"),
        n_layers=h.need("num_hidden_layers", "N"),
        n_heads=heads,
        d_ff=h.need("intermediate_size", "Dff"),
        head_dim=h.get("head_dim"),
        norm="rmsnorm",
        positions="rope",
    )
    kv = h.get("num_key_value_heads")
    f["n_kv_heads"] = heads if kv is None else kv


def gated(key: str) -> Mechanism:
    """The gated FFN's activation, named by `key` (SwiGLU for silu, GeGLU for the gelus)."""
    def _act(h: HF, f: Fields) -> None:
        f["ffn"] = h.act(key, gated=True)
    _act.__name__ = f"gated_{key}"
    return mechanism(key)(_act)


@mechanism("max_position_embeddings", "tie_word_embeddings")
def table(h: HF, f: Fields) -> None:
    # read after the activation, as transformers' classes list them
    f.update(max_positions=h.get("max_position_embeddings"),
             tie_embeddings=h.get("tie_word_embeddings"))


@mechanism("attention_bias")
def attention_bias(h: HF, f: Fields) -> None:
    # attention_bias: biases on q, k, v and o
    bias = bool(h.get("attention_bias", False))
    f.update(qkv_bias=bias, attn_out_bias=bias)


@mechanism("mlp_bias")
def mlp_bias(h: HF, f: Fields) -> None:
    f["ffn_bias"] = bool(h.get("mlp_bias", False))


@mechanism("sliding_window")
def sliding(h: HF, f: Fields) -> None:
    # every layer slides over sliding_window keys (null: none)
    f["sliding_window"] = h.get("sliding_window")


def windows(types: list[str], window: int | None, n_layers: int) -> Fields:
    """HF layer_types → sliding_window and layer_types, saying only what differs from the
    default (no list when every layer is alike)."""
    other = [t for t in types if t not in _KINDS]
    if other:
        raise ShapecalcError(
            "layer_types", f"{other[0]!r} layers are not modelled; supported: {', '.join(_KINDS)}"
        )
    if len(types) != n_layers:
        raise ShapecalcError(
            "layer_types", f"lists {len(types)} layers, but num_hidden_layers is {n_layers}"
        )
    kinds = [_KINDS[t] for t in types]
    if "sliding" not in kinds:
        return dict(sliding_window=None, layer_types=None)
    if window is None:
        raise ShapecalcError(
            "layer_types", "has sliding layers, but no window (sliding_window null, or "
            "use_sliding_window false)"
        )
    return dict(sliding_window=window, layer_types=tuple(kinds) if "full" in kinds else None)


def qwen_window(h: HF) -> int | None:
    """Qwen2, Qwen3, Qwen-MoE: sliding_window counts only when use_sliding_window."""
    return h.get("sliding_window") if h.get("use_sliding_window", False) else None


@mechanism("use_sliding_window", "sliding_window", "max_window_layers", "layer_types")
def qwen_windows(h: HF, f: Fields) -> None:
    # Qwen2, Qwen3: without layer_types, the layers at or past max_window_layers slide, if
    # use_sliding_window (transformers 5.x's default layer_types)
    n, window = f["n_layers"], qwen_window(h)
    types = h.get("layer_types") or [
        "sliding_attention" if window is not None and i >= (h.get("max_window_layers") or 0)
        else "full_attention" for i in range(n)
    ]
    f.update(windows(types, window, n))


@mechanism("layer_types", "sliding_window")
def alternating(h: HF, f: Fields) -> None:
    # gpt-oss: layers alternate sliding (even i) and full unless layer_types says
    n = f["n_layers"]
    types = h.get("layer_types") or [
        "sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)
    ]
    f.update(windows(types, h.get("sliding_window"), n))


@mechanism("attention_bias")
def qk_norm(h: HF, f: Fields) -> None:
    # Qwen3Attention: RMSNorm over each head's Dh on q and k; attention_bias on q, k, v and o
    bias = bool(h.get("attention_bias", False))
    f.update(qk_norm=True, qkv_bias=bias, attn_out_bias=bias)


