"""Rich tables for the trace and the presets. Rendering never computes: it formats a trace dict."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ..costs.fields import PP_LEDGER, TOTALS, TP_LEDGER
from ..model.conventions import FLOPS_MEANING, mixer_tag
from .console import make_console
from .layout import KVRows, width_of
from .output import csv_text, markdown_table
from .units import human_bytes, human_count, human_flops, plural

GROUP_TITLE = {"embedding": "embedding", "block": "block", "head": "head"}


def shape_str(dims: list[str], shape: list[int]) -> str:
    return f"[{','.join(dims)}] = [{','.join(str(x) for x in shape)}]"


def _block_title(s: dict[str, Any], kinds: list[dict[str, Any]]) -> str:
    """`block  × N = 32 layers (one shown)`; with several kinds of layer, one title per kind:
    `block  × 21 layers: sliding window W=4096 (one shown)`."""
    n = s["repeat"]
    if len(kinds) <= 1:
        return f"block  × N = {n} layer{'s' if n != 1 else ''} (one shown)"
    label = kinds[s["kind"]]["label"]
    return f"block  × {n} layer{'s' if n != 1 else ''}: {label} (one shown)"


def _stage_cells(stages: list[dict[str, Any]], kinds: list[dict[str, Any]] | None
                 ) -> list[dict[str, Any] | Text]:
    """Each stage's cells (name, shape, formula, FLOPs, params, bytes, note), with a group's
    title (a Text) before its first stage."""
    out: list[dict[str, Any] | Text] = []
    current = None
    for s in stages:
        if (s["group"], s.get("kind")) != current:
            current = (s["group"], s.get("kind"))
            label = GROUP_TITLE[s["group"]]
            if s["group"] == "block":
                label = _block_title(s, kinds or [])
            out.append(Text(label, style="bold cyan"))
        formula: Text
        value: Text
        if s["flops"]:
            formula, value = Text(s["flops_formula"]), Text(human_flops(s["flops"]))
        elif s["elementwise_flops"]:
            formula = Text(s["elementwise_formula"], style="dim")
            value = Text(human_flops(s["elementwise_flops"]) + " ew", style="dim")
        else:
            formula, value = Text(""), Text("")
        out.append({"name": s["name"], "shape": Text(shape_str(s["dims"], s["shape"])),
                    "formula": formula, "flops": value,
                    "params": Text(f"{s['params']:,}" if s["params"] else ""),
                    "bytes": Text(human_bytes(s["bytes"])), "note": s["note"]})
    return out


def _lines(*parts: str | Text) -> Text:
    """The non-empty parts, one a line."""
    return Text("\n").join(p if isinstance(p, Text) else Text(p) for p in parts
                           if (p.plain if isinstance(p, Text) else p))


def _hanging(*parts: tuple[str | Text, int]) -> Group:
    """Lines indented as given, each wrapping under its own indent (a long stage name or note
    on a narrow console)."""
    return Group(*(Padding(p if isinstance(p, Text) else Text(p), (0, 0, 0, indent))
                   for p, indent in parts if (p.plain if isinstance(p, Text) else p)))


NOTE_ROOM = 16  # the one-line layout is chosen when its note column gets at least this much


def _stage_table(cells: list[dict[str, Any] | Text], title: str, layout: str,
                 notes: bool = True) -> Table:
    """The stage list in one of three layouts, widest first: `one-line` (a column each),
    `two-line` (the formula under the FLOPs, the note under the stage) and `stacked` (the shape
    under the stage, the formula under the FLOPs, the bytes under the params)."""
    t = Table(title=Text(title, style="table.title"), box=box.SIMPLE_HEAD, title_justify="left",
              header_style="bold")  # a name is text, not markup
    if layout == "one-line":
        heads = ("stage", "shape", "FLOPs formula", "FLOPs", "params", "bytes") + (
            ("note",) if notes else ())
    elif layout == "two-line":
        heads = ("stage", "shape", "FLOPs\nformula", "params", "bytes")
    else:
        heads = ("stage\n  shape", "FLOPs\nformula", "params\nbytes")
    for h in heads:
        left = h.startswith(("stage", "shape", "note"))
        t.add_column(h, justify="left" if left else "right",
                     no_wrap=not h.startswith(("stage", "note")),
                     style="dim" if h == "note" else None, overflow="fold")
    for c in cells:
        if isinstance(c, Text):
            t.add_row(c)
            continue
        name = Text("  " + c["name"])
        note = Text(c["note"], style="dim")
        if layout == "one-line":
            row = [name, c["shape"], c["formula"], c["flops"], c["params"], c["bytes"]]
            t.add_row(*row, *([note] if notes else []))
        elif layout == "two-line":
            t.add_row(_hanging((c["name"], 2), (note if notes else "", 4)), c["shape"],
                      _lines(c["flops"], c["formula"]), c["params"], c["bytes"])
        else:
            t.add_row(_hanging((c["name"], 2), (c["shape"], 4), (note if notes else "", 4)),
                      _lines(c["flops"], c["formula"]),
                      Text("\n").join([c["params"], c["bytes"]]))  # bytes always below
    return t


def print_stages(console: Console, stages: list[dict[str, Any]], title: str,
                 kinds: list[dict[str, Any]] | None = None) -> None:
    """The stage list in the widest layout the console holds, else one record per stage."""
    _print_stage_layout(console, _stage_cells(stages, kinds), title)
    if any(not s["flops"] and s["elementwise_flops"] for s in stages):
        console.print(Text(EW_LEGEND, style="dim"))


# the suffix a stage with no matmul shows on its FLOPs, explained under the list
EW_LEGEND = ("ew: elementwise FLOPs (norms, softmax, activations, RoPE, residuals), shown where a "
             "stage has no matmul; totalled apart from the matmul FLOPs")


def _print_stage_layout(console: Console, cells: list[dict[str, Any] | Text], title: str) -> None:
    from .layout import fits, records

    one = _stage_table(cells, title, "one-line", notes=False)
    if width_of(console, one) + NOTE_ROOM <= console.width:
        console.print(_stage_table(cells, title, "one-line"))
        return
    two = _stage_table(cells, title, "two-line", notes=False)
    if fits(console, two):
        console.print(_stage_table(cells, title, "two-line"))
        return
    stacked = _stage_table(cells, title, "stacked")
    if fits(console, stacked, least=True):
        console.print(stacked)
        return
    header = ["stage", "shape", "FLOPs formula", "FLOPs", "params", "bytes", "note"]
    rows: list[list[Any]] = []
    for c in cells:
        if isinstance(c, Text):
            rows.append([c] + [""] * 6)
        else:
            rows.append([c["name"], c["shape"], c["formula"], c["flops"], c["params"],
                         c["bytes"], c["note"]])
    records(console, header, rows, 1, title)


def totals_panel(doc: dict[str, Any], console: Console) -> Any:
    """The totals as a panel (with a console: laid out for its width, layout.kv_panel)."""
    tot = doc["totals"]
    pb = tot["params_breakdown"]
    wl = doc["workload"]
    t = KVRows()
    t.add_row("parameters", f"{tot['params']:,}", human_count(tot["params"]))
    if tot["active_params"] != tot["params"]:
        t.add_row("  active per token", f"{tot['active_params']:,}",
                  f"{human_count(tot['active_params'])}: the k of E routed experts a token uses")
    t.add_row("  embedding", f"{pb['embedding']:,}",
              "shared with the LM head" if doc["model"]["tie_embeddings"] else "")
    if pb["positions"]:  # a learned table
        t.add_row("  position table", f"{pb['positions']:,}", "")
    if pb.get("embedding_norm"):
        t.add_row("  embedding norm", f"{pb['embedding_norm']:,}", "")
    for k in pb["per_kind"]:
        alike = len(pb["per_kind"]) == 1
        t.add_row(
            "  per layer" if alike else f"  per layer, {k['label']} × {k['count']}",
            f"{k['per_layer']:,}",
            f"attention {k['attention_per_layer']:,} · FFN {k['ffn_per_layer']:,} · "
            f"norms {k['norms_per_layer']:,}"
            + (f" · mixer {k['mixer_per_layer']:,}" if k.get("mixer_per_layer") else "")
            + (f" · mHC {k['hyper_per_layer']:,}" if k.get("hyper_per_layer") else "")
            + (f" · compressors {c:,}" if (c := k.get("compressor_per_layer")) else ""),
        )
    t.add_row("  N layers", f"{pb['layers']:,}", "")
    t.add_row("  final norm", f"{pb['final_norm']:,}",
              f"after the mHC head's {pb['hyper_head']:,}" if pb.get("hyper_head") else "")
    t.add_row("  LM head", f"{pb['lm_head']:,}",
              "tied: counted once" if doc["model"]["tie_embeddings"] else "")
    t.add_row(f"matmul FLOPs ({wl['phase']})", f"{tot['flops']:,}", human_flops(tot["flops"]))
    fb = tot["flops_breakdown"]
    t.add_row("", "", " · ".join(f"{k.replace('_', ' ')} {human_flops(v)}"
                                 for k, v in fb.items() if v))
    t.add_row("elementwise FLOPs", f"{tot['elementwise_flops']:,}",
              human_flops(tot["elementwise_flops"]))
    if tot.get("mixer_flops_convention", "none") != "none":  # a model with stateful mixers
        t.add_row("  mixers' FLOPs", c := tot["mixer_flops_convention"], FLOPS_MEANING[c])
    if sel := tot.get("selected_attention"):  # DSA: the convention, and the other one's total
        keys = (f"K_blk={plural(sel['top_blocks'], 'block')} of S_blk={sel['block_size']}"
                if sel.get("top_blocks") else f"K_sel={sel['top_k']}")
        t.add_row("  selected attention", sel["convention"], f"{keys}; "
                  + " · ".join(f"{k} {human_flops(v)}" for k, v in sel["flops"].items()))
    t.add_row(f"weight bytes ({wl['dtype']})", f"{tot['weight_bytes']:,}",
              human_bytes(tot["weight_bytes"]))
    if tot.get("weight_tensors"):  # a quantized format: what its bytes are made of
        parts = tot["weight_bytes_breakdown"]
        t.add_row("", "", tot["weight_format"] + ": " + " · ".join(
            f"{k} {human_bytes(v)}" for k, v in parts.items() if v))
    kvd = wl["kv_dtype"] or wl["dtype"]
    t.add_row(
        f"KV cache ({kvd}, {plural(tot['kv_cache_tokens'], 'token')})",
        f"{tot['kv_cache_bytes']:,}",
        f"{human_bytes(tot['kv_cache_bytes'])} · {tot['kv_cache_bytes_per_token']:,} B per "
        "token = 2·N·H_kv·Dh·bytes",
    )
    if s := tot.get("state_cache_bytes"):  # fixed per sequence, whatever T is
        t.add_row(f"mixer states ({tot['state_cache_convention']})", f"{s:,}", human_bytes(s))
    groups = tot["kv_cache_groups"]
    for g in groups if len(groups) > 1 else []:  # local and global layers hold different T
        kind = (f"W={g['window']:,}" if g["window"] is not None else f"C={g['chunk']:,}"
                if g["chunk"] is not None else "full attention")
        t.add_row(f"  {plural(g['layers'], 'layer')} × {plural(g['tokens'], 'token')} ({kind})",
                  f"{g['bytes']:,}",
                  human_bytes(g["bytes"]))
    t.add_row(
        f"  paged, block {wl['block_size']}",
        plural(tot["kv_cache_blocks"], "block"),
        human_bytes(tot["kv_cache_paged_bytes"]),
    )
    la = tot["largest_activation"]
    t.add_row(
        "largest activation",
        f"{la['bytes']:,}",
        f"{la['name']} {shape_str(la['dims'], la['shape'])} {human_bytes(la['bytes'])}",
    )
    return t.panel("totals", console)


def parallel_panel(doc: dict[str, Any], console: Console) -> Any:
    tp, pp = doc["parallel"]["tp"], doc["parallel"]["pp"]
    t = KVRows()
    p = tp["degree"]
    t.add_row("tensor parallel p", str(p), "" if p > 1 else "one device holds every weight")
    if p > 1:
        kv_note = "replicated (H_kv < p, as vLLM)" if tp["kv_heads_replicated"] else "H_kv/p"
        t.add_row(
            "  heads per rank", f"{tp['heads_per_rank']} q · {tp['kv_heads_per_rank']} kv", kv_note
        )
        t.add_row("  Dff per rank", f"{tp['d_ff_per_rank']:,}", "")
        cols = ", ".join(dict.fromkeys(s["weight"] for s in tp["splits"] if s["split"] == "column"))
        rows = ", ".join(dict.fromkeys(s["weight"] for s in tp["splits"] if s["split"] == "row"))
        t.add_row("  split by column", "", cols)
        t.add_row("  split by row", "", rows + " (→ all-reduce of [B,T,D])")
        t.add_row("  all-reduces per layer", str(tp["allreduce_per_layer"]), "B·T·D·bytes each")
        human = {"bytes": human_bytes, "flops": human_flops}
        for label, key, unit, note in (
            ("one all-reduce", "allreduce_bytes", "bytes", ""),
            ("per layer", "allreduce_bytes_per_layer", "bytes", ""),
            ("over N layers", "allreduce_bytes_total", "bytes", ""),
            ("ring traffic per rank", "ring_bytes_per_rank_total", "bytes",
             " = 2(p−1)/p of the buffers"),
            ("embedding all-reduce", "embedding_allreduce_bytes", "", "vocab-parallel lookup"),
            ("logits all-gather", "logits_allgather_bytes", "", "vocab-parallel LM head"),
            ("weights per rank", "weight_bytes_per_rank", "bytes", ""),
            ("KV cache per rank", "kv_cache_bytes_per_rank", "bytes", ""),
            ("matmul FLOPs per rank", "flops_per_rank", "flops", ""),
        ):
            shown = human[unit](tp[key]) if unit else ""
            t.add_row(f"  {label}", f"{tp[key]:,}", shown + note)
    ep = doc["parallel"]["ep"]
    if ep["moe_layers"]:
        t.add_row("expert parallel ep", str(ep["degree"]), ep["composition"])
        if ep["degree"] > 1:
            t.add_row("  experts per rank", f"{ep['experts_per_rank']:,}",
                      human_bytes(ep["expert_weight_bytes_per_rank"]) + " of expert weights")
            t.add_row("  all-to-all per MoE layer", f"{ep['alltoall_bytes_per_layer']:,}",
                      f"{human_bytes(ep['alltoall_bytes_per_layer'])} if every token goes "
                      f"off-rank; × (ep−1)/ep = {ep['alltoall_bytes_per_layer_expected']:,.0f} "
                      "expected under uniform routing")
    t.add_row("pipeline stages s", str(pp["stages"]), "" if pp["stages"] > 1 else "all N layers")
    if pp["stages"] > 1:
        t.add_row("  layers per stage", " · ".join(str(x) for x in pp["layers_per_stage"]),
                  "remainder before the last stage, as vLLM")
        t.add_row(
            "  boundary activation",
            f"{pp['boundary_bytes']:,}",
            f"{human_bytes(pp['boundary_bytes'])} = B·T·"
            f"{'n_hc·' if doc['model'].get('hc_streams') else ''}D·bytes, at each of "
            f"{pp['boundaries']} boundar{'y' if pp['boundaries'] == 1 else 'ies'}",
        )
        t.add_row(
            "  weights per stage (all ranks)",
            "",
            " · ".join(human_bytes(x) for x in pp["weight_bytes_per_stage"]),
        )
    return t.panel("parallelism", console)


def print_trace(
    doc: dict[str, Any], per_rank: bool = False, console: Console | None = None,
    seq_note: str | None = None,
) -> None:
    console = console or make_console()
    m, wl = doc["model"], doc["workload"]
    stages = doc["stages"]
    wd = doc.get("widths") or {}
    dts = wl["dtype"] if len(set(wd.values())) <= 1 else (
        f"weights {wd['weights']}, activations/all-reduce {wd['activations']}, "
        f"KV {wd['kv_cache']}")
    title = (
        f"{m['name']} · {wl['phase']} · B={wl['batch']} {seq_note or 'T=' + str(wl['seq'])} · {dts}"
        f" · tp={wl['tp']} pp={wl['pp']}" + mixer_tag(doc["totals"])
    )
    if per_rank and "rank_stages" in doc:
        stages = doc["rank_stages"]
        title += " · one rank's stages"
    print_stages(console, stages, title, doc["layers"]["kinds"])
    from .layout import show

    show(console, totals_panel(doc, console), parallel_panel(doc, console),
         breakdown_chart(doc, console=console))
    for n in doc.get("notes", ()):  # how the config was read (inputs/hf.py: notes)
        console.print(Text(f"note: {n}", style="yellow"))


# -- where FLOPs, parameters and memory go --------------------------------------------------------
def _bar_rows(t: Table, title: str, items: list[tuple[str, int]], unit: Any, width: int) -> None:
    total = sum(v for _, v in items) or 1
    t.add_row(Text(title, style="bold cyan"), "", "", "")
    for label, v in items:
        cells = round(v / total * width)
        bar = Text("█" * cells, style="cyan") + Text("·" * (width - cells), style="dim")
        t.add_row(Text("  " + label), bar, unit(v), f"{100 * v / total:5.1f} %")


def breakdown_items(doc: dict[str, Any], memory: bool = True
                    ) -> list[tuple[str, list[tuple[str, int]], Any]]:
    """(title, [(label, value)], unit) of where the matmul FLOPs, the parameters and (with
    `memory`) one device's memory go: the terminal's bars and the HTML report's charts."""
    tot, pb, fb = doc["totals"], doc["totals"]["params_breakdown"], doc["totals"]["flops_breakdown"]
    n = doc["model"]["n_layers"]
    kinds = pb["per_kind"]
    flops = [(k.replace("_", " "), v) for k, v in fb.items()]
    flops.append(("elementwise (apart)", tot["elementwise_flops"]))
    params = [
        ("embedding", pb["embedding"]),
        ("position table", pb["positions"]),
        (f"attention × {n}", sum(k["attention_per_layer"] * k["count"] for k in kinds)),
        (f"FFN × {n}", sum(k["ffn_per_layer"] * k["count"] for k in kinds)),
        ("token mixers", sum(k.get("mixer_per_layer", 0) * k["count"] for k in kinds)),
        ("hyper-connections", sum(k.get("hyper_per_layer", 0) * k["count"] for k in kinds)
         + pb.get("hyper_head", 0)),
        ("norms", sum(k["norms_per_layer"] * k["count"] for k in kinds) + pb["final_norm"]
         + pb.get("embedding_norm", 0)),
        ("LM head", pb["lm_head"]),
    ]
    out = [("where FLOPs go", [x for x in flops if x[1]], human_flops),
           ("where parameters go", [x for x in params if x[1]], human_count)]
    if memory:
        tp = doc["parallel"]["tp"]
        parts = [
            ("weights", tp["weight_bytes_per_rank"]),
            ("KV cache", tp["kv_cache_bytes_per_rank"]),
            ("mixer states", tp.get("state_cache_bytes_per_rank", 0)),
            ("largest activation", tp["largest_activation_bytes_per_rank"]),
        ]
        title = "where one device's memory goes" + (" (per rank)" if tp["degree"] > 1 else "")
        out.append((title, [x for x in parts if x[1]], human_bytes))
    return out


def breakdown_chart(doc: dict[str, Any], width: int = 40, memory: bool = True,
                    console: Console | None = None) -> Any:
    """Bars of where the matmul FLOPs, the parameters and (with `memory`) one device's memory
    go. With a console, the bars shrink to fit its width (and go below 8 cells)."""
    if console is not None:
        from .layout import Deferred, line, width_of

        t = breakdown_chart(doc, width, memory)
        spare = console.width - width_of(console, t)
        if spare >= 0 or width + spare >= 8:
            return breakdown_chart(doc, width + min(spare, 0), memory)
        # too narrow for bars: the label, then `value  share` below it
        rows = list(zip(*(c.cells for c in t.columns), strict=True))

        def lines() -> None:
            for label, _, value, share in rows:
                line(console, label)
                if value:
                    line(console, f"{value}  {share.replace(' ', '')}", 4)

        return Deferred(lines)
    t = Table.grid(padding=(0, 2))
    for _ in range(4):
        t.add_column()
    for title, items, unit in breakdown_items(doc, memory):
        _bar_rows(t, title, items, unit, width)
    return t


# -- trace as Markdown and CSV --------------------------------------------------------------------
STAGE_COLUMNS = ("group", "name", "op", "dims", "shape", "flops_formula", "flops",
                 "elementwise_formula", "elementwise_flops", "params_formula", "params", "bytes",
                 "dtype", "repeat", "note")


def _cells(s: dict[str, Any]) -> list[Any]:
    return [f"[{','.join(map(str, s[c]))}]" if c in ("dims", "shape") else s[c]
            for c in STAGE_COLUMNS]


def trace_csv(doc: dict[str, Any]) -> str:

    return csv_text(list(STAGE_COLUMNS), [_cells(s) for s in doc["stages"]])


def trace_markdown(doc: dict[str, Any]) -> str:

    m, wl, tot = doc["model"], doc["workload"], doc["totals"]
    rows = [[s["name"] + (f" (×{s['repeat']})" if s["repeat"] > 1 else ""),
             shape_str(s["dims"], s["shape"]), s["flops_formula"] if s["flops"] else "",
             f"{s['flops']:,}" if s["flops"] else "", f"{s['params']:,}" if s["params"] else "",
             f"{s['bytes']:,}"] for s in doc["stages"]]
    # every number of the totals and the ledgers, with its meaning, as costs/fields.py declares
    summary = []
    for where, fields, values in (("totals", TOTALS, tot), ("parallel.tp", TP_LEDGER,
                                  doc["parallel"]["tp"]),
                                  ("parallel.pp", PP_LEDGER, doc["parallel"]["pp"])):
        for f in fields:
            v = values[f.name]
            if f.type in ("int", "bool", "list[int]"):
                shown = f"{v:,}" if f.type == "int" else str(v)
            elif f.name == "largest_activation":
                shown = f"{v['bytes']:,} ({v['name']})"
            else:
                continue  # breakdowns and splits: in the JSON
            summary.append([f"{where}.{f.name}", shown, f.doc])
    head = (f"## {m['name']}: {wl['phase']}, B={wl['batch']}, T={wl['seq']}, {wl['dtype']}, "
            f"tp={wl['tp']}, pp={wl['pp']}{mixer_tag(doc['totals'])}\n\n")
    return (head + markdown_table(["stage", "shape", "FLOPs formula", "FLOPs", "params", "bytes"],
                                  rows)
            + "\n" + markdown_table(["key", "value", "meaning"], summary))
