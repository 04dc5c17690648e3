"""`train --search` as text: the best layouts, one line each, then the failures grouped by
reason (count and an example), and where nothing fits the closest miss."""

from __future__ import annotations

from typing import Any

from .units import human_bytes, money, plural

SHOWN_WHYS = 6  # a framework failure's distinct reasons printed (the JSON has them all)


def _layout(r: dict[str, Any]) -> str:
    fw = f"{r['framework']} " if "framework" in r else ""
    return (fw + f"tp={r['tp']} cp={r['cp']} pp={r['pp']} dp={r['dp']} ep={r['ep']} "
            f"v={r['virtual_stages']} b={r['micro_batch']} m={r['grad_accum']} "
            f"zero={r['zero']} recompute={r['recompute']}")


def search_text(doc: dict[str, Any]) -> str:
    out = [f"Layout search: {doc['gpus']:,} × {doc['gpu']}, global batch "
           f"{plural(doc['global_batch'], 'sequence')} of T={doc['seq']} "
           f"({doc['tokens_per_step']:,} tokens a step), "
           f"{doc['precision']}{', fp8 ' + doc['fp8'] if doc.get('fp8') else ''}, "
           f"{doc['attention']} attention; frameworks: "
           f"{', '.join(doc['space'].get('frameworks', ['hf']))}",
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
    per = doc.get("best_by_framework") or []
    if len(per) > 1:
        out.append("fastest under each framework:")
        out += [f"  {_layout(r)}: step {r['step_s']:.4g} s, peak {human_bytes(r['peak_bytes'])}"
                for r in per]
    if doc["failed"]:
        out.append("do not run or do not fit:")
    for f in doc["failed"]:
        e = f["example"]
        out.append(f"  {f['reason']}: {f['count']:,} (e.g. {_layout_short(e)}: {e['why']})")
        whys = f.get("whys") or []
        out += [f"    {w['count']:,}: {w['why']}" for w in whys[:SHOWN_WHYS]]
        if len(whys) > SHOWN_WHYS:
            out.append(f"    … {len(whys) - SHOWN_WHYS} more (--json: failed[].whys)")
    miss = doc.get("closest_miss")
    if miss:
        over = miss["peak_bytes"] - doc["gpu_memory_bytes"]
        out.append(f"nothing fits; closest miss: {_layout(miss)}: peak "
                   f"{human_bytes(miss['peak_bytes'])}, {human_bytes(over)} over")
    elif not doc["best"]:
        out.append("nothing fits")
    return "\n".join(out)


def _layout_short(r: dict[str, Any]) -> str:
    keys = ("framework", "tp", "cp", "pp", "dp", "ep", "virtual_stages", "micro_batch", "zero",
            "recompute")
    short = {"virtual_stages": "v", "micro_batch": "b", "framework": "fw"}
    return " ".join(f"{short.get(k, k)}={r[k]}" for k in keys if k in r)


def print_search(doc: dict[str, Any], console: Any) -> None:
    console.print(search_text(doc), markup=False, highlight=False, soft_wrap=True)
