"""Why a disaggregated run misses its SLO, in why.py's terms (metric, percentile, value,
target, phase, why) for --find-gpus' frontier: each missed bound of sim.metrics, its phase the
pool (or the transfer) that takes the most of it at its percentile.

- TTFT: its parts (disagg.metrics' ttft_parts: the prefill pool's queue and prompt, the KV
  transfer, the decode pool's queue and first step), the largest at the bound's percentile
  (p99 where the parts are not summarised at it): phase prefill, transfer or decode;
- ITL, TPOT: the decode pool's steps (phase decode), its busy fraction;
- e2e: its TTFT's largest part against the decode (phase decode when the decode pool is the
  busier).
"""

from __future__ import annotations

from typing import Any

from .slo import LABEL, SLO

WHERE = {"prefill": "the prefill pool (its queue and prompts)",
         "transfer": "the KV transfer (its link's queue and send)",
         "decode": "the decode pool (its queue for blocks and first step)"}


def _t(x: float) -> str:
    return f"{x * 1e3:.4g} ms" if x < 1 else f"{x:.4g} s"


def missed(m: dict[str, Any], slo: SLO) -> list[dict[str, Any]]:
    dis = m["disaggregation"]
    parts = dis["ttft_parts"]
    busy = {side: dis[side]["busy_fraction"] for side in ("prefill", "decode")}
    out = []
    for b in m["slo_bounds"]:
        if b["met"]:
            continue
        q = f"p{b['percentile']:g}"
        head = f"{LABEL[b['metric']]} {q} {_t(b['value_s'])} > {_t(b['target_s'])}"
        if b["metric"] in ("ttft", "e2e"):
            at = q if q in parts["prefill_s"] else "p99"
            name, v = max((("prefill", parts["prefill_s"][at] or 0.0),
                           ("transfer", parts["transfer_s"][at] or 0.0),
                           ("decode", parts["decode_first_s"][at] or 0.0)), key=lambda x: x[1])
            if b["metric"] == "e2e" and busy["decode"] >= busy["prefill"]:
                name = "decode"
            side = "prefill" if name == "transfer" else name
            why = (f"{head}: {WHERE[name]} takes {_t(v)} of its TTFT ({at})"
                   + ("" if name == "transfer" else f", {busy[side]:.0%} busy"))
            phase = name
        else:
            phase = "decode"
            why = f"{head}: the decode pool's steps ({busy['decode']:.0%} busy)"
        pre = dis["decode"]["preemptions"]
        if pre:
            why += f"; {pre:,} preemption{'' if pre == 1 else 's'} (KV blocks full)"
        out.append({"metric": b["metric"], "percentile": b["percentile"],
                    "value_s": b["value_s"], "target_s": b["target_s"], "phase": phase,
                    "why": why})
    return out
