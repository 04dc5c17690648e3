"""`verify --against transformers`: shapecalc's totals against transformers' own model of the same
config.json, measured on the meta device (shapecalc/reference/measure.py): parameters, the FLOPs
of a prefill of B×T (every position's logits) and of one decode step on its cache, and the bytes
of the cache after the prefill. Where a total differs, the check names the module where the two
part: shapecalc's stages grouped by the transformers module each runs in (reference/modules.py),
compared with transformers' per-module counts in forward order.

transformers and shapecalc agree on everything counted here but three conventions, each converted
exactly from transformers' own config and cache (and listed in the output):
- a sliding-window layer's cache keeps W−1 tokens in transformers, min(T, W) in shapecalc (vLLM);
- a chunked layer (Llama 4) keeps the last min(T, C−1) tokens in transformers, the current
  chunk's ((T−1) mod C)+1 in shapecalc (vLLM), and its decode query multiplies min(T, C−1)+1
  keys in transformers, (T mod C)+1 in shapecalc;
- Falcon's new decoder caches K and V broadcast to every query head, shapecalc the H_kv heads.
MLA models are compared in shapecalc's `latent` form, the one transformers 5.x runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..costs.trace import build_trace
from ..interpret.symbolic import stages as symbolic_stages
from ..model.config import (
    DTYPE_BITS,
    ModelConfig,
    ShapecalcError,
    Workload,
    check,
    make_workload,
)
from ..model.plan import layer_plan
from ..model.stage import Stage
from ..model.suggest import canonical_dtype
from ..reference import PINNED, require
from ..reference.modules import FLOPS_ON_PARENT, Places, first_difference
from ..reference.stored import stored_config

DTYPES = ("fp32", "bf16", "fp16")  # what transformers builds a model in here
DEFAULT_BATCH, DEFAULT_SEQ = 1, 16


AGAINST = ("transformers",)
# verify's options that --against cannot honour, and why (refused, never ignored)
WHY_NOT = {
    "set": "it changes shapecalc's model, not the config.json transformers builds",
    "phase": "it checks the prefill and one decode step, both",
    "kv_dtype": "transformers caches in the model's dtype",
    "act_dtype": "transformers computes in the model's dtype",
    "logits": "the prefill computes every position's logits, as a forward does",
    "tp": "transformers' model is measured on one device",
    "pp": "transformers' model is measured on one device",
    "ep": "transformers' model is measured on one device",
    "mla_form": "transformers 5.x runs the latent form, which it is compared in",
    "block_size": "transformers' cache is not paged",
    "attention_flops": "eager attention computes the whole [T,T] scores",
    "padding_mask": "the measured forward has no padding",
    "mixer_flops": "transformers runs its own torch path, the transformers-torch convention",
    "state_cache": "transformers' cache is transformers'",
    "state_dtype": "transformers keeps the recurrent state in fp32",
    "layers": "every layer is measured (on the meta device: no memory)",
    "precision": "the meta device computes no values",
    "seed": "the meta device holds no weights",
    "memory_budget": "the meta device allocates nothing",
    "train": "it measures a forward",
    "recompute": "it measures a forward",
}
UNSET = {"seed": 0, "tp": 1, "pp": 1, "ep": 1}  # defaults, or what it measures anyway


def source(preset: str | None, config: Any, hf_config: Any, presets_dir: list[Path] | None,
           ) -> tuple[ModelConfig, dict[str, Any], str]:
    """shapecalc's model, the config.json's dict transformers builds, and where it is from:
    --hf-config, or a built-in --preset with a stored config.json (reference/stored.py)."""
    from ..inputs import files, sources
    from ..inputs.model import load_model

    if config is not None or (preset is None and hf_config is None):
        raise ShapecalcError("against", "transformers builds a config.json: give --hf-config, or "
                             "a --preset that has one stored")
    model, _ = load_model(preset, None, hf_config, None, presets_dir)
    if hf_config is not None:
        path = Path(hf_config)
        path = path / "config.json" if files.path_is(path.is_dir) else path
        return model, files.read_json(path, "hf-config"), files.shown(path)
    assert preset is not None
    builtin = sources.presets_dirs(None)[-1]
    stored = stored_config(preset)
    if stored is None or sources.list_presets(presets_dir)[preset].parent != builtin:
        raise ShapecalcError("preset", f"{preset!r} has no stored config.json; give --hf-config")
    return model, files.read_json(stored, "preset"), f"preset {preset} ({stored.name})"


def run(against: str, preset: str | None, config: Any, hf_config: Any,
        presets_dir: list[Path] | None, *, batch: int | None, seq: int | None,
        dtype: str | None, given: dict[str, Any]) -> dict[str, Any]:
    """`verify --against`: refuse what it cannot honour, then measure and compare."""
    if against not in AGAINST:
        raise ShapecalcError("against", f"{against!r}: one of {', '.join(AGAINST)}")
    for field, value in given.items():
        if value not in (None, False, []) and not (field in UNSET and UNSET[field] == value):
            raise ShapecalcError(field, f"verify --against does not take it: {WHY_NOT[field]}")
    model, raw, where = source(preset, config, hf_config, presets_dir)
    if not isinstance(raw, dict):
        raise ShapecalcError("hf-config", "a config.json holds one JSON object")
    wl = workload(model, batch, seq, dtype)
    for phase in ("prefill", "decode"):  # a T the model cannot take (a position table's end)
        check(model, wl.model_copy(update={"phase": phase}))
    require()  # every input checked first: a bad one is named whether the extra is there or not
    return verify_against(model, raw, wl, where)


def workload(model: ModelConfig, batch: int | None, seq: int | None,
             dtype: str | None) -> Workload:
    """The prefill verify --against compares (the decode step follows from it)."""
    dt = canonical_dtype(dtype, DTYPE_BITS) if dtype is not None else "bf16"
    if dt not in DTYPES:
        raise ShapecalcError("dtype", f"{dt!r}: transformers builds the model in one of "
                             f"{', '.join(DTYPES)} here")
    return make_workload({"batch": DEFAULT_BATCH if batch is None else batch,
                          "seq": DEFAULT_SEQ if seq is None else seq, "dtype": dt,
                          "mla_form": "latent" if model.mla else None})


def verify_against(model: ModelConfig, raw: dict[str, Any], wl: Workload,
                   source: str) -> dict[str, Any]:
    """Measure `raw` (a config.json's dict) with transformers and compare (see `compare`)."""
    require()
    from ..reference.measure import measure_config

    try:
        measured = measure_config(raw, wl.batch, wl.seq, wl.dtype, day0=True)  # every tensor
    except Exception as e:  # transformers refuses the config, or its forward cannot run on meta
        text = str(e).strip()
        first = text.splitlines()[0] if text else type(e).__name__
        what = ("does not run on the meta device" if "meta" in text else
                f"could not be built or run ({type(e).__name__})")
        raise ShapecalcError("against", f"transformers' {raw.get('model_type')} model {what}: "
                             f"{first}") from None
    return compare(model, wl, measured, source)


def _per_module(st: list[Stage], key: str, places: Places, kind_of: tuple[int, ...],
                ) -> dict[str, int]:
    """shapecalc's `key` (params or flops) per transformers module: each block stage once per
    layer of its kind, the others once."""
    out: dict[str, int] = {}
    nth: dict[tuple[int | None, str], int] = {}  # a role's stages so far in its layer kind
    for s in st:
        v = getattr(s, key)
        n = nth[s.kind, s.role] = nth.get((s.kind, s.role), -1) + 1
        if not v:
            continue
        layers = [i for i, k in enumerate(kind_of) if k == s.kind] if s.group == "block" else [None]
        for i in layers:
            m = places.module(s.role, i, n)
            if key == "flops" and s.role in FLOPS_ON_PARENT:
                m = m.rpartition(".")[0] or m
            out[m] = out.get(m, 0) + v
    return out


def _kv_layers(st: list[Stage], kind_of: tuple[int, ...]) -> list[int]:
    """shapecalc's cache bytes per layer (the cache stages of each layer's kind)."""
    per_kind: dict[int | None, int] = {}
    for s in st:
        if s.op == "kv_cache":
            per_kind[s.kind] = per_kind.get(s.kind, 0) + s.bytes
    return [per_kind.get(k, 0) for k in kind_of]


def _by_layer(per_layer: list[int], places: Places) -> dict[str, int]:
    """Cache bytes per layer as counts of its attention module (a layer transformers lacks:
    the layers' list)."""
    out: dict[str, int] = {}
    for i, b in enumerate(per_layer):
        out[places.attention(i)] = out.get(places.attention(i), 0) + b
    return out


def _held(layer: dict[str, Any], seq: int) -> int:
    """Tokens a layer keeps after a T-token prefill in shapecalc's convention (model/plan.held),
    from what transformers' config says the layer is."""
    w = layer["window"]
    if layer["attention"] == "chunked_attention":
        return (seq - 1) % w + 1
    return min(seq, w) if w else seq


def transformers_kv(measured: dict[str, Any]) -> tuple[list[int], list[str]]:
    """transformers' cache per layer in shapecalc's conventions, and the conversions applied."""
    seq, cfg = measured["seq"], measured["config"]
    # Falcon calls its KV heads num_kv_heads
    kv_heads = cfg["num_key_value_heads"] or cfg["num_kv_heads"] or cfg["num_attention_heads"]
    out, notes = [], set()
    for layer in measured["cache"]:
        if not layer["tokens"]:  # a stateful mixer's or an MLP-only block's layer: no keys
            out.append(0)
            continue
        per_token = layer["bytes"] // layer["tokens"]
        held = _held(layer, seq)
        if held != layer["tokens"]:
            notes.add(f"{layer['attention']} layers: transformers keeps {layer['tokens']} tokens "
                      f"after the prefill, shapecalc (vLLM) {held}")
        b = per_token * held
        if cfg["new_decoder_architecture"] and layer["heads"] != kv_heads:
            notes.add(f"Falcon's new decoder caches K and V of all {layer['heads']} query heads; "
                      f"shapecalc the {kv_heads} KV heads")
            b = b * kv_heads // layer["heads"]
        out.append(b)
    return out, sorted(notes)


V4_ENTRIES = ("compressed_kv",)  # DeepSeek-V4's compressed entries: its cache's keys, as
# shapecalc counts them (a decode reads them beside the window)


def _v4_entries(model: ModelConfig, measured: dict[str, Any], kv: list[int],
                notes: list[str]) -> tuple[str, ...]:
    """DeepSeek-V4 (shared K=V) in shapecalc's conventions, `kv` and `notes` changed in place:
    its one K=V tensor once (transformers' layers store it as keys and values), its compressed
    entries counted as KV (transformers' are a layer attribute beside them). Returns the parts
    moved from the states to the KV."""
    if not model.shared_kv or "cache_tensors" not in measured:
        return ()
    for i, b in enumerate(kv):
        kv[i] = b // 2
    for t in measured["cache_tensors"]:
        if t["part"] in V4_ENTRIES:
            kv[t["layer"]] += t["bytes"]
    notes.append("DeepSeek-V4's K=V: transformers caches it as keys and values, shapecalc once; "
                 "its compressed entries are KV in shapecalc")
    return V4_ENTRIES


def _decode_chunk_fix(measured: dict[str, Any], places: Places) -> tuple[dict[str, int], list[str]]:
    """transformers' decode FLOPs per module with a chunked layer's query reading the current
    chunk's (T mod C)+1 keys, as shapecalc counts, instead of transformers' min(T, C−1)+1."""
    mods = dict(measured["decode"]["modules"])
    cfg, B, T = measured["config"], measured["batch"], measured["seq"]
    notes = []
    for layer in measured["cache"]:
        if layer["attention"] != "chunked_attention":
            continue
        C = layer["window"]
        extra = min(T, C - 1) + 1 - (T % C + 1)
        if extra:
            at = places.attention(layer["layer"])
            # QKᵀ and A·V: 2·B·H·Dh FLOPs per key each
            per_key = 4 * B * cfg["num_attention_heads"] * cfg["head_dim"]
            mods[at] = mods.get(at, 0) - per_key * extra
            notes.append(f"chunked layers: the decode query reads {T % C + 1} keys in shapecalc, "
                         f"{min(T, C - 1) + 1} in transformers")
    return mods, sorted(set(notes))


def _check(name: str, quantity: str, ours: int, theirs: int, where: str | None,
           at: tuple[int, int] | None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "quantity": quantity, "shapecalc": ours,
                         "transformers": theirs, "ok": ours == theirs, "first_difference": None}
    if where is not None:
        c["first_difference"] = {"module": where, "shapecalc": at[0] if at else None,
                                 "transformers": at[1] if at else None}
    if not c["ok"]:
        c["detail"] = f"first differs at {where or '(no module)'}" + (
            f": shapecalc {at[0]:,}, transformers {at[1]:,}" if at else "")
    return c


def _subtree(counts: dict[str, int], node: str) -> int:
    return sum(v for k, v in counts.items() if node == "(model)" or k == node
               or k.startswith(node + "."))


def _compare(name: str, quantity: str, total: int, theirs_total: int, ours: dict[str, int],
             theirs: dict[str, int], places: Places) -> dict[str, Any]:
    theirs = places.join(theirs)  # siblings shapecalc computes as one stage, summed
    order = [places.joined.get(n, n) for n in places.modules]
    where = first_difference(theirs, ours, list(dict.fromkeys(order)))
    at = None if where is None else (_subtree(ours, where), _subtree(theirs, where))
    return _check(name, quantity, total, theirs_total, where, at)


def compare(model: ModelConfig, wl: Workload, measured: dict[str, Any],
            source: str) -> dict[str, Any]:
    """The checks of one model against one measurement (`measure_config`'s record)."""
    pre = wl.model_copy(update={"phase": "prefill", "logits": "all"})
    dec = pre.model_copy(update={"phase": "decode"})
    t_pre, t_dec = build_trace(model, pre)["totals"], build_trace(model, dec)["totals"]
    st_pre, st_dec = symbolic_stages(model, pre, 1), symbolic_stages(model, dec, 1)
    kind_of = layer_plan(model).kind_of
    places = Places(measured["order"], measured["layers_path"])
    dec_theirs, dec_notes = _decode_chunk_fix(measured, places)
    kv_theirs, kv_notes = transformers_kv(measured)
    entries = _v4_entries(model, measured, kv_theirs, kv_notes)
    kv_mod, kv_mod_theirs = (_by_layer(kv, places)
                             for kv in (_kv_layers(st_pre, kind_of), kv_theirs))
    B, T = wl.batch, wl.seq
    checks = [
        _compare("params", "params", t_pre["params"], measured["params"],
                 _per_module(st_pre, "params", places, kind_of), measured["params_modules"],
                 places),
        _compare(f"prefill FLOPs (B={B}, T={T}, all logits)", "prefill_flops", t_pre["flops"],
                 measured["prefill"]["flops"], _per_module(st_pre, "flops", places, kind_of),
                 measured["prefill"]["modules"], places),
        _compare(f"decode FLOPs (one token on T={T} cached)", "decode_flops", t_dec["flops"],
                 sum(dec_theirs.values()), _per_module(st_dec, "flops", places, kind_of),
                 dec_theirs, places),
        _compare(f"KV cache bytes after the prefill ({wl.dtype})", "kv_cache_bytes",
                 t_pre["kv_cache_bytes"], sum(kv_theirs), kv_mod, kv_mod_theirs, places),
    ]
    if "cache_tensors" in measured:  # a live measurement: every tensor of the cache
        from ..reference.measure import KV_PARTS

        states = sum(t["bytes"] for t in measured["cache_tensors"]
                     if t["part"] not in (*KV_PARTS, *entries))
        checks.append(_check(f"state cache bytes after the prefill ({wl.dtype})",
                             "state_cache_bytes", t_pre["state_cache_bytes"], states, None, None))
    conventions = [*kv_notes, *dec_notes]
    if wl.mla_form == "latent":
        conventions.append("MLA: shapecalc's latent form (transformers re-expands the cached "
                           "latent through kv_b_proj every step)")
    if measured["llama4_routed_moe_layers"]:
        conventions.append("Llama 4: each token through its top-k experts only (transformers' "
                           "Llama4TextMoe runs all E experts on every token, scaled by 0 where "
                           "not chosen)")
    return {
        "model": model.name,
        "source": source,
        "against": "transformers",
        "versions": {"torch": measured["torch"], "transformers": measured["transformers"]},
        "pinned": dict(PINNED),
        "workload": {"batch": B, "seq": T, "dtype": wl.dtype},
        "how": {"device": measured["device"], "model_class": measured["model_class"],
                "attn_implementation": "eager",
                "experts_implementation": measured["experts_implementation"],
                "mla_form": wl.mla_form},
        "conventions": conventions,
        "transformers_cache_bytes": measured["cache_bytes"],
        "checks": checks,
        "ok": all(c["ok"] for c in checks),
    }
