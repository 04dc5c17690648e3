"""Tables that fit the console's width without cutting a number.

rich shrinks a table that is wider than the console by wrapping its wrappable columns and then
cutting the others (`67,1…`). Here a table is measured first and laid out another way when it
does not fit: its value columns split over several tables that repeat the key columns, or, on a
very narrow console, one record per row (`label  value` lines). Numbers are never wrapped or cut:
a line that cannot hold one is left longer than the console.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

Cell = str | Text
UNBOUNDED = 100_000


def width_of(console: Console, renderable: RenderableType, least: bool = False) -> int:
    """The console columns `renderable` needs unwrapped (or, with `least`, with every wrappable
    column wrapped as far as it goes)."""
    # measured against a very wide console: rich caps a measure at the width it is offered
    opts = console.options.update(max_width=UNBOUNDED)
    m = Measurement.get(console, opts, renderable)
    if not least or not isinstance(renderable, Table):
        return m.minimum if least else m.maximum
    # rich's minimum wraps every column at its longest word; only those that may wrap do
    width = m.maximum
    for col in renderable.columns:
        if not col.no_wrap:
            c = renderable._measure_column(console, opts, col)
            width -= c.maximum - c.minimum
    return width


def _text(c: Cell) -> Text:
    return c if isinstance(c, Text) else Text(c)


def fits(console: Console, renderable: RenderableType, least: bool = False) -> bool:
    return width_of(console, renderable, least) <= console.width


def line(console: Console, text: Cell, indent: int = 0) -> None:
    """One line of prose, wrapped at spaces; a word (a number) longer than the console stays
    whole."""
    t = text if isinstance(text, Text) else Text(text)
    for part in t.divide(_breaks(t.plain, console.width - indent)):
        part.rstrip()
        console.print(Text(" " * indent) + part, overflow="ignore", no_wrap=True, crop=False)


def _breaks(s: str, width: int) -> list[int]:
    """Where to break `s` into lines of at most `width` cells, at spaces only."""
    out, start, last_space = [], 0, -1
    for i, ch in enumerate(s):
        if ch == " " and i > start:
            last_space = i
        if cell_len(s[start:i + 1]) > width and last_space > start:
            out.append(last_space + 1)
            start, last_space = last_space + 1, -1
    return out


def records(console: Console, header: Sequence[str], rows: Sequence[Sequence[Cell]],
            keys: int = 1, title: str | None = None) -> None:
    """Each row as a block: its key cells on one line, then `header  value` lines (the value on
    a line of its own where the two do not fit side by side)."""
    if title:
        line(console, Text(title, style="bold"))
    for row in rows:
        parts = [c if isinstance(c, Text) else Text(c) for c in row[:keys]]
        named = [p if i == 0 or not header[i] else Text(header[i] + " ") + p
                 for i, p in enumerate(parts) if p.plain]
        key = Text(" · ").join(named)
        if key:
            key.stylize("bold")
            line(console, key)
        for name, cell in zip(header[keys:], row[keys:], strict=False):
            name = " ".join(name.split())  # a header of several lines, on one
            value = cell if isinstance(cell, Text) else Text(cell)
            if not value.plain:
                continue
            if 2 + len(name) + 2 + value.cell_len <= console.width:
                line(console, Text(name + "  ") + value, 2)
            else:
                line(console, name, 2)
                line(console, value, 4)


def split_table(console: Console, header: Sequence[str], rows: Sequence[Sequence[Cell]],
                keys: int = 1, title: str | None = None, caption: str | None = None,
                right: Sequence[bool] | None = None, wrap: Sequence[bool] | None = None,
                ) -> None:
    """Print a table whole if it fits; else its value columns (after the first `keys`) in as
    many tables as needed, each with the key columns; else (too narrow for even one value
    column beside the keys) as records. `right`: right-justify a column (numbers); `wrap`: a
    column of prose that may wrap (the others never do)."""
    n = len(header)
    right = right or [i >= keys for i in range(n)]
    wrap = wrap or [False] * n

    cells = [[_text(c) for c in r] for r in rows]  # text, not markup: a name may hold brackets
    heads = list(header)
    for i in range(n):  # rich does not justify a column that may overflow: pad it here
        if right[i] and not wrap[i]:
            w = max([cell_len(x) for x in heads[i].split("\n")]
                    + [c[i].cell_len for c in cells if "\n" not in c[i].plain])
            heads[i] = "\n".join(" " * (w - cell_len(x)) + x for x in heads[i].split("\n"))
            for c in cells:
                if "\n" not in c[i].plain:
                    c[i] = c[i].copy()
                    c[i].pad_left(w - c[i].cell_len)

    def build(cols: Sequence[int], part: str = "") -> Table:
        head = ((title or "") + part).strip()
        t = Table(box=box.SIMPLE_HEAD, header_style="bold", title_justify="left",
                  title=Text(head, style="table.title") if head else None,
                  caption=Text(caption, style="table.caption") if caption else None,
                  caption_justify="left")  # names are text, not markup
        for i in cols:
            t.add_column(Text(heads[i]), justify="right" if right[i] else "left",
                         no_wrap=not wrap[i], overflow="fold" if wrap[i] else "ignore")
        for c in cells:
            t.add_row(*(c[i] for i in cols))
        return t

    whole = build(range(n))
    if fits(console, whole) or (any(wrap) and fits(console, whole, least=True)):
        console.print(whole)
        return
    key_cols = list(range(keys))
    groups: list[list[int]] = []
    for i in range(keys, n):
        if groups and fits(console, build(key_cols + groups[-1] + [i]), least=True):
            groups[-1].append(i)
        elif fits(console, build([*key_cols, i]), least=True):
            groups.append([i])
        else:
            records(console, header, rows, keys, title)
            if caption:
                line(console, Text(caption, style="dim"))
            return
    for k, g in enumerate(groups):
        part = f" (columns {k + 1} of {len(groups)})" if len(groups) > 1 else ""
        t = build(key_cols + g, part)
        if k < len(groups) - 1:
            t.caption = None  # once, under the last part
        console.print(t)


def kv_panel(console: Console, title: str, rows: Sequence[tuple[Cell, Cell, Cell]]) -> Any:
    """`label  value  note` rows in a titled panel: the labels and notes wrap, the values never;
    on a console too narrow for that, a title line and one `label` / `value  note` pair a row."""
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column(justify="right", no_wrap=True)
    t.add_column(style="dim")
    for r in rows:
        t.add_row(*(c if isinstance(c, Text) else Text(c) for c in r))
    panel = Panel(t, title=Text(title), title_align="left", expand=False)  # text, not markup
    if width_of(console, t, least=True) + 4 <= console.width:  # a panel measures unwrapped
        return panel
    out: list[Any] = [Text(title, style="bold")]
    for label, value, note in rows:
        lab = label if isinstance(label, Text) else Text(label, style="bold")
        if lab.plain:
            out.append(lab)
        rest = (value if isinstance(value, Text) else Text(value)).copy()
        if (note.plain if isinstance(note, Text) else note):
            rest += Text("  ") + (note if isinstance(note, Text) else Text(note, style="dim"))
        if rest.plain:
            out.append(Text("    ") + rest)

    def lines() -> None:
        for t in out:
            line(console, t)

    return Deferred(lines)


class Deferred:
    """Output that `show` makes by calling a function (lines through `line`, records)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn


def show(console: Console, *items: Any) -> None:
    """Print renderables and Deferred output alike."""
    for it in items:
        if isinstance(it, Deferred):
            it.fn()
        else:
            console.print(it)


def table_or_records(console: Console, table: Table, width: int | None = None) -> Any:
    """`table` if it fits `width` (default: the console's) with its prose wrapped, else its rows
    as records (the first column the key) for `show` to print."""
    if width_of(console, table, least=True) <= (width or console.width):
        return table
    header = [str(c.header) for c in table.columns]
    # str cells are markup, as the table would have rendered them
    rows = [[Text.from_markup(c) if isinstance(c, str) else c for c in r]
            for r in zip(*(list(c.cells) for c in table.columns), strict=True)]
    title = str(table.title) if table.title else None
    return Deferred(lambda: records(console, header, rows, 1, title))


class KVRows:
    """The rows of a `label  value  note` panel (trace's totals and parallelism), laid out for
    the console's width by kv_panel."""

    def __init__(self) -> None:
        self.rows: list[tuple[Cell, Cell, Cell]] = []

    def add_row(self, label: Cell, value: Cell, note: Cell = "") -> None:
        self.rows.append((label, value, note))

    def panel(self, title: str, console: Console) -> Any:
        return kv_panel(console, title, self.rows)


def wrap_plain(lines: Sequence[str], width: int) -> list[str]:
    """Plain text lines of at most `width` cells (`train`'s report): a longer line breaks at its
    spaces, the rest indented 4 more than it; a word longer than the room (a number) stays
    whole on its own line; no line ends in spaces. Runs of spaces that align columns are kept."""
    out: list[str] = []
    for text in lines:
        text = text.rstrip()
        indent = len(text) - len(text.lstrip(" "))
        more = " " * min(indent + 4, width // 2)
        cur = ""
        for m in re.finditer(r"( *)(\S+)", text):
            gap, word = m.groups()
            if cur.strip() and cell_len(cur + gap + word) > width:
                out.append(cur)
                cur = more + word
            else:
                cur += gap + word
        out.append(cur)
    return out
