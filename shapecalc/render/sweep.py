"""sweep's rows as JSON Lines, CSV, Markdown or a rich table."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from .output import markdown_table
from .plan import _fmt

SWEEP_FORMATS = ("jsonl", "json", "csv", "markdown", "table")


SWEEP_TABLE_COLS = (
    ("batch", "int"), ("seq", "int"), ("phase", "text"), ("tp", "int"), ("pp", "int"),
    ("dtype", "text"), ("kv_dtype", "text"), ("flops", "flops"),
    ("weight_bytes_per_rank", "bytes"), ("kv_cache_bytes_per_rank", "bytes"),
    ("allreduce_bytes_total", "bytes"), ("ring_bytes_per_rank_total", "bytes"),
    ("boundary_bytes", "bytes"),
)
SWEEP_TABLE_FIT = (("fits", "bool"), ("mem_total", "bytes"), ("kv_tokens_fit", "int"),
                   ("ttft_s", "time"), ("decode_s_per_token", "time"), ("tokens_per_s", "rate"))


def _strings(col: Any, json_mode: bool) -> list[str]:
    """One column as text: exact integers, shortest floats, null/empty for NaN and None."""
    import numpy as np

    a = np.asarray(col)
    if a.dtype.kind in "iu":
        if a.size and a.min() == a.max():  # constant per model: params, per-token bytes, …
            return [str(int(a[0]))] * a.size
        u, inv = np.unique(a, return_inverse=True)
        if u.size * 8 < a.size:  # few distinct values: format each once
            return np.array([str(x) for x in u.tolist()], dtype=object)[inv].tolist()
        return a.astype(str).tolist()
    if a.dtype.kind == "b":
        return np.where(a, "true", "false").tolist()
    if a.dtype.kind == "f":
        s = a.astype(str)
        s[np.isnan(a)] = "null" if json_mode else ""
        return s.tolist()
    # object: Python ints (exact beyond int64) or strings / None
    cache: dict[Any, str] = {}
    out = []
    for v in a.tolist():
        if v not in cache:
            if v is None:
                cache[v] = "null" if json_mode else ""
            elif isinstance(v, str):
                cache[v] = json.dumps(v) if json_mode else v
            else:
                cache[v] = str(v)
        out.append(cache[v])
    return out


def sweep_lines(chunk: Any, fmt: str, header: bool, keys: list[str]) -> Iterator[str]:
    """The chunk's rows as JSON Lines or CSV lines (with `keys` in order), in blocks."""
    json_mode = fmt in ("json", "jsonl")
    if json_mode:
        template = "{" + ",".join(f"{json.dumps(k)}:%s" for k in keys) + "}"
    elif header:
        yield ",".join(keys)
    n = len(chunk)
    step = 200_000
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        strs = []
        for k in keys:
            if k in ("case", "model"):
                v = getattr(chunk, k)
                strs.append([json.dumps(v) if json_mode else _csv_cell(v)] * (hi - lo))
            else:
                strs.append(_strings(chunk.columns[k][lo:hi], json_mode))
        if json_mode:
            yield "\n".join(template % row for row in zip(*strs, strict=True))
        else:
            yield "\n".join(",".join(row) for row in zip(*strs, strict=True))


def _csv_cell(s: str) -> str:
    return '"' + s.replace('"', '""') + '"' if any(c in s for c in ',"\n') else s


def sweep_table(chunks: list[Any], console: Any) -> None:
    from rich import box
    from rich.table import Table

    fit = any("fits" in c.columns for c in chunks)
    cols = SWEEP_TABLE_COLS + (SWEEP_TABLE_FIT if fit else ())
    t = Table(box=box.SIMPLE_HEAD, title="sweep", caption="bytes in binary units; times are "
              "roofline lower bounds" if fit else "bytes in binary units")
    t.add_column("model")
    for k, _ in cols:
        t.add_column(k, justify="left" if k in ("phase", "dtype", "kv_dtype") else "right")
    for c in chunks:
        lists = {k: c.columns[k].tolist() for k, _ in cols}
        for i in range(len(c)):
            t.add_row(c.case, *(_fmt(kind, lists[k][i]) for k, kind in cols))
    console.print(t)


def sweep_markdown(chunks: list[Any]) -> str:
    fit = any("fits" in c.columns for c in chunks)
    cols = SWEEP_TABLE_COLS + (SWEEP_TABLE_FIT if fit else ())
    rows = []
    for c in chunks:
        lists = {k: c.columns[k].tolist() for k, _ in cols}
        for i in range(len(c)):
            rows.append([c.case, *(_fmt(kind, lists[k][i]) for k, kind in cols)])
    return markdown_table(["model", *(k for k, _ in cols)], rows)
