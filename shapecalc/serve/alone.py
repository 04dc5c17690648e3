"""sim.run's fast path: replicas that never interact, each advanced alone over its own arrivals.

Under round-robin routing with an open loop (arrivals fixed in advance, no closed-loop users)
request k of the arrival order, (arrival, id), goes to replica k mod R whatever the replicas
do, so no replica's run reads another's. The shared loop advances a busy replica whose clock is
c with `until` = the earliest arrival not yet routed, which is the earliest arrival of all
strictly after c (every arrival ≤ c is routed first: an arrival at the very time a step would
start is queued first), and routes a replica's own arrival at t once its clock is ≥ t. Here each
replica makes exactly those calls, in that order, with those arguments (`until` read off the
sorted arrival times), so every float is the same; it skips the heap of every replica's clock
and the rest of the loop per step. A stretch of decodes still stops at every arrival (its
steps' seconds are affine from where it starts: stopping elsewhere would move their last bits).

Least-loaded routing reads every replica's queue, a closed loop's arrivals follow finishes, and
speculative replicas share one seeded stream of draws (specsched.py): those keep the shared loop.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable

from .decoders import Seq
from .scheduler import Replica
from .workload import Request


def independent(router: str, concurrency: int | None, ranks: int, spec: object) -> bool:
    """Whether the replicas' runs do not interact (the fast path is exact)."""
    return router == "round-robin" and concurrency is None and (spec is None or ranks == 1)


def run_alone(reps: list[Replica], reqs: list[Request], seqs: list[Seq | None],
              progress: Callable[[int, int], None] | None) -> None:
    """Each replica over its share of the arrivals (module doc); fills `seqs` by id."""
    order = sorted((r.arrival, r.id) for r in reqs)  # the shared loop's heap order
    times = [t for t, _ in order]
    n, steps = len(reqs), 0

    def step(r: Replica) -> None:
        nonlocal steps
        k = bisect_right(times, r.clock)
        before = (len(r.durs), r.preemptions)
        r.advance(times[k] if k < n else math.inf)
        if (len(r.durs), r.preemptions) == before:
            raise AssertionError("serve: a replica made no progress")
        steps += 1
        if progress is not None and steps % 2000 == 0:
            progress(sum(1 for s in seqs if s is not None and s.finish >= 0), n)

    for idx, r in enumerate(reps):
        for t, i in order[idx::len(reps)]:
            while r.busy and r.clock < t:
                step(r)
            seqs[i] = r.add(reqs[i], t)
        while r.busy:
            step(r)
