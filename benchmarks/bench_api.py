"""The Python API against llm-analysis, per phase-point (issue 25: ≥ 10×).

The same points in both tools: Llama-2-70B (llm-analysis: its ModelConfig with the model's
published widths, registered under a name; shapecalc: the llama2-70b preset) on an A100 80 GB
(a100-sxm-80gb / A100-80GB), batch 1..32+1 × seq 128..4096+128 × tp 2,4,8 (3,072 points; every
one fits llm-analysis' memory check). One llm-analysis `infer` call estimates a point's prefill
and its decode: two phase-points. shapecalc's call is the grid form a planner scripts,
`shapecalc.sweep(model, gpu, batch=…, seq=…, tp=…, phase="prefill,decode")`, whose rows (typed
SweepRow objects, memory, roofline and expected times included) are each one phase-point.
Both load their model and GPU once, outside the timing, and run in rounds, interleaved, in CPU
time (time.process_time: steadier than wall time on a loaded machine); the ratio of medians is
printed against the 10× target. A small grid (batch 1..32x2 × seq 128..4096x2 × tp 2,4,8: 216
phase-points) is printed for the record: there a sweep's fixed cost (~7 ms: the closed form
evaluated once per phase, tp and regime, whatever the points) weighs on few points.

llm-analysis runs in its own Python (its pins, transformers 4.31, clash with shapecalc's): this
interpreter if it imports llm_analysis, else a virtual environment that the script makes and
`pip install`s it into (LLMA_VENV, default ~/.cache/shapecalc-bench/llm-analysis), else, when
that cannot be done (no network), the recorded figure below with its date. Its calls run in a
worker process that times itself, one round at a time between shapecalc's rounds.

    python benchmarks/bench_api.py [ROUNDS] [--recorded]   (--recorded: skip llm-analysis)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import shapecalc

TARGET = 10.0
LLMA_VERSION = "0.2.2"
# llm-analysis 0.2.2's `infer` in a loop over GRID (log_level ERROR) on this machine (2 cores,
# shared), the median of 7 rounds interleaved with shapecalc's (which made 106,496 then)
RECORDED = {"date": "2026-12-01", "version": LLMA_VERSION, "phase_points_per_cpu_s": 9_626.0}
GRID = {"batch": list(range(1, 33)), "seq": list(range(128, 4097, 128)), "tp": [2, 4, 8]}
SMALL = {"batch": [1, 2, 4, 8, 16, 32], "seq": [128, 256, 512, 1024, 2048, 4096], "tp": [2, 4, 8]}
VENV = Path(os.environ.get("LLMA_VENV", Path.home() / ".cache/shapecalc-bench/llm-analysis"))

# the worker: llm-analysis' in-process call in a loop; per round it reads a grid as one JSON line
# and answers the CPU seconds the loop took and the phase-points it evaluated
WORKER = """
import json, sys, time
import llm_analysis.config as cfg
from llm_analysis.analysis import infer
cfg.model_configs["llama-2-70b"] = cfg.ModelConfig(
    name="llama-2-70b", num_layers=80, n_head=64, hidden_dim=8192, vocab_size=32000,
    max_seq_len=4096, num_key_value_heads=8, ffn_embed_dim=28672, expansion_ratio=3.5,
    model_type="llama")
def run(grid):
    n = 0
    for tp in grid["tp"]:
        for b in grid["batch"]:
            for s in grid["seq"]:
                infer(model_name="llama-2-70b", gpu_name="a100-sxm-80gb", log_level="ERROR",
                      batch_size_per_gpu=b, seq_len=s, tp_size=tp, num_tokens_to_generate=1)
                n += 2  # its prefill and its decode estimate
    return n
run({"batch": [1], "seq": [128], "tp": [2]})
print("ready", flush=True)
for line in sys.stdin:
    grid = json.loads(line)
    t0 = time.process_time()
    n = run(grid)
    print(json.dumps([time.process_time() - t0, n]), flush=True)
"""


def llm_analysis_python() -> str | None:
    """A Python that imports llm_analysis: this one, else the venv (made and filled on first
    use); None when it cannot be installed."""
    if subprocess.run([sys.executable, "-c", "import llm_analysis"], capture_output=True
                      ).returncode == 0:
        return sys.executable
    py = VENV / "bin" / "python"
    if not py.exists():
        print(f"installing llm-analysis=={LLMA_VERSION} into {VENV} …", flush=True)
        if subprocess.run([sys.executable, "-m", "venv", str(VENV)]).returncode:
            return None
    ok = subprocess.run([str(py), "-c", "import llm_analysis"], capture_output=True)
    if ok.returncode and subprocess.run(
            [str(py), "-m", "pip", "install", "-q", f"llm-analysis=={LLMA_VERSION}"]).returncode:
        return None
    return str(py)


def shapecalc_round(model: shapecalc.Model, gpu: shapecalc.GPU, grid: dict) -> tuple[float, int]:
    """CPU seconds and phase-points of one sweep over the grid, both phases."""
    t0 = time.process_time()
    rows = list(shapecalc.sweep(model, gpu, batch=grid["batch"], seq=grid["seq"], tp=grid["tp"],
                                phase="prefill,decode"))
    return time.process_time() - t0, len(rows)


def measure(rounds: int, worker: subprocess.Popen | None, grid: dict) -> tuple[float, float | None]:
    """Phase-points per CPU-second of shapecalc and of llm-analysis (None: not run), medians of
    interleaved rounds."""
    model, gpu = shapecalc.load_model("llama2-70b"), shapecalc.load_gpu("A100-80GB")
    shapecalc_round(model, gpu, grid)  # the closed form's fits, as a planner's first call
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(rounds):
        cpu, n = shapecalc_round(model, gpu, grid)
        ours.append(n / cpu)
        if worker is not None:
            assert worker.stdin is not None and worker.stdout is not None
            worker.stdin.write(json.dumps(grid) + "\n")
            worker.stdin.flush()
            cpu, n = json.loads(worker.stdout.readline())
            theirs.append(n / cpu)
    return statistics.median(ours), statistics.median(theirs) if theirs else None


def main(rounds: int = 7, recorded: bool = False) -> None:
    py = None if recorded else llm_analysis_python()
    worker = None
    if py is not None:
        worker = subprocess.Popen([py, "-c", WORKER], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert worker.stdout is not None
        if worker.stdout.readline().strip() != "ready":
            raise SystemExit("the llm-analysis worker did not start")
    n = len(GRID["batch"]) * len(GRID["seq"]) * len(GRID["tp"])
    print(f"llama2-70b on A100 80 GB; {n:,} points × (prefill, decode) = {2 * n:,} phase-points; "
          f"CPU time, medians of {rounds} interleaved rounds")
    for label, grid in (("grid", GRID), ("small grid, for the record", SMALL)):
        ours, theirs = measure(rounds, worker, grid)
        if theirs is None:
            theirs = RECORDED["phase_points_per_cpu_s"]
            src = (f"recorded {RECORDED['date']}, llm-analysis {RECORDED['version']}; not "
                   "run now")
        else:
            src = "measured now, interleaved"
        pts = len(grid["batch"]) * len(grid["seq"]) * len(grid["tp"]) * 2
        ratio = ours / theirs
        verdict = ("" if grid is not GRID else
                   f"  (target ≥ {TARGET:g}×{'' if ratio >= TARGET else ': MISSED'})")
        print(f"{label} ({pts:,} phase-points)")
        print(f"  shapecalc.sweep        : {ours:10,.0f} phase-points per CPU-s")
        print(f"  llm-analysis infer loop: {theirs:10,.0f} phase-points per CPU-s ({src})")
        print(f"  ratio per phase-point  : {ratio:10.2f}×{verdict}")
    if worker is not None:
        assert worker.stdin is not None
        worker.stdin.close()
        worker.wait()


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(int(args[0]) if args else 7, "--recorded" in sys.argv[1:])
