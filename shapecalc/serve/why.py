"""Why a run misses its SLO, read from the run's own records: for each bound missed, the phase
(prefill, decode, queue) and the cause.

- ITL and TPOT: the iterations whose gaps reach the bound's value. When most of those gaps fall
  in iterations that also ran prefill tokens (Replica.ptoks), the cause is the chunks sharing
  decode steps ("prefill chunks (up to 8,192 tokens a step) share decode steps"); else the
  decode step itself
  (its batch). Gaps across a preemption are the KV cache being full.
- TTFT: the requests at or past the bound's value, their TTFT against their prefill alone on an
  idle replica (cost.prefill(1, prompt)): the rest is queueing and sharing the steps.
- e2e: its TTFT and its decode (TPOT × (output − 1)) at the request that sets the percentile.
Preemptions are named where the run had any (KV blocks full).
"""

from __future__ import annotations

from typing import Any

from ..model.errors import plural
from .decoders import Seq
from .scheduler import Replica
from .slo import LABEL, SLO, tpot


def _t(x: float, digits: int = 3) -> str:
    return f"{x * 1e3:.{digits}g} ms" if x < 1 else f"{x:.{digits}g} s"


def _gaps(reps: list[Replica], v: float) -> tuple[int, int, int, int]:
    """Decode tokens in iterations of at least v seconds: all, those whose iteration ran
    prefill tokens, the largest such prefill, and the preemption gaps of at least v."""
    tok = pre = big = 0
    for rep in reps:
        for d, w, n in zip(rep.durs, rep.toks, rep.ptoks, strict=True):
            if w and d >= v:
                tok += w
                if n:
                    pre += w
                    big = max(big, n)
    over = sum(1 for rep in reps for g in rep.gaps if g >= v)
    return tok, pre, big, over


def _steps(reps: list[Replica], v: float, what: str) -> tuple[str, str]:
    tok, pre, big, over = _gaps(reps, v)
    if over and over * 2 >= tok + over:
        return "decode", f"gaps across preemptions (KV blocks full: {over:,} of them)"
    if pre and pre * 2 >= tok:
        return "prefill", (f"prefill chunks (up to {big:,} tokens a step) share decode steps "
                           f"({pre / tok:.0%} of the {what} at or past it)")
    return "decode", "the decode steps themselves (the batch of sequences each step runs)"


def explain(slo: SLO, rows: list[dict[str, Any]], reps: list[Replica], seqs: list[Seq],
            prefill: Any, preemptions: int) -> list[dict[str, Any]]:
    """Each missed bound (rows: slo.evaluate's) with its phase and why; `prefill(tokens)` is one
    request's prefill alone on an idle replica, s."""
    out = []
    for r in rows:
        if r["met"]:
            continue
        m, v = r["metric"], r["value_s"]
        k = next(k for k in (3, 4, 6, 9) if _t(v, k) != _t(r["target_s"], k))  # 40.1 > 40
        head = f"{LABEL[m]} p{r['percentile']:g} {_t(v, k)} > {_t(r['target_s'], k)}"
        if m == "itl":
            phase, why = _steps(reps, v, "gaps")
        elif m == "tpot":
            slow = [s for s in seqs if (tpot(s) or 0.0) >= v]
            gap = min(((s.finish - s.first) / (s.req.output - 1) for s in slow), default=v)
            phase, why = _steps(reps, gap, "gaps of its slowest requests")
        elif m == "ttft":
            late = [s for s in seqs if s.first - s.req.arrival >= v]
            s = min(late, key=lambda x: x.first - x.req.arrival)
            alone = prefill(s.req.prompt)
            wait = s.first - s.req.arrival - alone
            if wait >= alone:
                phase, why = "queue", (f"{_t(wait)} of it waiting and sharing steps (its "
                                       f"{s.req.prompt:,}-token prefill alone takes "
                                       f"{_t(alone)})")
            else:
                phase, why = "prefill", (f"its {s.req.prompt:,}-token prefill alone takes "
                                         f"{_t(alone)}")
        else:
            late = [s for s in seqs if s.finish - s.req.arrival >= v]
            s = min(late, key=lambda x: x.finish - x.req.arrival)
            first, dec = s.first - s.req.arrival, s.finish - s.first
            phase = "decode" if dec >= first else "queue"
            why = f"TTFT {_t(first)}, then {plural(s.req.output - 1, 'token')} in {_t(dec)}"
        if preemptions and "preemption" not in why:
            why += f"; {preemptions:,} preemption{'' if preemptions == 1 else 's'} (KV blocks full)"
        out.append({**r, "phase": phase, "why": f"{head}: {why}"})
    return out
