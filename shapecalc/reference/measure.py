"""Counting a transformers model: parameters per module, FLOPs per module with PyTorch's
FlopCounterMode over a prefill of B×T and one decode step, and the bytes transformers' cache holds.

One counting code for `verify --against transformers` (`measure_config`, on the meta device) and
for tests/torch_reference's measuring harness (tiny models with real weights). FlopCounterMode
counts matmul-like aten ops only (mm, addmm, bmm, baddbmm, …), one multiply-add = 2 FLOPs: no
bias adds, norms, softmax, activations or embedding lookups.

Imports torch: only `verify --against` and the harness import this module (shapecalc.reference).
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig, AutoModelForCausalLM

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class Count(NamedTuple):
    """One counted forward: total FLOPs, FLOPs per aten op, FLOPs per module not attributed to a
    child (keyed like 'model.layers.0.mlp.experts'; they sum to the total)."""

    total: int
    ops: dict[str, int]
    modules: dict[str, int]


def natural(key: str) -> list[Any]:
    """Sort key of a module path: layer 10 after layer 9."""
    return [int(p) if p.isdigit() else p for p in key.split(".")]


def self_flops(counts: dict[str, dict[str, int]]) -> dict[str, int]:
    """FLOPs per module not attributed to a child module, keyed by the path below the model class
    (FlopCounterMode names a module '<RootClass>.<path>'); the values sum to the total."""
    totals = {name: sum(ops.values()) for name, ops in counts.items() if name != "Global"}
    # a module's parent is its nearest recorded ancestor (a ModuleList is never called)
    children = dict.fromkeys(totals, 0)
    for name, total in totals.items():
        parts = name.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            if (parent := ".".join(parts[:cut])) in totals:
                children[parent] += total
                break
    out = {}
    for name, total in totals.items():
        if total - children[name]:
            key = name.split(".", 1)[1] if "." in name else "(model)"
            out[key] = int(total - children[name])
    return dict(sorted(out.items(), key=lambda kv: natural(kv[0])))


def count(fn: Callable[[], Any]) -> Count:
    """Run fn under FlopCounterMode."""
    fc = FlopCounterMode(display=False)
    with fc:
        fn()
    counts = fc.get_flop_counts()
    ops = {str(op): int(n) for op, n in counts.get("Global", {}).items()}
    parts = self_flops({k: {str(o): int(n) for o, n in v.items()} for k, v in counts.items()})
    total = int(fc.get_total_flops())
    assert sum(parts.values()) == total, (sum(parts.values()), total)
    return Count(total, dict(sorted(ops.items())), parts)


def n_params(model: torch.nn.Module) -> int:
    """sum(p.numel()): a tied or shared tensor once."""
    return int(sum(p.numel() for p in model.parameters()))


def params_by_module(model: torch.nn.Module) -> dict[str, int]:
    """Each module's own parameters (not its children's), a tied tensor with the module that
    registers it first (the embedding, not the LM head); modules without any are left out."""
    out: dict[str, int] = {}
    for name, p in model.named_parameters():  # each tensor once
        mod = name.rpartition(".")[0] or "(model)"
        out[mod] = out.get(mod, 0) + int(p.numel())
    return out


def cache_bytes(cache: Any) -> tuple[int, list[list[list[int]]]]:
    """Bytes of every tensor a transformers cache holds, and each layer's tensor shapes."""
    total, shapes = 0, []
    for layer in cache.layers:
        tensors = _tensors(layer)
        total += sum(t.numel() * t.element_size() for t in tensors)
        shapes.append([list(t.shape) for t in tensors])
    return total, shapes


def _tensors(layer: Any) -> list[Any]:
    """A cache layer's tensors: keys, values, and a DSA layer's indexer keys (DynamicIndexedLayer:
    the lightning indexer's key cache, none on a layer sharing another's top-k)."""
    return [t for t in (getattr(layer, "keys", None), getattr(layer, "values", None),
                        getattr(layer, "indexer_keys", None),
                        getattr(layer, "idx_keys", None)) if t is not None]  # MiniMax-M3's


def _global_attr(cfg: Any, key: str) -> Any:
    """A config's model-wide value of `key`, None where it has none. A per-layer config (Gemma
    4's, dots3's per_layer_config) makes reading one of its per-layer keys an error unless
    asked for; asked, the global is the first layer type's."""
    if getattr(cfg, "is_heterogeneous", False):
        cfg.allow_global_per_layer_attribute_access = True
    try:
        return getattr(cfg, key, None)
    except Exception:  # AmbiguousGlobalPerLayerAttributeError
        return None


def cache_layers(cache: Any) -> list[dict[str, Any]]:
    """Each layer of a transformers cache: its class, the tokens it keeps, its bytes."""
    out = []
    for layer in cache.layers:
        k = getattr(layer, "keys", None)
        if not isinstance(k, torch.Tensor):  # a mixer's states, no keys
            out.append({"kind": type(layer).__name__, "tokens": 0, "bytes": 0})
            continue
        out.append({"kind": type(layer).__name__, "tokens": int(k.shape[-2]),
                    "bytes": int(sum(t.numel() * t.element_size() for t in _tensors(layer)))})
    return out


def window_cache_bytes(cache: Any, seq: int) -> int:
    """What the same cache holds when each layer transformers gives a sliding-window cache keeps
    min(T, W) tokens (vLLM's convention, and shapecalc's) instead of its W−1: per layer, its
    bytes per token × the tokens it would keep. (A chunked layer is such a window too, of C.)
    A layer without keys (a stateful mixer's) adds none."""
    total = 0
    for layer in cache.layers:
        if not isinstance(getattr(layer, "keys", None), torch.Tensor) or not layer.keys.numel():
            continue
        held = layer.keys.shape[-2]
        per_token = 2 * layer.keys.numel() * layer.keys.element_size() // held
        sliding = type(layer).__name__ == "DynamicSlidingWindowLayer"
        total += (min(seq, layer.sliding_window) if sliding else seq) * per_token
    return total


# an attention layer's cache (a DSA layer's lightning-indexer keys too); every other tensor is a
# state (a mixer's conv and recurrent states)
KV_PARTS = ("keys", "values", "indexer_keys", "idx_keys")  # idx_keys: MiniMax-M3's block indexer


def cache_tensors(cache: Any) -> list[dict[str, Any]]:
    """Every tensor a transformers cache holds, whatever its layer classes: each layer's
    attributes walked (a tensor, or a dict, list or tuple of them: the mixers keep their conv
    and recurrent states in dicts by state index), one row a tensor with its layer, attribute,
    shape, dtype and bytes. A tensor two attributes share counts once; private attributes
    (`_sliding_window_tensor`) are the layer's bookkeeping, not cache."""
    rows: list[dict[str, Any]] = []
    seen: set[int] = set()

    def add(i: int, part: str, t: Any) -> None:
        if isinstance(t, torch.Tensor) and t.numel() and id(t) not in seen:
            seen.add(id(t))
            rows.append({"layer": i, "part": part, "shape": list(t.shape),
                         "dtype": str(t.dtype).removeprefix("torch."),
                         "bytes": int(t.numel() * t.element_size())})
        elif isinstance(t, dict):
            for v in t.values():
                add(i, part, v)
        elif isinstance(t, (list, tuple)):
            for v in t:
                add(i, part, v)

    for i, layer in enumerate(cache.layers):
        for part, value in sorted(vars(layer).items()):
            if not part.startswith("_"):  # a private scalar (a sliding layer's window) is
                add(i, part, value)  # bookkeeping, not cache
    return rows


def _logits_ok(shape: Any, rows: tuple[int, int], vocab: int) -> bool:
    """Logits [B, T, ≤ N_vocab]: Inkling drops its padded head's logits past
    unpadded_vocab_size (a view: the head's FLOPs are the whole vocabulary's)."""
    return tuple(shape[:2]) == rows and 0 < shape[2] <= vocab and len(shape) == 3


def forward_steps(model: Any, vocab: int, batch: int, seq: int, *,
                  count_fn: Callable[[Callable[[], Any]], Any] = count,
                  at_cache: Callable[[Any], Any] | None = None,
                  after: Callable[[str], None] | None = None, last: bool = True,
                  cached_prefill: bool = False) -> dict[str, Any]:
    """The counted forwards on seeded token ids [B,T] and [B,1]: 'prefill' (all T logits, no
    cache), 'prefill_last' (logits_to_keep=1; None where the forward lacks that argument) and
    'decode' (one token on the cache of a use_cache=True prefill run outside the counter), each
    what `count_fn` returns. Also 'out' (their outputs), 'kv' and 'kv_window' (cache_bytes and
    window_cache_bytes of the cache before the decode), 'at_cache' (what `at_cache(cache)`
    returns then), the 'cache' after the decode, and the ids. `after(step)` runs after each
    forward: 'prefill', 'prefill_last', 'cache' (the uncounted prefill), 'decode'. `last=False`
    skips 'prefill_last'; `cached_prefill` counts the prefill with use_cache=True, as the meta
    device needs (without a cache, transformers' mask looks for packed sequences in the position
    ids, a data-dependent test); the cache costs no FLOPs."""
    g = torch.Generator().manual_seed(0)
    device = next(model.parameters()).device  # the meta device needs meta token ids
    ids = torch.randint(0, vocab, (batch, seq), generator=g).to(device)
    next_ids = torch.randint(0, vocab, (batch, 1), generator=g).to(device)
    params = inspect.signature(model.forward).parameters
    # transformers 5.x renamed `past_key_values` to `cache` (argument and output field)
    cache_kw = "cache" if "cache" in params else "past_key_values"
    done = after or (lambda _step: None)
    res: dict[str, Any] = {"out": {}, "ids": ids, "next_ids": next_ids, "prefill_last": None}
    out = res["out"]
    with torch.no_grad():
        res["prefill"] = count_fn(
            lambda: out.setdefault("p", model(ids, use_cache=cached_prefill)))
        assert _logits_ok(out["p"].logits.shape, (batch, seq), vocab), out["p"].logits.shape
        done("prefill")
        if last and "logits_to_keep" in params:
            res["prefill_last"] = count_fn(lambda: out.setdefault(
                "pl", model(ids, use_cache=cached_prefill, logits_to_keep=1)))
            assert _logits_ok(out["pl"].logits.shape, (batch, 1), vocab), out["pl"].logits.shape
            done("prefill_last")
        # a cached prefill's own cache serves the decode: one forward fewer on the meta device
        pre = out["p"] if cached_prefill else model(ids, use_cache=True)
        done("cache")
        cache = getattr(pre, "cache", None) if cache_kw == "cache" else pre.past_key_values
        assert cache is not None
        res["kv"] = cache_bytes(cache)
        res["kv_window"] = window_cache_bytes(cache, seq)
        res["at_cache"] = at_cache(cache) if at_cache else None
        res["decode"] = count_fn(
            lambda: out.setdefault("d", model(next_ids, use_cache=True, **{cache_kw: cache})))
        assert _logits_ok(out["d"].logits.shape, (batch, 1), vocab), out["d"].logits.shape
        done("decode")
    res["cache"] = cache
    return res


# -- building --------------------------------------------------------------------------------------
def config_from_dict(raw: dict[str, Any]) -> Any:
    """The config transformers builds from a config.json's dict: quantization_config dropped (the
    unquantized model is counted: from_config would quantize nothing anyway, or refuse), and
    model_type kimi_k2 read as deepseek_v3 (as transformers' kimi_k25 config maps it)."""
    d = {k: v for k, v in raw.items() if k != "quantization_config"}
    if d.get("model_type") == "kimi_k2":
        d["model_type"] = "deepseek_v3"
    if d.get("model_type") == "dots3_note":  # its text model (the reader's), at any width: the
        d["model_type"] = "dots3_note_text"  # multimodal class holds its towers to D = 5120
    return AutoConfig.for_model(**d)


# causal LMs transformers' AutoModelForCausalLM does not map (Mistral 4 ships inside Mistral 3's
# image-text model): built by their own class
CAUSAL_LM = {"mistral4": "Mistral4ForCausalLM"}


def build(cfg: Any, **kw: Any) -> Any:
    """transformers' causal LM of `cfg`: AutoModelForCausalLM's, or its CAUSAL_LM class."""
    name = CAUSAL_LM.get(cfg.model_type)
    if name is None:
        return AutoModelForCausalLM.from_config(cfg, **kw)
    return getattr(transformers, name)._from_config(cfg, **kw)


def text_config(cfg: Any) -> Any:
    """The causal LM's config: a multimodal config's text_config (Gemma 3, Llama 4), else cfg."""
    return cfg.get_text_config(decoder=True)


def rotary_dim(model: torch.nn.Module) -> int | None:
    """R, each head's rotated width, from the built rotary embedding: 2·len(inv_freq), or GPT-J's
    sin/cos table width; None without one."""
    for name, mod in model.named_modules():
        if name.endswith("rotary_emb"):
            if hasattr(mod, "inv_freq"):
                return 2 * int(mod.inv_freq.shape[-1])
            if hasattr(mod, "pos_embd_dim"):
                return int(mod.pos_embd_dim)
    return None


def _parts(model: torch.nn.Module) -> dict[str, int]:
    """A multimodal model's vision side: its vision tower (or model) and projector, if any."""
    out = {}
    for name, mod in model.named_modules():
        last = name.rpartition(".")[2]
        if last in ("vision_tower", "vision_model", "multi_modal_projector") and last not in out:
            out[last] = n_params(mod)
    return out


def checkpoint_params(raw: dict[str, Any]) -> dict[str, Any]:
    """A config.json's models on the meta device: `text` (the causal LM of its text config, what
    shapecalc counts) and `text_class`; `whole` (the class its `architectures` names, with any
    vision tower and projector: what the checkpoint holds) and those parts' counts; the text
    model's `rotary_dim`."""
    cfg = config_from_dict(raw)
    with torch.device("meta"):
        text = build(text_config(cfg))
        arch = getattr(transformers, (raw.get("architectures") or [""])[0], None)
        whole = arch(cfg) if arch is not None and text_config(cfg) is not cfg else text
    return {"text": n_params(text), "text_class": type(text).__name__, "whole": n_params(whole),
            "rotary_dim": rotary_dim(text), **_parts(whole)}


def meta_params(cfg: Any) -> int:
    """Parameters of the model built from cfg on the meta device (no memory, no init)."""
    with torch.device("meta"):
        model = build(cfg)
    return n_params(model)


# -- Llama 4's experts, routed ---------------------------------------------------------------------
def _llama4_routed_moe(self: Any, hidden_states: torch.Tensor) -> tuple[torch.Tensor, Any]:
    """Llama4TextMoe as engines run it (vLLM's Llama4MoE): each token through its top-k experts
    only, its input scaled by sigmoid(logit) as transformers scales it. transformers' own forward
    runs all E experts on every token (scaled by 0 where not chosen)."""
    x = hidden_states.reshape(-1, self.hidden_dim)
    logits = self.router(x)[1]
    top, idx = torch.topk(logits, self.top_k, dim=1)
    w = torch.sigmoid(top.float()).to(x.dtype)
    out = self.shared_expert(x)
    pairs = x.repeat_interleave(self.top_k, dim=0) * w.reshape(-1, 1)
    routed = self.experts(pairs, idx.reshape(-1))
    out.add_(routed.reshape(-1, self.top_k, self.hidden_dim).sum(dim=1))
    return out, logits


def _llama4_pair_experts(self: Any, x: torch.Tensor, expert_ids: torch.Tensor) -> torch.Tensor:
    """One (token, expert) pair a row, each with its expert's weights gathered (as transformers'
    batched_mm experts do): shape-static, so it also runs on the meta device."""
    gate, up = torch.bmm(x.unsqueeze(1), self.gate_up_proj[expert_ids]).squeeze(1).chunk(2, -1)
    return torch.bmm((up * self.act_fn(gate)).unsqueeze(1), self.down_proj[expert_ids]).squeeze(1)


def route_llama4(model: torch.nn.Module) -> int:
    """Give every Llama4TextMoe of `model` the routed forward; returns how many."""
    import types

    from transformers.models.llama4 import modeling_llama4

    moes = [m for m in model.modules() if isinstance(m, modeling_llama4.Llama4TextMoe)]
    for m in moes:
        m.forward = types.MethodType(_llama4_routed_moe, m)  # type: ignore[method-assign]
        m.experts.forward = types.MethodType(_llama4_pair_experts, m.experts)  # type: ignore
    return len(moes)


# -- verify --against transformers -----------------------------------------------------------------
def _layers_path(model: torch.nn.Module, n_layers: int) -> str | None:
    """Path of the decoder layers' ModuleList: the shallowest one with N entries."""
    found = [name for name, mod in model.named_modules()
             if isinstance(mod, torch.nn.ModuleList) and len(mod) == n_layers]
    return min(found, key=lambda n: n.count("."), default=None)


def _cache_facts(cfg: Any, cache: Any) -> list[dict[str, Any]]:
    """Each cache layer after the prefill: its class, what transformers' config says the layer
    is (full, sliding, chunked attention), its window, the tokens and heads it keeps, its bytes."""
    kinds = getattr(cfg, "layer_types", None)
    out = []
    for i, (layer, info) in enumerate(zip(cache.layers, cache_layers(cache), strict=True)):
        window = getattr(layer, "sliding_window", None)
        kind = kinds[i] if kinds else ("sliding_attention" if window else "full_attention")
        keys = getattr(layer, "keys", None)
        heads = int(keys.shape[1]) if isinstance(keys, torch.Tensor) and keys.dim() == 4 else 0
        out.append({**info, "layer": i, "attention": kind, "window": window, "heads": heads})
    return out


def measure_config(raw: dict[str, Any], batch: int, seq: int, dtype: str,
                   day0: bool = False) -> dict[str, Any]:
    """transformers' causal LM of a config.json on the meta device, at B×T in `dtype`: parameters
    per module, FLOPs per module of the prefill (all T logits, eager attention) and of one decode
    step on its cache, and the cache after the prefill, layer by layer and tensor by tensor
    (`day0`: also the prefill with the last position's logits only, `prefill_last`, and every
    tensor of the cache, `cache_tensors`: what the day-0 path reports). The routed experts run
    transformers' `batched_mm` path (the eager one calls nonzero(), which the meta device cannot
    run); Llama 4's MoE runs routed (route_llama4). Plain data, no tensors."""
    # transformers' deprecation warnings and config notes are not ours to print
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _measure(raw, batch, seq, dtype, day0)
    finally:
        transformers.logging.set_verbosity(verbosity)


def _measure(raw: dict[str, Any], batch: int, seq: int, dtype: str, day0: bool
             ) -> dict[str, Any]:
    cfg = text_config(config_from_dict(raw))
    with torch.device("meta"):
        model = build(cfg, attn_implementation="eager", dtype=DTYPES[dtype],
                      experts_implementation="batched_mm")
    model.eval()
    cfg = model.config
    routed = route_llama4(model)
    names = {mod: name or "(model)" for name, mod in model.named_modules()}
    order: dict[str, None] = {}

    def seen(mod: torch.nn.Module, _args: Any) -> None:
        order.setdefault(names.get(mod, "?"), None)

    hook = torch.nn.modules.module.register_module_forward_pre_hook(seen)
    try:
        res = forward_steps(model, cfg.vocab_size, batch, seq, last=day0, cached_prefill=True,
                            at_cache=lambda c: (_cache_facts(cfg, c), cache_tensors(c)))
    finally:
        hook.remove()
    for name in names.values():  # modules the forward never called go last
        order.setdefault(name, None)
    order.pop("?", None)
    extra = {} if not day0 else {
        "prefill_last": None if res["prefill_last"] is None else {
            "flops": res["prefill_last"].total, "modules": res["prefill_last"].modules},
        "cache_tensors": res["at_cache"][1]}
    return {
        **extra,
        "torch": torch.__version__, "transformers": transformers.__version__,
        "model_class": type(model).__name__, "model_type": cfg.model_type, "device": "meta",
        "dtype": dtype, "batch": batch, "seq": seq,
        "experts_implementation": getattr(cfg, "_experts_implementation", None),
        "llama4_routed_moe_layers": routed,
        "layers_path": _layers_path(model, cfg.num_hidden_layers),
        "order": list(order),
        "params": n_params(model), "params_modules": params_by_module(model),
        "prefill": {"flops": res["prefill"].total, "modules": res["prefill"].modules},
        "decode": {"flops": res["decode"].total, "modules": res["decode"].modules},
        "cache": res["at_cache"][0], "cache_bytes": res["kv"][0],
        # what check/against.py converts conventions with (Falcon names its KV heads num_kv_heads)
        "config": {k: _global_attr(cfg, k) for k in (
            "num_attention_heads", "num_key_value_heads", "num_kv_heads", "head_dim",
            "sliding_window", "attention_chunk_size", "new_decoder_architecture")},
    }
