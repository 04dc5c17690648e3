"""The disaggregated parts of `serve`'s tables (--pd, --find-pd): the header's two pools, each
pool's use, the KV transfer, TTFT's parts, and --find-pd's splits."""

from __future__ import annotations

from typing import Any

from .serve import _n, _say, _t, body, print_chart, print_metrics, print_serve
from .units import plural


def print_pd(doc: dict[str, Any], console: Any) -> None:
    """serve's table (render/serve.py print_serve) for a disaggregated run or --find-pd."""
    header(doc, console)
    if doc["command"] == "simulate":
        print_metrics(doc, console)
        pools(doc, console)
        print_chart(doc, console)
    else:
        find_pd(doc, console)


def print_search(doc: dict[str, Any], console: Any) -> None:
    """--find-gpus' table: headed by the two pools when the plan found is disaggregated."""
    if not doc["deployment"].get("pd"):
        print_serve(doc, console)
        return
    header(doc, console)
    body(doc, console)


def _side(p: dict[str, Any]) -> str:
    return (f"{plural(p['replicas'], 'replica')} × (tp={p['tp']}, pp={p['pp']}"
            f"{', ep=' + str(p['ep']) if p['ep'] > 1 else ''})")


def header(doc: dict[str, Any], console: Any) -> None:
    d = doc["deployment"]
    pd = d["pd"]
    _say(console, (str(doc["model"]), "bold"),
         f" on {doc['gpu']}: prefill {_side(pd['prefill'])} + decode {_side(pd['decode'])} = "
         f"{plural(d['gpus'], 'GPU')}, {d['router']}, max_num_seqs={d['max_num_seqs']}, "
         f"max_batched_tokens={d['max_batched_tokens']} ({doc['deployment_is']})")


def pools(doc: dict[str, Any], console: Any) -> None:
    from .layout import split_table

    dis = doc["disaggregation"]
    rows = [[side, str(p["gpus"]), f"{p['busy_fraction']:.0%}", f"{p['iterations']:,}",
             f"{p['queue_mean']:.3g}", f"{p['queue_max']:,}", f"{p['preemptions']:,}"]
            for side, p in (("prefill", dis["prefill"]), ("decode", dis["decode"]))]
    split_table(console, ["pool", "GPUs", "busy", "iterations", "queue mean", "queue max",
                          "preempt"], rows, 1, "pools (disaggregated prefill and decode)")
    cols = ("p50", "p90", "p99", "mean", "max")
    parts = dis["ttft_parts"]
    rows = [[label, *(_t(parts[k][c]) for c in cols)] for k, label in (
        ("prefill_s", "prefill (its queue and prompt)"),
        ("transfer_s", "KV transfer (its link's queue and send)"),
        ("decode_first_s", "decode (its queue and first step)"))]
    split_table(console, ["", *cols], rows, 1, "TTFT's parts",
                wrap=[True] + [False] * len(cols))
    kv = dis["kv_transfer"]
    b, r = kv["bytes"], kv["bytes_per_rank"]
    each = f"{b['min']:,}" if b["min"] == b["max"] else f"{b['min']:,}–{b['max']:,}"
    rank = f"{r['min']:,}" if r["min"] == r["max"] else f"{r['min']:,}–{r['max']:,}"
    _say(console, f"KV transfer: {each} bytes a request ({rank} a rank) over the {kv['link']} at "
         f"{kv['bandwidth_bytes_per_s'] / 1e9:,.4g} GB/s, {kv['when']}")


def find_pd(doc: dict[str, Any], console: Any) -> None:
    from rich.text import Text

    from .layout import split_table

    fp = doc["find_pd"]
    rows = []
    for r in fp["splits"]:
        style = "bold" if r == fp["plan"] else ""
        rows.append([Text(x, style=style) for x in (
            f"{r['prefill_replicas']}:{r['decode_replicas']}",
            f"{r['prefill_gpus']}:{r['decode_gpus']}", str(r["gpus"]),
            "met" if r["slo_met"] else "missed", _t(r["ttft_p99_s"]), _t(r["itl_p99_s"]),
            f"{r['prefill_busy_fraction']:.0%}", f"{r['decode_busy_fraction']:.0%}",
            _n(r["output_tokens_per_s_per_gpu"]), r["why"] or "")])
    split_table(console, ["P:D", "GPUs P:D", "GPUs", "SLO", "TTFT p99", "ITL p99",
                          "prefill busy", "decode busy", "out tok/s/GPU", "why"], rows, 1,
                f"--find-pd splits at {fp['rate']:g} requests/s",
                wrap=[False] * 9 + [True])
    for note in fp["notes"]:
        _say(console, f"note: {note}")
    p = fp["plan"]
    if p is None:
        _say(console, ("no explored P:D split meets the SLO", "red"))
    else:
        _say(console, "plan: ", (plural(p["gpus"], "GPU"), "bold"),
             f" = {p['prefill_replicas']} prefill : {p['decode_replicas']} decode replicas "
             f"({p['prefill_gpus']}:{p['decode_gpus']} GPUs; TTFT p99 {_t(p['ttft_p99_s'])}, "
             f"ITL p99 {_t(p['itl_p99_s'])})")
