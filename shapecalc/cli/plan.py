"""Commands of capacity planning: compare, sweep, fit (and hardware, the GPU profiles).

Loaded when one of them is invoked (lazy.py); numpy, rich and the planning code load inside the
commands, so each command loads only what it needs.
"""


from collections.abc import Callable
from typing import Annotated, Any

import typer

from ..render.output import check_outputs
from .options import (
    EP,
    PP,
    TP,
    ActDtype,
    AttnFlops,
    Batch,
    BlockSize,
    ConfigFile,
    DtypeOpt,
    Format,
    HFConfig,
    Html,
    JsonOut,
    KvDtype,
    Logits,
    MixerFlops,
    MlaForm,
    Mode,
    Output,
    Preset,
    PresetsDir,
    Sets,
    StateCache,
    StateDtype,
    Svg,
    fail,
)
from .plan_options import (
    Attention,
    BatchList,
    Cases,
    ChartOpt,
    ChartY,
    ComputeDtype,
    ComputeEff,
    DtypeList,
    Gpu,
    HardwareDir,
    KvDtypeList,
    LinkEff,
    MaxBatched,
    MemoryEff,
    PerfSets,
    PhaseList,
    PlotFile,
    PpList,
    Price,
    SeqList,
    SetGpu,
    TpList,
    Utilization,
    apply_mode,
    complete_gpus,
    gpu_option,
    grid_axes,
    output_format,
    plan_opts,
    refuse_without_gpu,
)

PLAN_CONVENTIONS = (
    "Context T = --seq: the KV cache holds T tokens per sequence (paged, --block-size); TTFT is "
    "the prefill of T tokens, the decode step reads the T cached tokens plus the new one. Memory "
    "per rank = weights + KV cache + activation workspace (an estimate: 2 × the largest tensor "
    "a rank writes in prefill, without the [T,T] scores under FlashAttention) + reserve "
    "(1 − --utilization, like vLLM's --gpu-memory-utilization 0.9). Times are roofline LOWER "
    "BOUNDS: max(FLOPs/peak, bytes/bandwidth) + (ring all-reduce + PP boundary bytes)/link, "
    "each divided by its efficiency factor. Expected times: a model calibrated on published "
    "measurements (docs/checked/calibration.md, shapecalc calibrate; --perf NAME=V). Bytes in "
    "binary units."
)

# -- compare --------------------------------------------------------------------------------------


def compare(
    cases: Cases,
    batch: BatchList = None,
    seq: SeqList = None,
    tp: TpList = None,
    pp: PpList = None,
    ep: EP = None,
    mla_form: MlaForm = None,
    dtype: DtypeList = None,
    kv_dtype: KvDtypeList = None,
    phase: Annotated[str | None, typer.Option("--phase", help="prefill | decode: the phase "
                                                 "of the totals and parallel sections")] = None,
    act_dtype: ActDtype = None,
    mode: Mode = None,
    logits: Logits = None,
    block_size: BlockSize = None,
    attention_flops: AttnFlops = None,
    mixer_flops: MixerFlops = None,
    state_cache: StateCache = None,
    state_dtype: StateDtype = None,
    presets_dir: PresetsDir = None,
    gpu: Gpu = None,
    hardware_dir: HardwareDir = None,
    set_gpu: SetGpu = None,
    utilization: Utilization = 0.9,
    compute_efficiency: ComputeEff = 1.0,
    memory_efficiency: MemoryEff = 1.0,
    link_efficiency: LinkEff = 1.0,
    price: Price = None,
    compute_dtype: ComputeDtype = None,
    attention: Attention = "flash",
    max_batched_tokens: MaxBatched = 8192,
    perf: PerfSets = None,
    ratio: Annotated[bool, typer.Option("--ratio", help="show ratios to the first column")] = False,
    chart: ChartOpt = False,
    chart_y: ChartY = None,
    plot: PlotFile = None,
    fmt: Format = "table",
    as_json: JsonOut = False,
    output: Output = None,
    svg: Svg = None,
    html: Html = None,
) -> None:
    from ..model.config import ShapecalcError

    try:
        from ..plan.cases import parse_case
        from ..plan.compare import compare as plan_compare
        from ..plan.compare import expand_cases
        from ..render.output import FORMATS

        fmt = output_format(fmt, as_json, FORMATS)
        opts = plan_opts(utilization, compute_efficiency, memory_efficiency, link_efficiency, price,
                         compute_dtype, attention, max_batched_tokens, perf)
        hw = gpu_option(gpu, hardware_dir, set_gpu)
        refuse_without_gpu(hw)
        from ..inputs.unsupported import Unsupported

        try:
            parsed = [parse_case(c, presets_dir) for c in cases]
        except Unsupported as e:  # day-0: measured by transformers, when it is installed
            from . import day0

            day0.available(e)
            day0.compare(cases, presets_dir, dict(batch=batch, seq=seq, dtype=dtype,
                                                  logits=logits, phase=phase),
                         {"--tp": tp, "--pp": pp, "--ep": ep, "--mla-form": mla_form,
                          "--kv-dtype": kv_dtype, "--act-dtype": act_dtype, "--mode": mode,
                          "--block-size": block_size, "--attention-flops": attention_flops,
                          "--gpu": gpu, "--set-gpu": set_gpu, "--ratio": ratio,
                          "--chart": chart, "--chart-y": chart_y, "--plot": plot,
                          "--html": html, "--mixer-flops": mixer_flops,
                          "--state-cache": state_cache, "--state-dtype": state_dtype,
                          **day0.changed(opts)}, fmt, output, svg)
            return
        base = {k: v for k, v in (("phase", phase), ("act_dtype", act_dtype),
                                  ("logits", logits), ("block_size", block_size),
                                  ("attention_flops", attention_flops), ("ep", ep),
                                  ("mla_form", mla_form), ("mixer_flops", mixer_flops),
                                  ("state_cache", state_cache), ("state_dtype", state_dtype))
                if v is not None}
        axes = grid_axes(batch, seq, tp, pp, dtype, kv_dtype)
        apply_mode(mode, base, axes)
        columns = expand_cases(parsed, base, axes)
        check_outputs("--chart's bars" if chart else None, output=output, svg=svg, html=html,
                      plot=plot)
        from .chart import prepare

        y = prepare(chart, chart_y, plot, fmt, output, hw is not None)
        from ..plan.price import with_default_price

        items = plan_compare(columns, hw, with_default_price(opts, hw),
                             logits_set=logits is not None)
        note = None if seq is not None or any("seq" in c.workload for c in parsed) else (
            "T: default min(2048, max_positions) of each model")
        drawn = None
        if y is not None:
            from ..render.chart import compare_points, make_chart

            drawn = make_chart(compare_points(items, y), y)
        from .plan_emit import emit_compare

        emit_compare(items, fmt, output, svg, html, ratio, note)
        from .chart import emit

        emit(drawn, chart, plot, output)
    except ShapecalcError as e:
        fail(e)
    if hw is not None and not any(it["fit"]["fits"] for it in items):  # README: Exit status
        raise typer.Exit(1)


# -- fit ------------------------------------------------------------------------------------------


def fit(
    case: Annotated[str | None, typer.Argument(
        help="NAME or NAME@field=value,… (or use --preset/--config/--hf-config)",
        show_default=False,
    )] = None,
    preset: Preset = None,
    config: ConfigFile = None,
    hf_config: HFConfig = None,
    set_: Sets = None,
    presets_dir: PresetsDir = None,
    batch: Batch = None,
    seq: Annotated[int | None, typer.Option("--seq", "-t", help="T: the context")] = None,
    dtype: DtypeOpt = None,
    kv_dtype: KvDtype = None,
    act_dtype: ActDtype = None,
    mode: Mode = None,
    logits: Annotated[str | None, typer.Option(
        "--logits", help="all | last (default last: serving computes the last position only)",
    )] = None,
    tp: TP = None,
    pp: PP = None,
    ep: EP = None,
    mla_form: MlaForm = None,
    block_size: BlockSize = None,
    attention_flops: AttnFlops = None,
    mixer_flops: MixerFlops = None,
    state_cache: StateCache = None,
    state_dtype: StateDtype = None,
    gpu: Annotated[str, typer.Option("--gpu", help="a hardware profile (shapecalc hardware)",
                                     autocompletion=complete_gpus)] = "",
    hardware_dir: HardwareDir = None,
    set_gpu: SetGpu = None,
    utilization: Utilization = 0.9,
    compute_efficiency: ComputeEff = 1.0,
    memory_efficiency: MemoryEff = 1.0,
    link_efficiency: LinkEff = 1.0,
    price: Price = None,
    compute_dtype: ComputeDtype = None,
    attention: Attention = "flash",
    max_batched_tokens: MaxBatched = 8192,
    perf: PerfSets = None,
    fmt: Format = "table",
    as_json: JsonOut = False,
    output: Output = None,
    svg: Svg = None,
    html: Html = None,
) -> None:
    from ..model.config import ShapecalcError

    try:
        from ..plan.fit import fit as plan_fit
        from ..render.output import FORMATS
        from .options import fit_model, resolve_workload, seq_note

        fmt = output_format(fmt, as_json, FORMATS)
        if not gpu:
            raise ShapecalcError("gpu", "fit needs --gpu NAME (see: shapecalc hardware)")
        opts = plan_opts(utilization, compute_efficiency, memory_efficiency, link_efficiency, price,
                         compute_dtype, attention, max_batched_tokens, perf)
        hw = gpu_option(gpu, hardware_dir, set_gpu)
        flags = dict(batch=batch, seq=seq, dtype=dtype, kv_dtype=kv_dtype, act_dtype=act_dtype,
                     logits=logits, tp=tp, pp=pp, ep=ep, mla_form=mla_form,
                     block_size=block_size, attention_flops=attention_flops,
                     mixer_flops=mixer_flops, state_cache=state_cache, state_dtype=state_dtype)
        from ..inputs.unsupported import Unsupported

        try:
            model, wbase, at = fit_model(case, preset, config, hf_config, set_, presets_dir)
        except Unsupported as e:  # day-0: measured by transformers, when it is installed
            from . import day0

            day0.no_case_fields(case)
            fits = day0.fit(e, dict(batch=batch, seq=seq, dtype=dtype, logits=logits),
                            {"--set": set_, "--kv-dtype": kv_dtype, "--act-dtype": act_dtype,
                             "--mode": mode, "--tp": tp, "--pp": pp, "--ep": ep,
                             "--mla-form": mla_form, "--block-size": block_size,
                             "--attention-flops": attention_flops, "--html": html,
                             "--mixer-flops": mixer_flops, "--state-cache": state_cache,
                             "--state-dtype": state_dtype, **day0.changed(opts)},
                            hw, utilization, fmt, output, svg)
            if not fits:
                raise typer.Exit(1) from None
            return
        wbase = {"logits": "last", **wbase}
        # a case's @ fields win over the mode's widths, as a flag does
        wl = resolve_workload(wbase, mode, model, decode=True, **{**flags, **at})
        from ..plan.price import with_default_price

        doc = plan_fit(model, wl, hw, with_default_price(opts, hw))
        check_outputs(output=output, svg=svg, html=html)
        from .plan_emit import emit_fit

        emit_fit(doc, fmt, output, svg, html, model, wl, seq_note(model, wl, seq, wbase))
    except ShapecalcError as e:
        fail(e)
    if not doc["fits"]:  # scripts test the verdict by the exit code
        raise typer.Exit(1)


# -- sweep ----------------------------------------------------------------------------------------


def sweep(
    cases: Cases,
    batch: BatchList = None,
    seq: SeqList = None,
    tp: TpList = None,
    pp: PpList = None,
    ep: EP = None,
    mla_form: MlaForm = None,
    dtype: DtypeList = None,
    kv_dtype: KvDtypeList = None,
    phase: PhaseList = None,
    act_dtype: ActDtype = None,
    mode: Mode = None,
    logits: Logits = None,
    block_size: BlockSize = None,
    attention_flops: AttnFlops = None,
    mixer_flops: MixerFlops = None,
    state_cache: StateCache = None,
    state_dtype: StateDtype = None,
    presets_dir: PresetsDir = None,
    gpu: Gpu = None,
    hardware_dir: HardwareDir = None,
    set_gpu: SetGpu = None,
    utilization: Utilization = 0.9,
    compute_efficiency: ComputeEff = 1.0,
    memory_efficiency: MemoryEff = 1.0,
    link_efficiency: LinkEff = 1.0,
    price: Price = None,
    compute_dtype: ComputeDtype = None,
    attention: Attention = "flash",
    max_batched_tokens: MaxBatched = 8192,
    perf: PerfSets = None,
    fmt: Annotated[str, typer.Option(
        "--format", help="jsonl | json (both: one JSON object per line) | csv | markdown | table"
    )] = "jsonl",
    as_json: Annotated[bool, typer.Option("--json", help="same as --format jsonl")] = False,
    chart: ChartOpt = False,
    chart_y: ChartY = None,
    plot: PlotFile = None,
    output: Output = None,
    svg: Svg = None,
    html: Html = None,
) -> None:
    from ..model.config import ShapecalcError

    try:
        from ..plan.cases import parse_case, parse_str_grid
        from ..render.sweep import SWEEP_FORMATS
        from .sweep import run

        fmt = output_format("jsonl" if as_json else fmt, False, SWEEP_FORMATS)
        opts = plan_opts(utilization, compute_efficiency, memory_efficiency, link_efficiency, price,
                         compute_dtype, attention, max_batched_tokens, perf)
        hw = gpu_option(gpu, hardware_dir, set_gpu)
        refuse_without_gpu(hw)
        parsed = [parse_case(c, presets_dir) for c in cases]
        given = grid_axes(batch, seq, tp, pp, dtype, kv_dtype)
        phases = (parse_str_grid(phase, "phase", ("prefill", "decode"))
                  if phase is not None else None)
        fixed = {k: v for k, v in (("act_dtype", act_dtype), ("logits", logits),
                                   ("block_size", block_size),
                                   ("attention_flops", attention_flops), ("ep", ep),
                                  ("mla_form", mla_form), ("mixer_flops", mixer_flops),
                                  ("state_cache", state_cache), ("state_dtype", state_dtype))
                if v is not None}
        apply_mode(mode, fixed, given)
        check_outputs("--chart's bars" if chart else None, output=output, svg=svg, html=html,
                      plot=plot)
        from .chart import emit, prepare

        y = prepare(chart, chart_y, plot, fmt, output, hw is not None)
        drawn = run(parsed, given, phases, fixed, hw, opts, fmt, output, svg, html, y)  # streams
        emit(drawn, chart, plot, output)
    except ShapecalcError as e:
        fail(e)
    from .sweep import nothing_fits

    if nothing_fits():  # a negative verdict exits 1 (README: Exit status)
        raise typer.Exit(1)


_HELP = {
    "compare": "Side by side, one column per case (and per --tp/--batch/--seq/--dtype value): "
    "params, weights, KV cache per rank, FLOPs, all-reduce and ring bytes, PP boundary, decode "
    "intensity; with --gpu, fit and time rows. ",
    "sweep": "A grid over batch, seq, tp, pp, dtype, kv dtype and phase, evaluated in closed form "
    "with NumPy: one row per point (JSON Lines or CSV). Ranges: 1..256x2 (powers of two), "
    "1..64+8 (steps), lists 512,2048. ",
    "fit": "Does a model fit a GPU at tp×pp? Memory per rank, the largest batch, the longest "
    "context, the smallest tp and pp, KV tokens that fit, roofline lower bounds and expected "
    "times (at B and at the largest batch). Exit code 1 when the verdict is 'does not fit' "
    "(memory, or a context beyond max_positions), 0 when it fits. ",
}
COMMANDS: dict[str, Callable[..., Any]] = {
    "compare": compare, "sweep": sweep, "fit": fit,
}
# each command's --help: what it does, then the conventions of planning
HELP = {name: text + PLAN_CONVENTIONS for name, text in _HELP.items()}
