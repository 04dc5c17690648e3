"""`-` is stdout for every writer (issue 12): `--svg -` and `--html -` print the picture or the
report on stdout, as `--output -` does the table, when nothing else goes there (the table or JSON
in `--output FILE`); otherwise they are refused in one line naming the flag, before any output,
and no file named `-` is ever made."""

from __future__ import annotations

import pytest

TRACE = ("trace", "--preset", "seed-tiny", "--seq", "4")
COMPARE = ("compare", "seed-tiny", "--batch", "1,2")


@pytest.mark.parametrize("flag,start", [("--svg", "<svg"), ("--html", "<!DOCTYPE html>")])
@pytest.mark.parametrize("cmd", [TRACE, COMPARE], ids=["trace", "compare"])
def test_dash_is_stdout(cli, monkeypatch, tmp_path, cmd, flag, start):
    monkeypatch.chdir(tmp_path)
    table = tmp_path / "table.txt"
    r = cli(*cmd, "--output", str(table), flag, "-")
    assert r.code == 0, r.err
    assert r.out.startswith(start) and r.out.rstrip().endswith(("</svg>", "</html>"))
    assert "seed-tiny" in table.read_text()  # the table went to its file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.txt"]  # no file named '-'


def test_dash_svg_is_the_same_picture(cli, tmp_path):
    """What `--svg -` prints is the file `--svg FILE` writes."""
    picture = tmp_path / "t.svg"
    assert cli(*TRACE, "--svg", str(picture), "--output", str(tmp_path / "a.txt")).code == 0
    r = cli(*TRACE, "--svg", "-", "--output", str(tmp_path / "b.txt"))
    assert r.code == 0 and r.out == picture.read_text()


@pytest.mark.parametrize("args,field,what", [
    ((*TRACE, "--svg", "-"), "svg", "the command's output"),  # the table is on stdout
    ((*TRACE, "--json", "--html", "-"), "html", "the command's output"),
    ((*TRACE, "--output", "-", "--svg", "-"), "svg", "the command's output"),
    ((*TRACE, "--output", "t.txt", "--svg", "-", "--html", "-"), "html", "--svg"),
    ((*COMPARE, "--html", "-"), "html", "the command's output"),
    ((*COMPARE, "--output", "c.txt", "--chart", "--svg", "-"), "svg", "--chart's bars"),
    (("sweep", "seed-tiny", "--batch", "1,2", "--format", "csv", "--output", "s.csv",
      "--chart", "--html", "-"), "html", "--chart's bars"),
    (("fit", "seed-tiny", "--gpu", "h100-sxm", "--svg", "-"), "svg", "the command's output"),
])
def test_dash_refused_when_stdout_is_taken(cli, monkeypatch, tmp_path, args, field, what):
    monkeypatch.chdir(tmp_path)
    r = cli(*args)
    assert r.code == 2 and r.out == "", (r.code, r.out[:200])
    assert r.err == f"error: {field}: - (stdout) already carries {what}" + (
        " (send it to a file with --output FILE)\n" if what.startswith("the") else "\n")
    assert list(tmp_path.iterdir()) == []  # nothing written, not even the --output file
