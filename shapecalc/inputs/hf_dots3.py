"""dots3 (issue 20), as transformers 5.24's Dots3NoteTextConfig and modeling_dots3_note.py define
its text model: MLA with a head-wise sigmoid gate (g_proj), an RMSNorm on the shared k_rope and
the normed latents × √(D/D_q), √(D/D_c); DeepSeek Sparse Attention's indexer on the
indexed_attention layers (its keys cached in fp32: its RoPE runs in fp32), a sliding window on the
sliding_attention layers (no indexer there), each layer type of its own widths (per_layer_config,
or the released checkpoint's swa_* keys); DeepSeek-V3's MoE (sigmoid, group-limited, a correction
bias that is a buffer) after the first dense layers. Only the text model is read: the vision and
audio towers are not counted. hf_dots3 holds the entry, joined to the table by hf_families.py."""

from __future__ import annotations

from typing import Any

from ..model.config import ShapecalcError
from ..model.widths import LayerWidths
from .hf_base import HF, Family, Fields, mechanism
from .hf_llama import SILU, table

# Dots3NoteTextConfig's layer types → shapecalc's (indexed: full MLA with the indexer)
TYPES = {"indexed_attention": "full", "sliding_attention": "sliding", "full_attention": "full"}
# per_layer_config's keys a layer's attention reads (Dots3NoteTextAttention takes
# config.per_layer_config[layer_idx]) → LayerWidths' fields
PER_LAYER = {"num_attention_heads": "n_heads", "q_lora_rank": "q_lora_rank",
             "kv_lora_rank": "kv_lora_rank", "qk_nope_head_dim": "qk_nope_head_dim",
             "qk_rope_head_dim": "qk_rope_head_dim", "v_head_dim": "v_head_dim"}
# per-layer keys that change no count: K/V heads (held equal to H), head_dim (the RoPE table's
# width only), the norms' eps, dropout
NO_COUNT = ("num_key_value_heads", "head_dim", "rms_norm_eps", "attention_dropout")
# the released checkpoint's sliding-layer keys, and their class defaults
SWA = {"num_attention_heads": 64, "num_key_value_heads": 64, "q_lora_rank": 1024,
       "kv_lora_rank": 1024, "head_dim": 256, "qk_nope_head_dim": 192, "v_head_dim": 128}
_LAYER_KEYS = ("layer_types", "use_dsa", "use_sliding_window", "sliding_window",
               "sliding_window_size", "per_layer_config", "swa_qk_rope_head_dim",
               *(f"swa_{k}" for k in SWA))
_MLA_KEYS = ("kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
             "v_head_dim", "head_dim", "attention_bias", "index_topk", "index_n_heads",
             "index_head_dim", "rope_theta", "swa_rope_theta", "rope_parameters")


def _count(h: HF, key: str, value: Any) -> int:
    if type(value) is not int or value < 1:
        raise ShapecalcError(key, f"must be a whole number > 0, not {value!r}")
    return value


def _types(h: HF, n: int) -> list[str]:
    """Each layer's type as Dots3NoteTextConfig.__post_init__ derives it: layer_types, else
    the first two and every i ≡ 1 (mod 4) full (indexed unless use_dsa is false), the rest
    sliding (unless use_sliding_window is false); use_dsa renames one full kind to the other."""
    given, plc = h.get("layer_types"), h.get("per_layer_config")
    use_dsa = h.get("use_dsa", None if plc is not None else True)
    sliding = h.get("use_sliding_window", True)
    if given is None:
        full = "full_attention" if use_dsa is False else "indexed_attention"
        types = [full if not sliding or i < 2 or i % 4 == 1 else "sliding_attention"
                 for i in range(n)]
    elif isinstance(given, list) and all(t in TYPES for t in given):
        types = list(given)
    else:
        raise ShapecalcError("layer_types", f"must list {', '.join(TYPES)} per layer, not "
                             f"{given!r}")
    if use_dsa is not None:
        old, new = ("full_attention", "indexed_attention")[:: 1 if use_dsa else -1]
        types = [new if t == old else t for t in types]
    if len(types) != n:
        raise ShapecalcError("layer_types", f"lists {len(types)} layers, but "
                             f"num_hidden_layers is {n}")
    if {"full_attention", "indexed_attention"} <= set(types):
        raise ShapecalcError("layer_types", "mixes full_attention and indexed_attention: full "
                             "MLA layers without an indexer beside indexed ones are not modelled")
    return types


def _overrides(h: HF, types: list[str]) -> dict[int, dict[str, Any]]:
    """per_layer_config (a mapping of layer index → overrides, or a list of N), else the swa_*
    keys on every sliding layer (the class's setdefault)."""
    n, plc = len(types), h.get("per_layer_config")
    if plc is None:
        swa = {k: h.get(f"swa_{k}", d) for k, d in SWA.items()}
        rope = h.get("swa_qk_rope_head_dim")
        swa["qk_rope_head_dim"] = rope if rope is not None else (
            _count(h, "swa_head_dim", swa["head_dim"])
            - _count(h, "swa_qk_nope_head_dim", swa["qk_nope_head_dim"]))
        return {i: swa for i, t in enumerate(types) if t == "sliding_attention"}
    if isinstance(plc, list):
        if len(plc) != n:
            raise ShapecalcError("per_layer_config", f"lists {len(plc)} layers, but "
                                 f"num_hidden_layers is {n}")
        plc = dict(enumerate(plc))
    if not isinstance(plc, dict):
        raise ShapecalcError("per_layer_config", f"must map layer indices to overrides, not "
                             f"{plc!r}")
    out: dict[int, dict[str, Any]] = {}
    for key, over in plc.items():
        i = int(key) if isinstance(key, int) or (isinstance(key, str) and key.isdigit()) else -1
        if not 0 <= i < n:
            raise ShapecalcError("per_layer_config", f"{key!r} is not a layer index in "
                                 f"0..{n - 1} (num_hidden_layers is {n})")
        if not isinstance(over, dict):
            raise ShapecalcError("per_layer_config", f"layer {i}: must be a mapping of "
                                 f"overrides, not {over!r}")
        bad = next((k for k in over if k not in PER_LAYER and k not in NO_COUNT), None)
        if bad is not None:
            raise ShapecalcError(f"per_layer_config.{bad}", "is not modelled per layer "
                                 "(transformers' Dots3NoteText model reads it from the global "
                                 "config, or its indexer's and FFN's widths per layer are not "
                                 "modelled)")
        out[i] = over
    return out


@mechanism("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
           "num_key_value_heads", "intermediate_size", *_MLA_KEYS, *_LAYER_KEYS)
def dots3(h: HF, f: Fields) -> None:
    n, heads = h.need("num_hidden_layers", "N"), h.need("num_attention_heads", "H")
    bias = bool(h.get("attention_bias", False))
    glob = {k: h.get(k) for k in ("num_key_value_heads", "q_lora_rank", "kv_lora_rank",
                                  "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                                  "head_dim")}
    glob["num_attention_heads"] = heads
    types = _types(h, n)
    over = _overrides(h, types)
    layers = [{**glob, **over.get(i, {})} for i in range(n)]
    for t in set(types):  # the class reads per_layer_config[layer_type]: one config a type
        first = next(i for i in range(n) if types[i] == t)
        odd = next((i for i in range(n) if types[i] == t and layers[i] != layers[first]), None)
        if odd is not None:
            raise ShapecalcError("per_layer_config", f"layer {odd} differs from layer {first}, "
                                 f"both {t}: Dots3NoteTextConfig needs one config a layer type")
    swa = h.get("per_layer_config") is None  # the sliding layers' widths from swa_* keys
    for i, (t, lay) in enumerate(zip(types, layers, strict=True)):
        def src(k: str, i: int = i) -> str:  # the key a layer's width was read from
            return k if i not in over else f"swa_{k}" if swa else "per_layer_config"
        at = f"layer {i}'s " if i in over and not swa else ""
        for k in PER_LAYER:
            if lay[k] is None and k == "q_lora_rank":
                raise ShapecalcError(src(k), f"{at}null, but Dots3's MLA always builds q_a_proj")
            _count(h, src(k), lay[k])
        if lay["num_key_value_heads"] != lay["num_attention_heads"]:
            raise ShapecalcError(src("num_key_value_heads"), f"{at}must equal "
                                 "num_attention_heads: MLA makes K and V for every head")
        if t == "sliding_attention" and lay["head_dim"] != lay["qk_nope_head_dim"] + lay[
                "qk_rope_head_dim"]:
            raise ShapecalcError(src("head_dim"), f"{at}a sliding layer's head_dim must equal "
                                 "qk_nope_head_dim + qk_rope_head_dim")
    dsa = "indexed_attention" in types
    base = {k: layers[0][k] if v is None else v for k, v in glob.items()}  # the model's own
    f.update(vocab_size=h.need("vocab_size", "N_vocab"), d_model=h.need("hidden_size", "D"),
             n_layers=n, n_heads=heads, d_ff=h.need("intermediate_size", "Dff"),
             norm="rmsnorm", positions="rope", rope_interleaved=True, qkv_bias=bias,
             attn_out_bias=bias, attn_head_gate=True, mla_rope_norm=True, mla_latent_scale=True,
             **{v: base[k] for k, v in PER_LAYER.items() if k != "num_attention_heads"},
             layer_types=tuple(TYPES[t] for t in types))
    widths = {v: tuple(lay[k] for lay in layers) for k, v in PER_LAYER.items()}
    widths = {v: w for (k, v), w in zip(PER_LAYER.items(), widths.values(), strict=True)
              if set(w) != {base[k]}}
    if "qk_rope_head_dim" in widths:  # shapecalc turns every layer by one RoPE table
        raise ShapecalcError("swa_qk_rope_head_dim" if swa else "per_layer_config",
                             "a qk_rope_head_dim of a layer type's own is not modelled (one "
                             f"RoPE width D_r={base['qk_rope_head_dim']} for every layer)")
    f["layer_widths"] = LayerWidths(**widths) if widths else None
    if "sliding_attention" in types:
        w = h.get("sliding_window")
        f["sliding_window"] = _count(h, "sliding_window", w if w is not None else h.get(
            "sliding_window_size", 512))
    if dsa:
        for key, field in (("index_topk", "index_topk"), ("index_n_heads", "index_heads"),
                           ("index_head_dim", "index_head_dim")):
            f[field] = _count(h, key, h.get(key))
        f["index_cache_dtype"] = "fp32"  # k_I after the fp32 RoPE: the cache keeps it so
    _rope(h, f)


def _rope(h: HF, f: Fields) -> None:
    """θ of the indexed (full) and the sliding layers (the executor's angles; no count)."""
    params = h.get("rope_parameters")
    theta, local = h.get("rope_theta", 80_000_000.0), h.get("swa_rope_theta", 50_000.0)
    if isinstance(params, dict) and isinstance(params.get("sliding_attention"), dict):
        local = params["sliding_attention"].get("rope_theta", local)
    if isinstance(params, dict) and isinstance(params.get("indexed_attention"), dict):
        theta = params["indexed_attention"].get("rope_theta", theta)
    f.update(rope_base=float(theta), rope_base_local=float(local) if (
        f.get("sliding_window") is not None and local != theta) else None)


@mechanism("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
           "n_shared_experts", "shared_experts_intermediate_size",
           "moe_shared_expert_intermediate_size", "routed_scaling_factor", "norm_topk_prob",
           "n_group", "topk_group", "mlp_layer_types", "first_k_dense_replace", "moe_layer_freq")
def dots3_moe(h: HF, f: Fields) -> None:
    """Dots3NoteTextMoE: E routed experts of Dff_e (top k of sigmoid + a correction buffer,
    group-limited: no count), n_s shared of Dff_s, on the sparse layers of mlp_layer_types (else
    every layer from first_k_dense_replace on, where moe_layer_freq allows)."""
    n = f["n_layers"]
    experts = _count(h, "n_routed_experts", h.first("n_routed_experts"))
    k = _count(h, "num_experts_per_tok", h.get("num_experts_per_tok"))
    shared = h.get("n_shared_experts")
    if type(shared) is not int or shared < 1:
        raise ShapecalcError("n_shared_experts", f"{shared!r}: Dots3 needs at least one shared "
                             "expert")
    groups, top = h.get("n_group"), h.get("topk_group")
    if type(groups) is not int or groups < 1 or experts % groups or experts // groups < 2:
        raise ShapecalcError("n_group", f"{groups!r} must divide n_routed_experts={experts} "
                             "into groups of at least two")
    if type(top) is not int or not 1 <= top <= groups:
        raise ShapecalcError("topk_group", f"{top!r} must be in 1..n_group={groups}")
    if k > experts:
        raise ShapecalcError("num_experts_per_tok", f"{k} is more than the {experts} experts")
    width = h.get("moe_shared_expert_intermediate_size")
    width = h.get("shared_experts_intermediate_size") if width is None else width
    types = h.get("mlp_layer_types")
    first, freq = h.get("first_k_dense_replace", 1), h.get("moe_layer_freq", 1)
    if types is None:
        if isinstance(freq, list) and len(freq) < n:
            raise ShapecalcError("moe_layer_freq", f"lists {len(freq)} layers, but "
                                 f"num_hidden_layers is {n}")
        if not isinstance(freq, list) and (type(freq) is not int or freq < 1):
            raise ShapecalcError("moe_layer_freq", f"must be a whole number > 0, not {freq!r}")
        if type(first) is not int or first < 0:
            raise ShapecalcError("first_k_dense_replace", f"must be a whole number ≥ 0, not "
                                 f"{first!r}")
        types = ["sparse" if i >= first and (bool(freq[i]) if isinstance(freq, list)
                                              else i % freq == 0) else "dense"
                 for i in range(n)]
    if not isinstance(types, list) or len(types) != n or any(
            t not in ("dense", "sparse") for t in types):
        raise ShapecalcError("mlp_layer_types", f"must give 'dense' or 'sparse' for each of the "
                             f"{n} layers, not {types!r}")
    f.update(n_experts=experts, experts_per_token=k,
             d_ff_expert=_count(h, "moe_intermediate_size", h.get("moe_intermediate_size")),
             n_shared_experts=shared, d_ff_shared=_count(h, "shared_experts_intermediate_size",
                                                         width),
             router_scoring="sigmoid", norm_topk_prob=bool(h.get("norm_topk_prob")),
             routed_scaling_factor=h.get("routed_scaling_factor"),
             ffn_types=tuple("moe" if t == "sparse" else "dense" for t in types))
    if "moe" not in f["ffn_types"]:
        raise ShapecalcError("mlp_layer_types", "has no sparse layer; the model needs experts")
    if "dense" not in f["ffn_types"]:
        f["ffn_types"] = None


# Dots3NoteTextConfig's defaults (transformers 5.24; its docstring names
# dots-studio/dots3-note-prev)
_DOTS3 = dict(vocab_size=152064, hidden_size=5120, intermediate_size=13824,
              moe_intermediate_size=1536, num_hidden_layers=46, num_attention_heads=128,
              num_key_value_heads=128, n_shared_experts=1, n_routed_experts=256,
              routed_scaling_factor=1.0, kv_lora_rank=512, q_lora_rank=1024, qk_rope_head_dim=64,
              v_head_dim=128, qk_nope_head_dim=128, n_group=1, topk_group=1,
              num_experts_per_tok=8, norm_topk_prob=True, hidden_act="silu",
              max_position_embeddings=524288, tie_word_embeddings=False, attention_bias=False,
              index_topk=2048, index_head_dim=128, index_n_heads=64, head_dim=256,
              shared_experts_intermediate_size=1536, mlp_layer_types=None, layer_types=None,
              sliding_window=None, rope_parameters=None)

DOTS3: tuple[Family, ...] = (
    Family("dots3_note", "dots3: MLA + DSA indexer, 3 sliding MLA : 1, widths per layer type, MoE",
           (dots3, SILU, table, dots3_moe), _DOTS3,
           aliases={"n_routed_experts": ("num_local_experts",)},
           widths=dict(vocab_size=152064, hidden_size=5120, intermediate_size=13824,
                       num_hidden_layers=46, num_attention_heads=128),
           # the multimodal config's other towers and token ids: not the text model;
           # mlp_bias: Dots3NoteTextMLP and the experts build no biases whatever it says
           ignored=frozenset({"vision_config", "audio_config", "image_token_id",
                              "video_token_id", "audio_token_id", "output_router_logits",
                              "mlp_bias"})),
)
