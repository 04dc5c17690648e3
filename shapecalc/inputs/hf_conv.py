"""The families whose token mixers are convolutions (issue 19): LFM2's gated short convolution
beside full attention (lfm2; lfm2_moe with sparse MoE layers), and LFM3's beside full and sliding
attention with a per-head attention gate and sandwich norms (lfm3). Each mechanism reads the
keys it declares; CONV holds their entries, joined to the table by hf_families.py."""

from __future__ import annotations

from ..model.config import ShapecalcError
from . import hf_moe as moe
from .hf_base import HF, Family, Fields, mechanism

# Lfm2DecoderLayer: a layer is attention unless its type is "conv"; the masks are built for these
# two types only (another string fails in Lfm2Model.forward)
LFM2_TYPES = {"conv": "short_conv", "full_attention": "attention"}


def _pattern(h: HF, n: int, types: list[str] | None, known: dict[str, str]) -> list[str]:
    """layer_types checked: a list of N known strings."""
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise ShapecalcError("layer_types", f"must be a list of layer types, not {types!r}")
    bad = next((t for t in types if t not in known), None)
    if bad is not None:
        raise ShapecalcError("layer_types", f"{bad!r} is not one of {', '.join(known)}")
    if len(types) != n:
        raise ShapecalcError("layer_types", f"lists {len(types)} layers, but num_hidden_layers "
                             f"is {n}")
    return types


def _kernel(h: HF) -> int:
    k = h.get("conv_L_cache")
    if type(k) is not int or k < 1:
        raise ShapecalcError("conv_L_cache", f"K_c, the conv's kernel, must be a positive "
                             f"integer, not {k!r}")
    return k


def _conv_fields(h: HF, types: list[str], known: dict[str, str]) -> Fields:
    mixers = tuple(known[t] for t in types)
    conv = "short_conv" in mixers
    return dict(mixer_types=mixers, conv_kernel=_kernel(h) if conv else None,
                conv_bias=bool(h.get("conv_bias")))


def _widths(h: HF, f: Fields) -> None:
    """Lfm2Model's widths: RMSNorms (the last, embedding_norm, after the layers), RoPE, per-head
    q/k RMSNorms (q_layernorm, k_layernorm), SwiGLU (w1, w3, w2); head_dim if given, else D/H."""
    heads = h.need("num_attention_heads", "H")
    kv = h.get("num_key_value_heads")
    f.update(vocab_size=h.need("vocab_size", "N_vocab"), d_model=h.need("hidden_size", "D"),
             n_layers=h.need("num_hidden_layers", "N"), n_heads=heads,
             n_kv_heads=heads if kv is None else kv, head_dim=h.get("head_dim"), norm="rmsnorm",
             positions="rope", ffn="swiglu", qk_norm=True,
             max_positions=h.get("max_position_embeddings"))


@mechanism("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
           "num_key_value_heads", "head_dim", "max_position_embeddings", "layer_types",
           "full_attn_idxs", "conv_L_cache", "conv_bias", "intermediate_size", "block_ff_dim",
           "block_auto_adjust_ff_dim", "block_ffn_dim_multiplier", "block_multiple_of",
           "tie_word_embeddings", "tie_embedding")
def lfm2(h: HF, f: Fields) -> None:
    """Lfm2Config.__post_init__ and Lfm2MLP: layer_types, else the layers of full_attn_idxs
    attend (default every layer); block_ff_dim wins over intermediate_size, tie_embedding over
    tie_word_embeddings; with block_auto_adjust_ff_dim, Dff = ⌊2·I/3⌋, × the multiplier, rounded
    up to block_multiple_of."""
    _widths(h, f)
    n = f["n_layers"]
    types = h.get("layer_types")
    if types is None:
        idx = h.get("full_attn_idxs")
        if idx is None:
            idx = list(range(n))
        if not isinstance(idx, list) or not all(type(i) is int for i in idx):
            raise ShapecalcError("full_attn_idxs", f"must be a list of layer indices, not "
                                 f"{idx!r}")
        bad = next((i for i in idx if not 0 <= i < n), None)
        if bad is not None:
            raise ShapecalcError("full_attn_idxs", f"layer {bad} does not exist (N={n})")
        types = ["full_attention" if i in idx else "conv" for i in range(n)]
    f.update(_conv_fields(h, _pattern(h, n, types, LFM2_TYPES), LFM2_TYPES))
    given = h.get("block_ff_dim"), h.get("intermediate_size")  # both looked at: the first wins
    width = "block_ff_dim" if "block_ff_dim" in h.cfg else "intermediate_size"
    dff = given[0] if width == "block_ff_dim" else given[1]
    if type(dff) is not int or dff < 1:
        raise ShapecalcError(width, f"Dff must be a positive integer, not {dff!r}")
    if h.get("block_auto_adjust_ff_dim"):
        dff = int(2 * dff / 3)
        mult = h.get("block_ffn_dim_multiplier")
        if mult is not None:
            step = h.get("block_multiple_of")
            if type(step) is not int or step < 1:
                raise ShapecalcError("block_multiple_of", f"must be a positive integer, not "
                                     f"{step!r}")
            dff = step * -(-int(mult * dff) // step)
    tie = h.get("tie_embedding"), h.get("tie_word_embeddings", True)
    f.update(d_ff=dff, tie_embeddings=bool(tie[0] if "tie_embedding" in h.cfg else tie[1]))


LFM3_TYPES = {"conv": "short_conv", "full_attention": "attention",
              "sliding_attention": "attention"}


@mechanism("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
           "num_key_value_heads", "head_dim", "max_position_embeddings", "layer_types",
           "conv_L_cache", "conv_bias", "intermediate_size", "tie_word_embeddings",
           "sliding_window", "use_sandwich_norm", "use_attention_gate", "attention_bias",
           "rope_parameters.partial_rotary_factor")
def lfm3(h: HF, f: Fields) -> None:
    """Lfm3Config and Lfm3DecoderLayer: LFM2's layers (its short conv, operator and FFN norms)
    with Qwen3's attention (per-head q/k RMSNorms, attention_bias on q, k, v and o), a sigmoid
    gate per head (g_proj [D → H], use_attention_gate), sliding layers of sliding_window, each
    branch's output RMS-normed before its residual add (use_sandwich_norm), and Lfm2MoeMLP's
    SwiGLU of intermediate_size (no auto-adjust). Default layer_types: layer i attends when
    i mod 4 = 2 (full) or i mod 4 = 0, i > 0 (sliding); the rest are convs. RoPE (proportional
    on the full layers: the whole head turned, some frequencies zero) changes no count."""
    _widths(h, f)
    # the full layers' proportional RoPE: its partial_rotary_factor zeroes frequencies, the
    # encoding still spans the whole head (rope_type proportional), so no count changes
    h.read.add("rope_parameters.partial_rotary_factor")
    n = f["n_layers"]
    types = h.get("layer_types")
    if types is None:
        types = ["full_attention" if i % 4 == 2 else "sliding_attention" if i % 4 == 0 and i
                 else "conv" for i in range(n)]
    types = _pattern(h, n, types, LFM3_TYPES)
    f.update(_conv_fields(h, types, LFM3_TYPES))
    dff = h.get("intermediate_size")
    if type(dff) is not int or dff < 1:
        raise ShapecalcError("intermediate_size", f"Dff must be a positive integer, not {dff!r}")
    slides = "sliding_attention" in types
    window = h.get("sliding_window")
    if slides and (type(window) is not int or window < 1):
        raise ShapecalcError("sliding_window", f"W must be a positive integer, not {window!r}")
    bias = bool(h.get("attention_bias"))
    f.update(d_ff=dff, tie_embeddings=bool(h.get("tie_word_embeddings")),
             layer_types=tuple("sliding" if t == "sliding_attention" else "full" for t in types),
             sliding_window=window if slides else None, qkv_bias=bias, attn_out_bias=bias,
             attn_head_gate=bool(h.get("use_attention_gate")),
             norm_position="sandwich" if h.get("use_sandwich_norm") else "pre")


@mechanism("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
           "num_key_value_heads", "head_dim", "max_position_embeddings", "layer_types",
           "conv_L_cache", "conv_bias", "intermediate_size", "tie_word_embeddings",
           "tie_embedding", "routed_scaling_factor", "use_expert_bias")
def lfm2_moe(h: HF, f: Fields) -> None:
    """Lfm2MoeDecoderLayer: LFM2's layers (layer_types required: Lfm2MoeConfig writes none, and
    its model indexes them), the first num_dense_layers with Lfm2MoeMLP of intermediate_size
    (no auto-adjust), the others a sparse MoE: a sigmoid router [D → E] without bias choosing by
    sigmoid + expert_bias (use_expert_bias: a buffer, the choice only), the k weights
    renormalised (norm_topk_prob) and × routed_scaling_factor, Qwen2-MoE's experts."""
    _widths(h, f)
    n = f["n_layers"]
    types = h.get("layer_types")
    if types is None:
        raise ShapecalcError("layer_types", "Lfm2MoeConfig has no default layer pattern, and "
                             "Lfm2MoeModel indexes one: the config must give it")
    f.update(_conv_fields(h, _pattern(h, n, types, LFM2_TYPES), LFM2_TYPES))
    dff = h.get("intermediate_size")
    if type(dff) is not int or dff < 1:
        raise ShapecalcError("intermediate_size", f"Dff must be a positive integer, not {dff!r}")
    h.get("use_expert_bias")  # a buffer added for the choice: no parameter, no count
    tie = h.get("tie_embedding"), h.get("tie_word_embeddings", True)
    f.update(d_ff=dff, tie_embeddings=bool(tie[0] if "tie_embedding" in h.cfg else tie[1]),
             routed_scaling_factor=h.get("routed_scaling_factor"))


# Lfm2Config's defaults (transformers 5.24; the LFM2-1.2B checkpoint's, its docstring says)
_LFM2 = dict(vocab_size=65536, hidden_size=2560, intermediate_size=12288, num_hidden_layers=32,
             num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=128000,
             tie_word_embeddings=True, conv_bias=False, conv_L_cache=3, block_multiple_of=256,
             block_ffn_dim_multiplier=1.0, block_auto_adjust_ff_dim=True, full_attn_idxs=None,
             layer_types=None)

# Lfm3Config's defaults (transformers 5.24; the LFM3-1.7B checkpoint's, its docstring says)
_LFM3 = dict(vocab_size=128000, hidden_size=2048, intermediate_size=7680, num_hidden_layers=24,
             num_attention_heads=16, num_key_value_heads=4, head_dim=128,
             max_position_embeddings=128000, tie_word_embeddings=True, conv_bias=False,
             conv_L_cache=7, layer_types=None, sliding_window=256, use_sandwich_norm=True,
             use_attention_gate=True, attention_bias=False)

# Lfm2MoeConfig's defaults (transformers 5.24; its docstring names LFM2-8B-A1B)
_LFM2_MOE = dict(vocab_size=65536, hidden_size=2048, intermediate_size=7168,
                 moe_intermediate_size=1792, num_hidden_layers=32, tie_word_embeddings=True,
                 max_position_embeddings=128000, num_attention_heads=32, num_key_value_heads=8,
                 conv_bias=False, conv_L_cache=3, num_dense_layers=2, num_experts_per_tok=4,
                 num_experts=32, use_expert_bias=True, routed_scaling_factor=1.0,
                 norm_topk_prob=True, layer_types=None)

CONV: tuple[Family, ...] = (
    Family("lfm2", "LFM2: gated short convolutions and GQA attention by layer_types",
           (lfm2,), _LFM2, widths=dict(vocab_size=65536, hidden_size=2560,
                                       num_hidden_layers=32, num_attention_heads=32)),
    Family("lfm2_moe", "LFM2-MoE: LFM2's layers, dense first, then sigmoid top-k experts",
           (lfm2_moe, moe.dense_first, moe.experts("num_experts", "moe_intermediate_size"),
            moe.norm_topk), _LFM2_MOE, fixed=dict(router_scoring="sigmoid"),
           widths=dict(vocab_size=65536, hidden_size=2048, num_hidden_layers=32,
                       num_attention_heads=32)),
    Family("lfm3", "LFM3: short convs, full and sliding attention, head gates, sandwich norms",
           (lfm3,), _LFM3, widths=dict(vocab_size=128000, hidden_size=2048,
                                       num_hidden_layers=24, num_attention_heads=16)),
)
