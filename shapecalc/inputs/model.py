"""A model from exactly one source — a preset, a config file or a Hugging Face config.json — with
`--set` overrides: what the CLI's --preset/--config/--hf-config and the Python API's load_model
share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..model.config import ModelConfig, ShapecalcError
from ..model.quant import source_fields
from . import sources

# the first seed's §13 example (one set of sizes through the whole pass), traced when no model is
# given: seed-tiny at B=2, T=4
DEFAULT = ("seed-tiny", {"batch": 2, "seq": 4})


def load_model(
    preset: str | None,
    config: str | Path | None,
    hf_config: str | Path | None,
    sets: list[str] | None,
    presets_dir: list[Path] | None,
    names: tuple[str, str, str] = ("--preset", "--config", "--hf-config"),
) -> tuple[ModelConfig, dict[str, Any]]:
    """The model (seed-tiny if no source) and the workload fields its source sets (a config
    file's [workload] table; the seed's B and T for seed-tiny by default; the dtype a
    quantized checkpoint stores). `names` are how the
    caller calls the three sources, for the error line."""
    given = [x for x in (preset, config, hf_config) if x is not None]
    if len(given) > 1:
        raise ShapecalcError("model", f"give one of {', '.join(names)}")
    workload: dict[str, Any] = {}
    if config is not None:
        model, workload = sources.load_config_file(config)
    elif hf_config is not None:
        from .hf import load_hf_config  # the readers load only for a config.json

        model = load_hf_config(hf_config)
    else:
        model = sources.load_preset(DEFAULT[0] if preset is None else preset, presets_dir)
        if preset is None:
            workload = dict(DEFAULT[1])
    if sets:
        model = sources.apply_overrides(model, sets)
    return model, source_fields(model, workload)  # a quantized checkpoint sets its dtype
