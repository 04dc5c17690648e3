"""What the planners' start-up leaves unloaded (issue 25: benchmarks/bench_startup.py measures the
time; these hold the mechanisms that keep it): a plain decoder's `trace --json` imports none of
the mechanism modules a few families use, `train --json` none of fit's closed forms, and the
lazy pieces that replace eager ones give what the eager ones gave."""

from __future__ import annotations

import subprocess
import sys
import typing

# the mechanism modules of model/ and the symbolic interpreter's variants (interpret/): each
# loads where a model uses it (model/forward.py's registry, symbolic._Variant)
MECHANISMS = tuple(f"shapecalc.model.{m}" for m in (
    "mla", "dsa", "compressed", "cca", "hyper", "block_sparse", "inkling", "kda", "mamba1",
    "mamba2", "gated_deltanet", "short_conv")) + tuple(
    f"shapecalc.interpret.symbolic_{m}" for m in (
        "mla", "dsa", "compressed", "cca", "hyper", "block_sparse", "inkling", "kda", "mamba1",
        "mamba2", "deltanet", "zaya"))


def _loaded(argv: list[str], names: tuple[str, ...]) -> list[str]:
    """Which of `names` are in sys.modules when `shapecalc ARGV` exits (in a fresh process)."""
    code = (
        "import sys, atexit\n"
        f"atexit.register(lambda: sys.stderr.write(repr(sorted(m for m in {names!r} "
        "if m in sys.modules))))\n"
        f"sys.argv = ['shapecalc', *{argv!r}]\n"
        "from shapecalc.cli import main\nmain()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return eval(r.stderr.strip())  # a list of names, as repr wrote it


def test_a_plain_decoder_loads_no_mechanism_module():
    assert _loaded(["trace", "--preset", "llama2-70b", "--json"],
                   (*MECHANISMS, "unicodedata")) == []


def test_train_loads_no_closed_form():
    assert _loaded(["train", "--preset", "seed-tiny", "--json"],
                   ("shapecalc.plan.fit", "shapecalc.costs.closed", "shapecalc.plan.options",
                    "numpy")) == []  # the step model's and search's arrays: only with --gpu


def test_serve_without_speculation_loads_no_draft_nor_numpy():
    """A plain serve run imports neither speculation's scheduler and draft nor NumPy (they
    cost it more than the floor's imports: bench_startup.py)."""
    assert _loaded(["serve", "--preset", "seed-tiny", "--gpu", "h100-sxm", "--requests", "2",
                    "--json"],
                   ("numpy", "shapecalc.serve.specsched", "shapecalc.serve.draft")) == []


def test_each_variant_operation_is_its_module_function():
    """Every lazy method of SymbolicOps resolves to sym_<name> of symbolic_<module>.py."""
    import importlib

    from shapecalc.interpret import symbolic

    # VARIANTS, not the class's _Variant entries: an earlier test may have resolved them
    assert len(symbolic.VARIANTS) >= 40
    for name, (mod, fn) in symbolic.VARIANTS.items():
        module = importlib.import_module(f"shapecalc.interpret.symbolic_{mod}")
        assert getattr(symbolic.SymbolicOps, name) is getattr(module, f"sym_{fn}"), name


def test_record_annotations_are_get_type_hints():
    """record._hints (each distinct text evaluated once) gives what get_type_hints gives."""
    from shapecalc.inputs.hardware import GPU
    from shapecalc.model import record
    from shapecalc.model.config import ModelConfig, Workload

    classes: set[type] = set()
    todo = [record.Record]
    while todo:  # every record class, subclasses of subclasses too
        fresh = set(todo.pop().__subclasses__()) - classes
        classes |= fresh
        todo += fresh
    assert {ModelConfig, Workload, GPU} <= classes
    for c in classes:
        assert record._hints(c) == typing.get_type_hints(c, include_extras=True), c


def test_blas_held_to_one_thread_outside_the_executor(cli, monkeypatch):
    """OpenBLAS's threads spin as NumPy loads (~0.1 CPU-s a command): every command but the
    executor's (verify, explain) holds it to one thread before NumPy loads; a value the user
    set stays."""
    import os

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    assert cli("hardware").code == 0
    assert os.environ.get("OPENBLAS_NUM_THREADS") == "1"
    for command in ("verify", "explain"):
        monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
        cli(command, "--help")
        assert "OPENBLAS_NUM_THREADS" not in os.environ, command
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    assert cli("hardware").code == 0
    assert os.environ["OPENBLAS_NUM_THREADS"] == "4"
