"""Tables and terminal charts of `shapecalc serve`: percentiles, throughput, goodput, the
KV-cache utilisation and queue length over time, and the searches' results."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table

BARS = " ▁▂▃▄▅▆▇█"


def _t(x: float | None) -> str:
    if x is None:
        return "—"
    if x >= 1:
        return f"{x:.3g} s" if x < 100 else f"{x:,.0f} s"
    if x >= 1e-3:
        return f"{x * 1e3:.3g} ms"
    return f"{x * 1e6:.3g} µs"


def _n(x: float | None) -> str:
    return "—" if x is None else (f"{x:,.0f}" if x >= 100 else f"{x:.3g}")


def spark(values: list[float], top: float, width: int) -> str:
    """One row of block characters, `values` resampled to `width` columns (bucket means)."""
    if not values or width < 1:
        return ""
    out = []
    n = len(values)
    for c in range(width):
        lo, hi = c * n // width, max(c * n // width + 1, (c + 1) * n // width)
        v = sum(values[lo:hi]) / (hi - lo)
        k = 0 if top <= 0 else min(len(BARS) - 1, round(v / top * (len(BARS) - 1)))
        out.append(BARS[k])
    return "".join(out)


def print_chart(doc: dict[str, Any], console: Any) -> None:
    tl = doc["timeline"]
    width = max(10, min(100, console.width - 24))
    end = tl["t_s"][-1] + tl["t_s"][0] if tl["t_s"] else 0.0
    qmax = max(tl["waiting"], default=0.0)
    console.print(f"[bold]over time[/bold] (0 … {_t(end)}, {len(tl['t_s'])} spans, "
                  "each column a mean)")
    console.print(f"  KV cache  {spark(tl['kv_utilization'], 1.0, width)}  0–100 %")
    console.print(f"  queue     {spark(tl['waiting'], qmax, width)}  0–{qmax:.3g} waiting (mean)")


def print_metrics(doc: dict[str, Any], console: Any) -> None:
    t = Table(box=box.SIMPLE_HEAD, title="latency")
    for col in ("", "p50", "p90", "p99", "mean", "max"):
        t.add_column(col, justify="left" if not col else "right")
    for key, label in (("ttft_s", "TTFT"), ("itl_s", "inter-token"),
                       ("tpot_s", "per output token (request mean)"), ("e2e_s", "end-to-end")):
        s = doc[key]
        t.add_row(label, *(_t(s[k]) for k in ("p50", "p90", "p99", "mean", "max")))
    console.print(t)
    th = doc["throughput"]
    u = Table(box=box.SIMPLE_HEAD, title=f"throughput ({doc['deployment']['gpus']} GPUs, "
              f"{_t(doc['duration_s'])} simulated)")
    for col in ("", "total", "per GPU"):
        u.add_column(col, justify="left" if not col else "right")
    for k, label in (("requests_per_s", "requests/s"), ("input_tokens_per_s", "input tokens/s"),
                     ("output_tokens_per_s", "output tokens/s")):
        u.add_row(label, _n(th[k]), _n(th[k + "_per_gpu"]))
    g = doc["goodput"]
    slo = doc["slo"]
    if slo["ttft_s"] is not None or slo["itl_s"] is not None:
        u.add_row(f"goodput (TTFT ≤ {_t(slo['ttft_s'])}, per-token ≤ {_t(slo['itl_s'])})",
                  f"{_n(g['requests_per_s'])} req/s", f"{g['fraction']:.1%} of requests")
    console.print(u)
    sat = doc["saturated_per_replica"]
    console.print(
        f"preemptions: {doc['preemptions']:,}   iterations: {doc['iterations']:,}   KV cache: "
        f"{doc['kv_blocks_per_replica']:,} blocks ({doc['kv_tokens_per_replica']:,} tokens) a "
        f"replica, mean use {doc['kv_utilization']['mean']:.0%}   queue: mean "
        f"{doc['queue']['mean']:.3g}, max {doc['queue']['max']:,}")
    console.print(f"decode-only ceiling per replica: {_n(sat['output_tokens_per_s'])} output "
                  f"tokens/s ({sat['max_decode_batch']} sequences a step)")
    if slo["ttft_s"] is not None or slo["itl_s"] is not None:
        verdict = "[green]met[/green]" if doc["slo_met"] else "[red]missed[/red]"
        console.print(f"SLO at p{slo['percentile']}: {verdict}")


def print_serve(doc: dict[str, Any], console: Any) -> None:
    d = doc["deployment"]
    console.print(f"[bold]{doc['model']}[/bold] on {doc['gpu']}: {d['replicas']} × (tp={d['tp']}"
                  f", pp={d['pp']}{', ep=' + str(d['ep']) if d['ep'] > 1 else ''}) = {d['gpus']} "
                  f"GPUs, {d['router']}, max_num_seqs={d['max_num_seqs']}, "
                  f"max_batched_tokens={d['max_batched_tokens']}")
    if doc["command"] == "simulate":
        print_metrics(doc, console)
        print_chart(doc, console)
    elif doc["command"] == "find-rate":
        fr = doc["find_rate"]
        t = Table(box=box.SIMPLE_HEAD, title="--find-rate probes")
        for col in ("rate (req/s)", "SLO", "TTFT p99", "ITL p99", "goodput (req/s)"):
            t.add_column(col, justify="right")
        for p in fr["probes"]:
            t.add_row(f"{p['rate']:.4g}", "met" if p["slo_met"] else "missed",
                      _t(p["ttft_p99_s"]), _t(p["itl_p99_s"]), _n(p["goodput_requests_per_s"]))
        console.print(t)
        if fr["rate"] is None:
            console.print(f"[red]no rate meets the SLO[/red]: {fr['reason']}")
        else:
            console.print(f"highest rate within the SLO: [bold]{fr['rate']:.4g} requests/s[/bold] "
                          f"({fr['reason']})")
    else:
        fg = doc["find_gpus"]
        t = Table(box=box.SIMPLE_HEAD, title=f"--find-gpus frontier at {fg['rate']:g} requests/s")
        for col in ("tp", "pp", "replicas", "GPUs", "SLO", "TTFT p99", "ITL p99",
                    "goodput (req/s)", "out tok/s/GPU", "preempt"):
            t.add_column(col, justify="right")
        for r in sorted(fg["frontier"], key=lambda r: (r["gpus"], r["tp"], r["pp"])):
            mark = "[bold]" if r is fg["plan"] or r == fg["plan"] else ""
            t.add_row(*(mark + x for x in (
                str(r["tp"]), str(r["pp"]), str(r["replicas"]), str(r["gpus"]),
                "met" if r["slo_met"] else "missed", _t(r["ttft_p99_s"]), _t(r["itl_p99_s"]),
                _n(r["goodput_requests_per_s"]), _n(r["output_tokens_per_s_per_gpu"]),
                str(r["preemptions"]))))
        console.print(t)
        for note in fg["notes"]:
            console.print(f"note: {note}")
        p = fg["plan"]
        if p is None:
            console.print("[red]no explored deployment meets the SLO[/red]")
        else:
            console.print(f"plan: [bold]{p['gpus']} GPUs[/bold] = {p['replicas']} replicas × "
                          f"tp={p['tp']} × pp={p['pp']} (TTFT p99 {_t(p['ttft_p99_s'])}, ITL p99 "
                          f"{_t(p['itl_p99_s'])})")
