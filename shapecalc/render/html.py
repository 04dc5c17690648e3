"""`--html FILE`: a self-contained report page, built from the same dicts as `--json`.

One file, nothing fetched: the style, a small sorting/copying script and the charts (inline SVG)
are in the page (html_parts.py), and no `src`/`href` points anywhere but inside it. Every text
from the user (model names, labels, formulas) goes through `html.escape`.
"""

from __future__ import annotations

from typing import Any

from .html_parts import Cell, bars_svg, charts, esc, page, section, stacked_svg, table
from .trace import breakdown_items
from .units import fmt_value, human_bytes, human_count, human_flops, human_time, plural


# -- trace -----------------------------------------------------------------------------------------
def _shape(s: dict[str, Any]) -> str:
    return f"[{','.join(s['dims'])}] = [{','.join(str(x) for x in s['shape'])}]"


def _part(s: dict[str, Any], kinds: list[dict[str, Any]]) -> str:
    if s["group"] != "block":
        return str(s["group"])
    n = s["repeat"]
    label = f": {kinds[s['kind']]['label']}" if len(kinds) > 1 and s.get("kind") is not None else ""
    return f"block × {n}{label}"


def stage_table(tid: str, stages: list[dict[str, Any]], kinds: list[dict[str, Any]],
                caption: str) -> str:
    rows = []
    for i, s in enumerate(stages):
        flops: Cell
        if s["flops"]:
            formula, flops = s["flops_formula"], (human_flops(s["flops"]), s["flops"])
        elif s["elementwise_flops"]:
            formula = s["elementwise_formula"] + " (elementwise)"
            flops = (human_flops(s["elementwise_flops"]) + " ew", s["elementwise_flops"], "ew")
        else:
            formula, flops = "", ("", 0)
        rows.append([(str(i + 1), i + 1), _part(s, kinds), s["name"], _shape(s), formula, flops,
                     (f"{s['params']:,}" if s["params"] else "", s["params"]),
                     (human_bytes(s["bytes"]), s["bytes"]), s["dtype"], s["note"]])
    return table(tid, ["#", "part", "stage", "shape", "FLOPs formula", "FLOPs", "params", "bytes",
                       "dtype", "note"], rows, numeric={0, 5, 6, 7}, caption=caption,
                 mono={3, 4})


def _ledger_rows(doc: dict[str, Any]) -> list[list[Cell]]:
    """Every number of the totals and the ledgers, with its meaning, as costs/fields.py says."""
    from ..costs.fields import PP_LEDGER, TOTALS, TP_LEDGER

    human = {"flops": human_flops, "elementwise_flops": human_flops, "params": human_count,
             "active_params": human_count}
    rows: list[list[Cell]] = []
    for where, fields, values in (("totals", TOTALS, doc["totals"]),
                                  ("parallel.tp", TP_LEDGER, doc["parallel"]["tp"]),
                                  ("parallel.pp", PP_LEDGER, doc["parallel"]["pp"])):
        for f in fields:
            v = values[f.name]
            if f.type == "int":
                h = human.get(f.name, human_bytes if "bytes" in f.name else lambda _: "")(v)
                rows.append([f"{where}.{f.name}", (f"{v:,}", v), h, f.doc])
            elif f.type in ("bool", "str", "list[int]"):
                shown = " · ".join(f"{x:,}" for x in v) if f.type == "list[int]" else str(v)
                rows.append([f"{where}.{f.name}", shown, "", f.doc])
            elif f.name == "largest_activation":
                rows.append([f"{where}.{f.name}", (f"{v['bytes']:,}", v["bytes"]),
                             f"{human_bytes(v['bytes'])}: {v['name']} {_shape(v)}", f.doc])
    return rows


def trace_title(doc: dict[str, Any]) -> tuple[str, str]:
    m, wl = doc["model"], doc["workload"]
    wd = doc.get("widths") or {}
    dts = wl["dtype"] if len(set(wd.values())) <= 1 else (
        f"weights {wd['weights']}, activations/all-reduce {wd['activations']}, "
        f"KV {wd['kv_cache']}")
    return (f"{m['name']}: {wl['phase']}, B={wl['batch']}, T={wl['seq']}",
            f"dtype {dts} · tp={wl['tp']} pp={wl['pp']} ep={wl.get('ep', 1)} · "
            f"attention FLOPs {wl['attention_flops']} · logits {wl['logits']}")


def trace_html(doc: dict[str, Any]) -> str:
    """`trace --html`: the stages with their formulas, the totals and ledgers, and the charts."""
    m, tot = doc["model"], doc["totals"]
    title, subtitle = trace_title(doc)
    kinds = doc["layers"]["kinds"]
    tp = doc["parallel"]["tp"]
    flops, params, (mem_title, mem_parts, _) = breakdown_items(doc, memory=True)
    figs = [stacked_svg(mem_title + ": weights + KV cache + largest activation", mem_parts)]
    figs += [bars_svg(t, items, unit) for t, items, unit in (flops, params)]
    layers = ", ".join(f"{k['count']} × {k['label']}" for k in kinds)
    summary = (f"<p>{plural(m['n_layers'], 'layer')} ({esc(layers)}), D={m['d_model']:,}, "
               f"H={m['n_heads']}, N_vocab={m['vocab_size']:,}: {tot['params']:,} parameters "
               f"({esc(human_count(tot['params']))}), {tot['flops']:,} matmul FLOPs "
               f"({esc(human_flops(tot['flops']))}), KV cache {tot['kv_cache_bytes']:,} B "
               f"({esc(human_bytes(tot['kv_cache_bytes']))}).</p>")
    sections = [
        section("summary", summary, charts(*figs), id_="summary"),
        section("stages", stage_table(
            "stages", doc["stages"], kinds,
            "block stages are one layer of their kind (× the count in 'part'); FLOPs: matmul, "
            "or elementwise (ew) where a stage has no matmul"), id_="stages"),
    ]
    if "rank_stages" in doc:
        sections.append(section("one tensor-parallel rank's stages", stage_table(
            "rank-stages", doc["rank_stages"], kinds, f"rank 0 of p={tp['degree']}"),
            id_="rank-stages"))
    sections.append(section("totals and parallel ledgers", table(
        "totals", ["key", "value", "", "meaning"], _ledger_rows(doc), numeric={1},
        caption="the keys of trace --json"), id_="totals"))
    sections.append(section("parameters by part", table(
        "params", ["part", "parameters", "", "per layer: attention · FFN · norms"],
        _params_rows(doc), numeric={1}, sortable=False), id_="params"))
    return page(title, subtitle, sections, data=doc)


def _params_rows(doc: dict[str, Any]) -> list[list[Cell]]:
    pb = doc["totals"]["params_breakdown"]
    rows: list[list[Cell]] = [["embedding", (f"{pb['embedding']:,}", pb["embedding"]),
                               human_count(pb["embedding"]), ""]]
    for key, label in (("positions", "position table"), ("embedding_norm", "embedding norm")):
        if pb.get(key):
            rows.append([label, (f"{pb[key]:,}", pb[key]), human_count(pb[key]), ""])
    for k in pb["per_kind"]:
        rows.append([f"{plural(k['count'], 'layer')}: {k['label']}",
                     (f"{k['layers']:,}", k["layers"]),
                     human_count(k["layers"]),
                     f"{k['per_layer']:,} = {k['attention_per_layer']:,} · "
                     f"{k['ffn_per_layer']:,} · {k['norms_per_layer']:,}"])
    rows.append(["final norm", (f"{pb['final_norm']:,}", pb["final_norm"]), "", ""])
    tied = doc["model"]["tie_embeddings"]
    rows.append(["LM head", (f"{pb['lm_head']:,}", pb["lm_head"]), human_count(pb["lm_head"]),
                 "tied to the embedding: counted once" if tied else ""])
    rows.append(["total", (f"{pb['total']:,}", pb["total"]), human_count(pb["total"]), ""])
    return rows


# -- fit -------------------------------------------------------------------------------------------
def fit_html(doc: dict[str, Any], trace_doc: dict[str, Any]) -> str:
    """`fit --html`: the verdict, the memory bar to capacity, the answers, the times, the FLOP and
    parameter breakdowns (of the trace of the same workload) and every key of fit --json."""
    from .plan import ESTIMATES, fit_flat, mem_parts

    wl, mem = doc["workload"], doc["memory_per_rank"]
    verdict = doc.get("verdict") or ("fits" if doc["fits"] else "does not fit")
    title = f"{doc['model']} on {doc['gpu']}: {verdict}"
    subtitle = (f"tp={wl['tp']} pp={wl['pp']} ep={wl.get('ep', 1)} ({doc['gpus']} GPU"
                f"{'s' if doc['gpus'] > 1 else ''}) · B={wl['batch']} T={wl['seq']} · "
                f"{wl['dtype']}" + (f", KV {wl['kv_dtype']}" if wl["kv_dtype"] else ""))
    parts = [(k.replace("_", " "), mem[k]) for k, _ in mem_parts(mem)]
    stage = f" (pipeline stage {doc['pp_stage']}, the fullest)" if wl["pp"] > 1 else ""
    figs = [stacked_svg(f"memory per rank{stage}: {human_bytes(mem['total'])} of "
                        f"{human_bytes(mem['capacity'])}", parts, mem["capacity"])]
    figs += [bars_svg(t + " (prefill of this workload)" if "FLOPs" in t else t, items, unit)
             for t, items, unit in breakdown_items(trace_doc, memory=False)]
    mem_rows: list[list[Cell]] = [[k.replace("_", " "), (f"{mem[k]:,}", mem[k]),
                                   human_bytes(mem[k])]
                                  for k in ("weights", "kv_cache", "state_cache",
                                            "activations", "reserve", "total", "capacity")
                                  if k != "state_cache" or mem.get(k)]
    ans: list[list[Cell]] = [
        ["largest batch", (f"{doc['max_batch']:,}", doc["max_batch"]), f"at T={wl['seq']:,}"],
        ["longest context", (f"{doc['max_seq']:,}", doc["max_seq"]), f"at B={wl['batch']:,}"],
        ["smallest tp", fmt_value("int", doc["min_tp"]), f"at pp={wl['pp']}"],
        ["smallest pp", fmt_value("int", doc["min_pp"]), f"at tp={wl['tp']}"],
        ["KV tokens that fit", (f"{doc['kv_tokens_fit']:,}", doc["kv_tokens_fit"]),
         f"{human_bytes(doc['kv_cache_bytes_per_token_per_rank'])} per token per rank"],
    ]
    tm = doc["times"]
    times = [[ph, *((human_time(tm[f"{p}_{t}_s"]), tm[f"{p}_{t}_s"])
                    for t in ("compute", "memory", "comm")),
              (human_time(tm[total]), tm[total]), str(tm[f"{p}_bound"] or "—")]
             for ph, p, total in (("prefill", "prefill", "prefill_s"),
                                  ("decode (per token)", "decode", "decode_s_per_token"))]
    est_cols = [(f"B={wl['batch']} expected", doc["expected"]), ("bound", doc["lower_bound"])]
    if doc.get("at_max_batch"):
        mx = doc["at_max_batch"]
        est_cols += [(f"B={mx['batch']} (largest) expected", mx["expected"]),
                     ("bound", mx["lower_bound"])]
    est = [[label, *((("—" if d[key] is None else f(d[key])), d[key]) for _, d in est_cols)]
           for label, key, f in ESTIMATES]
    verdict_p = (f'<p>verdict: <span class="{"ok" if doc["fits"] else "bad"}">{esc(verdict)}'
                 "</span></p>")
    notes = "".join(f"<li>{esc(n)}</li>" for n in doc["notes"])
    sections = [
        section("memory", verdict_p, charts(*figs[:1]), table(
            "memory", ["part", "bytes", ""], mem_rows, numeric={1}, sortable=False), id_="memory"),
        section("answers", table("answers", ["question", "answer", "at"], ans, numeric={1},
                                 sortable=False), id_="answers"),
        section("time: roofline lower bounds", table(
            "times", ["phase", "compute", "memory", "communication", "total", "bound"], times,
            numeric={1, 2, 3, 4}, sortable=False,
            caption="max(FLOPs/peak, bytes/bandwidth) + link"), table(
            "estimates", ["", *(c for c, _ in est_cols)], est, numeric={1, 2, 3, 4},
            sortable=False, caption="expected (calibrated model) and roofline bound"),
            id_="times"),
        section("where FLOPs and parameters go", charts(*figs[1:]), id_="breakdowns"),
    ]
    if notes:
        sections.append(section("notes", f'<ul class="notes">{notes}</ul>', id_="notes"))
    sections.append(section("every key of fit --json", table(
        "keys", ["key", "value"], [[k, (_fmt_any(v), v if isinstance(v, (int, float)) else None)]
                                   for k, v in fit_flat(doc)], numeric=set()), id_="keys"))
    return page(title, subtitle, sections, data=doc)


def _fmt_any(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v).lower() if v is not None else "null"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


# -- compare ---------------------------------------------------------------------------------------
def compare_html(items: list[dict[str, Any]], ratio: bool = False) -> str:
    """`compare --html`: one column per case, the best of each row marked."""
    from .plan import _best, _ratio, compare_rows

    header = ["", *(f"{it['case']} · B={it['workload']['batch']} T={it['workload']['seq']} "
                    f"{it['workload']['dtype']} tp={it['workload']['tp']} "
                    f"pp={it['workload']['pp']}" for it in items)]
    rows: list[list[Cell]] = []
    for row in compare_rows(items):
        values = [row.get(it) for it in items]
        best = _best(row, values)
        rows.append([row.label, *((fmt_value(row.kind, v)
                                   + (_ratio(v, values[0]) if ratio and i else ""),
                                   v if isinstance(v, (int, float)) else None,
                                   "best" if i in best else "")
                                  for i, v in enumerate(values))])
    body = table("compare", header, rows, numeric=set(range(1, len(header))), sortable=False,
                 wide=len(items) > 4,
                 caption="best of each row in bold green" + (
                     "; ≥/≤: roofline bounds, expected: the calibrated model"
                     if items and "fit" in items[0] else ""))
    cases = ", ".join(it["case"] for it in items)
    return page(f"compare: {cases}", f"{len(items)} column{'s' if len(items) != 1 else ''}",
                [section("compare", body, id_="compare")], data=items)


# -- sweep -----------------------------------------------------------------------------------------
def sweep_html(chunks: list[Any]) -> str:
    """`sweep --html`: every point a row (the table's columns), sortable by exact values."""
    from .sweep import table_cols

    fit = any("fits" in c.columns for c in chunks)
    cols = table_cols(fit)
    rows: list[list[Cell]] = []
    for c in chunks:
        lists = {k: c.columns[k].tolist() for k, _ in cols}
        for i in range(len(c)):
            rows.append([c.case, *((fmt_value(kind, lists[k][i]),
                                    lists[k][i] if kind not in ("text",) else None)
                                   for k, kind in cols)])
    numeric = {i + 1 for i, (_, kind) in enumerate(cols) if kind not in ("text", "bool")}
    cases = ", ".join(dict.fromkeys(c.case for c in chunks))
    return page(f"sweep: {cases}", plural(len(rows), "point"),
                [section("points", table("sweep", ["model", *(k for k, _ in cols)], rows,
                                         numeric=numeric, wide=True), id_="points")])


def console_html(title: str, subtitle: str, draw: Any, data: Any) -> str:
    """A command's table as a report (serve, train): what `draw(console)` prints, as text in the
    page, with the --json document riding along."""
    import io

    from .console import make_console

    buf = io.StringIO()
    draw(make_console(buf, 120))
    return page(title, subtitle, [section(title, f"<pre>{esc(buf.getvalue())}</pre>")],
                data=data)
