"""Where text output goes: --format checks, --output files, JSON, CSV and Markdown text. No rich:
the JSON paths import this and nothing heavier (tables and their SVG/HTML exports: console.py).
"""

from __future__ import annotations

import io
import json
import math
import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from ..model.config import ShapecalcError

FORMATS = ("table", "json", "csv", "markdown")



def check_format(fmt: str, allowed: Iterable[str] = FORMATS) -> str:
    allowed = tuple(allowed)
    if fmt not in allowed:
        raise ShapecalcError("format", f"{fmt!r} is not one of {', '.join(allowed)}")
    return fmt


# ── files: checked before anything is written, written atomically, committed together ────────────
#
# An existing output file is overwritten (like `>` and `cp`), but only when the command succeeds:
# each file is written to a temporary file in its own folder and moved over the target with
# os.replace, all at the end (cli.main commits; a failed command discards). An output that is one of
# the command's inputs, a folder, a missing folder or an empty path is refused before anything is
# written. Devices and FIFOs (/dev/null, /dev/full) are written in place.


class _Pending:
    """Files written during one command, moved into place together by commit()."""

    def __init__(self) -> None:
        self.files: list[OutputFile] = []


_tx: _Pending | None = None


@contextmanager
def transaction() -> Iterator[Callable[[], None]]:
    """Outputs opened inside are moved into place when the returned commit() is called, and
    discarded (temporary files removed, targets untouched) otherwise."""
    from ..inputs.files import READ

    global _tx
    outer, _tx = _tx, _Pending()
    tx = _tx
    if outer is None:
        READ.clear()  # the inputs of this command only (an inode may be reused afterwards)

    def commit() -> None:
        for f in tx.files:
            f.close()
        for f in tx.files:
            f.commit()
        tx.files.clear()

    try:
        yield commit
    finally:
        _tx = outer
        for f in tx.files:
            f.discard()
        if outer is None:
            READ.clear()


class OutputFile(io.TextIOWrapper):
    """A text stream to an output: a temporary file next to the target (or the device itself).
    Write errors (ENOSPC on /dev/full) come out as one ShapecalcError naming the field and file."""

    field: str
    target: str
    temp: str | None

    def error(self, e: OSError) -> ShapecalcError:
        return ShapecalcError(self.field, f"cannot write {shown(self.target)}: {e.strerror or e}")

    def write(self, s: str) -> int:
        try:
            return super().write(s)
        except OSError as e:
            raise self.error(e) from None

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as e:
            raise self.error(e) from None

    def close(self) -> None:
        if self.closed:
            return
        try:
            super().close()
        except OSError as e:
            raise self.error(e) from None
        finally:
            if _tx is None or self not in _tx.files:
                self.commit()

    def commit(self) -> None:
        if self.temp is not None:
            try:
                os.replace(self.temp, self.target)
            except OSError as e:
                self.discard()
                raise self.error(e) from None
            self.temp = None

    def discard(self) -> None:
        if not self.closed:
            with suppress(OSError):
                super().close()
        if self.temp is not None:
            with suppress(OSError):
                os.unlink(self.temp)
            self.temp = None


def quiet_stdout() -> None:
    """Point stdout at /dev/null (after a broken pipe or a full disk), so that the flush at exit
    is quiet."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def shown(path: str | Path) -> str:
    from ..inputs.files import shown as _shown

    return _shown(path)


def check_outputs(on_stdout: str | None = None, **paths: str | Path | None) -> None:
    """Refuse, before anything is written: an empty path, a folder, a missing folder, the same
    file twice, an input of this command. `paths`: field → path (None: not asked for).

    `-` is stdout, for --output and for the other writers (--svg -, --html -) alike, but one
    thing at a time: the command's table or JSON goes there unless --output names a file, and
    `on_stdout` says what else does (--chart's bars)."""
    seen: dict[str, str] = {}
    taken = on_stdout
    if "output" in paths and paths["output"] in (None, "-"):
        taken = taken or "the command's output (send it to a file with --output FILE)"
    for field, path in paths.items():
        if path is not None and field != "output" and str(path) == "-":
            if taken:
                raise ShapecalcError(field, f"- (stdout) already carries {taken}")
            taken = f"--{field}"
            continue
        if path is None or (field == "output" and str(path) == "-"):
            continue
        _check_one(field, str(path))
        real = os.path.realpath(path)
        if real in seen:
            raise ShapecalcError(field, f"{shown(path)} is also the --{seen[real]} file")
        seen[real] = field


def _check_one(field: str, path: str) -> None:
    from ..inputs.files import READ

    if not path.strip():
        raise ShapecalcError(field, "an empty path")
    p = shown(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise ShapecalcError(field, f"cannot write {p}: {e.strerror or e}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ShapecalcError(field, f"{p} is a directory")
    if st is not None and (st.st_dev, st.st_ino) in READ:
        read = READ[st.st_dev, st.st_ino]
        raise ShapecalcError(field, f"{p} is an input of this command"
                             f"{'' if read == path else f' (read as {shown(read)})'}; "
                             "not overwriting it")
    if st is not None and not stat.S_ISREG(st.st_mode):
        return  # a device or FIFO: written in place
    folder = os.path.dirname(os.path.realpath(path))
    if not os.path.isdir(folder):
        what = "not a directory" if os.path.lexists(folder) else "folder not found"
        raise ShapecalcError(field, f"cannot write {p}: {what}: {shown(folder)}")
    if st is not None and not os.access(path, os.W_OK):
        raise ShapecalcError(field, f"cannot write {p}: the file is read-only")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ShapecalcError(field, f"cannot write {p}: the folder is not writable")


def open_file(path: str | Path, field: str = "output") -> OutputFile:
    """A checked, atomic text stream to `path` (see above); close() it."""
    import tempfile  # here: the JSON hot path imports this module

    path = str(path)
    _check_one(field, path)
    target = os.path.realpath(path)
    temp: str | None = None
    try:
        if os.path.exists(target) and not stat.S_ISREG(os.stat(target).st_mode):
            # a device, or a FIFO with a reader (non-blocking: no reader fails, not hangs)
            fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK)
            os.set_blocking(fd, True)
        else:
            folder, name = os.path.split(target)
            fd, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
            mode = os.stat(target).st_mode & 0o7777 if os.path.exists(target) else _new_mode()
            os.fchmod(fd, mode)
    except OSError as e:
        if temp is not None:
            with suppress(OSError):
                os.unlink(temp)
        raise ShapecalcError(field, f"cannot write {shown(path)}: {e.strerror or e}") from None
    f = OutputFile(open(fd, "wb"), encoding="utf-8", newline="")
    f.field, f.target, f.temp = field, target, temp
    if _tx is not None:
        _tx.files.append(f)
    return f


def make_folder(path: str | Path, field: str) -> None:
    """A folder for outputs (with its parents), or one error line."""
    if os.path.lexists(path) and not os.path.isdir(path):
        raise ShapecalcError(field, f"{shown(path)} is not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ShapecalcError(field, f"cannot make the folder {shown(path)}: "
                             f"{e.strerror or e}") from None


def _new_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def open_output(path: str | None, field: str = "output") -> tuple[IO[str], bool]:
    """stdout, or the file (which the caller closes when the flag says so)."""
    if path is None or path == "-":
        return sys.stdout, False
    return open_file(path, field), True


def write_text(text: str, path: str | None, field: str = "output") -> None:
    out, close = open_output(path, field)
    try:
        out.write(text if text.endswith("\n") else text + "\n")
    finally:
        if close:
            out.close()


def json_text(doc: Any) -> str:
    try:
        return json.dumps(doc, ensure_ascii=False, indent=2, allow_nan=False)
    except ValueError:  # JSON has no inf or nan: a value that is not finite is null
        return json.dumps(finite(doc), ensure_ascii=False, indent=2, allow_nan=False)


def finite(doc: Any) -> Any:
    """`doc` with each inf or nan float as None (JSON's null: not finite, e.g. a time at
    --compute-efficiency 1e-300, or a check's difference where the run overflowed)."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, dict):
        return {k: finite(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [finite(v) for v in doc]
    return doc


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    def esc(s: str) -> str:
        return str(s).replace("|", "\\|")

    lines = ["| " + " | ".join(esc(h) for h in header) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def csv_text(header: list[str], rows: list[list[Any]]) -> str:
    buf = io.StringIO()
    import csv  # only --format csv writes it

    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow(["" if v is None else v for v in r])
    return buf.getvalue()


