"""sweep's rows as JSON Lines, CSV, Markdown or a rich table.

JSON Lines and CSV are written by column: each column of a chunk becomes fixed-width bytes (one
item a point, NUL-padded) with NumPy, copied into a block of rows made by repeating one template
row (the separators, JSON's keys), and the NULs are deleted at once (`bytes.translate`), which
leaves the rows. Integers are exact (int64 through a table of 4-digit groups, Python ints beyond
int64 with `str`), floats shortest round-trip (`repr`, vectorised in floats.py), NaN and None null
in JSON and empty in CSV, bools true/false. (A NUL in a CSV text would vanish: JSON escapes it,
and no label or dtype name holds one.)
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from .floats import repr_bytes, text_cells
from .output import markdown_table
from .units import fmt_value

SWEEP_FORMATS = ("jsonl", "json", "csv", "markdown", "table")


SWEEP_TABLE_COLS = (
    ("batch", "int"), ("seq", "int"), ("phase", "text"), ("tp", "int"), ("pp", "int"),
    ("dtype", "text"), ("kv_dtype", "text"), ("flops", "flops"),
    ("weight_bytes_per_rank", "bytes"), ("kv_cache_bytes_per_rank", "bytes"),
    ("allreduce_bytes_total", "bytes"), ("ring_bytes_per_rank_total", "bytes"),
    ("boundary_bytes", "bytes"),
)
SWEEP_TABLE_FIT = (("fits", "bool"), ("mem_total", "bytes"), ("kv_tokens_fit", "int"),
                   ("ttft_s", "time"), ("decode_s_per_token", "time"), ("tokens_per_s", "rate"),
                   ("expected_ttft_s", "time"), ("expected_decode_s_per_token", "time"),
                   ("expected_tokens_per_s", "rate"))

# the byte matrix of the rows written at once: 1 MiB stays in the core's cache through its
# ~60 passes (the template, each field, the NULs' deletion): ~10% less CPU than 8 MiB with
# --gpu; 256 KiB pays more calls a row
BLOCK_BYTES = 1 << 20

# the same text on every row; one 'S' item (NUL-padded) a row; or (items, r): one item for
# each run of r rows
Text = bytes | np.ndarray
Field = Text | tuple[np.ndarray, int]


# -- one column as bytes --------------------------------------------------------------------------

_DIGITS: tuple[np.ndarray, np.ndarray] | None = None
_SCRATCH: list[np.ndarray] = []  # int64 work arrays, reused: fresh ones cost page faults
_BLOCK: list[bytearray] = []  # sweep_bytes' block of rows, reused alike (_block)


def _digits() -> tuple[np.ndarray, np.ndarray]:
    """4-digit groups as uint32 (4 bytes of text each): 0..9999 with leading zeros, then
    10000.. the same without them (NUL instead). In the first table 10000 is "0" (the last
    group of the number 0), in the second all NUL (a group before the number begins): the
    float writer's integer cells (floats.text_cells)."""
    global _DIGITS
    if _DIGITS is None:
        cells = text_cells()["int"]
        _DIGITS = (np.concatenate([cells[:10_000], cells[20_000:]]), cells[:20_000])
    return _DIGITS


def _scratch(n: int) -> np.ndarray:
    if not _SCRATCH or _SCRATCH[0].shape[1] < n:
        _SCRATCH[:] = [np.empty((3, n), dtype=np.int64)]
    return _SCRATCH[0][:, :n]


def _int_field(a: np.ndarray) -> Text:
    """Non-negative int64 in decimal: groups of 4 digits, right-aligned, NUL before."""
    lo, hi = int(a.min()), int(a.max())
    if lo == hi:
        return str(lo).encode()
    if lo < 0 or hi >= 1 << 63:  # (beyond int64: Python ints)
        return _table_field(np.array([str(x) for x in a.tolist()], dtype="S"))
    last, other = _digits()
    groups = (len(str(hi)) + 3) // 4
    n = a.size
    out = np.empty((n, groups), dtype=np.uint32)
    work = _scratch(n)
    r = work[2]
    v = np.ascontiguousarray(a, dtype=np.int64)  # a run's items: a view; divided faster whole
    for j in range(groups - 1, 0, -1):  # from the last group: v = 10000·q + r
        q = work[j % 2]
        np.floor_divide(v, 10_000, out=q)
        np.multiply(q, 10_000, out=r)
        np.subtract(v, r, out=r)
        if lo < 10 ** (4 * (groups - j)):  # some row's leading group: no leading zeros
            np.add(r, 10_000, out=r, where=q == 0)
        np.take(last if j == groups - 1 else other, r, out=out[:, j])
        v = q
    np.add(v, 10_000, out=r)  # the first group (< 10000): leading
    np.take(last if groups == 1 else other, r, out=out[:, 0])
    # the NULs every row has before its digits left out (a view): narrower rows to fill, copy
    # and delete the NULs of
    pad = 4 * groups - len(str(hi))
    return np.ndarray((n,), dtype=f"S{4 * groups - pad}", buffer=out, offset=pad,
                      strides=(4 * groups,))


def _block(size: int) -> bytearray:
    """A block's bytes, `size` long: one buffer kept and resized in place from block to block
    (a fresh one each time pays its pages' faults again: ~15% of a large sweep's CPU time)."""
    if not _BLOCK:
        _BLOCK.append(bytearray(size))
    buf = _BLOCK[0]
    if len(buf) > size:
        del buf[size:]
    else:
        buf.extend(bytes(size - len(buf)))
    return buf


def _table_field(s: np.ndarray) -> Text:
    """A fixed-width bytes array ('S', NUL-padded); empty strings everywhere: nothing."""
    return s if s.dtype.itemsize else b""


def _gather(labels: list[bytes], codes: np.ndarray, periods: tuple[int, ...] = ()) -> Field:
    """Each point's label (codes index labels): one text where every point has the same one
    (a chunk's phase; two dtypes' activations both bf16), one item a run where the codes repeat
    along the chunk's runs (the dtype: the same for each KV dtype)."""
    if len(labels) == 1:
        return labels[0]
    texts = list(dict.fromkeys(labels))
    if len(texts) < len(labels):  # equal labels: one code each
        codes = np.array([texts.index(x) for x in labels], dtype=np.intp)[codes]
    if len(texts) == 1 or (codes.size and codes.min() == codes.max()):
        return texts[int(codes[0])] if codes.size else b""
    table = np.array(texts, dtype="S")
    return _per_run(codes, periods, lambda c: _table_field(table[c]))


def _text(v: Any, json_mode: bool) -> str:
    """One value of an object column, as the rows show it."""
    if v is None:
        return "null" if json_mode else ""
    if isinstance(v, str):
        return json.dumps(v) if json_mode else _csv_cell(v)
    if isinstance(v, bool | np.bool_):
        return "true" if v else "false"
    if isinstance(v, float) and not math.isfinite(v):  # JSON has no inf or nan
        return "null" if json_mode else ""
    return str(v)


_PROBE = 1024  # a float column whose first values are (nearly) all distinct is formatted whole


def _float_field(a: np.ndarray, json_mode: bool) -> Text:
    """Shortest round-trip (`repr`, as numpy's str), each distinct value once when many repeat;
    NaN (and inf: JSON has neither) null (JSON) or empty (CSV)."""
    if a.dtype != np.float64:  # numpy's str of a float32 is not repr of the float64
        s = a.astype("S")
        s = s.astype(f"S{max(4, s.dtype.itemsize)}")  # room for null ('inf' is 3 bytes)
        s[~np.isfinite(a)] = b"null" if json_mode else b""
        return _table_field(s)
    from ..costs.grid import distinct, run_starts  # not at import: fit's tables import this

    probe = distinct(a[:_PROBE].view(np.int64))
    if a.size < 2 or probe.size * 10 > min(a.size, _PROBE) * 9:
        return _table_field(_nulled(a, json_mode))  # distinct: no sort of the whole column
    v = a.view(np.int64)  # by bits: -0.0 is not 0.0
    new = run_starts(v)
    first = np.flatnonzero(new)
    if first.size == 1:  # one value
        x = float(a[0])
        return (b"null" if json_mode else b"") if not math.isfinite(x) else repr(x).encode()
    if first.size * 4 < a.size * 3:  # repeats next to each other (a sweep's inner axes): no sort
        return _table_field(_nulled(a[first], json_mode)[np.cumsum(new) - 1])
    bits, inv = np.unique(v, return_inverse=True)
    if bits.size * 4 < a.size * 3:  # each distinct value once
        return _table_field(_nulled(bits.view(np.float64), json_mode)[inv.ravel()])
    return _table_field(_nulled(a, json_mode))


def _nulled(a: np.ndarray, json_mode: bool) -> np.ndarray:
    """repr of each float64 ('S'), NaN and inf null (JSON) or empty (CSV)."""
    s = repr_bytes(a)
    nan = ~np.isfinite(a)
    if nan.any():
        s = s.astype(f"S{max(4, s.dtype.itemsize)}")  # room for null ('inf' is 3 bytes)
        s[nan] = b"null" if json_mode else b""
    return s


def _object_field(a: np.ndarray, json_mode: bool) -> Field:
    """Python ints (exact beyond int64), strings, None: each distinct value formatted once."""
    values = a.tolist()
    uniq = list(dict.fromkeys(values))
    # only a str equals a str, and None None: texts and Nones need no look at every value
    types = set(map(type, uniq))
    if not types <= {str, type(None)}:
        types = set(map(type, values))  # a number may equal one of another type (1 == 1.0)
    if types == {int}:  # what the closed form gives where int64 might overflow
        try:
            return _int_field(np.array(values, dtype=np.int64))
        except OverflowError:
            return _table_field(np.array(list(map(str, values)), dtype="S"))
    if not types <= {str, type(None)}:  # mixed numbers (1 == 1.0 == True): value by value
        return _table_field(np.array([_text(v, json_mode).encode() for v in values], dtype="S"))
    labels = [_text(v, json_mode).encode() for v in uniq]
    if len(labels) == 1:
        return labels[0]
    index = {v: i for i, v in enumerate(uniq)}
    codes = np.fromiter(map(index.__getitem__, values), dtype=np.intp, count=len(values))
    return _gather(labels, codes)


def _per_run(a: np.ndarray, periods: tuple[int, ...], write: Callable[[np.ndarray], Text]
             ) -> Field:
    """`write` of the column, once a run where it is the same along the chunk's runs."""
    r = _period(a, periods) if periods else 1
    f = write(a[::r] if r > 1 else a)
    return f if r == 1 or isinstance(f, bytes) else (f, r)


def _period(a: np.ndarray, periods: tuple[int, ...]) -> int:
    """The longest of the chunk's runs (`periods`, ascending, each a multiple of the one
    before) along which the column does not change (1: none): every change falls where a run
    begins. (One pass to find the changes: a column that changes on most rows costs no more.)"""
    new = a[1:] != a[:-1]  # new[i]: the value changes at row i + 1
    changes = int(np.count_nonzero(new))
    for r in reversed(periods):  # fewer changes than runs, each where a run begins
        if changes * r < a.size and np.count_nonzero(new[r - 1::r]) == changes:
            return r
    return 1


def _field(a: np.ndarray, json_mode: bool, periods: tuple[int, ...] = ()) -> Field:
    kind = a.dtype.kind
    if kind in "iu":  # e.g. FLOPs, the same at every pp, dtype and KV dtype: once a run
        return _per_run(a, periods, _int_field)
    if kind == "b":
        return _gather([b"false", b"true"], a.view(np.uint8), periods)
    if kind == "f":
        return _float_field(a, json_mode)
    if kind in "US":
        u, inv = np.unique(a, return_inverse=True)
        texts = [x.decode() if isinstance(x, bytes) else str(x) for x in u.tolist()]
        return _gather([_text(x, json_mode).encode() for x in texts], inv.ravel(), periods)
    return _object_field(a, json_mode)


# -- rows -----------------------------------------------------------------------------------------


def _pieces(chunk: Any, fmt: str, keys: list[str]) -> list[Field]:
    """The row as a sequence of constant texts and columns ('S' arrays), adjacent texts merged."""
    json_mode = fmt in ("json", "jsonl")
    out: list[Field] = []
    seen: dict[int, Field] = {}  # a column that is another's array (ttft_s, prefill_s)
    memo = getattr(chunk, "memo", None)  # texts of columns shared with other chunks
    shared = memo["columns"] if memo is not None else ()
    for i, k in enumerate(keys):
        if json_mode:
            sep = ("{" if i == 0 else ",") + json.dumps(k) + ":"
        else:
            sep = "" if i == 0 else ","
        out.append(sep.encode())
        if k in ("case", "model"):
            out.append(_text(getattr(chunk, k), json_mode).encode())
        elif k in getattr(chunk, "codes", {}):
            codes, labels = chunk.codes[k]
            out.append(_gather([_text(x, json_mode).encode() for x in labels], codes,
                               chunk.periods))
        elif getattr(chunk.columns[k], "codes", None) is not None:  # costs.grid.Labelled
            col = chunk.columns[k]
            out.append(_gather([_text(x, json_mode).encode() for x in col.labels], col.codes,
                               chunk.periods))
        else:
            col = chunk.columns[k]
            if id(col) not in seen:
                got = memo.get((k, json_mode)) if k in shared else None  # type: ignore[union-attr]
                if got is not None and got[0] is col:  # the other phase's rows: the same plan
                    seen[id(col)] = got[1]
                else:
                    seen[id(col)] = _field(np.asarray(col), json_mode, chunk.periods)
                    if k in shared and col.dtype.kind in "fOiub":  # the plan's, for the other phase
                        memo[k, json_mode] = col, seen[id(col)]  # type: ignore[index]
            out.append(seen[id(col)])
    out.append(b"}\n" if json_mode else b"\n")
    merged: list[Field] = []
    for p in out:
        if isinstance(p, bytes) and merged and isinstance(merged[-1], bytes):
            merged[-1] += p
        else:
            merged.append(p)
    return _joined(merged)


def _joined(pieces: list[Field]) -> list[Field]:
    """Each stretch of items a run (tuples) with only texts between them as one item a run of
    the shortest period among them: a row then copies one wide item, not one a field (a copy
    costs about the same whatever the item's width), and joining copies one item a run."""
    out: list[Field] = []
    i = 0
    while i < len(pieces):
        j = i + 1
        if isinstance(pieces[i], tuple):
            while (j + 1 < len(pieces) and isinstance(pieces[j], bytes)
                   and isinstance(pieces[j + 1], tuple)):
                j += 2
        if j - i < 3:
            out.append(pieces[i])
            i += 1
            continue
        part = pieces[i:j]
        r = min(p[1] for p in part if isinstance(p, tuple))
        first = part[0]
        assert isinstance(first, tuple)
        runs = len(first[0]) * first[1] // r
        width = sum(len(p) if isinstance(p, bytes) else _items(p).dtype.itemsize for p in part)
        mat = np.empty((runs, width), dtype=np.uint8)
        at = 0
        for p in part:
            if isinstance(p, bytes):
                mat[:, at:at + len(p)] = np.frombuffer(p, dtype=np.uint8)
                at += len(p)
            else:
                _copy(mat, at, width, p[0], p[1] // r, 0, runs)
                at += p[0].dtype.itemsize
        out.append((mat.view(f"S{width}").reshape(runs), r))
        i = j
    return out


def _copy(buf: Any, at: int, width: int, items: np.ndarray, per: int, lo: int, hi: int) -> None:
    """Rows lo..hi (multiples of `per`) of a buffer of rows `width` bytes wide, at byte `at` of
    each: items[lo/per..hi/per], each on `per` rows in turn."""
    if per == 1:
        dst = np.ndarray((hi - lo,), dtype=items.dtype, buffer=buf, offset=at, strides=(width,))
        dst[...] = items[lo:hi]
    else:
        dst = np.ndarray(((hi - lo) // per, per), dtype=items.dtype, buffer=buf, offset=at,
                         strides=(width * per, width))
        dst[...] = items[lo // per:hi // per, None]


def sweep_header(fmt: str, keys: list[str]) -> bytes:
    """CSV's header line (JSON Lines has none)."""
    return b"" if fmt in ("json", "jsonl") else (",".join(keys) + "\n").encode()


def sweep_bytes(chunk: Any, fmt: str, keys: list[str]) -> Iterator[bytes | bytearray]:
    """The chunk's rows as JSON Lines or CSV (UTF-8, each line ending in a newline), in blocks
    of at most ~BLOCK_BYTES."""
    n = len(chunk)
    if not n:
        return
    pieces = _pieces(chunk, fmt, keys)
    template = b"".join(p if isinstance(p, bytes) else bytes(_items(p).dtype.itemsize)
                        for p in pieces)
    width = len(template)
    blocks = -(-n * width // BLOCK_BYTES)  # blocks of (nearly) equal rows: one buffer fits all
    step = -(-n // blocks)
    run = max((p[1] for p in pieces if isinstance(p, tuple)), default=1)
    step += -step % run  # whole runs a block (n is a multiple of each)
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        buf = _block((hi - lo) * width)
        rows = np.ndarray((hi - lo, width), dtype=np.uint8, buffer=buf)
        rows[...] = np.frombuffer(template, dtype=np.uint8)  # the template on every row
        at = 0
        for p in pieces:
            if isinstance(p, bytes):
                at += len(p)
                continue
            # one item a row, or (items, r) one a run of r rows, copied to each of them
            items, r = p if isinstance(p, tuple) else (p, 1)
            _copy(buf, at, width, items, r, lo, hi)
            at += items.dtype.itemsize
        del rows
        yield buf.translate(None, b"\0")


def _items(p: np.ndarray | tuple[np.ndarray, int]) -> np.ndarray:
    return p[0] if isinstance(p, tuple) else p


def write_sweep(chunks: Iterable[Any], fmt: str, keys: list[str],
                write: Callable[[bytes | bytearray], Any]) -> int:
    """Every chunk's rows (CSV: the header first, once) through `write`; the number of rows."""
    rows = 0
    head = sweep_header(fmt, keys)
    if head:
        write(head)
    for chunk in chunks:
        for block in sweep_bytes(chunk, fmt, keys):
            write(block)
        rows += len(chunk)
    return rows


def sweep_lines(chunk: Any, fmt: str, header: bool, keys: list[str]) -> Iterator[str]:
    """The chunk's rows as JSON Lines or CSV lines (with `keys` in order), in blocks without
    their last newline."""
    if header and fmt not in ("json", "jsonl"):
        yield ",".join(keys)
    for block in sweep_bytes(chunk, fmt, keys):
        yield block[:-1].decode("utf-8")


def _csv_cell(s: str) -> str:
    return '"' + s.replace('"', '""') + '"' if any(c in s for c in ',"\r\n') else s


# -- tables ---------------------------------------------------------------------------------------


def table_cols(fit: bool) -> tuple[tuple[str, str], ...]:
    return SWEEP_TABLE_COLS + (SWEEP_TABLE_FIT if fit else ())


def table_rows(c: Any, cols: tuple[tuple[str, str], ...]) -> Iterator[list[str]]:
    lists = {k: c.columns[k].tolist() for k, _ in cols}
    for i in range(len(c)):
        yield [c.case, *(fmt_value(kind, lists[k][i]) for k, kind in cols)]


def sweep_markdown_lines(chunks: Iterable[Any], fit: bool) -> Iterator[str]:
    """A Markdown table, streamed: the header, then each chunk's rows (one text a chunk)."""
    cols = table_cols(fit)
    yield markdown_table(["model", *(k for k, _ in cols)], []).rstrip("\n")
    for c in chunks:
        rows = list(table_rows(c, cols))
        if rows:
            yield markdown_table(["model"], rows).split("\n", 2)[2].rstrip("\n")


def sweep_markdown(chunks: list[Any]) -> str:
    fit = any("fits" in c.columns for c in chunks)
    return "\n".join(sweep_markdown_lines(chunks, fit)) + "\n"
