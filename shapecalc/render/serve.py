"""Tables and terminal charts of `shapecalc serve`: percentiles, throughput, goodput, the
KV-cache utilisation and queue length over time, and the searches' results."""

from __future__ import annotations

from typing import Any

from .units import plural

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


def _say(console: Any, *parts: str | tuple[str, str]) -> None:
    """One line of prose (layout.line: wrapped at spaces, numbers whole); a (text, style) part
    is styled. Names are text, never markup (a model named `[red]x`)."""
    from rich.text import Text

    from .layout import line

    line(console, Text.assemble(*parts))


def print_chart(doc: dict[str, Any], console: Any) -> None:
    tl = doc["timeline"]
    end = tl["t_s"][-1] + tl["t_s"][0] if tl["t_s"] else 0.0
    qmax = max(tl["waiting"], default=0.0)
    _say(console, ("over time", "bold"), f" (0 to {_t(end)}, {len(tl['t_s'])} spans, "
         "each column a mean)")
    rows = (("KV cache", tl["kv_utilization"], 1.0, "0–100 %"),
            ("queue", tl["waiting"], qmax, f"0–{qmax:.3g} waiting (mean)"))
    width = min(100, console.width - 14 - max(len(r[3]) for r in rows))  # the line fits
    for label, values, top, scale in rows:
        if width >= 10:
            console.print(f"  {label:8}  {spark(values, top, width)}  {scale}", markup=False,
                          crop=False)
        else:  # narrow: the label and scale, then the row below
            _say(console, f"  {label}  {scale}")
            console.print("    " + spark(values, top, max(1, console.width - 4)),
                          markup=False, crop=False)


def _print_cost(c: dict[str, Any], console: Any) -> None:
    """The deployment's $/hour and what it serves for it (plan/price.py)."""
    from .layout import split_table
    from .units import money as m

    src = c["price_source"] if c["price_source"] == "--price" else c["price_source"].split(":")[0]
    rows = [["deployment, per hour", m(c["per_hour"])],
            ["per 1M input tokens (all of the cost)", m(c["per_million_input_tokens"])],
            ["per 1M output tokens (all of the cost)", m(c["per_million_output_tokens"])],
            ["per request", m(c["per_request"])],
            ["per request within the SLO", m(c["per_request_at_slo"])]]
    split_table(console, ["", "$"], rows, 1, f"cost (${c['price_per_gpu_hour']:g}/GPU-hour × "
                f"{plural(c['gpus'], 'GPU')}, {src})", wrap=[True, False])


def print_metrics(doc: dict[str, Any], console: Any) -> None:
    from .layout import split_table

    cols = ("p50", "p90", "p99", "mean", "max")
    rows: list[list[Any]] = []
    for key, label in (("ttft_s", "TTFT"), ("itl_s", "inter-token"),
                       ("tpot_s", "per output token (request mean)"), ("e2e_s", "end-to-end")):
        rows.append([label, *(_t(doc[key][k]) for k in cols)])
    split_table(console, ["", *cols], rows, 1, "latency", wrap=[True] + [False] * len(cols))
    th = doc["throughput"]
    rows = []
    for k, label in (("requests_per_s", "requests/s"), ("input_tokens_per_s", "input tokens/s"),
                     ("output_tokens_per_s", "output tokens/s")):
        rows.append([label, _n(th[k]), _n(th[k + "_per_gpu"])])
    g = doc["goodput"]
    slo, gs = doc["slo"], doc["goodput"]["slo"]
    if slo["bounds"]:
        e2e = "" if gs.get("e2e_s") is None else f", e2e ≤ {_t(gs['e2e_s'])}"
        rows.append([f"goodput (TTFT ≤ {_t(gs['ttft_s'])}, per-token ≤ {_t(gs['itl_s'])}{e2e})",
                     f"{_n(g['requests_per_s'])} req/s", f"{g['fraction']:.1%} of requests"])
    split_table(console, ["", "total", "per GPU"], rows, 1,
                f"throughput ({plural(doc['deployment']['gpus'], 'GPU')}, {_t(doc['duration_s'])} "
                "simulated)", wrap=[True, False, False])
    cost = doc.get("cost")
    if cost is not None:
        _print_cost(cost, console)
    if doc.get("speculative") is not None:
        from .spec import print_spec

        print_spec(doc["speculative"], console, _t, _n)
    sat = doc["saturated_per_replica"]
    _say(console,
         f"preemptions: {doc['preemptions']:,}   iterations: {doc['iterations']:,}   KV cache: "
         f"{doc['kv_blocks_per_replica']:,} blocks ({doc['kv_tokens_per_replica']:,} tokens) "
         f"{_pool_owner(doc['deployment'])}, mean use {doc['kv_utilization']['mean']:.0%}   "
         "queue: mean "
         f"{doc['queue']['mean']:.3g}, max {doc['queue']['max']:,}")
    pool = doc.get("kv_pool")
    if pool and (len(pool["groups"]) != 1 or pool["groups"][0]["window"] is not None
                 or pool["groups"][0]["chunk"] is not None or pool["state_units_per_sequence"]):
        kinds = ", ".join(
            f"sliding W={g['window']:,}" if g["window"] is not None else
            f"chunked C={g['chunk']:,}" if g["chunk"] is not None else "full"
            for g in pool["groups"])
        states = pool["state_units_per_sequence"] * pool["unit_bytes"]
        _say(console, f"KV cache groups (vLLM's hybrid manager): {kinds or 'none'}"
             + (f"; mixer states {states:,} bytes a running sequence" if states else ""))
    _say(console, f"decode-only ceiling per replica: {_n(sat['output_tokens_per_s'])} output "
         f"tokens/s ({plural(sat['max_decode_batch'], 'sequence')} a step)")
    if slo["bounds"]:
        _say(console, f"SLO at p{slo['percentile']}: " if _legacy(slo) else
             f"SLO{' ' + slo['name'] if slo['name'] else ''}: ",
             ("met", "green") if doc["slo_met"] else ("missed", "red"),
             "" if _legacy(slo) else " (" + ", ".join(_bound(b) for b in doc["slo_bounds"]) + ")")
        for m in doc.get("slo_missed", []):
            _say(console, f"why, {m['phase']}: {m['why']}")


def _legacy(slo: dict[str, Any]) -> bool:
    """Only today's ttft= and itl= (each at p99): the line they always printed."""
    return not slo["name"] and all(b["metric"] in ("ttft", "itl") and b["percentile"] == 99
                                   for b in slo["bounds"])


_LABEL = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "e2e"}


def _bound(b: dict[str, Any]) -> str:
    label = _LABEL[b["metric"]]
    return (f"{label} p{b['percentile']:g} {_t(b['value_s'])} "
            f"{'≤' if b['met'] else '>'} {_t(b['target_s'])}")


def _print_why(frontier: list[dict[str, Any]], console: Any) -> None:
    """Why each candidate missed, at the most replicas it was simulated with (serve/why.py)."""
    last: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in frontier:
        k = (r["tp"], r["pp"], r.get("max_batched_tokens", 0), kind(r).split(" pd=")[0],
             bool(r.get("pd")))
        if not r["slo_met"] and (k not in last or r["replicas"] > last[k]["replicas"]):
            last[k] = r
    for (tp, pp, mbt, _, _), r in last.items():
        fix = f"; {r['meets_with']}" if r.get("meets_with") else ""
        for m in r.get("missed", []):
            _say(console, f"why {plural(r['replicas'], 'replica')} × tp={tp} pp={pp}{kind(r)} "
                 f"(max_batched_tokens={mbt}) missed, {m['phase']}: {m['why']}{fix}")
            fix = ""


def kind(r: dict[str, Any]) -> str:
    """A frontier row's other dimensions: ' ep=8', ' k=3', ' pd=2:1' (serve/search_dims.py)."""
    pd = r.get("pd")
    return ((f" ep={r['ep']}" if r.get("ep", 1) > 1 else "")
            + (f" k={r['spec_k']}" if r.get("spec_k") is not None else "")
            + (f" pd={pd['prefill_replicas']}:{pd['decode_replicas']}" if pd else ""))


def _pool_owner(d: dict[str, Any]) -> str:
    return "an attention rank" if d.get("attention_ranks", 1) > 1 else "a replica"


def _ep_text(d: dict[str, Any]) -> str:
    """', ep=8: 8 attention ranks, DeepEP normal' (nothing without ep)."""
    if d["ep"] <= 1:
        return ""
    extra = (f", imbalance {d['ep_imbalance']:g}" if d.get("ep_imbalance", 1) != 1 else "") + (
        f", {d['redundant_experts']} redundant experts" if d.get("redundant_experts") else "")
    return (f", ep={d['ep']}: {plural(d.get('attention_ranks', 1), 'attention rank')}, DeepEP "
            f"{d.get('ep_mode') or 'normal'}{extra}")


def print_serve(doc: dict[str, Any], console: Any) -> None:
    d = doc["deployment"]
    _say(console, (str(doc["model"]), "bold"),
         f" on {doc['gpu']}: {plural(d['replicas'], 'replica')} × (tp={d['tp']}, pp={d['pp']}"
         f"{_ep_text(d)}) = {plural(d['gpus'], 'GPU')}, "
         f"{d['router']}, max_num_seqs={d['max_num_seqs']}, "
         f"max_batched_tokens={d['max_batched_tokens']} ({doc['deployment_is']})")
    body(doc, console)


def body(doc: dict[str, Any], console: Any) -> None:
    """print_serve below its header line (render/serve_pd.py heads a disaggregated plan)."""
    from rich.text import Text

    from .layout import split_table

    e = doc.get("engine")
    if e is not None:  # the profile the run follows (serve/engines.py), under either header
        _say(console, f"engine {e['profile']}: {e['order']}, {e['capacity']}, attention "
             f"{e['attention']} ({e['engine']})")
    if doc["command"] == "simulate":
        print_metrics(doc, console)
        print_chart(doc, console)
    elif doc["command"] == "find-rate":
        fr = doc["find_rate"]
        slo = doc["slo"]
        if _legacy(slo):  # today's table: TTFT and ITL at p99
            heads = ["TTFT p99", "ITL p99"]
            vals = [[p["ttft_p99_s"], p["itl_p99_s"]] for p in fr["probes"]]
        else:  # each bound's own definition and percentile
            heads = [f"{_LABEL[b['metric']]} p{b['percentile']:g}" for b in slo["bounds"]]
            vals = [p["bounds"] for p in fr["probes"]]
        rows: list[list[Any]] = [
            [f"{p['rate']:.4g}", "met" if p["slo_met"] else "missed", *(_t(x) for x in v),
             _n(p["goodput_requests_per_s"])] for p, v in zip(fr["probes"], vals, strict=True)]
        split_table(console, ["rate (req/s)", "SLO", *heads, "goodput (req/s)"],
                    rows, 1, "--find-rate probes",
                    right=[True, False, *(True for _ in heads), True])
        if fr["rate"] is None:
            _say(console, ("no rate meets the SLO", "red"), f": {fr['reason']}")
        else:
            _say(console, "highest rate within the SLO: ",
                 (f"{fr['rate']:.4g} requests/s", "bold"), f" ({fr['reason']})")
        above = [p for p in fr["probes"] if not p["slo_met"]
                 and (fr["rate"] is None or p["rate"] > fr["rate"])]
        if above:
            p = min(above, key=lambda p: p["rate"])
            for why in p.get("missed", []):
                _say(console, f"why {p['rate']:.4g} requests/s misses: {why}")
    else:
        fg = doc["find_gpus"]
        rows = []
        budgets = len({r.get("max_batched_tokens") for r in fg["frontier"]}) > 1
        old = _legacy(doc["slo"])
        heads = ["TTFT p99", "ITL p99"] if old else [
            f"{_LABEL[b['metric']]} p{b['percentile']:g}" for b in doc["slo"]["bounds"]]
        for r in sorted(fg["frontier"], key=lambda r: (r["gpus"], r["tp"], r["pp"])):
            style = "bold" if r is fg["plan"] or r == fg["plan"] else ""
            mbt = f" mbt={r['max_batched_tokens']}" if budgets else ""
            got: list[float | None] = [r["ttft_p99_s"], r["itl_p99_s"]] if old else r["bounds"]
            rows.append([Text(x, style=style) for x in (
                f"{r['replicas']}× tp={r['tp']} pp={r['pp']}{mbt}{kind(r)}", str(r["replicas"]),
                str(r["gpus"]),
                "met" if r["slo_met"] else "missed", *(_t(v) for v in got),
                _n(r["goodput_requests_per_s"]), _n(r["output_tokens_per_s_per_gpu"]),
                str(r["preemptions"]))])
        split_table(console, ["deployment", "replicas", "GPUs", "SLO", *heads,
                              "goodput (req/s)", "out tok/s/GPU", "preempt"], rows, 1,
                    f"--find-gpus frontier at {fg['rate']:g} requests/s")
        for note in fg["notes"]:
            _say(console, f"note: {note}")
        _print_why(fg["frontier"], console)
        p = fg["plan"]
        if p is None:
            _say(console, ("no explored deployment meets the SLO", "red"))
        else:
            _say(console, "plan: ", (plural(p["gpus"], "GPU"), "bold"),
                 f" = {plural(p['replicas'], 'replica')} × tp={p['tp']} × pp={p['pp']}{kind(p)}"
                 + (f", max_batched_tokens={p['max_batched_tokens']}" if budgets else "")
                 + " (" + ", ".join(f"{h} {_t(v)}" for h, v in zip(
                     heads, [p["ttft_p99_s"], p["itl_p99_s"]] if old else p["bounds"],
                     strict=True)) + ")"
                 + ("" if p.get("cost_per_hour") is None else f", ${p['cost_per_hour']:,.2f} an "
                    "hour"))
