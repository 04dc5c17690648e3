"""The NumPy executor against bare np.matmul, on one real-width Llama-2-7B layer at T=128.

One forward step (B=1, T=128 prefill, 1 of 32 layers, float32; embedding and LM head included, as
forward() runs them) is timed through the executor, which records every stage as verify does.
Then the very same GEMMs (the same operand arrays, logged by the executor) are replayed with bare
np.matmul. Prints both GFLOP/s and their ratio (target ≥ 0.8), and the executor's peak memory
(RSS above the start) as a ratio to the bytes of the weights it allocated.

    python benchmarks/bench_executor.py [repeats]
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from shapecalc.inputs.sources import load_preset
from shapecalc.interpret.numeric import step
from shapecalc.interpret.weights import Weights
from shapecalc.model.config import Workload


def rss_peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def rss_now() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def main(repeats: int = 3) -> None:
    model = load_preset("llama2-7b")
    wl = Workload(batch=1, seq=128)
    ids = np.random.default_rng(1).integers(0, model.vocab_size, (1, 128))
    start = rss_now()
    w = Weights(model, 0, np.float32)
    first = step(model, wl, w, ids, layers=1, keep_operands=True)  # makes the weights
    weight_bytes = w.nbytes()
    flops = sum(s.flops for s in first.stages)
    gemms = first.gemms
    del first

    def executor() -> None:
        step(model, wl, w, ids, layers=1)

    def bare() -> None:
        for a, b in gemms:
            np.matmul(a, b)

    t_exec, t_bare = [], []
    for _ in range(repeats):  # interleaved, so that machine noise hits both alike
        for fn, ts in ((executor, t_exec), (bare, t_bare)):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    peak = rss_peak() - start
    g_exec, g_bare = flops / min(t_exec) / 1e9, flops / min(t_bare) / 1e9
    print(f"llama2-7b, 1 layer of 32 at real width, B=1 T=128 prefill, float32, "
          f"{len(gemms)} GEMMs, {flops / 1e9:.1f} GFLOP")
    print(f"executor      {g_exec:8.1f} GFLOP/s  ({min(t_exec) * 1e3:.0f} ms)")
    print(f"bare np.matmul {g_bare:7.1f} GFLOP/s  ({min(t_bare) * 1e3:.0f} ms)")
    print(f"ratio executor / bare matmul: {g_exec / g_bare:.2f}")
    print(f"peak memory {peak / 2**30:.2f} GiB / weights {weight_bytes / 2**30:.2f} GiB = "
          f"{peak / weight_bytes:.2f}×")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
