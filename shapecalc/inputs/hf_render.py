"""A `text_config` beside a supported top-level model_type (issue 12, HF oddities).

A multimodal config (model_type `gemma3`, `llama4`, `llava`, …) keeps its decoder in `text_config`
and hf.py reads that. But a config whose own model_type is a supported text model (`llama`,
`qwen2`, `gemma3_text`, …) and that also holds a `text_config` describes two models: none of the
supported families' transformers config classes has a text_config, so the model is built from the
top level, while `PretrainedConfig.get_text_config()` (generation, cache set-up) returns the
nested dict — transformers 5 fails to build LlamaForCausalLM from such a config. shapecalc reads
the top level only when the text_config agrees with it on everything that sets a shape (the keys
the family's reader reads, every key hf_keys.SHAPE_KEYS knows, and model_type), and otherwise
refuses, naming text_config and the first key that differs.
"""

from __future__ import annotations

from typing import Any

from ..model.config import ShapecalcError
from .hf_families import READS
from .hf_keys import SHAPE_KEYS, _given


def check_text_config(cfg: dict[str, Any], mt: str) -> None:
    """Refuse `cfg`'s text_config (top-level model_type `mt`, a supported one) unless it is
    null or agrees with the top level on every shape key it gives."""
    text = cfg.get("text_config")
    if text is None:
        return
    if not isinstance(text, dict):
        raise ShapecalcError("text_config", f"must be an object, not {text!r}")
    keys = READS.get(mt, frozenset()) | set(SHAPE_KEYS) | {"model_type"}
    top = dict(_given(cfg))  # rope dicts' entries dotted (rope_parameters.partial_rotary_factor)
    for key, value in _given(text):
        if key not in top and key in SHAPE_KEYS and SHAPE_KEYS[key].is_neutral(value, text):
            continue  # absent at the top and neutral here (use_sliding_window: false)
        if key in keys and (key not in top or value != top[key]):
            shown = repr(top[key]) if key in top else "absent"
            raise ShapecalcError(
                "text_config", f"its {key} = {value!r} differs from the top level ({shown}) "
                f"of this {mt!r} config: transformers builds {mt!r} from the top level, and "
                "a text_config is a second model's shape; refused rather than ignored (remove "
                "text_config, or make it agree)")
