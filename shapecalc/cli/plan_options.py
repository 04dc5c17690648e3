"""The options and helpers the planning commands (compare, fit, sweep, hardware) share: typer
`Annotated` aliases defined once, and the functions that turn them into a GPU, plan options and
grid axes (or one error line)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

Cases = Annotated[
    list[str],
    typer.Argument(
        help="NAME or NAME@field=value,…: a preset, a .toml/.json config or an HF "
        "config.json; workload fields (tp, seq, kv_dtype, …) and model fields (as --set) after @",
        show_default=False,
    ),
]
def complete_gpus(incomplete: str) -> list[str]:
    """Shell completion: the hardware profiles whose name starts with what is typed (any case)."""
    from ..inputs.hardware import list_gpus

    return [n for n in sorted(list_gpus()) if n.lower().startswith(incomplete.lower())]


Gpu = Annotated[str | None, typer.Option("--gpu", help="a hardware profile (shapecalc hardware)",
                                         autocompletion=complete_gpus)]
HardwareDir = Annotated[
    list[Path] | None,
    typer.Option("--hardware-dir",
                 help="another folder of GPU profiles (also $SHAPECALC_HARDWARE)"),
]
SetGpu = Annotated[
    list[str] | None,
    typer.Option("--set-gpu", help="override a GPU value: hbm_bandwidth=3.0e12, "
                 "peak_flops.fp8=1.5e15, memory_bytes=96GiB (repeatable)"),
]
Utilization = Annotated[
    float, typer.Option("--utilization", help="usable fraction of GPU memory; the rest is the "
                        "reserve (vLLM's --gpu-memory-utilization)")
]
ComputeEff = Annotated[
    float, typer.Option("--compute-efficiency", help="fraction of peak FLOP/s reached (0, 1]")
]
MemoryEff = Annotated[
    float, typer.Option("--memory-efficiency", help="fraction of memory bandwidth reached (0, 1]")
]
LinkEff = Annotated[
    float, typer.Option("--link-efficiency", help="fraction of link bandwidth reached (0, 1]")
]
Price = Annotated[
    float | None, typer.Option("--price", help="price per GPU-hour: gives cost per 1M tokens")
]
ComputeDtype = Annotated[
    str | None,
    typer.Option("--compute-dtype", help="dtype of the matmuls' peak (default: activation dtype)"),
]
Attention = Annotated[
    str, typer.Option("--attention", help="flash | eager: which tensors the activation "
                      "workspace estimate counts")
]
MaxBatched = Annotated[
    int, typer.Option("--max-batched-tokens", help="tokens of one prefill step for the "
                      "activation estimate (chunked prefill, vLLM's --max-num-batched-tokens, "
                      "default 8192); 0: the whole batch's B·T at once")
]
PerfSets = Annotated[
    list[str] | None,
    typer.Option("--perf", help="override a term of the expected-time model: NAME=VALUE, e.g. "
                 "layer_overhead_s=4e-5 (repeatable; names: shapecalc calibrate --help, "
                 "docs/checked/calibration.md)"),
]


# -- charts (render/chart.py) ---------------------------------------------------------------------
ChartOpt = Annotated[bool, typer.Option(
    "--chart", help="also draw bars of --chart-y against the swept axis (batch, else seq, tp, "
    "pp) after the table, one series per case")]
ChartY = Annotated[str | None, typer.Option(
    "--chart-y", help="what --chart and --plot show: expected_tokens_per_s (default with "
    "--gpu), tokens_per_s, mem_total, expected_ttft_s, ttft_s (these need --gpu) or "
    "kv_cache_bytes_per_rank (default without)")]
PlotFile = Annotated[str | None, typer.Option(
    "--plot", help="write that chart as a PNG or SVG file (FILE.png | FILE.svg; needs "
    "matplotlib: pip install 'shapecalc[plot]')")]


BatchList = Annotated[
    str | None, typer.Option("--batch", "-b", help="B: one or more, e.g. 1,8,32 or 1..256x2")
]
SeqList = Annotated[
    str | None, typer.Option("--seq", "-t", help="T: one or more, e.g. 512,2048,8192")
]
TpList = Annotated[str | None, typer.Option("--tp", help="p: one or more, e.g. 1,2,4,8")]
PpList = Annotated[str | None, typer.Option("--pp", help="s: one or more pipeline stage counts")]
DtypeList = Annotated[
    str | None, typer.Option("--dtype", help="one or more of fp32, bf16, fp16, fp8, int8, int4")
]
KvDtypeList = Annotated[
    str | None, typer.Option("--kv-dtype", help="KV cache dtype(s) (default: dtype)")
]
PhaseList = Annotated[
    str | None, typer.Option("--phase", help="prefill | decode, or both: prefill,decode")
]


# -- helpers --------------------------------------------------------------------------------------


def gpu_option(name: str | None, dirs: list[Path] | None, sets: list[str] | None) -> Any:
    from ..model.config import ShapecalcError

    if name is None:
        if sets:
            raise ShapecalcError("set-gpu", "needs --gpu")
        if dirs:  # (only the flag: $SHAPECALC_HARDWARE is a standing setting)
            raise ShapecalcError("hardware-dir", "is where --gpu NAME is looked up: give --gpu "
                                 "NAME or leave out --hardware-dir")
        return None
    from ..inputs.hardware import load_gpu

    return load_gpu(name, dirs, sets)


# compare's and sweep's options that only shape the --gpu columns (fit, times, cost): without
# --gpu each would change nothing, so one the user typed is refused (cli/once.given)
GPU_ONLY = ("utilization", "compute_efficiency", "memory_efficiency", "link_efficiency", "price",
            "compute_dtype", "attention", "max_batched_tokens", "perf")


def refuse_without_gpu(hw: Any) -> None:
    from ..model.config import ShapecalcError
    from .once import given

    if hw is not None:
        return
    for name in GPU_ONLY:
        if given(name):
            flag = "--" + name.replace("_", "-")
            raise ShapecalcError(flag[2:], "shapes the --gpu columns (memory fit, times, cost): "
                                 f"give --gpu NAME or leave out {flag}")


def plan_opts(utilization: float, ce: float, me: float, le: float, price: float | None,
              compute_dtype: str | None, attention: str, max_batched_tokens: int | None,
              perf: list[str] | None = None) -> Any:
    from ..model.config import DTYPE_BITS
    from ..model.suggest import canonical_dtype
    from ..plan.options import PlanOptions
    from ..plan.perf import perf_overrides

    return PlanOptions(utilization, ce, me, le, price, canonical_dtype(compute_dtype, DTYPE_BITS),
                       attention,
                       max_batched_tokens or None, perf_overrides(perf))


def output_format(fmt: str, as_json: bool, allowed: tuple[str, ...]) -> str:
    from ..render.output import check_format

    return check_format("json" if as_json else fmt, allowed)


def grid_axes(batch: str | None, seq: str | None, tp: str | None, pp: str | None,
              dtype: str | None, kv_dtype: str | None) -> dict[str, list[Any]]:
    from ..plan.cases import parse_axes

    return parse_axes({"batch": batch, "seq": seq, "tp": tp, "pp": pp, "dtype": dtype,
                       "kv_dtype": kv_dtype})





def apply_mode(mode: str | None, fixed: dict[str, Any], axes: dict[str, Any]) -> None:
    """A deployment mode's widths (model/deploy.py) where no flag gave them: the activation
    dtype into the fixed fields, the weight and KV dtypes into the axes."""
    from ..model.deploy import mode_fields

    f = mode_fields(mode)
    if f:
        fixed.setdefault("act_dtype", f["act_dtype"])
        axes.setdefault("dtype", [f["dtype"]])
        axes.setdefault("kv_dtype", [f["kv_dtype"]])
