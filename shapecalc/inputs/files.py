"""Reading the files a user names (--config, --hf-config, presets, hardware profiles, sweep and
compare cases, calibrate's measurements): every way a file can be hostile ends as one
`ShapecalcError(field, reason)`, before it can hang, exhaust memory or recurse.

- The type is checked on an open, non-blocking descriptor: a FIFO or a device (/dev/zero) is
  refused, never read, so nothing waits for a writer or reads forever.
- At most MAX_BYTES are read: a config is kilobytes; anything over 10 MiB is refused (a
  request trace, which may hold serve's 10⁶ requests, takes a larger limit: serve/workload.py).
- Text is UTF-8; a UTF-8 byte-order mark (Windows editors write one) is accepted and dropped;
  UTF-16/32 and other bytes are refused, naming the offset.
- JSON refuses duplicate keys (the last would silently win), naming the key; TOML already does.
- Nesting deeper than MAX_DEPTH is refused (no RecursionError downstream).
"""

from __future__ import annotations

import codecs
import errno
import json
import os
import stat
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..model.errors import ShapecalcError

MAX_BYTES = 10 * 2**20
MAX_DEPTH = 64
# every file read as an input, (device, inode) → the path it was named by: an output that is one
# of them is refused (render/output.py), however it is spelled (symlink, hard link, ../)
READ: dict[tuple[int, int], str] = {}


def shown(path: str | Path) -> str:
    """A path as one printable line: control characters (a newline in a name) escaped."""
    return escape_controls(str(path))


def path_is(test: Callable[[], bool]) -> bool:
    """A path test (`path.exists`, `path.is_dir`, …) that says False where the OS cannot even
    look: a name too long, a NUL."""
    try:
        return test()
    except (OSError, ValueError):
        return False


def escape_controls(text: str) -> str:
    """Control characters (ESC, NUL, newlines, …) as visible escapes: `\\n`, `\\x1b`."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def read_bytes(path: str | Path, field: str, limit: int = MAX_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` (MAX_BYTES, or a trace's), or one error
    line."""
    p = shown(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ShapecalcError(field, f"file not found: {p}") from None
    except IsADirectoryError:
        raise ShapecalcError(field, f"{p} is a directory, not a file") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ShapecalcError(field, f"{p}: a symlink loop") from None
        raise ShapecalcError(field, f"cannot read {p}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ShapecalcError(field, f"{p} is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device or socket"
            raise ShapecalcError(field, f"{p} is {kind}, not a regular file")
        if st.st_size > limit:
            raise ShapecalcError(field, f"{p} is {st.st_size:,} bytes, more than the "
                                 f"{limit // 2**20} MiB such a file may have")
        READ.setdefault((st.st_dev, st.st_ino), str(path))
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(limit + 1)
    except OSError as e:
        raise ShapecalcError(field, f"cannot read {p}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if len(raw) > limit:  # grew while read
        raise ShapecalcError(field, f"{p} is more than {limit // 2**20} MiB")
    return raw


def decode(raw: bytes, path: str | Path, field: str) -> str:
    """UTF-8 text (a UTF-8 BOM dropped), or one line naming what the bytes are."""
    p = shown(path)
    if raw.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        raise ShapecalcError(field, f"{p} is UTF-32 text; save it as UTF-8")
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise ShapecalcError(field, f"{p} is UTF-16 text; save it as UTF-8")
    if raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8):]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ShapecalcError(field, f"{p} is not UTF-8 text (byte 0x{raw[e.start]:02x} at "
                             f"offset {e.start})") from None
    if not text.strip():
        raise ShapecalcError(field, f"{p} is empty")
    if "\0" in text:
        raise ShapecalcError(field, f"{p} is a binary file (a NUL byte at offset "
                             f"{text.index(chr(0))})")
    return text


def read_text(path: str | Path, field: str, limit: int = MAX_BYTES) -> str:
    return decode(read_bytes(path, field, limit), path, field)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _Duplicate(k)
        out[k] = v
    return out


class _Duplicate(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


class SyntaxRefusal(ShapecalcError):
    """Not valid TOML/JSON; `detail` is the parser's message (for "neither TOML nor JSON")."""

    def __init__(self, field: str, reason: str, detail: str):
        super().__init__(field, reason)
        self.detail = detail


def _one_line(err: Exception) -> str:
    return escape_controls(" ".join(str(err).split()))


def loads(text: str, kind: str, path: str | Path, field: str) -> Any:
    """Parse TOML or JSON text; every failure (syntax, duplicate key, depth) as one error line."""
    p = shown(path)
    try:
        if kind == "TOML":
            data = tomllib.loads(text)
        else:
            data = json.loads(text, object_pairs_hook=_no_duplicates)
    except _Duplicate as e:
        raise ShapecalcError(field, f"{p}: duplicate key {escape_controls(repr(e.key))}") from None
    except RecursionError:
        raise ShapecalcError(field, f"{p} is nested too deeply") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        raise SyntaxRefusal(field, f"{p} is not valid {kind}: {_one_line(e)}", _one_line(e)) \
            from None
    if _depth(data) > MAX_DEPTH:
        raise ShapecalcError(field, f"{p} is nested more than {MAX_DEPTH} levels deep")
    return data


def _depth(data: Any) -> int:
    """How deep lists and tables nest (iteratively: no recursion on hostile input)."""
    deepest, todo = 0, [(data, 1)]
    while todo:
        x, d = todo.pop()
        if isinstance(x, dict):
            x = list(x.values())
        if isinstance(x, list):
            deepest = max(deepest, d)
            if d > MAX_DEPTH:
                break
            todo += [(v, d + 1) for v in x if isinstance(v, (dict, list))]
    return deepest


def read_json(path: str | Path, field: str) -> Any:
    """A JSON file, through every check above."""
    return loads(read_text(path, field), "JSON", path, field)


def _rows(text: str, p: str, field: str, most: int | None, header: int = 0) -> list[str]:
    """The text's lines, refused before any is parsed when more than `most` rows (after
    `header` lines) hold anything."""
    lines = text.splitlines()
    if most is not None:
        n = sum(1 for line in lines if line.strip()) - header
        if n > most:
            raise ShapecalcError(field, f"{p} has {n:,} rows, more than the {most:,} it may "
                                 "have")
    return lines


def read_jsonl(path: str | Path, field: str, limit: int = MAX_BYTES, most: int | None = None
               ) -> list[tuple[int, Any]]:
    """A JSON Lines file through every check above, each line a value: (line number, value);
    at most `most` of them."""
    text, p, out = read_text(path, field, limit), shown(path), []
    for i, line in enumerate(_rows(text, p, field, most), 1):
        if line.strip():
            try:
                out.append((i, loads(line, "JSON", f"{p}:{i}", field)))
            except SyntaxRefusal:
                raise ShapecalcError(field, f"{p}:{i}: not valid JSON") from None
    return out


def read_csv(path: str | Path, field: str, limit: int = MAX_BYTES, most: int | None = None
             ) -> list[dict[str, str]]:
    """A CSV file with a header line, through the reading checks above: a header naming a
    column twice (the last would silently win), a row with more or fewer cells than the header,
    or a quoted field left open is refused, naming the line; at most `most` rows."""
    import csv

    text, p = read_text(path, field, limit), shown(path)
    try:
        rows = list(csv.reader(_rows(text, p, field, most, header=1)))
    except csv.Error as e:
        raise ShapecalcError(field, f"{p} is not valid CSV: {_one_line(e)}") from None
    rows = [r for r in rows if any(c.strip() for c in r)]
    if not rows:
        raise ShapecalcError(field, f"{p} is empty")
    head = [c.strip() for c in rows[0]]
    for c in head:
        if head.count(c) > 1:
            raise ShapecalcError(field, f"{p}: duplicate column {escape_controls(repr(c))}")
    out = []
    for i, r in enumerate(rows[1:], 2):
        if len(r) != len(head):
            raise ShapecalcError(field, f"{p}: row {i} has {len(r)} cells, the header "
                                 f"{len(head)}")
        out.append(dict(zip(head, r, strict=True)))
    return out
