"""Start-up cost of `shapecalc trace --preset llama2-70b --json` against the floor of its stack.

The floor is `python -c "import typer, pydantic"`. Both commands run interleaved, many times, in
one process tree, so machine noise hits both alike; the script prints the ratio of medians.
Target: at most about 1.3×.
"""

from __future__ import annotations

import compileall
import statistics
import subprocess
import sys
import time
from pathlib import Path

FLOOR = [sys.executable, "-c", "import typer, pydantic"]
TRACE = [sys.executable, "-m", "shapecalc", "trace", "--preset", "llama2-70b", "--json"]


def once(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main(runs: int = 30) -> None:
    # typer and pydantic run from compiled bytecode, as pip installs them; an editable checkout
    # under PYTHONDONTWRITEBYTECODE would recompile shapecalc on every call, so compile it once.
    compileall.compile_dir(Path(__file__).resolve().parent.parent / "shapecalc", quiet=1)
    once(FLOOR), once(TRACE)  # warm the file cache
    floor, trace = [], []
    for _ in range(runs):
        floor.append(once(FLOOR))
        trace.append(once(TRACE))
    f, t = statistics.median(floor), statistics.median(trace)
    print(f"floor  (import typer, pydantic): {f * 1000:7.1f} ms  (median of {runs})")
    print(f"trace --preset llama2-70b --json: {t * 1000:7.1f} ms")
    print(f"ratio: {t / f:.2f}×  (target ≤ 1.3×)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
