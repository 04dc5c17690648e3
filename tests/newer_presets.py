"""The presets newer than the 52 the golden file recorded first (the 2025–2026 families, their
quantized forms, the stateful mixers): the tests that run every preset take these under
`pytest -m slow`, one preset per family staying in the default run elsewhere
(test_families_reference, test_mixers, test_quant), so that the default suite keeps its time;
the verify runs keep one preset per architecture of the first ones (REPRESENTATIVE)."""

from __future__ import annotations

import functools
import gzip
import importlib.util
import json
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "golden_cases_newer", Path(__file__).parent / "golden" / "cases.py")
assert _spec and _spec.loader
_cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cases)
ORIGINAL = _cases.original_presets(json.loads(gzip.decompress(_cases.PATH.read_bytes())))


# the fields that size a model; their presence (not their value) is part of its architecture
SIZES = {"vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "d_ff",
         "max_positions", "n_experts", "experts_per_token", "d_ff_expert", "d_ff_shared",
         "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
         "rope_base", "sliding_window", "n_shared_experts", "rotary_dim", "mixer_types",
         "ffn_types", "layer_types", "first_dense_layers", "n_group", "topk_group",
         "attention_chunk_size", "rope_base_local", "query_pre_attn_scalar",
         "routed_scaling_factor", "no_rope_layers", "moe_layers"}


@functools.cache
def preset(name: str):
    """A preset loaded once per process, for the parameter lists that modules build as they are
    collected (each worker collects every module; tests themselves load with
    sources.load_preset, under the environment they set). Models are frozen: sharing is safe."""
    from shapecalc.inputs.sources import load_preset

    return load_preset(name)


@functools.cache
def preset_names() -> tuple[str, ...]:
    """sources.list_presets()'s names, sorted, read once per process (at collection)."""
    from shapecalc.inputs.sources import list_presets

    return tuple(sorted(list_presets()))


def _representatives() -> set[str]:
    """Of the first presets, the one with the fewest parameters of each architecture (every
    field but the sizes the same: Llama 3's 8B, 70B and 405B are one): what the default run
    verifies; the golden file still traces every preset."""
    from shapecalc.inputs.sources import published

    best: dict[tuple, tuple[int, str]] = {}
    for n in sorted(ORIGINAL):
        m = preset(n).model_dump()
        sig = tuple(sorted((k, (v is None) if k in SIZES else repr(v)) for k, v in m.items()
                           if k != "name"))
        best[sig] = min(best.get(sig, (published(n)["params"], n)), (published(n)["params"], n))
    return {n for _, n in best.values()}


REPRESENTATIVE = _representatives()


def default_or_slow(names: list[str]) -> list[object]:
    """Each name as a parameter; a newer preset's, and a first preset's of an architecture
    another (smaller) preset represents, marked slow."""
    return [pytest.param(n, marks=[] if n in REPRESENTATIVE else [pytest.mark.slow])
            for n in names]
