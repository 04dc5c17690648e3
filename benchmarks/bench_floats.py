"""render/floats.py's repr_bytes against an older version of it, side by side in one process.

The old one is read from git (`git show REV:shapecalc/render/floats.py`, by default the commit
before the rework of December 2026), the new one is this checkout's. Each array is formatted by
both in turn, many times over (so machine noise hits both alike); the script prints ns per
float of each (the best run, and the median) and the ratio old/new of the best runs, and checks
that both give the same texts. Arrays: 16,384 values of U[0, 0.05); times (1e-4..10 s) and rates
(1..1e6 /s) as a sweep computes them, 16,384 and 5,462 long (a sweep's chunks); 300 values.

    python benchmarks/bench_floats.py [--old REV] [--runs N]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from shapecalc.render import floats  # noqa: E402

OLD_REV = "2f968a9"  # the last commit with the template-loop formatter


def old_module(rev: str) -> types.ModuleType:
    src = subprocess.run(["git", "show", f"{rev}:shapecalc/render/floats.py"], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout
    mod = types.ModuleType("floats_old")
    exec(compile(src, f"{rev}:floats.py", "exec"), mod.__dict__)
    return mod


def arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    n = 16_384
    scale = 10.0 ** rng.integers(-3, 1, n)
    times = rng.integers(1, 10**9, n) * 1e-9 / rng.uniform(0.1, 1, n) * scale
    rates = rng.integers(1, 10**6, n) / rng.uniform(1e-3, 10, n)
    return {
        "U[0,0.05) 16384": rng.random(n) * 0.05,
        "times 16384": times[(times >= 1e-4) & (times < 10)][:n],
        "rates 16384": rates[(rates >= 1) & (rates < 1e6)][:n],
        "times 5462": times[:5462],
        "rates 5462": rates[:5462],
        "times 300": times[:300],
    }


def main() -> None:
    args = sys.argv[1:]
    rev = args[args.index("--old") + 1] if "--old" in args else OLD_REV
    runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 50
    old = old_module(rev)
    print(f"repr_bytes, ns/float (best, median of {runs}); old = {rev}, new = this checkout")
    for name, a in arrays().items():
        want = [s.replace(b"\0", b"") for s in old.repr_bytes(a).tolist()]
        assert [s.replace(b"\0", b"") for s in floats.repr_bytes(a).tolist()] == want, name
        spent: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(runs):
            for label, fn in (("old", old.repr_bytes), ("new", floats.repr_bytes)):
                t = time.perf_counter()
                fn(a)
                spent[label].append((time.perf_counter() - t) / a.size * 1e9)
        o, w = min(spent["old"]), min(spent["new"])
        print(f"  {name:16s} old {o:6.1f} ({statistics.median(spent['old']):6.1f})   "
              f"new {w:6.1f} ({statistics.median(spent['new']):6.1f})   {o / w:4.2f}x")


if __name__ == "__main__":
    main()
