"""Points per second of `sweep`'s closed form against one `build_trace` call per point.

Both run here, side by side, on the same grid of llama2-70b points (phase × tp × batch × seq × pp ×
dtype × kv dtype); the trace loop runs on a random sample of the grid (it would take hours on all
of it) and its points are checked against the closed form on the way. Prints points/s of each and
the ratio. Target: at least a million points per second for the vectorised sweep.

    python benchmarks/bench_sweep.py [points-in-the-trace-sample]
"""

from __future__ import annotations

import io
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from shapecalc.costs.closed import ClosedForm
from shapecalc.costs.trace import build_trace
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import Workload
from shapecalc.plan.planning import Case
from shapecalc.plan.sweep import SweepAxes, sweep
from shapecalc.render.sweep import sweep_lines

MODEL = "llama2-70b"
AXES = SweepAxes(
    batch=[2**i for i in range(9)],  # 1..256x2
    seq=list(range(8, 4097, 8)),  # 8..4096+8
    tp=[1, 2, 4, 8],
    pp=[1, 2, 4],
    dtype=["bf16", "fp8"],
    kv_dtype=["bf16", "fp8", "int4"],
    phase=["prefill", "decode"],
)
KEYS = ("flops", "weight_bytes", "kv_cache_bytes", "kv_cache_blocks", "allreduce_bytes_total",
        "ring_bytes_per_rank_total", "weight_bytes_per_rank", "kv_cache_bytes_per_rank",
        "flops_per_rank", "boundary_bytes")


def best_of(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(sample: int = 300) -> None:
    model = load_preset(MODEL)
    case = Case(MODEL, model)
    n = 1
    for v in vars(AXES).values():
        n *= len(v)

    # 1. the whole sweep (grid, fits of the closed form, evaluation), cold then warm
    t0 = time.perf_counter()
    chunk = sweep(case, AXES, {})
    cold = time.perf_counter() - t0
    warm = best_of(lambda: sweep(case, AXES, {}))
    assert len(chunk) == n

    # 2. the closed form alone on the prepared arrays (what a planner's loop calls)
    cf = ClosedForm(model)
    g = np.meshgrid(np.array([0, 1]), np.array(AXES.tp), np.array(AXES.batch),
                    np.array(AXES.seq), np.array(AXES.pp), np.array([16, 8]),
                    np.array([16, 8, 4]), indexing="ij")
    ph, tp, b, t, pp, bits, kv = (x.ravel() for x in g)
    cf.evaluate(b, t, ph, tp, pp, bits, kv)  # fit
    core = best_of(lambda: cf.evaluate(b, t, ph, tp, pp, bits, kv))

    # 3. CSV serialisation of every row (what `sweep --format csv` writes)
    keys = ["case", "model", *chunk.columns]
    buf = io.StringIO()
    t0 = time.perf_counter()
    for block in sweep_lines(chunk, "csv", True, keys):
        buf.write(block)
    csv_s = time.perf_counter() - t0

    # 4. one build_trace per point, on a random sample of the same grid, checked on the way
    rng = random.Random(0)
    idx = rng.sample(range(n), sample)
    cols = chunk.columns
    t0 = time.perf_counter()
    for i in idx:
        wl = Workload(batch=int(cols["batch"][i]), seq=int(cols["seq"][i]),
                      phase=str(cols["phase"][i]), tp=int(cols["tp"][i]), pp=int(cols["pp"][i]),
                      dtype=str(cols["dtype"][i]), kv_dtype=str(cols["kv_dtype"][i]))
        doc = build_trace(model, wl)
        flat = {**doc["totals"], **doc["parallel"]["tp"], **doc["parallel"]["pp"]}
        for k in KEYS:
            assert int(cols[k][i]) == flat[k], (k, i)
    trace_s = time.perf_counter() - t0

    per_trace = sample / trace_s
    print(f"grid: {MODEL}, {n:,} points (phase × tp × batch × seq × pp × dtype × kv dtype)")
    print(f"closed form, evaluation only  : {n / core:14,.0f} points/s  ({core * 1e3:8.1f} ms)")
    print(f"sweep(), warm (grid + columns): {n / warm:14,.0f} points/s  ({warm * 1e3:8.1f} ms)")
    print(f"sweep(), cold (+ fitting)     : {n / cold:14,.0f} points/s  ({cold * 1e3:8.1f} ms)")
    print(f"  + CSV text of every row     : {n / (warm + csv_s):14,.0f} points/s  "
          f"({csv_s * 1e3:8.1f} ms to serialise)")
    print(f"build_trace, one call a point : {per_trace:14,.1f} points/s  "
          f"({sample} sampled points, all equal to the closed form)")
    print(f"ratio (sweep warm / trace)    : {n / warm / per_trace:14,.0f}×")
    print(f"ratio (evaluation / trace)    : {n / core / per_trace:14,.0f}×")
    print("target: ≥ 1,000,000 points/s for the vectorised sweep")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
