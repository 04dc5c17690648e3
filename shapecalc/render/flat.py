"""A command's JSON document as rows of (dotted key, value), for --format csv and markdown where
the command has no table of its own shape (serve, train): every scalar once, in document order,
exact (what --json holds, flattened)."""

from __future__ import annotations

import csv
import io
from typing import Any


def rows(doc: Any, prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += rows(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(doc, (list, tuple)):
        for i, v in enumerate(doc):
            out += rows(v, f"{prefix}[{i}]")
    else:
        out.append((prefix, doc))
    return out


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


def flat_csv(doc: Any) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["key", "value"])
    for k, v in rows(doc):
        w.writerow([k, _cell(v)])
    return buf.getvalue()


def flat_markdown(doc: Any) -> str:
    lines = ["| key | value |", "|---|---|"]
    for k, v in rows(doc):
        cell = _cell(v).replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{k}` | {cell} |")
    return "\n".join(lines) + "\n"
