"""Hugging Face mechanism of Llama 4's text model (`llama4_text`, and the `text_config` of a
multimodal `llama4` config: the vision tower is not counted).

The `llama` mechanism (hf_llama.py) reads what Llama 4 shares with Llama (widths, heads, KV heads,
tied embeddings, the activation); this mechanism reads what Llama 4 changes, as transformers 5.x's
Llama4TextConfig.__post_init__ and modeling_llama4.py build it:

- layer i uses RoPE when no_rope_layers[i] is 1 (default: every layer but each
  no_rope_layer_interval-th, (i+1) % 4 == 0); the others are NoPE layers;
- layer_types (default: chunked_attention on the RoPE layers when attention_chunk_size is set,
  full_attention on the others); a chunked layer's query reads only its own chunk of C keys;
- use_qk_norm: an L2 norm (RMS, no weights) on q and k after RoPE, on RoPE layers only;
- attn_temperature_tuning: q scaled per position on the NoPE layers (floor_scale and attn_scale
  change values, not shapes or costs);
- MoE layers: moe_layers, or every interleave_moe_layer_step-th (i = step−1, 2·step−1, …); an MoE
  layer has E = num_local_experts routed experts of width intermediate_size, one shared expert of
  the same width, and a router [D→E] whose top-k logits go through a sigmoid that scales the
  token's input to each chosen expert; the other layers have a dense MLP of
  intermediate_size_mlp.

"""

from __future__ import annotations

from ..model.config import ShapecalcError
from .hf_base import HF, Fields, mechanism, positive_step

_KINDS = {"chunked_attention": "chunked", "full_attention": "full"}


def _layers(h: HF, n: int) -> tuple[list[bool], list[str], list[str]]:
    """(rope per layer, attention kind per layer, FFN kind per layer), as __post_init__ makes
    them."""
    interval = h.get("no_rope_layer_interval")
    rope_flags = h.int_list("no_rope_layers") or [int((i + 1) % interval != 0)
                                                  for i in range(n)]
    if len(rope_flags) < n:
        raise ShapecalcError("no_rope_layers", f"lists {len(rope_flags)} layers, but "
                             f"num_hidden_layers is {n}")
    rope = [bool(x) for x in rope_flags[:n]]
    chunk = h.get("attention_chunk_size")
    types = h.get("layer_types") or [
        "chunked_attention" if r and chunk is not None else "full_attention" for r in rope
    ]
    other = [t for t in types if t not in _KINDS]
    if other:
        raise ShapecalcError("layer_types", f"{other[0]!r} layers are not modelled; supported: "
                             f"{', '.join(_KINDS)}")
    if len(types) != n:
        raise ShapecalcError("layer_types", f"lists {len(types)} layers, but num_hidden_layers "
                             f"is {n}")
    step = positive_step(h, "interleave_moe_layer_step")
    moe = h.int_list("moe_layers")
    moe_set = set(range(step - 1, n, step) if moe is None else moe)
    return rope, [_KINDS[t] for t in types], ["moe" if i in moe_set else "dense"
                                              for i in range(n)]


@mechanism("attention_bias", "intermediate_size", "intermediate_size_mlp", "no_rope_layers",
           "no_rope_layer_interval", "attention_chunk_size", "layer_types", "use_qk_norm",
           "attn_temperature_tuning", "moe_layers", "interleave_moe_layer_step",
           "num_local_experts", "num_experts_per_tok")
def llama4(h: HF, f: Fields) -> None:
    n = f["n_layers"]
    rope, kinds, ffns = _layers(h, n)
    chunk = h.get("attention_chunk_size")
    if "chunked" in kinds and chunk is None:
        raise ShapecalcError("layer_types", "has chunked_attention layers, but "
                             "attention_chunk_size is null")
    experts = h.get("num_local_experts")
    if "moe" in ffns and not experts:
        raise ShapecalcError("num_local_experts", f"{experts!r}: MoE layers need experts")
    bias = bool(h.get("attention_bias", False))
    width = h.get("intermediate_size")
    f.update(
        qkv_bias=bias, attn_out_bias=bias,
        d_ff=h.get("intermediate_size_mlp"),  # the dense layers' MLP
        attention_chunk_size=chunk if "chunked" in kinds else None,
        layer_types=tuple(kinds) if "full" in kinds and "chunked" in kinds else None,
        nope_layers=tuple(i for i, r in enumerate(rope) if not r) or None,
        qk_l2_norm=bool(h.get("use_qk_norm")) and any(rope),
        attn_temperature_tuning=bool(h.get("attn_temperature_tuning")) and not all(rope),
    )
    if "moe" in ffns:
        f.update(
            n_experts=experts,
            experts_per_token=h.get("num_experts_per_tok"),
            d_ff_expert=width,
            n_shared_experts=1,  # Llama4TextMLP of intermediate_size: d_ff_shared = Dff_e
            router_scoring="topk_sigmoid",
            routing_on_input=True,
            ffn_types=tuple(ffns) if "dense" in ffns else None,
        )
