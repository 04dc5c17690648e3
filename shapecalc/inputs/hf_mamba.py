"""The mechanisms of the hybrid families whose token mixers carry a state: Nemotron-H's
per-layer pattern (Mamba-2, attention and MLP blocks, each one mixer after one norm)."""

from __future__ import annotations

from ..model.config import ShapecalcError
from .hf_base import HF, Fields, mechanism

# NemotronHConfig._pattern_to_list and its layers_block_type names: (token mixer, channel mixer)
_PATTERN = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
_BLOCKS = {"linear_attention": ("mamba2", "none"), "full_attention": ("attention", "none"),
           "mlp": ("none", "dense")}


@mechanism("hybrid_override_pattern", "layers_block_type", "num_hidden_layers", "vocab_size",
           "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
           "intermediate_size", "mlp_hidden_act", "mlp_bias", "tie_word_embeddings",
           "max_position_embeddings", "mamba_num_heads", "mamba_head_dim", "n_groups",
           "ssm_state_size", "conv_kernel", "chunk_size", "use_conv_bias")
def nemotron_h(h: HF, f: Fields) -> None:
    """NemotronHBlock: x + mixer(RMSNorm(x)), the mixer one of Mamba-2, attention without
    positions (no RoPE), an MLP (up, squared ReLU, down) or a MoE."""
    pattern = h.get("hybrid_override_pattern")
    if pattern is not None:
        if not isinstance(pattern, str):
            raise ShapecalcError("hybrid_override_pattern", "must be a string of M, -, * or E")
        bad = next((c for c in pattern if c not in _PATTERN), None)
        if bad is not None:
            raise ShapecalcError("hybrid_override_pattern", f"{bad!r} is not a layer type "
                                 "(M Mamba-2, * attention, - MLP, E MoE)")
        types, key = [_PATTERN[c] for c in pattern], "hybrid_override_pattern"
    else:
        types, key = list(h.one_of("layers_block_type") or ()), "layers_block_type"
    for t in types:
        if t == "moe":
            raise ShapecalcError(key, "has MoE layers (E): Nemotron-H's latent MoE is not "
                                 "modelled")
        if t not in _BLOCKS:
            raise ShapecalcError(key, f"{t!r} is not one of {', '.join(_BLOCKS)}")
    n = h.get("num_hidden_layers")
    if n is not None and n != len(types):
        raise ShapecalcError(key, f"lists {len(types)} layers, but num_hidden_layers is {n}")
    if h.get("mlp_hidden_act") != "relu2":
        raise ShapecalcError("mlp_hidden_act", f"{h.get('mlp_hidden_act')!r}: only Nemotron-H's "
                             "relu2 (squared ReLU) is modelled")
    heads = h.get("num_attention_heads")  # absent keys: NemotronHConfig's defaults
    f.update(
        vocab_size=h.get("vocab_size"), d_model=h.get("hidden_size"),
        n_layers=len(types), n_heads=heads, n_kv_heads=h.get("num_key_value_heads") or heads,
        head_dim=h.get("head_dim"), d_ff=h.get("intermediate_size"), ffn="relu2",
        ffn_bias=bool(h.get("mlp_bias")), norm="rmsnorm", positions="none",
        max_positions=h.get("max_position_embeddings"),
        tie_embeddings=h.get("tie_word_embeddings"),
        mixer_types=tuple(_BLOCKS[t][0] for t in types),
        ffn_types=tuple(_BLOCKS[t][1] for t in types),
        ssm_heads=h.get("mamba_num_heads"), ssm_head_dim=h.get("mamba_head_dim"),
        # the mamba_* spellings NemotronHConfig.__post_init__ renames: aliases
        ssm_groups=h.one_of("n_groups"), ssm_state=h.get("ssm_state_size"),
        conv_kernel=h.one_of("conv_kernel"), scan_chunk=h.one_of("chunk_size"),
        conv_bias=bool(h.one_of("use_conv_bias")))
    if "mamba2" not in f["mixer_types"]:  # the Mamba-2 fields belong to Mamba-2 layers
        for k in ("ssm_heads", "ssm_head_dim", "ssm_state", "conv_kernel", "scan_chunk"):
            f[k] = None
        f["ssm_groups"] = 1


def _period(h: HF, kind: str) -> tuple[int, int]:
    """Jamba's every-period-th layer from offset (JambaConfig.validate_architecture: offset <
    period)."""
    period, offset = h.get(f"{kind}_layer_period"), h.get(f"{kind}_layer_offset")
    if type(period) is not int or period < 1:
        raise ShapecalcError(f"{kind}_layer_period", f"must be a positive integer, not {period!r}")
    if type(offset) is not int or not 0 <= offset < period:
        raise ShapecalcError(f"{kind}_layer_offset", f"{offset!r} must be a whole number below "
                             f"{kind}_layer_period={period}")
    return period, offset


def _positive(h: HF, key: str, what: str) -> int:
    v = h.get(key)
    if type(v) is not int or v < 1:
        raise ShapecalcError(key, f"{what} must be a positive integer, not {v!r}")
    return v


@mechanism("attn_layer_period", "attn_layer_offset", "expert_layer_period",
           "expert_layer_offset", "num_experts", "num_experts_per_tok", "mamba_d_state",
           "mamba_d_conv", "mamba_expand", "mamba_dt_rank", "mamba_conv_bias", "mamba_proj_bias",
           "layers_block_type", "layer_types")
def jamba(h: HF, f: Fields) -> None:
    """JambaAttentionDecoderLayer / JambaMambaDecoderLayer: x + mixer(RMSNorm(x)), then x +
    FFN(RMSNorm(x)); the mixer attention without RoPE on every attn_layer_period-th layer from
    attn_layer_offset, else Mamba-1 (JambaMambaMixer: RMSNorms on Δ, B, C); the FFN a MoE of
    num_experts (softmax top-k, not renormalised) on every expert_layer_period-th layer from
    expert_layer_offset when num_experts > 1, else a SwiGLU MLP."""
    for key in ("layers_block_type", "layer_types"):  # JambaConfig's properties: no setter
        if h.get(key) is not None:
            raise ShapecalcError(key, "JambaConfig computes it from attn_layer_period and "
                                 "attn_layer_offset and cannot take it")
    n = f["n_layers"]
    ap, ao = _period(h, "attn")
    ep, eo = _period(h, "expert")
    experts = h.one_of("num_experts")  # or num_local_experts (attribute_map)
    if type(experts) is not int or experts < 1:
        raise ShapecalcError("num_experts", f"E must be a positive integer, not {experts!r}")
    mixers = tuple("attention" if i % ap == ao else "mamba1" for i in range(n))
    ffns = tuple("moe" if experts > 1 and i % ep == eo else "dense" for i in range(n))
    f.update(positions="none", mixer_types=mixers if "mamba1" in mixers else None)
    if "moe" in ffns:
        k = _positive(h, "num_experts_per_tok", "k")
        f.update(n_experts=experts, experts_per_token=k,
                 ffn_types=ffns if "dense" in ffns else None)
    if "mamba1" not in mixers:  # the Mamba-1 sizes belong to Mamba-1 layers
        return
    rank = h.get("mamba_dt_rank")
    if rank == "auto":  # JambaConfig.__post_init__: ⌈D/16⌉
        rank = -(-f["d_model"] // 16)
    if type(rank) is not int or rank < 1:
        raise ShapecalcError("mamba_dt_rank", f"R_dt must be a positive integer or 'auto', not "
                             f"{rank!r}")
    f.update(mamba_expand=_positive(h, "mamba_expand", "e"), mamba_dt_rank=rank,
             ssm_state=_positive(h, "mamba_d_state", "N_s"),
             conv_kernel=_positive(h, "mamba_d_conv", "K_c"),
             conv_bias=bool(h.get("mamba_conv_bias")),
             mamba_proj_bias=bool(h.get("mamba_proj_bias")), mamba_bcdt_norm=True)


def _factors(h: HF, key: str, n: int) -> tuple[float, ...]:
    """Falcon-H1's list of n multipliers (mlp_multipliers, ssm_multipliers)."""
    v = h.get(key)
    if v is None:  # FalconH1Config.__post_init__: all 1.0
        return (1.0,) * n
    if not isinstance(v, list) or len(v) != n or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        raise ShapecalcError(key, f"must be a list of {n} numbers, not {v!r}")
    return tuple(float(x) for x in v)


@mechanism("mamba_d_ssm", "mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_d_state",
           "mamba_d_conv", "mamba_expand", "mamba_chunk_size", "mamba_conv_bias",
           "mamba_rms_norm", "mamba_norm_before_gate", "lm_head_multiplier",
           "embedding_multiplier", "mlp_multipliers", "key_multiplier",
           "attention_out_multiplier", "attention_in_multiplier", "ssm_multipliers",
           "ssm_in_multiplier", "ssm_out_multiplier", "layers_block_type", "layer_types")
def falcon_h1(h: HF, f: Fields) -> None:
    """FalconH1DecoderLayer: h = RMSNorm(x); x + Mamba-2(h)·ssm_out + Attn(h·attn_in)·attn_out
    (FalconH1Mixer: its input × ssm_in, in_proj's parts × the μP vector, the gated RMSNorm only
    with mamba_rms_norm, else y ⊙ silu(z); attention with k × key_multiplier); then x +
    MLP(RMSNorm(x)), its gate × and its output × mlp_multipliers; the embeddings ×
    embedding_multiplier, the logits × lm_head_multiplier. Every multiplier is applied, 1 or not."""
    for key in ("layers_block_type", "layer_types"):  # a property: every layer is hybrid
        if h.get(key) is not None:
            raise ShapecalcError(key, "FalconH1Config makes every layer hybrid and cannot take it")
    heads = _positive(h, "mamba_n_heads", "H_s")
    inner = h.get("mamba_d_ssm")
    if inner is None:  # FalconH1Mixer: mamba_expand·D
        inner = _positive(h, "mamba_expand", "the expansion") * f["d_model"]
    elif type(inner) is not int or inner < 1:
        raise ShapecalcError("mamba_d_ssm", f"I must be a positive integer, not {inner!r}")
    dh = h.get("mamba_d_head")
    dh = inner // heads if dh == "auto" else dh
    if type(dh) is not int or dh * heads != inner:
        raise ShapecalcError("mamba_d_head", f"{dh!r} × mamba_n_heads={heads} must be the "
                             f"inner width {inner} (FalconH1Config.validate_architecture)")
    norm = bool(h.get("mamba_rms_norm"))
    if norm and h.get("mamba_norm_before_gate"):
        raise ShapecalcError("mamba_norm_before_gate", "true with mamba_rms_norm: RMSNorm(y)"
                             " ⊙ silu(z) is not modelled (only RMSNorm(y ⊙ silu(z)))")
    gate, down = _factors(h, "mlp_multipliers", 2)
    f.update(mixer_types=("parallel",) * f["n_layers"], ssm_heads=heads, ssm_head_dim=dh,
             ssm_groups=_positive(h, "mamba_n_groups", "G"),
             ssm_state=_positive(h, "mamba_d_state", "N_s"),
             conv_kernel=_positive(h, "mamba_d_conv", "K_c"),
             scan_chunk=_positive(h, "mamba_chunk_size", "L"),
             conv_bias=bool(h.get("mamba_conv_bias")), ssm_gated_norm=norm,
             ssm_multipliers=_factors(h, "ssm_multipliers", 5), mlp_multipliers=(gate, down),
             **{field: h.number(key) for field, key in (
                 ("embedding_multiplier", "embedding_multiplier"),
                 ("logit_scale", "lm_head_multiplier"), ("key_multiplier", "key_multiplier"),
                 ("attention_in_multiplier", "attention_in_multiplier"),
                 ("attention_out_multiplier", "attention_out_multiplier"),
                 ("ssm_in_multiplier", "ssm_in_multiplier"),
                 ("ssm_out_multiplier", "ssm_out_multiplier"))})


# GraniteMoeHybridConfig's layer_types, with the legacy names transformers remaps
_GRANITE = {"mamba": "mamba2", "linear_attention": "mamba2", "attention": "attention",
            "full_attention": "attention"}


@mechanism("layer_types", "layers_block_type", "position_embedding_type", "mamba_n_heads",
           "mamba_n_groups", "mamba_d_state", "mamba_d_head", "mamba_d_conv", "mamba_expand",
           "mamba_chunk_size", "mamba_conv_bias")
def granite_hybrid(h: HF, f: Fields) -> None:
    """GraniteMoeHybridDecoderLayer: x + mixer(RMSNorm(x))·residual_multiplier, the mixer a
    Mamba-2 (BambaMixer: the gated RMSNorm over G groups) on linear_attention layers, else
    Granite's attention (RoPE only with position_embedding_type rope); then x + (MoE(h) +
    shared MLP(h))·residual_multiplier."""
    n = f["n_layers"]
    types = h.one_of("layer_types")
    if types is None:  # GraniteMoeHybridConfig.__post_init__: every layer Mamba-2
        types = ["linear_attention"] * n
    if not isinstance(types, list):
        raise ShapecalcError("layer_types", f"must be a list of layer types, not {types!r}")
    bad = next((t for t in types if t not in _GRANITE), None)
    if bad is not None:
        raise ShapecalcError("layer_types", f"{bad!r} is not one of {', '.join(_GRANITE)}")
    if len(types) != n:
        raise ShapecalcError("layer_types", f"lists {len(types)} layers, but "
                             f"num_hidden_layers is {n}")
    pos = h.get("position_embedding_type")
    if pos not in (None, "rope", "nope"):
        raise ShapecalcError("position_embedding_type", f"{pos!r} is not rope or none")
    f.update(mixer_types=tuple(_GRANITE[t] for t in types),
             positions="rope" if pos == "rope" else "none")
    if "mamba2" not in f["mixer_types"]:
        return
    heads = _positive(h, "mamba_n_heads", "H_s")
    inner = _positive(h, "mamba_expand", "the expansion") * f["d_model"]
    dh = h.get("mamba_d_head")
    dh = inner // heads if dh == "auto" else dh
    if type(dh) is not int or dh * heads != inner:
        raise ShapecalcError("mamba_d_head", f"{dh!r} × mamba_n_heads={heads} must be the "
                             f"inner width mamba_expand·D = {inner}")
    f.update(ssm_heads=heads, ssm_head_dim=dh, ssm_groups=_positive(h, "mamba_n_groups", "G"),
             ssm_state=_positive(h, "mamba_d_state", "N_s"),
             conv_kernel=_positive(h, "mamba_d_conv", "K_c"),
             scan_chunk=_positive(h, "mamba_chunk_size", "L"),
             conv_bias=bool(h.get("mamba_conv_bias")))
