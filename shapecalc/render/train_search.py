"""`train --search` as text: the best layouts, one line each, then the failures grouped by
reason (count and an example), and where nothing fits the closest miss."""

from __future__ import annotations

from typing import Any

from .units import human_bytes, money


def _layout(r: dict[str, Any]) -> str:
    return (f"tp={r['tp']} cp={r['cp']} pp={r['pp']} dp={r['dp']} ep={r['ep']} "
            f"v={r['virtual_stages']} b={r['micro_batch']} m={r['grad_accum']} "
            f"zero={r['zero']} recompute={r['recompute']}")


def search_text(doc: dict[str, Any]) -> str:
    out = [f"Layout search: {doc['gpus']} × {doc['gpu']}, global batch {doc['global_batch']} "
           f"sequences of T={doc['seq']} ({doc['tokens_per_step']:,} tokens a step), "
           f"{doc['precision']}, {doc['attention']} attention",
           f"  {doc['candidates']:,} candidates, {doc['fitting']:,} fit"]
    if doc["best"]:
        out.append("best (fastest step that fits):")
    for i, r in enumerate(doc["best"], 1):
        line = (f"  {i}. {_layout(r)}: step {r['step_s']:.4g} s, MFU {100 * r['mfu']:.1f}%, "
                f"{r['tokens_per_s_per_gpu']:,.1f} tokens/s per GPU, peak "
                f"{human_bytes(r['peak_bytes'])}")
        c = r.get("cost")
        if c:
            line += (f", {money(c['per_step'])} a step, {money(c['per_trillion_tokens'])} per "
                     "trillion tokens")
        out.append(line)
    if doc["best"]:
        out.append(f"  (train {doc['best'][0]['train_args']} --global-batch "
                   f"{doc['global_batch']}: the best layout's whole report)")
    if doc["failed"]:
        out.append("do not run or do not fit:")
    for f in doc["failed"]:
        e = f["example"]
        out.append(f"  {f['reason']}: {f['count']:,} (e.g. {_layout_short(e)}: {e['why']})")
    miss = doc.get("closest_miss")
    if miss:
        over = miss["peak_bytes"] - doc["gpu_memory_bytes"]
        out.append(f"nothing fits; closest miss: {_layout(miss)}: peak "
                   f"{human_bytes(miss['peak_bytes'])}, {human_bytes(over)} over")
    elif not doc["best"]:
        out.append("nothing fits")
    return "\n".join(out)


def _layout_short(r: dict[str, Any]) -> str:
    keys = ("tp", "cp", "pp", "dp", "ep", "virtual_stages", "micro_batch", "zero", "recompute")
    short = {"virtual_stages": "v", "micro_batch": "b"}
    return " ".join(f"{short.get(k, k)}={r[k]}" for k in keys if k in r)


def print_search(doc: dict[str, Any], console: Any) -> None:
    console.print(search_text(doc), markup=False, highlight=False, soft_wrap=True)
