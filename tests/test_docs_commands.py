"""Every command README.md and docs/ show is run, and prints the lines shown under it
(tests/docs_text.py says how a page shows one). The few that take seconds are `slow`; those that
measure with transformers need torch (the reference extra) and skip without it."""

from __future__ import annotations

import pytest
from conftest import need_torch
from docs_text import ROOT, all_shown, inline_commands, missing_lines, pages, shown_commands

SHOWN = all_shown()
INLINE = inline_commands()
# not run here: it rewrites shapecalc/plan/perf_defaults.py (tests/test_perf.py runs the same
# fit and holds the file equal to it)
NOT_INLINE = ("calibrate", "tests/data/serving-measurements.json", "--write-defaults")
# seconds each, on this machine: under -m slow (the default suite keeps its 4 minutes)
SLOW = (
    "shapecalc verify --preset llama3.2-1b",
    "shapecalc verify --train --preset llama3-8b",
    "shapecalc serve --preset llama3-70b --gpu h100-sxm --rate 20",
    "shapecalc serve --preset llama3-70b --gpu h100-sxm --tp 4 --prompt-tokens 2048",  # find-rate
    # find-rate held to every gap and to TPOT (docs/guides/serving.md: the definitions)
    "shapecalc serve --preset llama2-70b --gpu h200 --tp 2 --dtype fp8 --kv-dtype fp8 "
    "--dataset openorca --requests 1000 --find-rate",
    "shapecalc compare llama3-8b llama3-70b@tp=4 --batch 1,8,32,128",  # 8 fits with times
    "shapecalc serve --preset qwen3-30b-a3b --gpu h100-sxm --tp 1 --ep 16",  # 16 ranks
    "shapecalc calibrate-train",  # 11 training records through train --framework
    "shapecalc train --preset llama3.1-405b --seq 8192 --gpu h100-sxm --search",  # 6 s CPU
    "shapecalc calibrate tests/data/serving-load-measurements.json",  # simulates 7 load tests
)
TORCH = ("--against", "docs/examples/arcee")


def _param(s):
    slow = s.command.startswith(SLOW) or any(t in s.command for t in TORCH)
    return pytest.param(s, id=s.where, marks=[pytest.mark.slow] if slow else [])


def test_the_pages_show_commands():
    assert len(SHOWN) >= 20 and {s.where.split(":")[0] for s in SHOWN} >= {"README.md"}


def test_every_block_of_output_is_under_its_command():
    silent: list[str] = []
    for p in pages():
        shown_commands(p, silent)
    assert not silent, f"fenced blocks that show no command (tag them ```text): {silent}"


@pytest.mark.parametrize("s", [_param(s) for s in SHOWN])
def test_a_shown_command_prints_its_lines(cli, monkeypatch, s):
    if any(t in s.command for t in TORCH):
        need_torch()
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", str(s.columns))
    r = cli(*s.argv)
    if any(x.startswith("error:") for x in s.lines):
        assert r.code == 2, (s.where, r.code, r.err)
    else:
        assert r.code in (0, 1), (s.where, r.code, r.err)  # 1: a verdict the page shows
    missing = missing_lines(s.lines, r.out + "\n" + r.err)
    assert not missing, f"{s.where}: {s.command} does not print {missing}\n{r.out}{r.err}"


def test_prose_names_commands_that_run():
    assert len(INLINE) >= 8 and any(argv == NOT_INLINE for _, argv in INLINE)


@pytest.mark.parametrize("where,argv", [
    pytest.param(w, a, id=w, marks=[pytest.mark.slow] if a[:2] == ("verify", "--train") else [])
    for w, a in INLINE if a != NOT_INLINE])
def test_a_command_named_in_prose_runs(cli, monkeypatch, tmp_path, where, argv):
    """Each `shapecalc …` a paragraph names runs as written (in an empty folder: one writes a
    report), with a verdict (0 or 1), never a refusal."""
    monkeypatch.chdir(tmp_path)
    r = cli(*argv)
    assert r.code in (0, 1), (where, argv, r.err)
    assert r.out or list(tmp_path.iterdir()), (where, argv)


def test_the_check_can_fail():
    assert missing_lines(("a", "b"), "a\nb\n") == []
    assert missing_lines(("b", "a"), "a\nb\n") == ["a"]  # in order
    assert missing_lines(("a b",), " a b  \n") == []
    assert missing_lines(("a",), "ab\n") == ["a"]  # whole lines
