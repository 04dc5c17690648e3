"""Charts for planning: one quantity (tokens/s, memory per rank, …) against the swept axis (batch,
else seq, tp, pp), one series per case and per value of the other axes that vary.

`sweep` and `compare` draw it as bars in the terminal (`--chart`, rich) and write it as a PNG or
SVG file (`--plot FILE`, matplotlib: an optional extra, `pip install 'shapecalc[plot]'`, imported
only when a file is written). Rendering never computes: the points come from the rows the command
printed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from ..model.config import ShapecalcError
from .output import open_file, shown
from .units import fmt_value

X_AXES = ("batch", "seq", "tp", "pp")  # the x axis: the first of these with several values
SERIES_KEYS = ("case", "batch", "seq", "tp", "pp", "phase", "dtype", "kv_dtype")

# name: (axis label, fmt_value kind, needs --gpu, file unit, its scale)
QUANTITIES: dict[str, tuple[str, str, bool, str, float]] = {
    "expected_tokens_per_s": ("tokens/s, expected (calibrated model)", "rate", True,
                              "tokens/s", 1.0),
    "tokens_per_s": ("tokens/s, roofline upper bound", "rate", True, "tokens/s", 1.0),
    "mem_total": ("memory per rank", "bytes", True, "GiB", 2.0**30),
    "kv_cache_bytes_per_rank": ("KV cache per rank", "bytes", False, "GiB", 2.0**30),
    "expected_ttft_s": ("time to first token, expected", "time", True, "ms", 1e-3),
    "ttft_s": ("time to first token, roofline lower bound", "time", True, "ms", 1e-3),
}
# where compare's JSON holds each quantity (sweep's rows hold them under their own name)
COMPARE_PATHS: dict[str, tuple[str, ...]] = {
    "expected_tokens_per_s": ("fit", "expected", "tokens_per_s"),
    "tokens_per_s": ("fit", "times", "tokens_per_s"),
    "mem_total": ("fit", "memory_per_rank", "total"),
    "kv_cache_bytes_per_rank": ("derived", "kv_cache_bytes_per_rank"),
    "expected_ttft_s": ("fit", "expected", "ttft_s"),
    "ttft_s": ("fit", "times", "ttft_s"),
}


@dataclass
class Chart:
    x: str
    y: str
    series: list[tuple[str, list[Any], list[Any]]]  # label, x values (ascending), y values

    @property
    def title(self) -> str:
        return f"{QUANTITIES[self.y][0]} against {self.x}"


def quantity(y: str | None, gpu: bool) -> str:
    """The charted quantity: `y`, or tokens/s expected with a GPU, else the KV cache per rank."""
    y = y or ("expected_tokens_per_s" if gpu else "kv_cache_bytes_per_rank")
    if y not in QUANTITIES:
        raise ShapecalcError("chart-y", f"{y!r} is not one of {', '.join(QUANTITIES)}")
    if QUANTITIES[y][2] and not gpu:
        raise ShapecalcError("chart-y", f"{y} needs --gpu")
    return y


def make_chart(points: list[dict[str, Any]], y: str) -> Chart:
    """Points (dicts with SERIES_KEYS and `y`) as series against the first axis that varies."""
    vary = [a for a in X_AXES if len({p[a] for p in points}) > 1]
    if not vary:
        raise ShapecalcError("chart", "needs an axis with several values to plot against: "
                             "--batch or --seq (e.g. --batch 1,8,32)")
    x = vary[0]
    label_keys = [k for k in SERIES_KEYS
                  if k != x and (k == "case" or len({p[k] for p in points}) > 1)]
    groups: dict[str, dict[Any, Any]] = {}
    for p in points:
        label = " · ".join(_case(p[k]) if k == "case" else f"{k} {_num(p[k])}"
                           for k in label_keys)
        groups.setdefault(label, {})[p[x]] = p[y]
    series = [(label, sorted(g), [g[v] for v in sorted(g)]) for label, g in groups.items()]
    return Chart(x, y, series)


def _case(case: str) -> str:
    """A case without the workload fields the series label names apart (compare's columns of
    `llama3-8b --batch 1,8` are `llama3-8b@batch=1`, `llama3-8b@batch=8`: one series)."""
    name, _, spec = case.partition("@")
    kept = [kv for kv in spec.split(",") if kv and kv.split("=")[0].strip() not in SERIES_KEYS]
    return name + ("@" + ",".join(kept) if kept else "")


def compare_points(items: list[dict[str, Any]], y: str) -> list[dict[str, Any]]:
    def get(it: dict[str, Any]) -> Any:
        for k in COMPARE_PATHS[y]:
            it = it[k]
        return it

    return [{"case": it["case"], **{k: it["workload"][k] for k in SERIES_KEYS[1:]},
             y: get(it)} for it in items]


def sweep_points(chunks: list[Any], y: str) -> list[dict[str, Any]]:
    out = []
    for c in chunks:
        cols = {k: c.columns[k].tolist() for k in (*SERIES_KEYS[1:], y)}
        for i in range(len(c)):
            out.append({"case": c.case, **{k: v[i] for k, v in cols.items()}})
    return out


def _num(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) else str(v)


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


# -- in the terminal ------------------------------------------------------------------------------
def print_chart(chart: Chart, console: Any) -> None:
    """Horizontal bars, one a point, scaled to the largest value of all series."""
    from rich.table import Table
    from rich.text import Text

    from .layout import line

    kind = QUANTITIES[chart.y][1]
    ys = [v for _, _, vs in chart.series for v in vs if not _missing(v)]
    top = max(ys, default=0) or 1
    xs = [f"{chart.x} {_num(x)}" for _, xv, _ in chart.series for x in xv]
    values = [fmt_value(kind, v) for _, _, vs in chart.series for v in vs]
    room = console.width - max(map(len, xs)) - max(map(len, values)) - 6
    width = max(4, min(50, room))
    line(console, Text(chart.title, style="bold"))
    for label, xv, yv in chart.series:
        line(console, Text(label, style="bold cyan"))
        t = Table.grid(padding=(0, 1))
        t.add_column(no_wrap=True)
        t.add_column(no_wrap=True)
        t.add_column(justify="right", no_wrap=True)
        for x, v in zip(xv, yv, strict=True):
            eighths = 0 if _missing(v) else round(v / top * width * 8)
            bar = "█" * (eighths // 8) + ("▏▎▍▌▋▊▉"[eighths % 8 - 1] if eighths % 8 else "")
            t.add_row(f"  {chart.x} {_num(x)}",
                      Text(bar.ljust(width), style="green"), fmt_value(kind, v))
        console.print(t, crop=False)


# -- as a file ------------------------------------------------------------------------------------
PLOT_FORMATS = (".png", ".svg")


def check_plot(path: str) -> None:
    """Refuse a --plot file before anything is printed: its suffix, and matplotlib (the path
    itself: output.check_outputs, with the command's other outputs)."""
    if Path(path).suffix.lower() not in PLOT_FORMATS:
        raise ShapecalcError("plot", f"{shown(path)} must end in .png or .svg")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ShapecalcError("plot", "writing a PNG or SVG needs matplotlib: pip install "
                             "'shapecalc[plot]'") from None


def save_plot(chart: Chart, path: str) -> None:
    """The chart as lines with markers (a log₂ x axis for powers of two over 8× and more); SVG
    text as paths, so the file needs no font; no date in it, so the same chart gives the same
    bytes."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure  # not pyplot: no global figures

    label, _, _, unit, scale = QUANTITIES[chart.y]
    fig = Figure(figsize=(8, 4.8), dpi=100)
    ax = fig.add_subplot()
    for name, xs, ys in chart.series:
        ax.plot(xs, [math.nan if _missing(v) else v / scale for v in ys], marker="o",
                label=name)
    flat = [x for _, xs, _ in chart.series for x in xs]
    if all(isinstance(x, int) and x > 0 and x & (x - 1) == 0 for x in flat) and \
            max(flat) >= 8 * min(flat):
        ax.set_xscale("log", base=2)
    ticks = sorted(set(flat))
    if len(ticks) <= 12:  # the swept values themselves, as numbers
        ax.set_xticks(ticks, [f"{x:,}" if isinstance(x, int) else str(x) for x in ticks])
        ax.minorticks_off()
    ax.set_xlabel(chart.x)
    ax.set_ylabel(label if unit in label else f"{label} ({unit})")
    ax.set_title(chart.title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fmt = Path(path).suffix.lower()[1:]
    out = open_file(path, "plot")  # atomic: in place when the command succeeds
    try:
        with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "shapecalc"}):
            fig.savefig(cast(IO[bytes], out.buffer), format=fmt,
                        metadata={"Date": None} if fmt == "svg" else None)
    except OSError as e:
        raise out.error(e) from None
    finally:
        out.close()
