"""Pipeline parallelism as vLLM V1 runs it: s stages, up to s batches in flight.

vLLM V1's engine core (vllm/v1/engine/core.py) sizes a batch queue to the executor's
`max_concurrent_batches` (the pipeline size) and, in `step_with_batch_queue`, schedules a new
batch whenever the queue is not full before it waits for the oldest one; the scheduler
(vllm/v1/core/sched/scheduler.py: `scheduled_req_ids`, "the requests that have been scheduled
and are being executed by the executor") does not schedule a request again while its batch is
in flight. So in steady state the running sequences
ride in m = min(s, sequences) micro-batches, stage i works on one while stage i + 1 works on the
one before, and a sequence gets its next token once its micro-batch has left the last stage.

`schedule` is the schedule itself (micro-batch j enters stage i when stage i is free and its
activations have crossed from stage i − 1; round r + 1 of micro-batch j enters stage 0 when
round r left the last stage). `round_terms` is its steady state in closed form: a round (every
running sequence advancing one token) takes

    P = max(m·τ_max, T)      τ_max = f·(T − X)

where T is one micro-batch's latency through every stage (its compute, memory, all-reduce and
overhead terms, plus X, the seconds its activations take over the s − 1 boundaries, sent while
the stage starts its next micro-batch) and f the share of the layers on the fullest stage
(pp_layers: vLLM's split; the embedding and LM head are counted as spread like the layers).
When m·τ_max ≥ T the fullest stage sets the pace and the others idle for the rest (the bubble);
when T is larger (few sequences, a slow link) every stage waits on the round trip.
"""

from __future__ import annotations

from typing import Any


def schedule(stage_s: list[float], micro: int, link_s: float = 0.0,
             rounds: int = 1) -> list[list[tuple[float, float]]]:
    """(start, end) of each (round·micro + j) micro-batch on each stage, earliest possible:
    stage_s[i] seconds a micro-batch on stage i, link_s each boundary crossing."""
    s = len(stage_s)
    free = [0.0] * s  # when each stage is next free
    done = [0.0] * micro  # when each micro-batch's previous round left the last stage
    out: list[list[tuple[float, float]]] = []
    for _ in range(rounds):
        for j in range(micro):
            ready, row = done[j], []
            for i, t in enumerate(stage_s):
                start = max(ready, free[i])
                free[i] = start + t
                row.append((start, start + t))
                ready = start + t + (link_s if i < s - 1 else 0.0)
            done[j] = row[-1][1]
            out.append(row)
    return out


def bubble(rows: list[list[tuple[float, float]]]) -> float:
    """The idle fraction of the stages over the schedule's span."""
    end = max(r[-1][1] for r in rows)
    busy = sum(e - b for r in rows for b, e in r)
    return 1.0 - busy / (len(rows[0]) * end)


def round_terms(mb: tuple[Any, Any, Any, Any], link_s: float, m: int, f: float
                ) -> tuple[Any, Any, Any, Any]:
    """perf.step_terms of one round from one micro-batch's (`mb`, through all stages; link_s
    of it the boundary crossings): whichever of m·τ_max and the latency T is larger (module
    doc), as (compute, memory, communication, overhead), so step_seconds gives P."""
    c, mem, comm, over = mb
    k = m * f
    if k * (max(c, mem) + comm - link_s + over) < max(c, mem) + comm + over:
        return mb
    return k * c, k * mem, k * (comm - link_s), k * over
