"""Shared fixtures, and what makes the suite the same on every machine.

- Hypothesis runs under the `ci` profile: derandomized (a fixed seed per test, so every run draws
  the same examples), no example database, no deadline and no timing health check (a loaded
  machine is slower, not wrong). `--hypothesis-profile dev` (or HYPOTHESIS_PROFILE=dev) draws fresh
  examples instead.
- The default run (`python3 -m pytest -q`) is spread over one pytest-xdist worker per CPU (at most
  MAX_WORKERS) where xdist is installed; a run of files or node ids stays in one process. So no
  test may share a file, folder, environment variable or module-level state with another one that
  changes it: each writes under its own tmp_path and sets variables with monkeypatch.
- verify's memory: its default budget is a constant (check/budget.DEFAULT_BUDGET), and for every
  test not marked `slow` the machine's available memory reads as that budget, so no default test
  plans, or refuses, by the free memory of the machine it runs on. `slow` tests (full-width verify
  of the largest presets: `pytest -m slow`) see the real machine.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", derandomize=True, database=None, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", derandomize=False, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

MAX_WORKERS = 4  # each worker collects the whole suite (~10 s of CPU) and holds its own caches


def _workers(config: pytest.Config) -> int:
    """How many xdist workers a run gets when it names none: one per CPU this process may use
    (at most MAX_WORKERS), for a run of the suite or of folders; 0 (in-process) for a run of
    files or node ids (`pytest tests/test_x.py::test_y` starts no workers), with --pdb, with -s,
    or on one CPU."""
    if config.getoption("usepdb") or config.getoption("capture") == "no":
        return 0
    here = config.invocation_params.dir
    if not all("::" not in a and (here / a).is_dir() for a in config.args):
        return 0
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    n = min(cpus or 1, MAX_WORKERS)
    return n if n > 1 else 0


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """The default run is parallel where pytest-xdist is installed (`.[test]` installs it): as if
    `-n N` were given, N by _workers. An explicit -n/--dist/--tx wins; `-p no:xdist` or `-n 0`
    runs everything in this one process. Runs before xdist's own hook (conftests register after
    plugins, and among tryfirst hooks the later registered runs first)."""
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    opt = config.option
    if opt.numprocesses is not None or opt.dist != "no" or opt.tx:
        return
    n = _workers(config)
    if n:
        opt.numprocesses = n


@pytest.fixture(autouse=True)
def pinned_memory(request, monkeypatch):
    """The available memory verify's refusal compares a plan with: DEFAULT_BUDGET, except in
    `slow` tests. Returns the pinned value (None in slow tests)."""
    if request.node.get_closest_marker("slow"):
        return None
    from shapecalc.check import budget

    monkeypatch.setattr(budget, "available_memory", lambda: budget.DEFAULT_BUDGET)
    return budget.DEFAULT_BUDGET


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run `shapecalc ARGS` in-process through the real entry point (exit codes included)."""
    from shapecalc.cli import main

    # the width the tables' tests read them at (the one-line layouts); a test of another width
    # sets its own COLUMNS (tests/test_render*.py)
    monkeypatch.setenv("COLUMNS", "200")

    def run(*args: str) -> Result:
        monkeypatch.setattr(sys, "argv", ["shapecalc", *args])
        capsys.readouterr()
        try:
            main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    # main() holds OpenBLAS to one thread for the process (cli/app.py): not past this test
    blas = os.environ.get("OPENBLAS_NUM_THREADS")
    yield run
    if blas is None:
        os.environ.pop("OPENBLAS_NUM_THREADS", None)
    else:
        os.environ["OPENBLAS_NUM_THREADS"] = blas


@pytest.fixture
def hf_model(tmp_path):
    """Load a reference case's `hf_config` (as measured by tests/torch_reference) through
    shapecalc's config.json reader."""
    from shapecalc.inputs.hf import load_hf_config

    def load(case):
        path = tmp_path / f"{case['name']}.json"
        path.write_text(json.dumps(case["hf_config"]))
        return load_hf_config(path)

    return load


def need_torch() -> None:
    """Skip the calling test where torch or transformers is missing, unless the run says it must
    have them (SHAPECALC_REQUIRE_TORCH=1: then it fails)."""
    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        why = f"{' and '.join(missing)} not installed (pip install 'shapecalc[reference]')"
        if os.environ.get("SHAPECALC_REQUIRE_TORCH") == "1":
            pytest.fail(why + " but SHAPECALC_REQUIRE_TORCH=1")
        pytest.skip(why)


def _load(script: str):
    path = Path(__file__).parent / "torch_reference" / f"{script}.py"
    spec = importlib.util.spec_from_file_location(script, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def live_measure():
    """`measure(family, case)`: re-measure a reference case with tests/torch_reference/harness.py
    (a family of its families/), or with a script of its own (measure_train, measure_train_saved);
    skips when torch or transformers is not installed (need_torch)."""
    need_torch()

    def measure(what, case):
        script = what if what.startswith("measure_") else "harness"
        mod = _load(script)
        kwargs = {k: v for k, v in case["hf_config"].items() if k != "model_type"}
        args = (case["name"], case["model_type"], kwargs)
        return mod.measure_case(*args) if script != "harness" else mod.measure_case(what, *args)

    return measure


@pytest.fixture
def kv_matches_hf():
    """`check(model, case)`: shapecalc's KV-cache bytes after a prefill of the case's B×T
    (float32) equal the transformers cache the reference script measured, under each convention:
    a sliding layer holding min(T, W) tokens (shapecalc's, vLLM's: `kv_cache_bytes_window_W`),
    and W−1 (transformers' DynamicSlidingWindowLayer: `kv_cache_bytes`), the latter by the same
    model with its window one shorter."""
    from shapecalc.costs.trace import build_trace
    from shapecalc.model.config import Workload

    def check(model, case):
        def kv(m):
            wl = Workload(batch=case["batch"], seq=case["seq"], dtype="fp32")
            return build_trace(m, wl)["totals"]["kv_cache_bytes"]

        assert kv(model) == case["kv_cache_bytes_window_W"]
        w = model.sliding_window
        hf = model if w is None else model.model_copy(update={"sliding_window": w - 1})
        assert kv(hf) == case["kv_cache_bytes"]

    return check
