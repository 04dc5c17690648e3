"""`sweep` side by side: its closed form, its output through the CLI, and one `build_trace` a point.

On one grid of llama2-70b points (phase × tp × batch × seq × pp × dtype × kv dtype: batch
1..256x2, seq 8..4096+8, tp 1,2,4,8, pp 1,2,4, bf16/fp8, bf16/fp8/int4 KV, both phases: 663,552
points), in one run:

- the closed form alone on prepared arrays, and `SweepGrid.chunks` (grid + evaluation, chunked
  as the CLI does), in points/s;
- `shapecalc sweep … --format csv` and `--format jsonl` through the real CLI path (`main()`, in
  this process, closed forms already fitted; rows written to /dev/null), in rows/s;
- the CSV command again in a fresh Python process: wall time (start-up and fitting included) and
  peak memory (VmHWM); and with `--gpu H100-SXM` (the memory, roofline and expected-time
  columns), in rows per CPU-second (the child's user + sys time, the better of two runs; without
  cached bytecode, e.g. PYTHONDONTWRITEBYTECODE=1 on a fresh checkout, compiling the modules
  adds ~0.1–0.2 CPU-s);
- one build_trace call a point, on a random sample of the grid (it would take hours on all of
  it), each point checked against the closed form on the way.

Targets: ≥ 1,000,000 points/s for the vectorised sweep; CSV written at ≥ 500,000 rows/s with a
peak under 300 MiB; with --gpu, CSV at ≥ 500,000 rows per CPU-second.

    python benchmarks/bench_sweep.py [points-in-the-trace-sample]
"""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from shapecalc.cli import main as cli_main
from shapecalc.costs.closed import ClosedForm
from shapecalc.costs.grid import evaluate
from shapecalc.costs.trace import build_trace
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import Workload
from shapecalc.plan.cases import Case
from shapecalc.plan.sweep import SweepAxes, SweepGrid, sweep

ROOT = Path(__file__).resolve().parent.parent
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
ARGV = ["sweep", MODEL, "--batch", "1..256x2", "--seq", "8..4096+8", "--tp", "1,2,4,8",
        "--pp", "1,2,4", "--dtype", "bf16,fp8", "--kv-dtype", "bf16,fp8,int4",
        "--phase", "prefill,decode"]
KEYS = ("flops", "weight_bytes", "kv_cache_bytes", "kv_cache_blocks", "allreduce_bytes_total",
        "ring_bytes_per_rank_total", "weight_bytes_per_rank", "kv_cache_bytes_per_rank",
        "flops_per_rank", "boundary_bytes")
TARGET_ROWS_S = 500_000
GPU = "H100-SXM"
# sha256 of that CSV (the --gpu grid) written by main at e070197, before sweepfast's changes
# (58a8f762… at 77d5fcd until 9bed317 priced each row's tp/pp across nodes by the topology)
GPU_CSV_SHA256 = "9ebc4384b94afc1dc9cdc8ac73504cd4907cb3b3fc0d9eb0e9ab8c369b078f51"
GPU_CSV_DATE = "2026-12-01"
TARGET_MIB = 300

# the CSV command in a fresh process, which reports its own peak memory (VmHWM) on exit
CHILD = """
import atexit, os, runpy, sys
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            os.write(int(os.environ["HWM_FD"]), line.split()[1].encode())
atexit.register(hwm)
sys.argv = ["shapecalc", *sys.argv[1:]]
runpy.run_module("shapecalc", run_name="__main__")
"""


def best_of(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def run_cli(argv: list[str]) -> None:
    """`shapecalc ARGV` in this process, stdout to /dev/null."""
    saved_argv, saved_out = sys.argv, sys.stdout
    with open(os.devnull, "w", encoding="utf-8") as null:
        sys.argv, sys.stdout = ["shapecalc", *argv], null
        try:
            cli_main()
        except SystemExit as e:
            if e.code:
                raise RuntimeError(f"shapecalc {' '.join(argv)}: exit {e.code}") from None
        finally:
            sys.argv, sys.stdout = saved_argv, saved_out


def fresh_process(argv: list[str], ok: tuple[int, ...] = (0,)) -> tuple[float, int, float]:
    """Wall seconds, peak KiB and CPU seconds (user + sys, from the child's rusage) of
    `shapecalc ARGV > /dev/null` in a new Python process."""
    r, w = os.pipe()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HWM_FD": str(w)}
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as null:
        p = subprocess.Popen([sys.executable, "-c", CHILD, *argv], stdout=null, env=env,
                             pass_fds=(w,), cwd=ROOT)
        os.close(w)
        _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    with os.fdopen(r, "rb") as f:
        kib = int(f.read() or 0)
    code = os.waitstatus_to_exitcode(status)
    if code not in ok:
        raise RuntimeError(f"shapecalc {' '.join(argv)}: exit {code}")
    return wall, kib, usage.ru_utime + usage.ru_stime


def main(sample: int = 300) -> None:
    model = load_preset(MODEL)
    case = Case(MODEL, model)
    n = 1
    for v in vars(AXES).values():
        n *= len(v)

    # 1. the sweep, chunked as the CLI runs it (grid, closed-form fits, evaluation), cold, warm
    def chunked() -> int:
        return sum(len(c) for c in SweepGrid(case, AXES, {}).chunks())

    t0 = time.perf_counter()
    assert chunked() == n
    cold = time.perf_counter() - t0
    warm = best_of(chunked)

    # 2. the closed form alone on the prepared arrays (what a planner's loop calls)
    cf = ClosedForm(model)
    g = np.meshgrid(np.array([0, 1]), np.array(AXES.tp), np.array(AXES.batch),
                    np.array(AXES.seq), np.array(AXES.pp), np.array([16, 8]),
                    np.array([16, 8, 4]), indexing="ij")
    ph, tp, b, t, pp, bits, kv = (x.ravel() for x in g)
    evaluate(cf, b, t, ph, tp, pp, bits, kv)  # the regimes
    core = best_of(lambda: evaluate(cf, b, t, ph, tp, pp, bits, kv))

    # 3. the CLI path, in this process: parse, grid, evaluate and write every row
    csv_s = best_of(lambda: run_cli([*ARGV, "--format", "csv"]), 2)
    jsonl_s = best_of(lambda: run_cli([*ARGV, "--format", "jsonl"]), 2)

    # 4. the CSV command in a fresh process: start-up and fits included, and its peak memory
    wall, kib, _ = fresh_process([*ARGV, "--format", "csv"])
    mib = kib / 1024
    # 4b. the same with --gpu H100-SXM (the fit, roofline and expected columns), in CPU seconds
    # (user + sys: the machine may be shared); exit 1 is the verdict that no row fits
    gpu_cpu = min(fresh_process([*ARGV, "--gpu", GPU, "--format", "csv"], (0, 1))[2]
                  for _ in range(2))
    # the same bytes as before the speed-up (render/floats.py, the plan shared by both phases)
    digest = hashlib.sha256(subprocess.run(
        [sys.executable, "-m", "shapecalc", *ARGV, "--gpu", GPU, "--format", "csv"],
        capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT).stdout
    ).hexdigest()

    # 5. one build_trace per point, on a random sample of the same grid, checked on the way
    chunk = sweep(case, AXES, {})
    assert len(chunk) == n
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
    print(f"closed form, evaluation only   : {n / core:12,.0f} points/s  ({core * 1e3:7.0f} ms)")
    print(f"sweep, chunked, warm           : {n / warm:12,.0f} points/s  ({warm * 1e3:7.0f} ms)")
    print(f"sweep, chunked, cold (+ fits)  : {n / cold:12,.0f} points/s  ({cold * 1e3:7.0f} ms)")
    print(f"CLI --format csv   (in process): {n / csv_s:12,.0f} rows/s    ({csv_s * 1e3:7.0f} ms)"
          f"   {n / csv_s / TARGET_ROWS_S:5.2f}× the {TARGET_ROWS_S:,} rows/s target")
    print(f"CLI --format jsonl (in process): {n / jsonl_s:12,.0f} rows/s    "
          f"({jsonl_s * 1e3:7.0f} ms)")
    print(f"CLI --format csv (new process) : {n / wall:12,.0f} rows/s    ({wall * 1e3:7.0f} ms,"
          " start-up and fits included)")
    print(f"CLI --format csv --gpu {GPU} (new process): {n / gpu_cpu:,.0f} rows per CPU-second "
          f"({gpu_cpu:.2f} CPU-s, user + sys, start-up and fits included)   "
          f"{n / gpu_cpu / TARGET_ROWS_S:5.2f}× the {TARGET_ROWS_S:,} rows/CPU-s target")
    print(f"  its output's sha256          : {digest[:16]}…  "
          + ("the bytes recorded before the speed-up" if digest == GPU_CSV_SHA256 else
             f"not the {GPU_CSV_SHA256[:16]}… recorded on {GPU_CSV_DATE} (the numbers changed?)"))
    print(f"  peak memory (VmHWM)          : {mib:12,.0f} MiB       "
          f"{TARGET_MIB / mib:5.2f}× under the {TARGET_MIB} MiB bound")
    print(f"build_trace, one call a point  : {per_trace:12,.1f} points/s  "
          f"({sample} sampled points, all equal to the closed form)")
    print(f"ratio (sweep warm / trace)     : {n / warm / per_trace:12,.0f}×")
    print(f"ratio (evaluation / trace)     : {n / core / per_trace:12,.0f}×")
    print(f"targets: ≥ 1,000,000 points/s for the vectorised sweep; CSV ≥ {TARGET_ROWS_S:,} "
          f"rows/s, peak < {TARGET_MIB} MiB")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
