"""Start-up cost of the planners' commands against the floor of their stack (issue 25).

The floor is `python -c "import typer, pydantic"`. Each command runs interleaved with it, many
times, so machine noise hits all alike; the script prints each one's ratio of medians to the
floor, in wall time and in CPU time (user + sys of the child: steadier on a loaded machine).
The commands run in this checkout's root: `python -m shapecalc` is its code, whatever the
current folder or PYTHONPATH (a copy of this script in another checkout measures that one).
Targets: trace ≤ 1.2×; fit, serve (a 100-request run) and train ≤ 1.5×. `--cold` runs the
commands without their bytecode cached (each run compiles shapecalc again), for the record.

On a machine shared with other work the CPU time of a start-up moves with the load (a loaded
core runs the floor's imports slower too, by another amount than the commands'), so
`--instructions` also counts the instructions each one runs, once, under valgrind's cachegrind
(where valgrind is installed): a count that no load changes, the ratio to compare across runs.

    python benchmarks/bench_startup.py [RUNS] [--cold] [--instructions]
"""

from __future__ import annotations

import compileall
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable
COMMANDS = {
    "floor": ([PY, "-c", "import typer, pydantic"], None),
    "trace": ([PY, "-m", "shapecalc", "trace", "--preset", "llama2-70b", "--json"], 1.2),
    "fit": ([PY, "-m", "shapecalc", "fit", "--preset", "llama3-70b", "--gpu", "h100-sxm",
             "--tp", "4", "--json"], 1.5),
    "serve": ([PY, "-m", "shapecalc", "serve", "--preset", "llama3-8b", "--gpu", "h100-sxm",
               "--rate", "2", "--requests", "100", "--json"], 1.5),
    "train": ([PY, "-m", "shapecalc", "train", "--preset", "llama3-8b", "--json"], 1.5),
}
ROOT = Path(__file__).resolve().parent.parent


def once(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: the child's user + sys)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env, cwd=ROOT)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd[2:])} failed")
    return wall, usage.ru_utime + usage.ru_stime


def instructions(cmd: list[str], env: dict[str, str]) -> int:
    """The instructions the command runs (cachegrind's I refs, the child's alone)."""
    p = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no",
                        "--cachegrind-out-file=/dev/null", *cmd], env=env, cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    refs = re.search(r"I\s+refs:\s+([\d,]+)", p.stderr)
    assert refs is not None, p.stderr
    return int(refs.group(1).replace(",", ""))


def count(env: dict[str, str]) -> None:
    floor = instructions(COMMANDS["floor"][0], env)
    print(f"instructions (cachegrind, one run each): floor {floor / 1e6:.1f} M")
    for name, (cmd, target) in COMMANDS.items():
        if target is not None:
            n = instructions(cmd, env)
            print(f"{name:6} {n / 1e6:7.1f} M  {n / floor:.2f}×  "
                  f"(target ≤ {target}×{'' if n / floor <= target else ': MISSED'})")


def main(runs: int = 30, cold: bool = False, count_too: bool = False) -> None:
    env = dict(os.environ)
    cache = None
    if cold:  # shapecalc's bytecode in a folder emptied before every run
        cache = tempfile.mkdtemp()
        env["PYTHONPYCACHEPREFIX"] = cache
    else:  # typer and pydantic run from compiled bytecode, as pip installs them: so does shapecalc
        compileall.compile_dir(ROOT / "shapecalc", quiet=1)
    for cmd, _ in COMMANDS.values():  # warm the file cache
        once(cmd, env)
    wall: dict[str, list[float]] = {k: [] for k in COMMANDS}
    cpu: dict[str, list[float]] = {k: [] for k in COMMANDS}
    for _ in range(runs):
        for name, (cmd, _) in COMMANDS.items():
            if cache and name != "floor":
                shutil.rmtree(cache, ignore_errors=True)
            w, c = once(cmd, env)
            wall[name].append(w)
            cpu[name].append(c)
    fw, fc = statistics.median(wall["floor"]), statistics.median(cpu["floor"])
    print(f"floor (import typer, pydantic): {fw * 1000:.0f} ms wall, {fc * 1000:.0f} ms CPU "
          f"(median of {runs}{', bytecode not cached' if cold else ''})")
    for name, (cmd, target) in COMMANDS.items():
        if target is None:
            continue
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(f"{name:6} {' '.join(cmd[3:])}\n       wall {w / fw:.2f}×  CPU {c / fc:.2f}×  "
              f"(target ≤ {target}×{'' if c / fc <= target else ': MISSED'})")
    if count_too and shutil.which("valgrind"):
        count(env)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(int(args[0]) if args else 30, "--cold" in sys.argv[1:], "--instructions" in sys.argv[1:])
