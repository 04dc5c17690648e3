"""Start-up cost of the planners' JSON commands against the floor of their stack.

The floor is `python -c "import typer, pydantic"`. The commands run interleaved with it, many
times, in one process tree, so machine noise hits all alike; the script prints each one's ratio of
medians to the floor. Targets: `trace --preset llama2-70b --json` at most about 1.3× (the ratio
before the foundation refactor: 1.25–1.30×); `fit --preset llama3-70b --gpu h100-sxm --tp 4
--json` at most 2×.
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
FIT = [sys.executable, "-m", "shapecalc", "fit", "--preset", "llama3-70b", "--gpu", "h100-sxm",
       "--tp", "4", "--json"]


def once(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main(runs: int = 30) -> None:
    # typer and pydantic run from compiled bytecode, as pip installs them; an editable checkout
    # under PYTHONDONTWRITEBYTECODE would recompile shapecalc on every call, so compile it once.
    compileall.compile_dir(Path(__file__).resolve().parent.parent / "shapecalc", quiet=1)
    once(FLOOR), once(TRACE), once(FIT)  # warm the file cache
    floor, trace, fit = [], [], []
    for _ in range(runs):
        floor.append(once(FLOOR))
        trace.append(once(TRACE))
        fit.append(once(FIT))
    f, t, g = statistics.median(floor), statistics.median(trace), statistics.median(fit)
    print(f"floor  (import typer, pydantic):                    {f * 1000:7.1f} ms  "
          f"(median of {runs})")
    print(f"trace --preset llama2-70b --json:                   {t * 1000:7.1f} ms  "
          f"ratio {t / f:.2f}×  (target ≤ 1.3×)")
    print(f"fit --preset llama3-70b --gpu h100-sxm --tp 4 --json: {g * 1000:7.1f} ms  "
          f"ratio {g / f:.2f}×  (target ≤ 2×)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
