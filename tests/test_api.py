"""The Python API (`import shapecalc`): its results equal the CLI's `--json` for the same inputs,
the docs' example (docs/reference/python-api.md) runs and matches the commands it names, and
nothing else is public."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import shapecalc

README = Path(__file__).parents[1] / "docs" / "reference" / "python-api.md"  # the API's page
PUBLIC = {
    "GPU", "CompareResult", "FitResult", "Model", "ModelConfig", "ShapecalcError", "SweepRow",
    "TraceResult", "Workload", "compare", "fit", "load_gpu", "load_model", "sweep", "trace",
    "workload",
}


def dump(result: Any) -> Any:
    """A result as the CLI writes it."""
    if isinstance(result, list):
        return [dump(r) for r in result]
    return result.model_dump(mode="json", exclude_unset=True)


def flags(fields: dict[str, Any]) -> list[str]:
    """Keyword fields as the CLI's flags: tp=4 → --tp 4, per_rank=True → --per-rank."""
    out: list[str] = []
    for k, v in fields.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            out.append(flag)
        else:
            out += [flag, ",".join(map(str, v)) if isinstance(v, list) else str(v)]
    return out


def cli_json(cli: Any, *args: str) -> Any:
    r = cli(*args)
    assert r.code == 0, r.err
    if args[0] == "sweep":
        return [json.loads(line) for line in r.out.splitlines()]
    return r.json()


# -- the public surface ----------------------------------------------------------------------------


def test_public_names_are_all_and_only_the_api():
    assert set(shapecalc.__all__) == PUBLIC
    assert set(dir(shapecalc)) == PUBLIC | {"__version__"}
    for name in PUBLIC:
        assert getattr(shapecalc, name) is not None
    with pytest.raises(AttributeError):
        _ = shapecalc.build_trace  # type: ignore[attr-defined]
    assert issubclass(shapecalc.ShapecalcError, Exception)


def test_importing_the_package_or_the_cli_does_not_load_the_api():
    code = ("import sys, shapecalc, shapecalc.cli; "
            "assert 'shapecalc.api' not in sys.modules, 'api loaded'; "
            "assert 'numpy' not in sys.modules, 'numpy loaded'; "
            "shapecalc.trace; assert 'shapecalc.api' in sys.modules")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=Path(__file__).parents[1])
    assert r.returncode == 0, r.stderr


# -- results equal the CLI's JSON ------------------------------------------------------------------

TRACES = [
    # the second seed's §11 (the TP communication ledger)
    ("llama2-70b", {"tp": 4, "batch": 1, "seq": 2048, "dtype": "fp16"}),
    ("llama3-8b", {"phase": "decode", "batch": 4, "seq": 1000, "kv_dtype": "fp8", "tp": 2}),
    ("qwen2.5-0.5b", {"tp": 2, "pp": 2, "logits": "last", "per_rank": True}),
    ("gpt2", {"batch": 3, "seq": 64, "attention_flops": "causal", "padding_mask": True}),
]


@pytest.mark.parametrize(("preset", "fields"), TRACES)
def test_trace_equals_cli(cli, preset, fields):
    result = shapecalc.trace(shapecalc.load_model(preset), **fields)
    assert isinstance(result, shapecalc.TraceResult)
    assert dump(result) == cli_json(cli, "trace", "--preset", preset, *flags(fields), "--json")


def test_trace_default_is_the_seed_example(cli):
    assert dump(shapecalc.trace(shapecalc.load_model())) == cli_json(cli, "trace", "--json")


def test_trace_from_a_config_file_with_its_workload(cli, tmp_path):
    path = tmp_path / "m.toml"
    path.write_text('vocab_size = 1000\nd_model = 64\nn_layers = 2\nn_heads = 4\nd_ff = 256\n'
                    'positions = "rope"\n[workload]\nbatch = 3\nseq = 100\ntp = 2\n')
    model = shapecalc.load_model(config=path)
    assert model.workload == {"batch": 3, "seq": 100, "tp": 2}
    assert dump(shapecalc.trace(model)) == cli_json(cli, "trace", "--config", str(path), "--json")
    # keywords override the file's [workload], as flags do
    assert dump(shapecalc.trace(model, seq=50)) == cli_json(
        cli, "trace", "--config", str(path), "--seq", "50", "--json")


def test_hf_config_and_set_overrides(cli):
    hf = Path(__file__).parent / "data" / "hf" / "mistral-7b.json"
    model = shapecalc.load_model(hf_config=hf, set={"n_kv_heads": 4, "name": "m4"})
    assert model.config.n_kv_heads == 4
    assert dump(shapecalc.trace(model, tp=4, seq=512)) == cli_json(
        cli, "trace", "--hf-config", str(hf), "--set", "n_kv_heads=4", "--set", "name=m4",
        "--tp", "4", "--seq", "512", "--json")


def test_a_workload_object_is_used_as_given():
    wl = shapecalc.workload(batch=2, seq=128, tp=2)
    model = shapecalc.load_model("llama3-8b")
    assert shapecalc.trace(model, wl).workload == wl.model_dump()
    assert shapecalc.trace(model, wl, seq=64).workload["seq"] == 64
    assert shapecalc.fit(model, "h100-sxm", wl).workload["logits"] == "all"


FITS = [
    ("llama2-70b", "h100-sxm", {"tp": 4, "batch": 16, "seq": 4096}),
    ("llama3-8b", "a100-80gb", {"batch": 8, "seq": 8192, "kv_dtype": "fp8", "price": 2.5,
                                "utilization": 0.85, "compute_efficiency": 0.5}),
    ("qwen2.5-7b", "l40s", {"tp": 2, "pp": 2, "seq": 2048, "dtype": "fp8",
                            "compute_dtype": "bf16", "max_batched_tokens": 1024,
                            "logits": "all", "attention": "eager"}),
]


@pytest.mark.parametrize(("preset", "gpu", "fields"), FITS)
def test_fit_equals_cli(cli, preset, gpu, fields):
    result = shapecalc.fit(shapecalc.load_model(preset), gpu, **fields)
    assert isinstance(result, shapecalc.FitResult)
    assert dump(result) == cli_json(cli, "fit", "--preset", preset, "--gpu", gpu,
                                    *flags(fields), "--json")


def test_fit_of_a_case_with_a_gpu_object(cli):
    gpu = shapecalc.load_gpu("h100-sxm", set={"memory_bytes": "96GiB"})
    assert dump(shapecalc.fit("llama2-70b@tp=4,seq=4096", gpu, batch=4)) == cli_json(
        cli, "fit", "llama2-70b@tp=4,seq=4096", "--gpu", "h100-sxm",
        "--set-gpu", "memory_bytes=96GiB", "--batch", "4", "--json")


COMPARES = [
    (["llama2-70b"], None, {"tp": [1, 2, 4, 8], "batch": 1, "seq": 2048, "dtype": "fp16"}),
    (["llama2-70b@n_kv_heads=2", "llama3-70b@kv_dtype=fp8"], None,
     {"tp": "2,4,8", "phase": "decode"}),
    (["llama3-8b", "mistral-7b@tp=2"], "h100-sxm", {"seq": [2048, 8192], "batch": 4}),
    (["qwen2.5-0.5b"], "rtx-4090", {"tp": 2, "logits": "all", "price": 0.5}),
]


@pytest.mark.parametrize(("cases", "gpu", "fields"), COMPARES)
def test_compare_equals_cli(cli, cases, gpu, fields):
    result = shapecalc.compare(cases, gpu=gpu, **fields)
    assert all(isinstance(r, shapecalc.CompareResult) for r in result)
    args = ["compare", *cases, *flags(fields), "--json"] + (["--gpu", gpu] if gpu else [])
    assert dump(result) == cli_json(cli, *args)


SWEEPS = [
    (["llama2-70b"], None, {"batch": "1..64x4", "seq": [512, 2048], "tp": [1, 3, 4, 8]}),
    (["llama3-8b", "gpt2@dtype=fp16"], None,
     {"seq": [1024, 4096], "phase": "prefill,decode", "kv_dtype": ["bf16", "fp8"]}),
    (["llama3-70b"], "h100-sxm", {"batch": [1, 32], "tp": [4, 8], "pp": [1, 2], "price": 3.0}),
    # more rows than one chunk of the streamed evaluation
    (["qwen2.5-0.5b"], None, {"batch": "1..160", "seq": "64..8192+64", "tp": 2}),
]


@pytest.mark.parametrize(("cases", "gpu", "fields"), SWEEPS)
def test_sweep_equals_cli(cli, cases, gpu, fields):
    rows = list(shapecalc.sweep(cases, gpu=gpu, **fields))
    assert all(isinstance(r, shapecalc.SweepRow) for r in rows)
    args = ["sweep", *cases, *flags(fields)] + (["--gpu", gpu] if gpu else [])
    assert dump(rows) == cli_json(cli, *args)


# -- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("call", "field"), [
    (lambda: shapecalc.trace("llama2-70b", tp=3), "tp"),
    (lambda: shapecalc.trace("llama2-70b", batchh=3), "batchh"),
    (lambda: shapecalc.load_model("no-such-model"), "preset"),
    (lambda: shapecalc.load_model("gpt2", set={"nope": 1}), "set"),
    (lambda: shapecalc.fit("gpt2", "no-such-gpu"), "gpu"),
    (lambda: shapecalc.fit("gpt2", "h100-sxm", utilization=2), "utilization"),
    (lambda: shapecalc.compare(["gpt2"], tp="1..x"), "tp"),
    (lambda: shapecalc.sweep("gpt2", seq=4096), "grid"),
])
def test_bad_input_raises_shapecalc_error(call, field):
    with pytest.raises(shapecalc.ShapecalcError) as e:
        call()
    assert e.value.field == field


def test_sweep_raises_before_the_first_row():
    with pytest.raises(shapecalc.ShapecalcError, match="no valid point"):
        shapecalc.sweep("gpt2", seq=[2048, 4096])  # beyond its 1024 learned positions
    rows = shapecalc.sweep("gpt2", seq=[512, 2048])  # 2048 skipped, as the CLI skips it
    assert [r.seq for r in rows] == [512]


# -- the README's example --------------------------------------------------------------------------


def readme_example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    m = re.search(r"```python\n(.*?)```", section, re.S)
    assert m, "the Python API page has no python block"
    return m.group(1)


def test_readme_example_runs_and_equals_the_cli(cli, capsys):
    code = readme_example()
    # each `# shapecalc ARGS` comment names the command whose JSON the next assignment equals
    commands = dict(
        (var, shlex.split(cmd))
        for cmd, var in re.findall(r"^# shapecalc (.+)\n(\w+) = ", code, re.M)
    )
    assert sorted(args[0] for args in commands.values()) == ["compare", "fit", "sweep", "trace"]
    ns: dict[str, Any] = {}
    exec(compile(code, str(README), "exec"), ns)
    assert capsys.readouterr().out.count("\n") >= 4  # it printed its results
    for var, args in commands.items():
        assert dump(ns[var]) == cli_json(cli, *args), var
