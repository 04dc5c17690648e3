"""Command-line inputs shared by the commands: the typer `Annotated` option aliases, defined
once, and the functions that turn them into a model and a workload (or one error line).

cli/app.py and the command modules import them from here, so no command module imports another.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ..model.config import ModelConfig, ShapecalcError, Workload, make_workload


def complete_presets(incomplete: str) -> list[str]:
    """Shell completion: the preset names that start with what is typed."""
    from ..inputs.sources import list_presets

    return [n for n in sorted(list_presets()) if n.startswith(incomplete)]


Preset = Annotated[str | None, typer.Option("--preset", help="a preset name (shapecalc presets)",
                                            autocompletion=complete_presets)]
ConfigFile = Annotated[
    Path | None, typer.Option("--config", help="a TOML or JSON file with the model fields")
]
HFConfig = Annotated[Path | None, typer.Option("--hf-config", help="a Hugging Face config.json")]
Sets = Annotated[
    list[str] | None, typer.Option("--set", help="override a model field: field=value (repeatable)")
]
PresetsDir = Annotated[
    list[Path] | None,
    typer.Option("--presets-dir", help="another folder of presets (also $SHAPECALC_PRESETS)"),
]
Batch = Annotated[int | None, typer.Option("--batch", "-b", help="B: sequences in the batch")]
Seq = Annotated[
    int | None,
    typer.Option(
        "--seq", "-t", help="T: prompt tokens (prefill) or tokens already cached (decode)"
    ),
]
# train reads T as the length of each training sequence, not a prompt
TrainSeq = Annotated[
    int | None, typer.Option("--seq", "-t", help="T: tokens in each training sequence")
]
Phase = Annotated[str | None, typer.Option("--phase", help="prefill | decode")]
DtypeOpt = Annotated[
    str | None, typer.Option("--dtype", help="fp32 | bf16 | fp16 | fp8 | int8 | int4 | mxfp4 | "
                             "nvfp4 | nf4: the weights (mxfp4, nvfp4, nf4 with their block "
                             "scales; a quantized checkpoint sets its own). 16- and 32-bit "
                             "weights set the activations and KV cache too; 8- and 4-bit ones "
                             "keep them bf16, as engines run them (--act-dtype, --kv-dtype "
                             "override)")
]
Mode = Annotated[str | None, typer.Option(
    "--mode", help="deployment widths: bf16 | fp8 (W8A8: fp8 weights and GEMMs, bf16 "
    "activations and all-reduce) | int8-wo | int4-wo | mxfp4 | nf4 (weight-only, 16-bit GEMMs) "
    "| nvfp4 (W4A4 at the fp4 peak) | fp8-kv")]
KvDtype = Annotated[str | None, typer.Option("--kv-dtype", help="KV cache dtype (default dtype)")]
ActDtype = Annotated[
    str | None, typer.Option("--act-dtype", help="activation dtype (default dtype)")
]
Logits = Annotated[str | None, typer.Option("--logits", help="all | last")]
TP = Annotated[int | None, typer.Option("--tp", help="p: tensor-parallel degree")]
PP = Annotated[int | None, typer.Option("--pp", help="s: pipeline stages")]
EP = Annotated[int | None, typer.Option(
    "--ep", help="expert-parallel degree: the routed experts split over ep GPUs (a multiple of "
    "tp: attention in ep/tp tensor-parallel replicas)")]
MlaForm = Annotated[str | None, typer.Option(
    "--mla-form", help="MLA models: absorbed (vLLM, FlashMLA; default) | latent (transformers "
    "5.x: the latent cache re-expanded each step) | expanded (K and V of every head cached)")]
Selection = Annotated[str | None, typer.Option(
    "--selection", show_default="eager", help="DeepSeek Sparse Attention models: eager "
    "(transformers' dense scores, the unselected masked) | sparse (a sparse kernel, FlashMLA: "
    "each query reads its K_sel selected latents)")]
BlockSize = Annotated[int | None, typer.Option("--block-size", help="paged KV cache block (16)")]
Mtp = Annotated[bool | None, typer.Option(
    "--mtp", help="also trace the multi-token-prediction modules (DeepSeek-V3, GLM-4.5: stages "
    "in group mtp; totals.mtp_flops), counted apart from the model's totals")]
MixerFlops = Annotated[str | None, typer.Option(
    "--mixer-flops", help="stateful mixers (Mamba-2, gated DeltaNet): how their FLOPs are "
    "counted: transformers-torch (default: FlopCounterMode on transformers' torch path) | fused "
    "(what mamba_ssm's and flash-linear-attention's GPU kernels compute)")]
StateCache = Annotated[str | None, typer.Option(
    "--state-cache", help="stateful mixers: whose state cache: transformers (default: K_c conv "
    "columns, fp32 recurrent state) | vllm (K_c − 1 columns, the state in --state-dtype)")]
StateDtype = Annotated[str | None, typer.Option(
    "--state-dtype", help="--state-cache vllm: the recurrent state's dtype (vLLM's "
    "mamba_ssm_cache_dtype; default auto: the activations' dtype)")]
AttnFlops = Annotated[
    str | None, typer.Option("--attention-flops", help="full (eager) | causal (lower half)")
]
PaddingMask = Annotated[
    bool | None, typer.Option("--padding-mask/--no-padding-mask", help="list the padding mask")
]
JsonOut = Annotated[bool, typer.Option("--json", help="one JSON document on stdout, nothing else")]
Format = Annotated[str, typer.Option("--format", help="table | json | csv | markdown")]
Output = Annotated[
    str | None, typer.Option("--output", "-o", help="write to this file instead of stdout")
]
Svg = Annotated[str | None, typer.Option("--svg", help="also save the table as an SVG picture")]
Html = Annotated[str | None, typer.Option("--html", help="also save the table as HTML")]


def fail(err: ShapecalcError) -> None:
    from .streams import error_line

    error_line(str(err))
    raise typer.Exit(2)


def resolve_model(
    preset: str | None,
    config: Path | None,
    hf_config: Path | None,
    sets: list[str] | None,
    presets_dir: list[Path] | None,
) -> tuple[ModelConfig, dict[str, Any]]:
    """The model from exactly one source (seed-tiny if none), plus a config file's [workload]."""
    from ..inputs.model import load_model

    return load_model(preset, config, hf_config, sets, presets_dir)


def resolve_workload(base: dict[str, Any], mode: str | None = None,
                     model: ModelConfig | None = None, decode: bool = False,
                     preferred_seq: int | None = None, **given: Any) -> Workload:
    """The workload: a config's [workload], then a deployment mode's widths, then the flags.
    With `model`, a T given nowhere is one the model fits (model/defaults.py), also for a
    decode step when the command runs one (`decode`)."""
    from ..model.deploy import mode_fields

    fields = {**base, **mode_fields(mode), **{k: v for k, v in given.items() if v is not None}}
    if model is not None and fields.get("seq") is None:
        from ..model.defaults import DEFAULT_SEQ, default_seq

        phases = [str(fields.get("phase") or "prefill")] + (["decode"] if decode else [])
        fields["seq"] = default_seq(model, phases, preferred_seq or DEFAULT_SEQ)
    return make_workload(fields)


def seq_note(model: ModelConfig, wl: Workload, seq: int | None, base: dict[str, Any],
             preferred_seq: int | None = None) -> str | None:
    """The header's `T=… (default…)` when neither --seq nor the config's [workload] gave T."""
    if seq is not None or base.get("seq") is not None:
        return None
    from ..model.defaults import DEFAULT_SEQ, default_seq_note

    return default_seq_note(model, wl.seq, preferred_seq or DEFAULT_SEQ)


def emit_json(doc: Any) -> None:
    try:
        text = json.dumps(doc, ensure_ascii=False, indent=2, allow_nan=False)
    except ValueError:  # JSON has no inf or nan: null (render/output.finite)
        from ..render.output import json_text

        text = json_text(doc)
    sys.stdout.write(text + "\n")


def show_target(words: list[str] | None, what: str) -> str | None:
    """`presets`, `presets NAME` and `presets show NAME` (hardware alike): the NAME, or None to
    list them all."""
    w = list(words or [])
    if w[:1] == ["show"] and len(w) > 1:
        w = w[1:]
    if len(w) > 1 or w == ["show"]:
        raise ShapecalcError(what, f"expected NAME or show NAME, got {' '.join(words or [])!r}")
    return w[0] if w else None


def matching(word: str, names: list[str]) -> list[str] | None:
    """`presets llama3`, `hardware 'H100*'`: the names a shell-style glob (with * ? [) or a
    substring picks, case-insensitively; None when `word` is one of the names (show it)."""
    import fnmatch

    if word in names:
        return None
    w = word.lower()
    glob = any(c in word for c in "*?[")
    return [n for n in names if (fnmatch.fnmatchcase(n.lower(), w) if glob else w in n.lower())]


def fit_model(case: str | None, preset: str | None, config: Any, hf_config: Any,
               set_: list[str] | None, presets_dir: Any
               ) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """fit's model from a CASE or one source: (model, workload fields, the case's @ fields)."""
    from ..model.config import ShapecalcError
    from ..plan.cases import case_fields, parse_case
    if case is not None:
        if (preset, config, hf_config) != (None, None, None):
            raise ShapecalcError("model", "give a CASE or one of --preset, --config, "
                                 "--hf-config, not both")
        c = parse_case(case, presets_dir)
        model = c.model
        wbase, at = case_fields(c, {})
        if set_:
            from ..inputs.sources import apply_overrides

            model = apply_overrides(model, set_)
        return model, wbase, at
    if (preset, config, hf_config) == (None, None, None):
        raise ShapecalcError("model", "give a CASE, or --preset, --config or --hf-config")
    model, wbase = resolve_model(preset, config, hf_config, set_, presets_dir)
    return model, wbase, {}
