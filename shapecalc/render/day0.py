"""The day-0 documents (reference/day0.py) as tables: the measured totals, each labelled, and the
cache tensor by tensor. Plain data in, text out; nothing is computed here."""

from __future__ import annotations

from typing import Any

from .units import exact_bytes, human_flops, human_time


def _header(doc: dict[str, Any]) -> str:
    w, m, how = doc["workload"], doc["model"], doc["measured_by"]
    return (f"[bold]{m['name']}[/bold] (model_type {m['model_type']}, {m['model_class']}) · "
            f"B={w['batch']} T={w['seq']} {w['dtype']} logits={w['logits']}\n"
            f"[yellow]{how['label']}[/yellow]: transformers' own model on the meta device "
            f"(eager attention, experts {how['experts_implementation']})")


def totals_rows(doc: dict[str, Any]) -> list[tuple[str, str]]:
    t = doc["totals"]
    return [
        ("params", f"{t['params']:,}"),
        ("prefill FLOPs", f"{t['prefill_flops']:,} ({human_flops(t['prefill_flops'])})"),
        ("decode FLOPs (one token on T)", f"{t['decode_flops']:,} "
                                          f"({human_flops(t['decode_flops'])})"),
        ("weight bytes", exact_bytes(t["weight_bytes"])),
        ("KV cache bytes", exact_bytes(t["kv_cache_bytes"])),
        ("state cache bytes", exact_bytes(t["state_cache_bytes"])),
    ]


def print_trace(doc: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    console.print(_header(doc))
    table = Table(title="totals (measured)", title_justify="left")
    table.add_column("total")
    table.add_column("value", justify="right")
    for row in totals_rows(doc):
        table.add_row(*row)
    console.print(table)
    cache = Table(title="cache after the prefill, tensor by tensor, as transformers keeps it",
                  title_justify="left")
    for col in ("tensor", "count", "dtypes", "bytes"):
        cache.add_column(col, justify="right" if col in ("count", "bytes") else "left")
    for p in doc["cache"]:
        cache.add_row(p["part"], str(p["tensors"]), ", ".join(p["dtypes"]),
                      exact_bytes(p["bytes"]))
    console.print(cache)
    console.print("no stages: this model_type is not in shapecalc's table yet, so there are no "
                  "stage formulas, shapes or TP/PP ledger; the totals are transformers' own.")


def print_fit(doc: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    f = doc["fit"]
    console.print(_header(doc))
    verdict = "[green]fits[/green]" if f["fits"] else "[red]does not fit[/red]"
    console.print(f"on one {doc['gpu']}: {verdict} (weights + caches against "
                  f"{exact_bytes(f['usable_bytes'])} usable)")
    table = Table(title="memory and bounds (measured)", title_justify="left")
    table.add_column("item")
    table.add_column("value", justify="right")
    for k, v in (("weights", exact_bytes(f["weight_bytes"])),
                 ("caches (KV + states)", exact_bytes(f["cache_bytes"])),
                 ("caches per sequence", exact_bytes(f["cache_bytes_per_sequence"])),
                 ("weights + caches", exact_bytes(f["total_bytes"])),
                 ("largest batch at T", "—" if f["max_batch"] is None else f"{f['max_batch']:,}"),
                 ("prefill, compute bound", human_time(f["prefill_s_bound"])),
                 ("decode step, memory bound", human_time(f["decode_step_s_bound"]))):
        table.add_row(k, v)
    console.print(table)
    console.print(f"not counted: {f['not_counted']}")


def print_compare(docs: list[dict[str, Any]], console: Any) -> None:
    from rich.table import Table

    table = Table(title="totals side by side", title_justify="left")
    table.add_column("total")
    for d in docs:
        w = d["workload"]
        table.add_column(f"{d['model']['name']}\nB={w['batch']} T={w['seq']} {w['dtype']}",
                         justify="right")
    rows = [totals_rows(d) for d in docs]
    for i, (name, _) in enumerate(rows[0]):
        table.add_row(name, *(r[i][1] for r in rows))
    table.add_row("how", *(d["measured_by"]["label"] for d in docs))
    console.print(table)
