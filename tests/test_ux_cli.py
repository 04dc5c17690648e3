"""Issue 12, defects 1, 5, 7 and 8: the first-use experience of the command line.

1. The default T fits the model (min(2048, max_positions); a decode step's new token needs one
   more position under a learned table), the header says so, a too-long --seq names the largest
   valid one, and --help shows every option's default.
5. Help text survives rich markup (`[m,k]×[k,n]`); --version and -h.
7. presets and hardware take one pattern (list, NAME, show NAME); unknown names get "did you
   mean"; dtype aliases; `presets show` prints the values used, not None.
8. explain on a wide model names the toy presets, and a narrowed model that runs.
"""

from __future__ import annotations

import re

import pytest
import typer

from shapecalc import __version__
from shapecalc.cli import app as app_module
from shapecalc.cli import lazy
from shapecalc.inputs import sources


def one_line_error(r, field: str) -> str:
    assert r.code == 2 and r.out == "" and r.err.count("\n") == 1, (r.code, r.out, r.err)
    assert r.err.startswith(f"error: {field}: ") and "Traceback" not in r.err
    return r.err


# -- 1. the default T --------------------------------------------------------------------------
def test_gpt2_runs_with_the_default_context(cli):
    """The issue's first command: it failed with 2048 positions > max_positions=1024."""
    r = cli("trace", "--preset", "gpt2")
    assert r.code == 0, r.err
    assert "T=1024 (default: min(2048, max_positions=1024))" in r.out.splitlines()[0]
    assert cli("trace", "--preset", "gpt2", "--json").json()["workload"]["seq"] == 1024
    # decode: T cached tokens + the new one must fit the 1,024 rows
    r = cli("trace", "--preset", "gpt2", "--phase", "decode", "--json")
    assert r.code == 0 and r.json()["workload"]["seq"] == 1023
    # a model with room says T=2048 is the default; an explicit --seq says nothing
    assert "T=2048 (default)" in cli("trace", "--preset", "llama3-8b").out.splitlines()[0]
    assert "default" not in cli("trace", "--preset", "gpt2", "--seq", "8").out.splitlines()[0]


@pytest.mark.parametrize("name", ["gpt2", "gpt2-xl", "pythia-1.4b", "llama3-8b"])
def test_every_command_takes_a_default_that_fits(cli, name):
    m = sources.load_preset(name)
    learned = m.positions == "learned"
    prefill_t = min(2048, m.max_positions or 2048)
    serve_t = min(2048, (m.max_positions or 2048) - (1 if learned else 0))
    assert cli("trace", "--preset", name, "--json").json()["workload"]["seq"] == prefill_t
    # fit, compare and sweep plan a decode step too: its estimate is there
    f = cli("fit", "--preset", name, "--gpu", "H100-SXM", "--json")
    assert f.code == 0, f.err
    assert f.json()["workload"]["seq"] == serve_t and f.json()["times"]["decode_s_per_token"]
    c = cli("compare", name, "--json").json()[0]
    assert c["workload"]["seq"] == serve_t and c["derived"]["decode_flops"] is not None
    s = cli("sweep", name, "--phase", "prefill,decode", "--format", "jsonl")
    assert s.code == 0 and {row["seq"] for row in map(__import__("json").loads,
                                                      s.out.splitlines())} == {serve_t}


def test_a_config_file_with_few_positions(cli, tmp_path):
    f = tmp_path / "m.toml"
    f.write_text('vocab_size = 50\nd_model = 16\nn_layers = 2\nn_heads = 2\nd_ff = 32\n'
                 'positions = "learned"\nmax_positions = 300\n')
    r = cli("trace", "--config", str(f), "--json")
    assert r.code == 0 and r.json()["workload"]["seq"] == 300
    r = cli("verify", "--config", str(f), "--json")  # verify's own default: 16
    assert r.code == 0 and r.json()["workload"]["seq"] == 16
    r = cli("explain", "--config", str(f), "--json")
    assert r.code == 0 and r.json()["shapes"]["X"] == [4, 16]


def test_too_long_seq_names_the_largest_valid_one(cli):
    err = one_line_error(cli("trace", "--preset", "gpt2", "--seq", "2048"), "seq")
    assert "max_positions=1024" in err and "the largest valid seq is 1024" in err
    err = one_line_error(cli("trace", "--preset", "gpt2", "--seq", "1024", "--phase", "decode"),
                         "seq")
    assert "the largest valid seq is 1023" in err
    assert cli("trace", "--preset", "gpt2", "--seq", "1023", "--phase", "decode").code == 0


def _commands() -> dict[str, typer.main.click.Command]:
    """Every command's click object, as the CLI builds it (help escaped, defaults shown)."""
    from shapecalc.cli.helptext import escape_tree

    root = escape_tree(typer.main.get_command(app_module.app))
    out = {"shapecalc": root}
    out.update({n: c for n, c in root.commands.items() if n not in lazy.COMMANDS})
    out.update({n: lazy.command(n) for n in lazy.COMMANDS})
    return out


@pytest.mark.parametrize("name", sorted(_commands()))
def test_help_shows_every_default(cli, name, monkeypatch):
    cmd = _commands()[name]
    missing = []
    for p in cmd.params:
        if p.name in ("help", "version") or (getattr(p, "is_flag", False) and
                                              p.default is False):
            continue  # flags are off unless given
        if p.required:
            continue
        if not (isinstance(p.show_default, str) or p.default not in (None, "")):
            missing.append(p.name)
    assert not missing, f"{name}: no default shown for {missing}"
    if name != "shapecalc":
        monkeypatch.setenv("COLUMNS", "250")
        out = cli(name, "--help").out
        assert out.count("[default:") >= len([p for p in cmd.params if p.default not in (
            None, "", False) or isinstance(p.show_default, str)]) - 1  # --help, eager flags


def test_help_states_the_seq_default(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    # typer shows a stated default in parentheses
    assert "[default: (min(2048, max_positions))]" in cli("trace", "--help").out
    assert "[default: (min(16, max_positions))]" in cli("verify", "--help").out
    assert "[default: (2)]" in cli("verify", "--help").out  # verify's batch, not trace's 1


# -- 5. help text and its markup ---------------------------------------------------------------
def _raw_help() -> dict[str, list[str]]:
    """The help strings as written, before escaping: per command, its own and its options'."""
    root = typer.main.get_command(app_module.app)
    out = {"": [root.help or ""]}
    for name, c in root.commands.items():
        if name in lazy.COMMANDS:
            import importlib

            module = importlib.import_module(f"shapecalc.cli.{lazy.COMMANDS[name][0]}")
            sub = typer.Typer()
            sub.command(name, help=module.HELP[name])(module.COMMANDS[name])
            c = typer.main.get_command(sub)
        out[name] = [c.help or ""] + [p.help for p in c.params if getattr(p, "help", None)]
    return out


def _flat(text: str) -> str:
    return re.sub(r"[\s│╭╮╰╯─]+", "", text)


@pytest.mark.parametrize("name", sorted(_raw_help()))
def test_bracketed_help_text_survives(cli, name, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    texts = _raw_help()[name]
    brackets = {b for t in texts for b in re.findall(r"\[[^\]\n]*\]", t)}
    out = _flat(cli(*([name] if name else []), "--help").out)
    lost = [b for b in brackets if _flat(b) not in out]
    assert not lost, f"{name or 'shapecalc'} --help lost {lost}"


def test_the_issues_matmul_rule_survives(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    for argv in ((), ("trace",), ("explain",)):
        out = cli(*argv, "--help").out
        assert "[m,k]×[k,n]" in out or "[m,n]×[n,p]" in out, argv


def test_version_and_short_help(cli, monkeypatch):
    r = cli("--version")
    assert r.code == 0 and r.out == f"shapecalc {__version__}\n"
    monkeypatch.setenv("COLUMNS", "120")
    for argv in ((), ("trace",), ("fit",), ("presets",), ("hardware",)):
        short, long = cli(*argv, "-h"), cli(*argv, "--help")
        assert short.code == long.code == 0 and short.out == long.out and "Usage" in short.out


# -- 7. one pattern, did you mean, dtype aliases, resolved values ------------------------------
def test_presets_and_hardware_take_one_pattern(cli):
    for cmd, name in (("presets", "gpt2"), ("hardware", "H100-SXM")):
        listed = cli(cmd)
        assert listed.code == 0 and name in listed.out
        short, long = cli(cmd, name), cli(cmd, "show", name)
        assert short.code == long.code == 0 and short.out == long.out and name in short.out
        assert cli(cmd, name, "--json").json() == cli(cmd, "show", name, "--json").json()
        one_line_error(cli(cmd, "show"), "preset" if cmd == "presets" else "gpu")
        one_line_error(cli(cmd, name, "extra"), "preset" if cmd == "presets" else "gpu")


@pytest.mark.parametrize("argv,field,meant", [
    (("trace", "--preset", "gtp2"), "preset", "'gpt2'"),
    (("presets", "show", "lama3-8b"), "preset", "'llama3-8b'"),
    (("compare", "mistral7b"), "preset", "'mistral-7b'"),
    (("fit", "--preset", "gpt2", "--gpu", "h100-sxn"), "gpu", "'H100-SXM'"),
    (("hardware", "show", "h100"), "gpu", "'H100-NVL' or 'H100-PCIe' or 'H100-SXM'"),  # all 3
    (("trace", "--dtype", "bf61"), "dtype", "'bf16'"),
    (("trace", "--kv-dtype", "fp7"), "kv_dtype", "'fp8'"),
    (("compare", "gpt2", "--dtype", "bfloat"), "dtype", "'bf16'"),
    (("trace", "--phase", "decod"), "phase", "'decode'"),
    (("fit", "--preset", "gpt2", "--gpu", "H100-SXM", "--compute-dtype", "bf61"),
     "compute-dtype", "'bf16'"),
])
def test_unknown_names_get_did_you_mean(cli, argv, field, meant):
    err = one_line_error(cli(*argv), field)
    assert f"(did you mean {meant}" in err


def test_nothing_close_no_suggestion(cli):
    assert "did you mean" not in cli("trace", "--preset", "zzzzzz").err


@pytest.mark.parametrize("alias,dtype", [("bfloat16", "bf16"), ("float16", "fp16"),
                                         ("half", "fp16"), ("float32", "fp32"), ("BF16", "bf16")])
def test_dtype_aliases(cli, alias, dtype):
    base = ["trace", "--preset", "llama3-8b", "--seq", "128", "--json"]
    assert cli(*base, "--dtype", alias).json() == cli(*base, "--dtype", dtype).json()
    assert cli(*base, "--kv-dtype", alias).json()["workload"]["kv_dtype"] == dtype
    col = cli("compare", f"llama3-8b@kv_dtype={alias}", "--dtype", f"{alias},fp8", "--json")
    assert [c["workload"]["dtype"] for c in col.json()] == [dtype, "fp8"]
    assert col.json()[0]["workload"]["kv_dtype"] == dtype
    fit = cli("fit", "--preset", "llama3-8b", "--gpu", "H100-SXM", "--compute-dtype", alias,
              "--json")
    if dtype != "fp32":  # H100's profile has no fp32 peak
        assert fit.json()["assumptions"]["compute_dtype"] == dtype


def test_presets_show_prints_the_values_used(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    out = cli("presets", "show", "gpt2").out
    assert "None" not in out
    rows = {line.split()[1]: line for line in out.splitlines() if len(line.split()) > 2}
    assert "12 (default: H)" in rows["n_kv_heads"]  # GPT-2: MHA, 12 heads
    assert "64 (default: D/H)" in rows["head_dim"]  # 768 / 12
    out = cli("presets", "llama3-8b").out
    rows = {line.split()[1]: line for line in out.splitlines() if len(line.split()) > 2}
    assert " 8 " in rows["n_kv_heads"] and "default" not in rows["n_kv_heads"]  # given: GQA 8
    assert "128 (default: D/H)" in rows["head_dim"]  # 4096 / 32
    out = cli("presets", "mixtral-8x7b").out
    assert "14336 (default: Dff)" in out  # each expert as wide as Dff
    # the JSON stays the config as a file gives it (None: the default), loadable again
    assert cli("presets", "gpt2", "--json").json()["n_kv_heads"] is None


# -- 8. explain names what it can run ----------------------------------------------------------
def test_explain_names_the_toy_presets_and_a_narrowed_model(cli, tmp_path):
    err = one_line_error(cli("explain", "--preset", "gpt2"), "model")
    toys = [n for n in sorted(sources.list_presets())
            if sources.load_preset(n).d_model <= 64]
    assert toys and all(f"{n} (D=" in err for n in toys)
    for n in toys:
        assert cli("explain", "--preset", n).code == 0
    sets = re.findall(r"--set (\S+)", err)
    assert sets == ["d_model=60", "head_dim=5"]  # 12 heads of 5: the widest D ≤ 64
    r = cli("explain", "--preset", "gpt2", *[x for s in sets for x in ("--set", s)], "--json")
    assert r.code == 0 and r.json()["shapes"]["WQ"] == [60, 5]
    # RoPE needs an even Dh: llama3-8b's 32 heads of 2
    err = one_line_error(cli("explain", "--preset", "llama3-8b"), "model")
    assert re.findall(r"--set (\S+)", err) == ["d_model=64", "head_dim=2"]
    # a user's own small preset is named too
    (tmp_path / "mini.toml").write_text(
        'vocab_size = 20\nd_model = 12\nn_layers = 1\nn_heads = 3\nd_ff = 24\n'
        'positions = "none"\n')
    err = cli("explain", "--preset", "gpt2", "--presets-dir", str(tmp_path)).err
    assert "mini (D=12)" in err


def test_the_api_takes_the_same_default_T():
    import shapecalc

    assert shapecalc.trace("gpt2").workload["seq"] == 1024
    assert shapecalc.trace("gpt2", phase="decode").workload["seq"] == 1023
    assert shapecalc.fit("gpt2", "H100-SXM").workload["seq"] == 1023  # it plans a decode step
    assert shapecalc.compare("gpt2")[0].workload["seq"] == 1023
    assert {r.seq for r in shapecalc.sweep("gpt2")} == {1024}
    assert shapecalc.trace("llama3-8b").workload["seq"] == 2048
    assert shapecalc.trace("gpt2", seq=8).workload["seq"] == 8
