"""`shapecalc verify` passes on every preset: K=1 layer, B=1, T=8, tp=1 and tp=2.

The default run checks every preset in seconds: at real width where one real-width layer fits
FULL_WIDTH_CAP (GPT-2, the seeds), else at reduced width — the same architecture (layer
count, heads, KV heads, FFN, norms, positions, biases, tying, vocabulary padding), with every
width divided by one factor. Their real-width runs (the weights made, or streamed, at full size:
tens of seconds each, minutes on a loaded machine) are marked `slow`: `pytest -m slow` runs them.
"""

from __future__ import annotations

import pytest
from newer_presets import default_or_slow, preset, preset_names

from shapecalc.check.budget import DEFAULT_BUDGET, estimate
from shapecalc.check.verify import verify
from shapecalc.inputs import sources
from shapecalc.model.config import ModelConfig, ShapecalcError, Workload, check
from shapecalc.model.plan import layer_plan
from shapecalc.model.quant import source_fields

MiB = 2**20
FULL_WIDTH_CAP = 320 * MiB  # the most a default run takes at real width (GPT-2)
REDUCED_CAP = 1024 * MiB  # the most one default-run case may plan to allocate
REDUCED_DH = 8  # head width of a reduced-width preset
PRESETS = list(preset_names())


def _tp(model: ModelConfig) -> int:
    try:  # tp=2 wherever the model allows it (OLMo 2's whole-width q/k norms do not)
        check(model, Workload(batch=1, seq=8, tp=2))
    except ShapecalcError:
        return 1
    return 2 if model.kv_heads % 2 == 0 else 1


def _workload(model: ModelConfig) -> Workload:
    return Workload(batch=1, seq=8, tp=_tp(model), **source_fields(model, {}))


def _fits(model: ModelConfig) -> bool:
    return estimate(model, _workload(model), 1) <= FULL_WIDTH_CAP


# widths an MLA or MoE preset also divides (each one given)
WIDTHS = ("d_ff_expert", "d_ff_shared", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim",
          "qk_rope_head_dim", "v_head_dim", "index_head_dim",
          # the stateful mixers' head widths and state (their head and group counts kept)
          "ssm_head_dim", "ssm_state", "gdn_qk_dim", "gdn_v_dim", "block_index_head_dim",
          # Gemma 4's global head width and per-layer embeddings
          "global_head_dim", "ple_dim", "ple_vocab")


def _factor(model: ModelConfig, dh: int = REDUCED_DH) -> int:
    # MLA: D_r shrinks to 2, the least RoPE allows, and every width divides by the same factor
    if model.mla:
        return model.rot // 2
    f = model.dh // dh
    mixer = [w for w in (getattr(model, k) for k in WIDTHS[7:]) if w is not None]
    while any(w % f for w in (model.dh, model.d_model, model.d_ff, *mixer)):  # Phi-3: Dh 96
        f -= 1
    return f


def reduced(model: ModelConfig, dh: int = REDUCED_DH) -> ModelConfig:
    """The preset with D, Dh, Dff (and every MLA and expert width) and the vocabulary divided by
    one factor (Dh/dh, or the next smaller factor that divides Dh, D and Dff; MLA: D_r/2): heads,
    KV heads, layers and everything else kept; the vocabulary keeps its residue mod 8 (so its
    padding for p ranks)."""
    f = _factor(model, dh)
    vocab = model.vocab_size // f
    vocab -= (vocab - model.vocab_size) % 8
    update = {"d_model": model.d_model // f, "d_ff": model.d_ff // f, "vocab_size": vocab}
    update |= {w: getattr(model, w) // f for w in WIDTHS if getattr(model, w) is not None}
    if model.head_dim is not None:
        update["head_dim"] = model.dh // f
    if model.rotary_dim is not None:  # partial rotary stays partial: an even R < dh
        update["rotary_dim"] = max(2, model.rotary_dim // f // 2 * 2)
    if model.layer_widths is not None:  # dots3: each layer's own widths, by the same factor
        update["layer_widths"] = {k: v if v is None or k in ("n_heads", "n_kv_heads") else
                                  tuple(x // f for x in v)
                                  for k, v in model.layer_widths.model_dump().items()}
    if model.rotary_dim_local is not None:  # Laguna's sliding layers' R, reduced alike
        update["rotary_dim_local"] = max(2, model.rotary_dim_local // f // 2 * 2)
    # a quantized checkpoint's blocks and groups need its real widths; verify checks shapes
    # and FLOPs, which the format does not change
    update["quantization"] = None
    return model.model_copy(update=update)


BIG = [n for n in PRESETS if not _fits(preset(n))]


def _passes(model: ModelConfig) -> dict:
    # one layer, or the fewest that run each kind of layer once (gpt-oss alternates two)
    doc = verify(model, _workload(model), layers=layer_plan(model).covering())
    failed = [c["name"] for c in doc["checks"] if not c["ok"]]
    assert not failed, failed
    assert doc["ok"] and len(doc["checks"]) >= 20
    return doc


@pytest.mark.parametrize("name", default_or_slow(PRESETS))
def test_verify_passes_on_every_preset(name):
    """Real width where it fits FULL_WIDTH_CAP, reduced width otherwise."""
    model = sources.load_preset(name)
    if name in BIG:
        model = reduced(model)
    assert estimate(model, _workload(model), 1) <= REDUCED_CAP
    _passes(model)


@pytest.mark.slow
@pytest.mark.parametrize("name", BIG)
def test_verify_passes_at_full_width_on_the_largest_presets(name):
    """Real width, one layer, under the default budget (weights streamed where one resident
    layer does not fit it)."""
    doc = _passes(sources.load_preset(name))
    assert doc["memory_budget_bytes"] == DEFAULT_BUDGET


def test_the_largest_presets_are_reduced_in_the_default_run_and_full_width_under_slow():
    assert {"llama3.1-405b", "llama3-70b", "llama2-70b", "qwen2.5-7b", "qwen2.5-0.5b"} <= set(BIG)
    assert {"gpt2", "seed-tiny"}.isdisjoint(BIG)


@pytest.mark.parametrize("name", BIG)
def test_reduced_width_keeps_the_architecture(name):
    model = sources.load_preset(name)
    small = reduced(model)
    f = _factor(model)
    assert f > 1
    assert small.rot == 2 if model.mla else (small.dh * f == model.dh and small.dh >= REDUCED_DH)
    assert (small.d_model * f, small.d_ff * f) == (model.d_model, model.d_ff)
    for w in WIDTHS:
        if getattr(model, w) is not None:
            assert getattr(small, w) * f == getattr(model, w), w
    assert small.vocab_size % 8 == model.vocab_size % 8
    widths = {"d_model", "d_ff", "vocab_size", "head_dim", "rotary_dim", "rotary_dim_local",
              "quantization", "layer_widths",
              *WIDTHS}
    assert small.model_dump(exclude=widths) == model.model_dump(exclude=widths)
    assert (small.n_heads, small.kv_heads) == (model.n_heads, model.kv_heads)
    assert _tp(small) == _tp(model)
