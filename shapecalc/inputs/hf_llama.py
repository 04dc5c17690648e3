"""The mechanisms of the Llama-like families: the shared body (widths, heads, KV heads, positions,
tied embeddings), the gated activation, biases, sliding windows (one for every layer, or per layer
from layer_types as Qwen and gpt-oss write them), q/k norms.

Each is a function over the reader and the fields read so far; its defaults are the family's
(hf_families.py), so one mechanism serves every family whose class defaults differ.
"""

from __future__ import annotations

from typing import Any

from ..model.config import ShapecalcError
from .hf_base import HF, Fields, Mechanism, mechanism

_KINDS = {"sliding_attention": "sliding", "full_attention": "full"}


def body(h: HF, f: Fields, width: str) -> None:
    """The body every Llama-like shares: RMSNorm, RoPE (rope_scaling changes no shape), and the
    widths, Dff read under `width`; head_dim null or absent: D/H; num_key_value_heads absent: the
    class default, null: H."""
    heads = h.need("num_attention_heads", "H")
    f.update(
        vocab_size=h.need("vocab_size", "N_vocab"),
        d_model=h.need("hidden_size", "D"),
        n_layers=h.need("num_hidden_layers", "N"),
        n_heads=heads,
        d_ff=h.need(width, "Dff"),
        head_dim=h.get("head_dim"),
        norm="rmsnorm",
        positions="rope",
    )
    kv = h.get("num_key_value_heads")
    f["n_kv_heads"] = heads if kv is None else kv


@mechanism("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
           "intermediate_size", "head_dim", "num_key_value_heads")
def llama(h: HF, f: Fields) -> None:
    body(h, f, "intermediate_size")


@mechanism("head_dim")
def floor_head_dim(h: HF, f: Fields) -> None:
    # head_dim null or absent and D/H not whole: D // H, as `getattr(config, "head_dim",
    # D // H)` floors it (GLM-4.5's class defaults: 4096 / 96 → 42); the model's other readers
    # refuse such a D rather than guess
    d, heads = f["d_model"], f["n_heads"]
    if h.get("head_dim") is None and d % heads:
        f["head_dim"] = d // heads


def gated(key: str) -> Mechanism:
    """The gated FFN's activation, named by `key` (SwiGLU for silu, GeGLU for the gelus)."""
    def _act(h: HF, f: Fields) -> None:
        f["ffn"] = h.act(key, gated=True)
    _act.__name__ = f"gated_{key}"
    return mechanism(key)(_act)


def plain(key: str) -> Mechanism:
    """An ungated MLP's activation, named by `key`: xIELU (Apertus), squared ReLU, ReLU, GELU."""
    def _act(h: HF, f: Fields) -> None:
        name = h.get(key)
        own = {"xielu": "xielu", "relu2": "relu2"}.get(name) if isinstance(name, str) else None
        f["ffn"] = own or h.act(key, gated=False)
    _act.__name__ = f"plain_{key}"
    return mechanism(key)(_act)


@mechanism("output_vocab_size")
def unpruned_head(h: HF, f: Fields) -> None:
    # Apertus 1.5: output_vocab_size null or N_vocab keeps the LM head whole; fewer rows (the
    # released checkpoints prune the multimodal tokens' rows) is a head shapecalc does not model
    rows = h.get("output_vocab_size")
    if rows is not None and rows != f["vocab_size"]:
        raise ShapecalcError("output_vocab_size", f"{rows!r}: an LM head of other rows than the "
                             f"embedding table's {f['vocab_size']} is not modelled")


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




def every_kth_full(every: int, first: bool) -> Mechanism:
    """Without layer_types, every `every`-th layer is full and the others slide: layer i is full
    when i % every == 0 (`first`: CWM) or (i+1) % every == 0 (OLMo 3, Cohere 2)."""
    def _pattern(h: HF, f: Fields) -> None:
        n = f["n_layers"]
        full = [(i if first else i + 1) % every == 0 for i in range(n)]
        types = h.get("layer_types") or [
            "full_attention" if x else "sliding_attention" for x in full]
        f.update(windows(types, h.get("sliding_window"), n))
    _pattern.__name__ = f"every_{every}th_full" + ("_first" if first else "")
    return mechanism("layer_types", "sliding_window")(_pattern)


def every_nth_full(key: str, name: str) -> Mechanism:
    """Without layer_types, every `key`-th layer is full and the others slide: layer i slides
    when (i+1) % n (Cohere 2, EXAONE 4: sliding_window_pattern; AFMoE:
    global_attn_every_n_layers). A string pattern such as "LLLG" makes their classes fail, so
    it is refused."""
    def _pattern(h: HF, f: Fields) -> None:
        n = f["n_layers"]
        types = h.get("layer_types")
        if not types:
            step = h.get(key)
            if type(step) is not int or step < 1:
                raise ShapecalcError(key, f"must be a positive integer without layer_types, "
                                     f"not {step!r}")
            types = ["sliding_attention" if (i + 1) % step else "full_attention"
                     for i in range(n)]
        f.update(windows(types, h.get("sliding_window"), n))
    _pattern.__name__ = name
    return mechanism("layer_types", "sliding_window", key)(_pattern)


window_pattern = every_nth_full("sliding_window_pattern", "window_pattern")
global_every = every_nth_full("global_attn_every_n_layers", "global_every")


def nope_full(needs_window: bool) -> Mechanism:
    """The full layers apply no RoPE, only the sliding ones do (Cohere 2; EXAONE 4 only when
    sliding_window is set, `needs_window`: without one every layer turns q and k)."""
    def _nope(h: HF, f: Fields) -> None:
        if needs_window and h.get("sliding_window") is None:
            return
        n, types = f["n_layers"], f["layer_types"]
        kinds = types or ("sliding" if f["sliding_window"] is not None else "full",) * n
        f["nope_layers"] = tuple(i for i, t in enumerate(kinds) if t == "full") or None
    _nope.__name__ = "nope_full" + ("_with_window" if needs_window else "")
    return mechanism(*(("sliding_window",) if needs_window else ()))(_nope)


@mechanism("sliding_window", "max_window_layers", "layer_types")
def late_windows(h: HF, f: Fields) -> None:
    # without layer_types, the layers at or past max_window_layers slide when sliding_window is
    # set (Dots1: no use_sliding_window switch)
    n, window = f["n_layers"], h.get("sliding_window")
    types = h.get("layer_types") or [
        "sliding_attention" if window is not None and i >= (h.get("max_window_layers") or 0)
        else "full_attention" for i in range(n)
    ]
    f.update(windows(types, window, n))


@mechanism("no_rope_layers", "no_rope_layer_interval", "use_sliding_window", "sliding_window",
           "layer_types")
def nope_every(h: HF, f: Fields) -> None:
    # SmolLM3: no_rope_layers[i] = 1 where layer i turns q and k (default: all but every
    # no_rope_layer_interval-th); with use_sliding_window the NoPE layers slide
    n = f["n_layers"]
    interval = h.get("no_rope_layer_interval")
    if not isinstance(interval, int) or interval < 1:
        raise ShapecalcError("no_rope_layer_interval", f"must be a positive integer, not "
                             f"{interval!r}")
    flags = h.int_list("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)]
    if len(flags) < n:
        raise ShapecalcError("no_rope_layers", f"lists {len(flags)} layers, but "
                             f"num_hidden_layers is {n}")
    window = h.get("sliding_window") if h.get("use_sliding_window") else None
    types = h.get("layer_types") or [
        "sliding_attention" if window is not None and not flags[i] else "full_attention"
        for i in range(n)
    ]
    f.update(windows(types, window, n),
             nope_layers=tuple(i for i in range(n) if not flags[i]) or None)


@mechanism("attention_bias")
def qkv_bias_only(h: HF, f: Fields) -> None:
    # attention_bias on q, k and v; o_proj has none (GLM-4.5, Seed-OSS)
    f.update(qkv_bias=bool(h.get("attention_bias", False)), attn_out_bias=False)


@mechanism("attention_out_bias")
def out_bias(h: HF, f: Fields) -> None:
    f["attn_out_bias"] = bool(h.get("attention_out_bias", False))


@mechanism("use_qk_norm")
def optional_qk_norm(h: HF, f: Fields) -> None:
    # RMSNorm over each head's Dh on q and k, when use_qk_norm (GLM-4.5)
    f["qk_norm"] = bool(h.get("use_qk_norm", False))


def rotary_factor(h: HF, default: float, *legacy: str) -> float:
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


def rotary_fields(h: HF, dh: int, default: float, *legacy: str) -> Fields:
    """rotary_dim R as the rotary embedding computes it: int(Dh · partial_rotary_factor)
    frequencies' worth, one per pair, so an odd int(...) turns one more dim (arange(0, r, 2))."""
    return rotary_of(dh, rotary_factor(h, default, *legacy))


def rotary_of(dh: int, factor: float) -> Fields:
    """rotary_fields of one factor (MiMo-V2-Flash gives one per layer type)."""
    r = int(dh * factor)
    r += r % 2
    if r <= 0 or r > dh:
        raise ShapecalcError("partial_rotary_factor", f"gives R={r} rotated dims of Dh={dh}; "
                             "RoPE needs an even R, 0 < R ≤ Dh")
    return dict(rotary_dim=None if r == dh else r)


@mechanism("partial_rotary_factor", "rope_parameters.partial_rotary_factor",
           "rope_scaling.partial_rotary_factor")
def partial_rotary(h: HF, f: Fields) -> None:
    # RoPE on the first R of each head's Dh, the rest passed through (rotate_half on that part,
    # as GPT-NeoX); the family's default factor
    f.update(rotary_fields(h, f["head_dim"] or f["d_model"] // f["n_heads"], 1.0))


@mechanism("rotary_dim", "partial_rotary_factor", "rope_parameters.partial_rotary_factor",
           "rope_scaling.partial_rotary_factor")
def rotary_dim_factor(h: HF, f: Fields) -> None:
    # MiniMax-M2: the released checkpoints give partial RoPE as rotary_dim, which the class
    # turns into partial_rotary_factor = rotary_dim / head_dim unless a factor is given
    dh = f["head_dim"] or f["d_model"] // f["n_heads"]
    r = h.get("rotary_dim")
    if r is not None and (type(r) is not int or r < 1):
        raise ShapecalcError("rotary_dim", f"must be a positive integer, not {r!r}")
    f.update(rotary_fields(h, dh, 1.0 if r is None else r / dh))


_TEMPERATURE_KEYS = tuple(f"{outer}.{k}" for outer in ("rope_parameters", "rope_scaling")
                          for k in ("llama_4_scaling_beta", "original_max_position_embeddings"))


@mechanism(*_TEMPERATURE_KEYS)
def query_temperature(h: HF, f: Fields) -> None:
    # Ministral3Attention: after RoPE, q × (1 + β·ln(1 + ⌊pos/S⌋)) on every layer, β and S read
    # from rope_parameters (or the legacy rope_scaling transformers turns into it; neither: the
    # class's YaRN defaults; one without β fails in transformers' forward, so it is refused);
    # YaRN itself changes RoPE's frequencies and its cos/sin factor, no count
    outer = next((k for k in ("rope_parameters", "rope_scaling") if h.cfg.get(k) is not None),
                 None)
    rope = h.default("rope_parameters") if outer is None else h.cfg[outer]
    h.read.update(_TEMPERATURE_KEYS)
    if not isinstance(rope, dict):
        raise ShapecalcError(str(outer), f"must be an object, not {rope!r}")
    beta, floor = rope.get("llama_4_scaling_beta"), rope.get("original_max_position_embeddings")
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or beta < 0:
        raise ShapecalcError(f"{outer}.llama_4_scaling_beta", f"the query temperature's "
                             f"β must be a number ≥ 0, not {beta!r}")
    if type(floor) is not int or floor < 1:
        raise ShapecalcError(f"{outer}.original_max_position_embeddings", "the query "
                             f"temperature's S must be a positive integer, not {floor!r}")
    f.update(q_temperature_beta=float(beta), q_temperature_floor=floor)


SILU = gated("hidden_act")
BODY = (llama, SILU, table)  # the Llama-like body, its activation, its tables


def class_defaults(kv: int | None, positions: int, tied: bool = False, act: str = "silu",
                   **more: Any) -> dict[str, Any]:
    """A Llama-like class's defaults: KV heads (None: H), max positions, tied embeddings, the
    activation, and the rest."""
    return dict(num_key_value_heads=kv, max_position_embeddings=positions,
                tie_word_embeddings=tied, hidden_act=act, **more)
