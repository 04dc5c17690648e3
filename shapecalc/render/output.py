"""Where text output goes: --format checks, --output files, JSON, CSV and Markdown text. No rich:
the JSON paths import this and nothing heavier (tables and their SVG/HTML exports: console.py).
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Iterable
from typing import IO, Any

from ..model.config import ShapecalcError

FORMATS = ("table", "json", "csv", "markdown")



def check_format(fmt: str, allowed: Iterable[str] = FORMATS) -> str:
    allowed = tuple(allowed)
    if fmt not in allowed:
        raise ShapecalcError("format", f"{fmt!r} is not one of {', '.join(allowed)}")
    return fmt


def open_output(path: str | None) -> tuple[IO[str], bool]:
    """stdout, or the file (which the caller closes when the flag says so)."""
    if path is None or path == "-":
        return sys.stdout, False
    try:
        return open(path, "w", encoding="utf-8", newline=""), True
    except OSError as e:
        raise ShapecalcError("output", f"cannot write {path}: {e.strerror or e}") from None


def write_text(text: str, path: str | None) -> None:
    out, close = open_output(path)
    try:
        out.write(text if text.endswith("\n") else text + "\n")
    finally:
        if close:
            out.close()


def json_text(doc: Any) -> str:
    return json.dumps(doc, ensure_ascii=False, indent=2, allow_nan=False)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    def esc(s: str) -> str:
        return str(s).replace("|", "\\|")

    lines = ["| " + " | ".join(esc(h) for h in header) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def csv_text(header: list[str], rows: list[list[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow(["" if v is None else v for v in r])
    return buf.getvalue()


