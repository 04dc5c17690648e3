"""`train --search` over the whole space of Llama-3.1-405B on 16,384 H100s (issue 24: ≤ 10 s
CPU), as the command runs it: every framework (the default), then hf alone (--framework hf) for
comparison; a child process per run, its CPU time (user + sys, steadier on a loaded machine than
the wall clock) and wall time, the median of RUNS.

    python benchmarks/bench_train_search.py [RUNS]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CMD = [sys.executable, "-m", "shapecalc", "train", "--preset", "llama3.1-405b", "--seq", "8192",
       "--gpu", "h100-sxm", "--search", "--gpus", "16384", "--global-batch", "2048", "--json"]
TARGET_CPU_S = 10.0


def once(extra: list[str]) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    p = subprocess.Popen(CMD + extra, stdout=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit("train --search failed")
    return wall, usage.ru_utime + usage.ru_stime


def main(runs: int = 3) -> None:
    for what, extra in (("all frameworks", []), ("hf alone", ["--framework", "hf"])):
        got = [once(extra) for _ in range(runs)]
        wall = statistics.median(w for w, _ in got)
        cpu = statistics.median(c for _, c in got)
        print(f"train --search ({what}), Llama-3.1-405B on 16,384 H100s (T=8192, global batch "
              f"2048): CPU (user+sys) {cpu:.2f} s, wall {wall:.2f} s, median of {runs}; target "
              f"≤ {TARGET_CPU_S:g} s CPU: {'met' if cpu <= TARGET_CPU_S else 'NOT met'}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
