"""No silent guesses: the config keys each Hugging Face reader reads, and the keys known to change
shapes, parameters, FLOPs or the KV cache.

A transformers config class keeps any key it does not know and its model ignores it, so a
Mixtral config relabelled `mistral` builds (and shapecalc would count) a 7.24 B dense model.
After a family's entry has been read, `audit` refuses, in one line naming the key, every key of
`SHAPE_KEYS` that the config gives with a value that changes something and that none of the
entry's mechanisms reads (hf_families.READS, each mechanism declaring its keys). The audit works
on every entry alike: nothing shape-changing is let through unread.

A family's reads are its mechanisms' keys (tests/test_hf_keys.py checks that they read exactly
these); to model a new variant: its keys in `SHAPE_KEYS` with the values that change nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..model.config import ShapecalcError
from .hf_base import same

Cfg = dict[str, Any]


def _heads(cfg: Cfg) -> Any:
    """H, under any family's name for it."""
    return next((cfg[k] for k in ("num_attention_heads", "n_head", "n_heads") if cfg.get(k)), None)


def _width(cfg: Cfg) -> Any:
    """D, under any family's name for it."""
    return next((cfg[k] for k in ("hidden_size", "n_embd", "d_model") if cfg.get(k)), None)


def _dh(cfg: Cfg) -> int | None:
    """Dh: head_dim if given, else D/H."""
    if isinstance(cfg.get("head_dim"), int):
        return int(cfg["head_dim"])
    d, h = _width(cfg), _heads(cfg)
    return d // h if isinstance(d, int) and isinstance(h, int) and h and d % h == 0 else None


def _off(flag: str) -> Callable[[Any, Cfg], bool]:
    """Neutral when the config itself switches the feature off (`flag` given and false)."""
    return lambda v, cfg: flag in cfg and not cfg[flag]


@dataclass(frozen=True)
class Key:
    """A key that changes shapes or costs: `what` it changes, and the values that change
    nothing (absent is always neutral)."""

    what: str
    neutral: tuple[Any, ...] = (None, False)
    also: Callable[[Any, Cfg], bool] | None = None  # neutral too when this holds

    def is_neutral(self, value: Any, cfg: Cfg) -> bool:
        return any(same(value, n) for n in self.neutral) or bool(
            self.also and self.also(value, cfg))


def _default_scale(v: Any, cfg: Cfg) -> bool:
    """An attention multiplier equal to the default 1/√Dh."""
    dh = _dh(cfg)
    return isinstance(v, (int, float)) and bool(dh) and math.isclose(v, dh ** -0.5)  # type: ignore[operator]


_EXPERTS = "experts (a Mixture-of-Experts FFN)"
_NONE0 = (None, 0, False)
_ONE = (None, 1, 1.0)

# Known shape- or cost-changing keys across Hugging Face families, grouped by variant. Nested
# keys (transformers 5 moves partial_rotary_factor into rope_parameters) are written dotted.
SHAPE_KEYS: dict[str, Key] = {
    # Mixture-of-Experts (checked first: a relabelled MoE config is named by its expert count)
    "num_local_experts": Key(_EXPERTS, _NONE0),
    "num_experts": Key(_EXPERTS, _NONE0),
    "n_routed_experts": Key(_EXPERTS, _NONE0),
    "moe_intermediate_size": Key("the routed experts' width", _NONE0),
    "n_shared_experts": Key("shared experts", _NONE0),
    "shared_expert_intermediate_size": Key("a shared expert", _NONE0),
    "num_experts_per_tok": Key("experts per token (k)", _NONE0),
    "experts_per_token": Key("experts per token (k)", _NONE0),
    "first_k_dense_replace": Key("the layers that are MoE", _NONE0),
    "moe_layer_freq": Key("the layers that are MoE", _ONE),
    "decoder_sparse_step": Key("the layers that are MoE", _ONE),
    "interleave_moe_layer_step": Key("the layers that are MoE", _ONE),
    "mlp_only_layers": Key("the layers that are MoE", (None, [])),
    "moe_layers": Key("the layers that are MoE", (None, [])),
    "mlp_layer_types": Key("the layers that are MoE"),
    "intermediate_size_mlp": Key("the dense MLP's width (Llama 4)"),
    "num_nextn_predict_layers": Key("multi-token-prediction modules (DeepSeek-V3)", _NONE0),
    # Multi-head Latent Attention
    "kv_lora_rank": Key("Multi-head Latent Attention (a latent KV cache)"),
    "q_lora_rank": Key("Multi-head Latent Attention (a low-rank q projection)"),
    "qk_rope_head_dim": Key("Multi-head Latent Attention (the decoupled RoPE width)"),
    "qk_nope_head_dim": Key("Multi-head Latent Attention (the no-RoPE q/k width)"),
    "v_head_dim": Key("the value head width"),
    # per-layer attention: windows, chunks, NoPE
    "use_sliding_window": Key("a sliding window"),
    "sliding_window": Key("a sliding window", also=_off("use_sliding_window")),
    "max_window_layers": Key("the layers that slide", also=lambda v, cfg: not cfg.get(
        "use_sliding_window")),
    "sliding_window_pattern": Key("the layers that slide"),
    "layer_types": Key("each layer's attention kind", also=lambda v, cfg: isinstance(v, list)
                       and all(t == "full_attention" for t in v)),
    "attention_chunk_size": Key("chunked attention"),
    "no_rope_layers": Key("NoPE layers", also=lambda v, cfg: isinstance(v, list) and bool(v)
                          and all(v)),
    "no_rope_layer_interval": Key("NoPE layers"),
    "attn_temperature_tuning": Key("attention temperature tuning (Llama 4)", _NONE0),
    # positions
    "alibi": Key("ALiBi attention biases"),
    "position_embedding_type": Key("the position encoding", (None, "absolute")),
    "rotary_pct": Key("partial rotary", _ONE),
    "partial_rotary_factor": Key("partial rotary", _ONE),
    "rope_parameters.partial_rotary_factor": Key("partial rotary", _ONE),
    "rope_scaling.partial_rotary_factor": Key("partial rotary", _ONE),
    "rotary_dim": Key("partial rotary", also=lambda v, cfg: v == _dh(cfg)),
    # block layout
    "use_parallel_residual": Key("a parallel residual block"),
    "parallel_attn": Key("a parallel residual block"),
    "new_decoder_architecture": Key("Falcon's new decoder (ln_attn, ln_mlp)"),
    "num_ln_in_parallel_attn": Key("the norms of a parallel block"),
    "apply_residual_connection_post_layernorm": Key("where the residual is taken"),
    "add_cross_attention": Key("cross-attention (not decoder-only)"),
    "is_encoder_decoder": Key("an encoder-decoder model (not decoder-only)"),
    "cross_attention_hidden_size": Key("cross-attention (not decoder-only)"),
    "use_bidirectional_attention": Key("bidirectional attention (not causal)"),
    # heads and widths
    "head_dim": Key("the head width Dh", also=lambda v, cfg: v == _dh({**cfg, "head_dim": None})),
    "num_key_value_heads": Key("KV heads", also=lambda v, cfg: v == _heads(cfg)),
    "num_kv_heads": Key("KV heads", also=lambda v, cfg: v == _heads(cfg)),
    "n_head_kv": Key("KV heads", also=lambda v, cfg: v == _heads(cfg)),
    "multi_query": Key("multi-query attention (one KV head)"),
    "word_embed_proj_dim": Key("projected embeddings", also=lambda v, cfg: v == _width(cfg)),
    # norms and biases
    "use_qk_norm": Key("q/k norms"),
    "qk_layernorm": Key("q/k norms"),
    "qk_ln": Key("q/k norms"),
    "qk_norm": Key("q/k norms"),
    "attention_bias": Key("attention biases"),
    "attention_out_bias": Key("an output projection bias"),
    "use_qkv_bias": Key("q, k, v biases"),
    "qkv_bias": Key("q, k, v biases"),
    "mlp_bias": Key("MLP biases"),
    "use_bias": Key("biases"),
    "bias": Key("biases"),
    "lm_head_bias": Key("an LM-head bias"),
    # scalings and caps
    "attn_logit_softcapping": Key("attention logit softcapping"),
    "final_logit_softcapping": Key("final logit softcapping"),
    "query_pre_attn_scalar": Key("the attention scale", also=lambda v, cfg: v == _dh(cfg)),
    "logit_scale": Key("scaled logits", _ONE),
    "embedding_multiplier": Key("scaled embeddings (Granite)", _ONE),
    "logits_scaling": Key("scaled logits (Granite)", _ONE),
    "residual_multiplier": Key("scaled residuals (Granite)", _ONE),
    "attention_multiplier": Key("the attention scale (Granite)", also=_default_scale),
}

def _given(cfg: Cfg) -> Iterator[tuple[str, Any]]:
    """The config's keys, with rope_parameters/rope_scaling entries dotted (and, when those hold
    one dict per layer type, each of those)."""
    for key, value in cfg.items():
        yield key, value
        if key in ("rope_parameters", "rope_scaling") and isinstance(value, dict):
            inner = [value, *(v for v in value.values() if isinstance(v, dict))]
            for d in inner:
                for k, v in d.items():
                    yield f"{key}.{k}", v


def audit(cfg: Cfg, model_type: str, reads: frozenset[str]) -> None:
    """Refuse the first key of SHAPE_KEYS (in their order) that `cfg` gives with a value that
    changes something, and that model_type's entry does not read (`reads`, with the keys its
    class ignores)."""
    given = dict(_given(cfg))
    for key, spec in SHAPE_KEYS.items():
        if key not in given or key in reads or spec.is_neutral(given[key], cfg):
            continue
        raise ShapecalcError(key, f"{given[key]!r} sets {spec.what}, which shapecalc does not "
                             f"read for model_type {model_type!r}; refused rather than ignored "
                             "(another family's config needs its own model_type)")


# keys no reader needs because they change no shape or count: token ids, dropouts, norm
# epsilons, initialisation, training and serving switches, provenance (PretrainedConfig's own)
_NEUTRAL = ("architectures", "model_type", "transformers_version", "torch_dtype", "dtype",
            "_name_or_path", "auto_map", "use_cache", "task_specific_params", "text_config",
            "vision_config", "quantization_config", "tokenizer_class", "cache_implementation",
            "gradient_checkpointing", "output_router_logits", "router_aux_loss_coef",
            "aux_loss_alpha", "seq_aux", "model_max_length", "verbose", "output_past",
            "prefix", "layerdrop", "initializer_range", "rope_scaling", "rope_parameters")
_NEUTRAL_PARTS = ("_token_id", "_token_index", "dropout", "pdrop", "_eps", "eps", "epsilon",
                  "init_", "_init", "summary_", "_jitter_noise", "_fusion", "softmax_in_fp32")


def unread(cfg: Cfg, known: frozenset[str]) -> list[str]:
    """The keys of `cfg` that no family reads or knows to ignore (`known`: every family's reads,
    ignored keys, defaults and aliases) and that are not plainly neutral: said in a note
    ("keys not read"), since shapecalc cannot tell what a new key (my_new_gating) changes."""
    return sorted(k for k in cfg if k not in known and k not in SHAPE_KEYS
                  and k not in _NEUTRAL and not any(p in k for p in _NEUTRAL_PARTS))
