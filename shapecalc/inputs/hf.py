"""Hugging Face config.json → ModelConfig: one reader per family, and the keys each reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..model.config import ModelConfig, ShapecalcError, first_error
from . import (
    files,
    hf_alibi,
    hf_classic,
    hf_deepseek,
    hf_gemma,
    hf_keys,
    hf_llama4,
    hf_moe,
    hf_quant,
    hf_render,
)
from .sources import _parse

_GELU = {"gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu_python", "gelu_accurate"}
_SILU = {"silu", "swish"}
_DENSE = ("falcon", "gemma", "gpt2", "llama", "mistral", "opt", "phi3", "qwen2")
SUPPORTED = tuple(sorted((*_DENSE, *hf_moe.READERS, *hf_alibi.READERS, *hf_classic.READERS,
                          *hf_deepseek.READERS, *hf_gemma.READERS, "llama4_text")))
# families that need what shapecalc does not model yet: the one line each is refused with
REFUSED: dict[str, str] = {}


class _HF:
    """Reads keys of one config.json; absent keys take the transformers class default. Every key
    looked at is recorded in `read` (hf_keys.READS declares them per family)."""

    def __init__(self, cfg: dict[str, Any]):
        self.cfg = cfg
        self.read: set[str] = set()

    def need(self, key: str, symbol: str, *aliases: str) -> Any:
        self.read.update((key, *aliases))
        for k in (key, *aliases):
            if self.cfg.get(k) is not None:
                value = self.cfg[k]
                # every needed key is a count or a width: readers compute with it (D // H, 4·D)
                if type(value) is not int or value < 1:
                    raise ShapecalcError(k, f"{symbol} must be a positive integer, not {value!r}")
                return value
        raise ShapecalcError(key, f"missing from config.json (needed for {symbol})")

    def get(self, key: str, default: Any = None) -> Any:
        """The key's value, else `default`. A given value must be of the default's kind: a
        flag true or false (`bool("false")` is True), a number a number (not `true`)."""
        self.read.add(key)
        if key not in self.cfg:
            return default
        value = self.cfg[key]
        if isinstance(default, bool) and not isinstance(value, bool):
            raise ShapecalcError(key, f"must be true or false, not {value!r}")
        number = isinstance(default, (int, float)) and not isinstance(default, bool)
        if number and value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ShapecalcError(key, f"must be a number, not {value!r}")
        return value

    def act(self, key: str, default: str, gated: bool) -> str:
        name = self.get(key, default)
        if not isinstance(name, str):
            raise ShapecalcError(key, f"must be an activation's name, not {name!r}")
        if gated and name in _SILU:
            return "swiglu"
        if name in _GELU:
            return "geglu" if gated else "gelu"
        if not gated and name == "relu":
            return "relu"
        ok = "silu, swish, gelu variants" if gated else "relu, gelu variants"
        kind = "a gated FFN" if gated else "an FFN"
        raise ShapecalcError(key, f"{name!r} is not supported for {kind}; supported: {ok}")


def _kv(h: _HF, default: int | None, n_heads: int) -> int:
    kv = h.get("num_key_value_heads", default)  # absent: class default; null: H (as __init__ does)
    return n_heads if kv is None else kv


def _llama_like(h: _HF, mt: str) -> dict[str, Any]:
    heads = h.need("num_attention_heads", "H")
    out: dict[str, Any] = dict(
        vocab_size=h.need("vocab_size", "N_vocab"),
        d_model=h.need("hidden_size", "D"),
        n_layers=h.need("num_hidden_layers", "N"),
        n_heads=heads,
        d_ff=h.need("intermediate_size", "Dff"),
        head_dim=h.get("head_dim"),  # null or absent: D/H
        norm="rmsnorm",
        positions="rope",  # rope_scaling changes no shape
    )
    # the family's class defaults: KV heads, positions, tied embeddings, the activation's key
    kv, positions, tied, act_key = {
        "llama": (None, 2048, False, "hidden_act"),
        "mistral": (8, 4096 * 32, False, "hidden_act"),
        "qwen2": (32, 32768, False, "hidden_act"),
        "gemma": (16, 8192, True, "hidden_activation"),
        "phi3": (None, 4096, False, "hidden_act"),
        "qwen3": (32, 32768, False, "hidden_act"),  # hf_moe.py reads the rest of these
        "mixtral": (8, 4096 * 32, False, "hidden_act"),
        "phimoe": (8, 4096 * 32, False, "hidden_act"),
        "qwen2_moe": (16, 32768, False, "hidden_act"),
        "qwen3_moe": (4, 32768, False, "hidden_act"),
        "gpt_oss": (8, 131072, False, None),  # its experts' SwiGLU reads no activation key
        "llama4_text": (8, 4096 * 32, False, "hidden_act"),  # hf_llama4.py reads the rest
        "deepseek_v2": (None, 2048, False, "hidden_act"),
        "deepseek_v3": (128, 4096, False, "hidden_act"),
        "kimi_k2": (128, 4096, False, "hidden_act"),
        **hf_gemma.DEFAULTS,
    }[mt]
    if mt == "gemma" and act_key and not h.get(act_key):  # (Gemma 2/3: hidden_activation)
        # older transformers read hidden_activation (ignoring hidden_act); newer read hidden_act
        act_key = "hidden_act"
    out.update(
        n_kv_heads=_kv(h, kv, heads),
        ffn=h.act(act_key, "gelu_pytorch_tanh" if mt.startswith("gemma") else "silu",
                  gated=True)
        if act_key else "swiglu",
        max_positions=h.get("max_position_embeddings", positions),
        tie_embeddings=h.get("tie_word_embeddings", tied),
    )
    if mt in ("llama", "gemma", *hf_gemma.READERS):  # attention_bias on q, k, v and o
        bias = bool(h.get("attention_bias", False))
        out.update(qkv_bias=bias, attn_out_bias=bias)
    if mt == "llama":
        out.update(ffn_bias=bool(h.get("mlp_bias", False)))
    elif mt == "mistral":  # no biases anywhere (MistralAttention/MistralMLP use bias=False)
        out.update(sliding_window=h.get("sliding_window", 4096))
    elif mt == "qwen2":  # q, k, v have biases; o_proj and the MLP do not
        out.update(qkv_bias=True, **hf_moe.qwen_windows(h, out["n_layers"]))
    elif mt == "gemma":
        out.update(head_dim=h.get("head_dim", 256),
                   embedding_scale=True)  # hidden_states * sqrt(hidden_size)
    elif mt == "phi3":  # one qkv_proj and one gate_up_proj matrix, no biases
        out.update(fused_qkv=True, sliding_window=h.get("sliding_window"))
    elif mt == "llama4_text":
        out.update(hf_llama4.llama4_text(h, out))
    elif mt in hf_deepseek.READERS:
        out.update(hf_deepseek.READERS[mt](h, out))
    else:
        out.update({**hf_moe.READERS, **hf_gemma.READERS}[mt](h, out))
    return out


def _gpt2(h: _HF) -> dict[str, Any]:
    if h.get("add_cross_attention", False):
        raise ShapecalcError("add_cross_attention", "cross-attention is not decoder-only")
    d = h.need("n_embd", "D")
    return dict(
        vocab_size=h.need("vocab_size", "N_vocab"),
        d_model=d,
        n_layers=h.need("n_layer", "N"),
        n_heads=h.need("n_head", "H"),
        d_ff=h.get("n_inner") or 4 * d,
        ffn=h.act("activation_function", "gelu_new", gated=False),
        norm="layernorm",
        positions="learned",
        max_positions=h.get("n_positions", 1024),
        tie_embeddings=h.get("tie_word_embeddings", True),  # HF counts the tied matrix once
        qkv_bias=True,
        attn_out_bias=True,
        ffn_bias=True,
        fused_qkv=True,  # c_attn: one [D, 3D] Conv1D
    )


def _falcon(h: _HF) -> dict[str, Any]:
    if h.get("alibi", False):
        raise ShapecalcError("alibi", "ALiBi attention biases are not supported (rope Falcon only)")
    d = h.need("hidden_size", "D", "n_embed")
    heads = h.need("num_attention_heads", "H", "n_head")
    new = bool(h.get("new_decoder_architecture", False))
    parallel = bool(h.get("parallel_attn", True))
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
        kv = 1 if h.get("multi_query", True) else heads
    bias = bool(h.get("bias", False))
    return dict(
        vocab_size=h.need("vocab_size", "N_vocab"),
        d_model=d,
        n_layers=h.need("num_hidden_layers", "N", "n_layer"),
        n_heads=heads,
        n_kv_heads=kv,
        d_ff=h.get("ffn_hidden_size") or 4 * d,
        ffn=h.act("activation", "gelu", gated=False),
        norm="layernorm",
        positions="rope",
        max_positions=h.get("max_position_embeddings", 2048),
        tie_embeddings=h.get("tie_word_embeddings", True),
        qkv_bias=bias,
        attn_out_bias=bias,
        ffn_bias=bias,
        fused_qkv=True,  # query_key_value
        parallel_block=parallel,
        parallel_norms=norms if parallel else 1,  # new decoder: ln_attn and ln_mlp (2)
    )


def _opt(h: _HF) -> dict[str, Any]:
    d = h.need("hidden_size", "D")
    proj = h.get("word_embed_proj_dim") or d
    if proj != d:
        raise ShapecalcError(
            "word_embed_proj_dim",
            f"{proj} differs from hidden_size {d}: OPT's project_in/project_out "
            "matrices cannot be represented",
        )
    if not h.get("layer_norm_elementwise_affine", True):
        raise ShapecalcError("layer_norm_elementwise_affine", "norms without γ, β are unsupported")
    pre = bool(h.get("do_layer_norm_before", True))
    if pre and h.get("_remove_final_layer_norm", False):
        raise ShapecalcError("_remove_final_layer_norm", "pre-norm without ln_f is unsupported")
    bias = bool(h.get("enable_bias", True))
    return dict(
        vocab_size=h.need("vocab_size", "N_vocab"),
        d_model=d,
        n_layers=h.need("num_hidden_layers", "N"),
        n_heads=h.need("num_attention_heads", "H"),
        d_ff=h.need("ffn_dim", "Dff"),
        ffn=h.act("activation_function", "relu", gated=False),
        norm="layernorm",
        norm_position="pre" if pre else "post",  # post: HF OPT then has no final layer norm
        positions="learned",
        # OPTLearnedPositionalEmbedding keeps 2 extra rows (offset 2, a fairseq legacy), so the
        # table has max_position_embeddings + 2 rows; positions 0..max_position_embeddings-1
        # are the usable ones.
        max_positions=(h.get("max_position_embeddings") or 2048) + 2,
        tie_embeddings=h.get("tie_word_embeddings", True),
        qkv_bias=bias,
        attn_out_bias=bias,
        ffn_bias=bias,
    )


def read_family(h: _HF, mt: str) -> dict[str, Any]:
    """The fields model_type `mt`'s reader reads from `h`, after the audit of the keys it leaves
    unread (hf_keys.py): a shape-changing key no reader reads is refused, never ignored."""
    # widths a config class defaults (a multimodal Gemma 3's text_config leaves some out)
    h.cfg = {**hf_gemma.CLASS_DEFAULTS.get(mt, {}), **h.cfg}
    if mt == "gpt2":
        fields = _gpt2(h)
    elif mt == "falcon":
        fields = _falcon(h)
    elif mt == "opt":
        fields = _opt(h)
    elif mt in hf_alibi.READERS:
        fields = hf_alibi.READERS[mt](h)
    elif mt in hf_classic.READERS:
        fields = hf_classic.READERS[mt](h)
    else:
        fields = _llama_like(h, mt)
    hf_keys.audit(h.cfg, mt)
    return fields


def load_hf_config(path: str | Path) -> ModelConfig:
    """A Hugging Face config.json (or the folder holding one) → ModelConfig."""
    path = Path(path)
    if files.path_is(path.is_dir):
        path = path / "config.json"
    cfg = _parse(path, "hf-config")
    mt, known = cfg.get("model_type"), ", ".join(SUPPORTED)
    if mt is None:
        raise ShapecalcError("model_type", f"missing from {files.shown(path)}; supported: {known}")
    text = cfg.get("text_config")
    inner = text.get("model_type") if isinstance(text, dict) else None
    mt, inner = (x if isinstance(x, str) else repr(x) for x in (mt, inner))
    where = f"{mt!r}" + (f" (its text_config: {inner!r})" if isinstance(text, dict) else "")
    if mt in REFUSED or inner in REFUSED:
        raise ShapecalcError("model_type", f"{where} needs {REFUSED.get(mt) or REFUSED[inner]}")
    multimodal = mt not in SUPPORTED and inner in SUPPORTED and isinstance(text, dict)
    if multimodal and isinstance(text, dict):
        # a multimodal config: the decoder is its text model (the vision side is not counted);
        # tie_word_embeddings may sit at the top
        tied = {k: cfg[k] for k in ("tie_word_embeddings",) if k in cfg}
        cfg, mt = {**tied, **text}, inner
    elif mt not in SUPPORTED:
        raise ShapecalcError("model_type", f"{where} is not supported; supported: {known}")
    else:  # a text model's own config: a text_config beside it must agree (hf_render.py)
        hf_render.check_text_config(cfg, mt)
    fields = read_family(_HF(cfg), mt)
    fields["quantization"] = hf_quant.read(_parse(path, "hf-config"))  # the top's config
    # Say only what differs from the defaults, so a loaded config reads like a preset.
    heads, d = fields["n_heads"], fields["d_model"]
    if isinstance(heads, int) and fields.get("n_kv_heads") == heads:
        fields["n_kv_heads"] = None
    if isinstance(heads, int) and isinstance(d, int) and d % heads == 0:
        if fields.get("head_dim") == d // heads:
            fields["head_dim"] = None
    stem = path.stem if path.stem != "config" else path.resolve().parent.name
    fields["name"] = files.escape_controls(stem) or "custom"
    if multimodal:  # the line that says what was read
        fields["name"] += " (text_config of a multimodal config; the vision tower is not counted)"
    try:
        return ModelConfig.model_validate(fields)
    except ValidationError as err:
        e = first_error(err)
        raise ShapecalcError(e.field, f"{e.reason} (read from {files.shown(path)})") from None
