"""Output of compare, sweep and fit: rich tables and bars, JSON, JSON Lines, CSV, Markdown.

Rendering never computes: it formats the dicts and columns that the plan package builds. Tables use
binary units (KiB, MiB, GiB) and say so; JSON and CSV carry the exact integers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .output import csv_text, markdown_table
from .sweep import table_cols, table_rows
from .units import fmt_value, human_bytes, human_rate, human_time, money

# ── fit ──────────────────────────────────────────────────────────────────────────────────────────

MEM_PARTS = (("weights", "blue"), ("kv_cache", "magenta"), ("state_cache", "cyan"),
             ("activations", "yellow"), ("reserve", "grey50"))


def mem_parts(mem: dict[str, int]) -> list[tuple[str, str]]:
    """The memory parts to show: the mixers' states only for a model that has them."""
    return [(k, c) for k, c in MEM_PARTS if k != "state_cache" or mem.get(k)]


def memory_bar(mem: dict[str, int], width: int = 60) -> Any:
    """A stacked bar of the memory split of one rank, scaled to its capacity (or the total)."""
    scale = max(mem["capacity"], mem["total"])
    bar = Text()
    used = 0
    for key, colour in mem_parts(mem):
        cells = round(mem[key] / scale * width)
        if mem[key] and cells == 0:
            cells = 1
        cells = min(cells, width - used)
        bar.append("█" * cells, style=colour)
        used += cells
    if used < width:
        bar.append("░" * (width - used), style="green" if mem["total"] <= mem["capacity"] else "")
    over = mem["total"] > mem["capacity"]
    bar.append(f"  {human_bytes(mem['total'])} / {human_bytes(mem['capacity'])}",
               style="bold red" if over else "bold green")
    legend = Text("  ")
    for key, colour in mem_parts(mem):
        legend.append("█ ", style=colour)
        legend.append(f"{key.replace('_', ' ')} {human_bytes(mem[key])}   ")
    legend.append("░ free", style="green")
    return bar, legend


def print_fit(doc: dict[str, Any], console: Any, seq_note: str | None = None) -> None:
    wl = doc["workload"]
    mem = doc["memory_per_rank"]
    a = doc["assumptions"]
    gpus = f"{doc['gpus']} GPU" + ("s" if doc["gpus"] > 1 else "")
    ep = f" ep={wl['ep']}" if wl.get("ep", 1) > 1 else ""
    title = (f"{doc['model']} on {doc['gpu']} · tp={wl['tp']} pp={wl['pp']}{ep} ({gpus}) · "
             f"B={wl['batch']} {seq_note or 'T=' + str(wl['seq'])} · {wl['dtype']}"
             + (f" kv {wl['kv_dtype']}" if wl["kv_dtype"] else ""))
    verdict = Text(doc.get("verdict") or ("fits" if doc["fits"] else "does not fit"),
                   style="bold green" if doc["fits"] else "bold red")
    t = Table(box=box.SIMPLE_HEAD, title="memory per rank"
              + (f" (pipeline stage {doc['pp_stage']}, the fullest)" if wl["pp"] > 1 else ""))
    t.add_column("part")
    t.add_column("bytes", justify="right")
    t.add_column("", justify="right")
    t.add_column("how", style="dim")
    kvh, form = doc["kv_heads_per_rank"], doc["kv_cache_form"]
    per = (f"{kvh} KV head{'s' if kvh > 1 else ''} per rank"
           + (" (replicated, as vLLM does)" if doc["kv_heads_replicated"] else "")
           if form in ("kv", "mla-expanded") else "MLA's latent, whole on every rank")
    how = {
        "weights": "exact: the rank's parameters × dtype bytes",
        "kv_cache": f"exact: {per}, {a['kv_cache']}",
        "activations": f"estimate ({a['attention']} attention): 2 × largest tensor of a "
        + (f"{a['max_batched_tokens']:,}-token prefill step" if a["max_batched_tokens"]
           else "prefill of the whole batch"),
        "reserve": f"1 − utilization {a['utilization']:g} of capacity",
        "state_cache": "exact: each stateful layer's conv window and fp32 recurrent state, per "
        "sequence, fixed in T",
    }
    for key, _ in mem_parts(mem):
        t.add_row(key.replace("_", " "), f"{mem[key]:,}", human_bytes(mem[key]), how[key])
    t.add_row(Text("total", style="bold"), f"{mem['total']:,}", human_bytes(mem["total"]), "")
    t.add_row("capacity", f"{mem['capacity']:,}", human_bytes(mem["capacity"]), Text(doc["gpu"]))
    bar, legend = memory_bar(mem, max(10, min(60, console.width - 30)))
    ans = Table(box=None, show_header=False, padding=(0, 2))
    ans.add_column(style="bold")
    ans.add_column(justify="right")
    ans.add_column(style="dim")
    ans.add_row("largest batch", f"{doc['max_batch']:,}", f"at T={wl['seq']:,}")
    ans.add_row("longest context", f"{doc['max_seq']:,}", f"at B={wl['batch']:,}"
                + (f" (memory alone: {doc['max_seq_memory']:,})"
                   if doc["max_seq_memory"] != doc["max_seq"] else ""))
    ans.add_row("smallest tp", "—" if doc["min_tp"] is None else str(doc["min_tp"]),
                f"at pp={wl['pp']}")
    ans.add_row("smallest pp", "—" if doc["min_pp"] is None else str(doc["min_pp"]),
                f"at tp={wl['tp']}")
    per_token = human_bytes(doc["kv_cache_bytes_per_token_per_rank"])
    ans.add_row("KV tokens that fit", f"{doc['kv_tokens_fit']:,}",
                f"after weights and activations; {per_token} per token per rank")
    tm = doc["times"]
    tt = Table(box=box.SIMPLE_HEAD,
               title="time: roofline LOWER BOUNDS (max(FLOPs/peak, bytes/bandwidth) + link; "
                     "attention FLOPs: the causal half a kernel does)")
    for col in ("phase", "compute", "memory", "communication", "total", "bound"):
        tt.add_column(col, justify="left" if col in ("phase", "bound") else "right")
    for ph, total in (("prefill", "prefill_s"), ("decode", "decode_s_per_token")):
        tt.add_row(ph + (" (per token)" if ph == "decode" else ""),
                   human_time(tm[f"{ph}_compute_s"]), human_time(tm[f"{ph}_memory_s"]),
                   human_time(tm[f"{ph}_comm_s"]), Text(human_time(tm[total]), style="bold"),
                   str(tm[f"{ph}_bound"] or "—"))
    rates = estimate_table(doc)
    if "cost_per_million_tokens" in doc:
        rates.add_row(Text(f"cost per 1M tokens ≥ (at ${doc['price_per_gpu_hour']:g}/GPU-h, "
                           f"{price_from(doc)})"), money(doc["cost_per_million_tokens"]))
    eff = (f"{a['compute_dtype']} peak {a['peak_flops']:.4g} FLOP/s × {a['compute_efficiency']:g}, "
           f"memory {a['hbm_bandwidth']:.4g} B/s × {a['memory_efficiency']:g}, "
           f"link {a['link_bandwidth']:.4g} B/s per direction × {a['link_efficiency']:g}")
    wd = a["widths"]
    eff += (f"\nbytes: weights {wd['weights']}, activations and all-reduce {wd['activations']}, "
            f"KV cache {wd['kv_cache']}; GEMMs at the {wd['compute']} peak")
    parts: list[Any] = [Text.assemble("verdict: ", verdict), t, bar, legend, Text(""), ans, tt,
                        rates, Text(eff, style="dim")]
    for note in doc["notes"]:
        parts.append(Text("note: " + note, style="yellow"))
    from .layout import show, table_or_records, width_of

    if all(width_of(console, p, least=True) + 4 <= console.width for p in parts):
        console.print(Panel(Group(*parts), title=Text(title), border_style="cyan", expand=False))
        return
    # too narrow for the panel: its parts one after another, a table that does not fit as records
    show(console, Text(title, style="bold"),
         *(table_or_records(console, p) if isinstance(p, Table) else p for p in parts))


ESTIMATES = (("time to first token", "ttft_s", human_time),
             ("decode time per token", "decode_s_per_token", human_time),
             ("tokens/s per sequence", "tokens_per_s_per_sequence", human_rate),
             ("tokens/s (batch)", "tokens_per_s", human_rate),
             ("tokens/s per GPU", "tokens_per_s_per_gpu", human_rate),
             ("prefill: largest term", "prefill_dominant", str),
             ("decode: largest term", "decode_dominant", str))


def estimate_table(doc: dict[str, Any]) -> Any:
    """Expected (calibrated) and lower-bound times at B and at the largest batch that fits."""
    t = Table(box=box.SIMPLE_HEAD, title="expected (calibrated model) and roofline bound")
    B = doc["workload"]["batch"]
    mx = doc.get("at_max_batch")
    cols = [(f"B={B} expected", doc["expected"]), ("bound", doc["lower_bound"])]
    if mx:
        cols += [(f"B={mx['batch']} (largest) expected", mx["expected"]),
                 ("bound", mx["lower_bound"])]
    t.add_column("")
    for name, _ in cols:
        t.add_column(name, justify="right", style="bold" if "expected" in name else "dim")
    for label, key, f in ESTIMATES:
        t.add_row(label, *("—" if d[key] is None else f(d[key]) for _, d in cols))
    return t


def fit_flat(doc: dict[str, Any]) -> list[tuple[str, Any]]:
    """`fit --json` as (dotted key, value) pairs, for CSV and Markdown."""
    out: list[tuple[str, Any]] = []

    def walk(prefix: str, v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                walk(f"{prefix}.{k}" if prefix else k, x)
        elif isinstance(v, list):
            out.append((prefix, "; ".join(str(x) for x in v)))
        else:
            out.append((prefix, v))

    walk("", doc)
    return out


def fit_markdown(doc: dict[str, Any]) -> str:
    mem = doc["memory_per_rank"]
    tm = doc["times"]
    rows = [[k.replace("_", " "), f"{mem[k]:,}", human_bytes(mem[k])]
            for k in ("weights", "kv_cache", "state_cache", "activations", "reserve", "total",
                      "capacity") if k != "state_cache" or mem.get(k)]
    head = (f"**{doc['model']}** on **{doc['gpu']}**, tp={doc['workload']['tp']} "
            f"pp={doc['workload']['pp']}, B={doc['workload']['batch']}, "
            f"T={doc['workload']['seq']}: **{'fits' if doc['fits'] else 'does not fit'}**\n\n")
    ans = [["largest batch", f"{doc['max_batch']:,}"], ["longest context", f"{doc['max_seq']:,}"],
           ["smallest tp", str(doc["min_tp"])], ["smallest pp", str(doc["min_pp"])],
           ["KV tokens that fit", f"{doc['kv_tokens_fit']:,}"],
           ["TTFT (lower bound)", human_time(tm["ttft_s"])],
           ["ITL (lower bound)", human_time(tm["itl_s"])],
           ["tokens/s (upper bound)", human_rate(tm["tokens_per_s"])],
           ["prefill bound", str(tm["prefill_bound"])], ["decode bound", str(tm["decode_bound"])]]
    ans += [[f"{label} (expected)", "—" if doc["expected"][key] is None
             else f(doc["expected"][key])] for label, key, f in ESTIMATES]
    if "cost_per_million_tokens" in doc:
        ans.append(["cost per 1M tokens (lower bound)", money(doc["cost_per_million_tokens"])])
    return (head + markdown_table(["memory per rank", "bytes", ""], rows) + "\n"
            + markdown_table(["question", "answer"], ans))


def fit_csv(doc: dict[str, Any]) -> str:
    return csv_text(["key", "value"], [[k, v] for k, v in fit_flat(doc)])


# ── compare ──────────────────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Row:
    label: str
    get: Callable[[dict[str, Any]], Any]
    kind: str
    better: str | None  # "low", "high" or None


def _kv_heads(it: dict[str, Any]) -> str:
    d = it["derived"]
    return (f"{d['kv_heads_per_rank']} (replicated ×{d['kv_replication']})"
            if d["kv_heads_replicated"] else str(d["kv_heads_per_rank"]))


def compare_rows(items: list[dict[str, Any]]) -> list[Row]:
    tp = lambda it: it["parallel"]["tp"]  # noqa: E731
    d = lambda it: it["derived"]  # noqa: E731
    rows = [
        Row("params", lambda it: it["totals"]["params"], "count", None),
        # per rank: one GPU of the fullest pipeline stage, as fit's memory per rank
        Row("weights / rank", lambda it: d(it)["stage_weight_bytes_per_rank"], "bytes", "low"),
        Row("KV heads / rank", _kv_heads, "text", None),
        Row("KV cache / token / rank",
            lambda it: d(it)["stage_kv_cache_bytes_per_token_per_rank"], "bytes", "low"),
        Row("KV cache / sequence / rank",
            lambda it: d(it)["stage_kv_cache_bytes_per_sequence_per_rank"], "bytes", "low"),
        Row("KV cache / batch / rank (paged)", lambda it: d(it)["stage_kv_cache_bytes_per_rank"],
            "bytes", "low"),
        Row("prefill FLOPs", lambda it: d(it)["prefill_flops"], "flops", "low"),
        Row("prefill FLOPs / rank", lambda it: d(it)["stage_prefill_flops_per_rank"], "flops",
            "low"),
        Row("decode FLOPs / token", lambda it: d(it)["decode_flops_per_token"], "flops", "low"),
        Row("all-reduces / layer", lambda it: tp(it)["allreduce_per_layer"], "int", None),
        Row("all-reduce (one)", lambda it: tp(it)["allreduce_bytes"], "bytes", "low"),
        Row("all-reduce / layer", lambda it: tp(it)["allreduce_bytes_per_layer"], "bytes", "low"),
        Row("all-reduce total", lambda it: tp(it)["allreduce_bytes_total"], "bytes", "low"),
        Row("ring traffic / rank", lambda it: tp(it)["ring_bytes_per_rank_total"], "bytes", "low"),
        Row("PP boundary (per crossing)", lambda it: d(it)["pp_boundary_bytes_per_crossing"],
            "bytes", "low"),
        Row("PP boundary total", lambda it: it["parallel"]["pp"]["boundary_bytes_total"],
            "bytes", "low"),
        Row("decode FLOPs / byte read", lambda it: d(it)["decode_arithmetic_intensity"], "float",
            "high"),
    ]
    if items and "fit" in items[0]:
        f = lambda it: it["fit"]  # noqa: E731
        rows += [
            Row("fits", lambda it: f(it)["fits"], "bool", "high"),
            Row("memory / rank", lambda it: f(it)["memory_per_rank"]["total"], "bytes", "low"),
            Row("capacity", lambda it: f(it)["memory_per_rank"]["capacity"], "bytes", None),
            Row("largest batch", lambda it: f(it)["max_batch"], "int", "high"),
            Row("longest context", lambda it: f(it)["max_seq"], "int", "high"),
            Row("smallest tp", lambda it: f(it)["min_tp"], "int", "low"),
            Row("KV tokens that fit", lambda it: f(it)["kv_tokens_fit"], "int", "high"),
            Row("TTFT ≥", lambda it: f(it)["times"]["ttft_s"], "time", "low"),
            Row("ITL ≥", lambda it: f(it)["times"]["itl_s"], "time", "low"),
            Row("tokens/s ≤", lambda it: f(it)["times"]["tokens_per_s"], "rate", "high"),
            Row("prefill bound", lambda it: f(it)["times"]["prefill_bound"], "text", None),
            Row("decode bound", lambda it: f(it)["times"]["decode_bound"], "text", None),
            Row("TTFT expected", lambda it: f(it)["expected"]["ttft_s"], "time", "low"),
            Row("ITL expected", lambda it: f(it)["expected"]["decode_s_per_token"], "time", "low"),
            Row("tokens/s expected", lambda it: f(it)["expected"]["tokens_per_s"], "rate", "high"),
            Row("tokens/s / GPU expected", lambda it: f(it)["expected"]["tokens_per_s_per_gpu"],
                "rate", "high"),
            Row("largest term (decode)", lambda it: f(it)["expected"]["decode_dominant"], "text",
                None),
        ]
        if "cost_per_million_tokens" in items[0]["fit"]:
            fit0 = items[0]["fit"]
            rows.append(Row(f"cost / 1M tokens ≥ (${fit0['price_per_gpu_hour']:g}/GPU-h, "
                            f"{price_from(fit0)})",
                            lambda it: it["fit"]["cost_per_million_tokens"], "money", "low"))
    return rows


def price_from(doc: dict[str, Any]) -> str:
    """Where the price came from, short: --price, or the profile's default."""
    src = doc.get("price_source") or "--price"
    return src if src == "--price" else src.split(":")[0].replace(" profile", "")


def _best(row: Row, values: list[Any]) -> set[int]:
    nums = [(i, float(v)) for i, v in enumerate(values)
            if v is not None and not isinstance(v, str)]
    if row.better is None or len(nums) < 2 or len({v for _, v in nums}) < 2:
        return set()
    target = (min if row.better == "low" else max)(v for _, v in nums)
    return {i for i, v in nums if v == target}


def _ratio(v: Any, first: Any) -> str:
    if v is None or first in (None, 0) or isinstance(v, (str, bool)) or isinstance(first, str):
        return ""
    return f" ×{float(v) / float(first):.3g}"


def print_compare(items: list[dict[str, Any]], console: Any, ratio: bool = False,
                  seq_note: str | None = None) -> None:
    from .layout import split_table

    title = ("compare" + (" (×: ratio to the first column)" if ratio else "")
             + (f" · {seq_note}" if seq_note else ""))
    caption = ("best of each row in bold green; bytes in binary units (GiB = 2³⁰ B)"
               + ("; ≥/≤: roofline bounds, expected: the calibrated model" if items and "fit" in
                  items[0] else ""))
    header = [""]
    for it in items:
        wl, wd = it["workload"], it["widths"]
        dts = wl["dtype"] if len(set(wd.values())) <= 1 else (
            f"w {wd['weights']} act {wd['activations']} KV {wd['kv_cache']}")
        header.append(f"{it['case']}\nB={wl['batch']} T={wl['seq']}\n{dts}"
                      f"\ntp={wl['tp']} pp={wl['pp']}")
    rows: list[list[Any]] = []
    for row in compare_rows(items):
        values = [row.get(it) for it in items]
        best = _best(row, values)
        cells: list[Any] = [Text(row.label, style="bold")]
        for i, v in enumerate(values):
            s = fmt_value(row.kind, v) + (_ratio(v, values[0]) if ratio and i else "")
            cells.append(Text(s, style="bold green" if i in best else ""))
        rows.append(cells)
    split_table(console, header, rows, 1, title, caption, wrap=[True] + [False] * len(items))


def compare_markdown(items: list[dict[str, Any]], ratio: bool = False) -> str:
    header = [""] + [it["case"] for it in items]
    rows = []
    for row in compare_rows(items):
        values = [row.get(it) for it in items]
        best = _best(row, values)
        cells = [row.label]
        for i, v in enumerate(values):
            s = fmt_value(row.kind, v) + (_ratio(v, values[0]) if ratio and i else "")
            cells.append(f"**{s}**" if i in best else s)
        rows.append(cells)
    return markdown_table(header, rows)


def compare_csv(items: list[dict[str, Any]]) -> str:
    """Rows × cases with the exact values (integers stay integers)."""
    header = ["row"] + [it["case"] for it in items]
    rows = [[row.label] + [row.get(it) for it in items] for row in compare_rows(items)]
    return csv_text(header, rows)


# ── sweep ────────────────────────────────────────────────────────────────────────────────────────


# ── sweep ────────────────────────────────────────────────────────────────────────────────────────


def sweep_table(chunks: list[Any], console: Any) -> None:
    """The points as rows; a column with one value on every row goes into the caption, and the
    columns that vary among batch, seq, phase, tp, pp and the dtypes lead every part of a
    table split for a narrow console."""
    from .layout import split_table

    fit = any("fits" in c.columns for c in chunks)
    cols = table_cols(fit)
    rows = [r for c in chunks for r in table_rows(c, cols)]
    header = ["model", *(k for k, _ in cols)]
    same = [i for i in range(1, len(header))
            if len(rows) > 1 and len({r[i] for r in rows}) == 1]
    keep = [i for i in range(len(header)) if i not in same]
    axes = {"batch", "seq", "phase", "tp", "pp", "dtype", "kv_dtype"}
    keys = [i for i in keep if i == 0 or header[i] in axes]
    order = keys + [i for i in keep if i not in keys]
    caption = ("bytes in binary units; times are roofline lower bounds, expected_*: the "
               "calibrated model" if fit else "bytes in binary units")
    if same:
        caption += "; on every row: " + ", ".join(f"{header[i]} {rows[0][i]}" for i in same)
    split_table(console, [header[i] for i in order], [[r[i] for i in order] for r in rows],
                len(keys), "sweep", caption,
                right=[header[i] not in ("model", "phase", "dtype", "kv_dtype") for i in order])
