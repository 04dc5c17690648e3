"""The documents a user reads (README.md and docs/**/*.md) and the commands they show.

A shown command is a `$ shapecalc …` line in a code block (fenced, or indented four spaces), with
`\\` continuing it and `  # …` a comment; the lines under it, up to the next `$` line or the end
of the block, are output it prints (`…` leaves lines out; `$ shapecalc train ... --flag` repeats
the previous command's arguments in that file). A fenced block of bare `shapecalc …` lines (or
`… && shapecalc …`) shows commands without their output. `COLUMNS=N` before `shapecalc` is the
width the output was printed at (else the tests' 200).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
ELIDED = {"…", "..."}


def pages() -> list[Path]:
    """README.md, then every page of the docs site."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def all_text() -> str:
    """Every document, one after another (each begins with its `# ` title)."""
    return "\n\n".join(text(p) for p in pages())


@dataclass(frozen=True)
class Shown:
    where: str  # file:line
    argv: tuple[str, ...]
    columns: int
    lines: tuple[str, ...]  # the output lines shown, stripped, `…` left out

    @property
    def command(self) -> str:
        return "shapecalc " + " ".join(self.argv)


def _command(line: str, base: list[str]) -> tuple[list[str], int]:
    line = line.split("  #")[0].strip()
    columns = 200
    words = shlex.split(line)
    while words and "=" in words[0] and words[0].split("=")[0].isupper():
        k, v = words.pop(0).split("=", 1)
        if k == "COLUMNS":
            columns = int(v)
    assert words and words[0] == "shapecalc", line
    args = words[1:]
    if args[1:2] == ["..."]:  # `shapecalc train ... --flag`: the previous command's arguments
        args = base + args[2:]
    return args, columns


def _fenced(rel: str, body: list[str], first: int, out: list[Shown]) -> bool:
    """The commands of one fenced block; False when it shows none."""
    if not any(x.startswith("$ ") for x in body):
        bare = [x.split("&&")[-1].strip() for x in body if x.strip()]
        if not bare or not all(x.startswith("shapecalc") or "pytest" in x for x in bare):
            return False
        for i, x in enumerate(bare):
            if x.startswith("shapecalc"):
                args, cols = _command(x, [])
                out.append(Shown(f"{rel}:{first + i}", tuple(args), cols, ()))
        return True
    base: list[str] = []
    i = 0
    while i < len(body):
        if not body[i].startswith("$ "):
            i += 1
            continue
        start, cmd = i, body[i][2:]
        while cmd.rstrip().endswith("\\"):
            i += 1
            cmd = cmd.rstrip()[:-1] + " " + body[i].strip()
        args, cols = _command(cmd, base)
        base = base or args
        i += 1
        shown = []
        while i < len(body) and not body[i].startswith("$ "):
            if body[i].strip() and body[i].strip() not in ELIDED:
                shown.append(body[i].strip())
            i += 1
        out.append(Shown(f"{rel}:{first + start}", tuple(args), cols, tuple(shown)))
    return True


# fenced blocks that show no command: code, data, and ```text for what no one command prints
NOT_RUN = ("python", "json", "toml", "text")


def shown_commands(path: Path, silent: list[str] | None = None) -> list[Shown]:
    """Every command `path` shows, in order; `silent` collects the untagged fenced blocks that
    show none (each must be tagged: a block of output is under the command that prints it)."""
    rel = str(path.relative_to(ROOT))
    lines = text(path).splitlines()
    out: list[Shown] = []
    i, base = 0, []
    while i < len(lines):
        m = re.match(r"^( *)```(\w*)\s*$", lines[i])  # a fence, perhaps inside a list item
        if m:
            pad, j = len(m.group(1)), i + 1
            while not lines[j].lstrip().startswith("```"):
                j += 1
            body = [x[pad:] if x[:pad].isspace() else x for x in lines[i + 1:j]]
            if m.group(2) not in NOT_RUN and not _fenced(rel, body, i + 2, out) \
                    and silent is not None:
                silent.append(f"{rel}:{i + 1}")
            i = j + 1
            continue
        if lines[i].startswith("    $ shapecalc"):  # an indented block
            start, cmd = i, lines[i].strip()[2:]
            while cmd.rstrip().endswith("\\"):
                i += 1
                cmd = cmd.rstrip()[:-1] + " " + lines[i].strip()
            args, cols = _command(cmd, base)
            base = base or args
            i += 1
            shown = []
            while i < len(lines) and lines[i].startswith("    ") and \
                    not lines[i].strip().startswith("$"):
                if lines[i].strip() not in ELIDED:
                    shown.append(lines[i].strip())
                i += 1
            out.append(Shown(f"{rel}:{start + 1}", tuple(args), cols, tuple(shown)))
            continue
        i += 1
    return out


def all_shown() -> list[Shown]:
    return [s for p in pages() for s in shown_commands(p)]


# a backticked command in prose that names a form rather than runs one
PLACEHOLDER = re.compile(r"\b[A-Z]{3,}\b|…|\||\bmine\.json\b")


def inline_commands() -> list[tuple[str, tuple[str, ...]]]:
    """(where, argv) of each backticked `shapecalc ARGS` in the pages' prose (code blocks and
    generated tables left out) that runs as written: not a bare command name, not a form with
    placeholders (`shapecalc presets NAME`, `compare CASE…`)."""
    out = []
    for path in pages():
        t = re.sub(r"<!-- ([a-z-]+): generated by .*?<!-- /\1 -->", "", text(path), flags=re.S)
        t = re.sub(r"^( *)```.*?^\1```", lambda m: "\n" * m.group(0).count("\n"), t,
                   flags=re.S | re.M)
        for m in re.finditer(r"`(shapecalc [^`]+)`", t):
            words = m.group(1).split()
            if len(words) > 2 and not PLACEHOLDER.search(m.group(1)):
                where = f"{path.relative_to(ROOT)}:{t[:m.start()].count(chr(10)) + 1}"
                out.append((where, tuple(words[1:])))
    return out


def missing_lines(shown: tuple[str, ...], printed: str) -> list[str]:
    """The shown lines that the printed output does not have, in order: each shown line must be
    a whole line of the output (both stripped), after the one before it."""
    lines = [x.strip() for x in printed.splitlines()]
    at, missing = 0, []
    for want in shown:
        try:
            at = lines.index(want, at) + 1
        except ValueError:
            missing.append(want)
    return missing
