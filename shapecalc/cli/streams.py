"""What the terminal and the standard streams can do to a command, handled once around it:

- output files are committed only when the command succeeds (render/output.py's transaction);
- a stdout that cannot encode our symbols (PYTHONIOENCODING=ascii, a C locale) gets ASCII
  stand-ins (× → x, · → *, box lines → - |) instead of a UnicodeEncodeError;
- a closed pipe (`| head -1`) ends the command quietly; a full stdout (`> /dev/full`) is one
  error line and exit code 2, never a traceback;
- error lines escape control characters (a path with a newline stays one line).
"""

from __future__ import annotations

import codecs
import errno
import io
import sys
from collections.abc import Callable
from typing import Any

from ..model.errors import ShapecalcError
from ..render.output import quiet_stdout

# one character for one (tables stay aligned)
_ASCII = {
    "×": "x", "·": "*", "—": "-", "–": "-", "−": "-", "′": "'", "″": '"', "→": ">", "←": "<",
    "≤": "<", "≥": ">", "≈": "~", "≠": "#", "…": ".", "±": "~", "÷": "/", "√": "V", "∞": "8",
    "•": "*", "✓": "v", "✗": "x", "µ": "u", "Σ": "S", "⌈": "[", "⌉": "]", "⌊": "[", "⌋": "]",
    "γ": "g", "β": "b",
}


def _stand_in(c: str) -> str:
    if c in _ASCII:
        return _ASCII[c]
    import unicodedata  # only a stream that cannot encode a symbol pays for its tables

    if unicodedata.east_asian_width(c) in "WF":
        return "??"
    name = unicodedata.name(c, "")
    if "BOX DRAWINGS" in name:
        return "|" if "VERTICAL" in name and "HORIZONTAL" not in name else "-" \
            if "HORIZONTAL" in name and "VERTICAL" not in name else "+"
    if "BLOCK" in name or "SHADE" in name:
        return "#"
    plain = unicodedata.normalize("NFKD", c).encode("ascii", "ignore").decode()
    return plain[:1] or "?"


def _degrade(err: UnicodeError) -> tuple[str, int]:
    if not isinstance(err, UnicodeEncodeError):
        raise err
    return "".join(_stand_in(c) for c in err.object[err.start:err.end]), err.end


codecs.register_error("shapecalc-ascii", _degrade)


def _ascii_fallback() -> None:
    """Streams whose encoding cannot write our symbols degrade them (see _ASCII)."""
    for s in (sys.stdout, sys.stderr):
        try:
            "×·—′─█".encode(getattr(s, "encoding", None) or "utf-8")
        except (UnicodeEncodeError, LookupError):
            reconfigure = getattr(s, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(errors="shapecalc-ascii")


class _Closed(io.TextIOBase):
    """stdout when the shell closed it (`>&-`): Python gives None; writing is an error line."""

    encoding = "utf-8"

    def write(self, s: str) -> int:
        raise OSError(errno.EBADF, "stdout is closed")


def error_line(text: str) -> None:
    from ..inputs.files import escape_controls

    if sys.stderr is None:  # `2>&-`: nowhere to say it; the exit code says it
        return
    try:
        sys.stderr.write(f"error: {escape_controls(text)}\n")
        sys.stderr.flush()
    except OSError:
        pass


def guarded(call: Callable[[], Any]) -> int:
    """Run a command; its exit code (2 for a stream or output failure)."""
    from ..render.output import transaction

    if sys.stdout is None:
        sys.stdout = _Closed()
    _ascii_fallback()
    try:
        with transaction() as commit:
            code = call()
            code = code if isinstance(code, int) else 0
            if code in (0, 1):  # 1: a verdict (fit: does not fit), not a failure
                commit()
            sys.stdout.flush()
        return code
    except ShapecalcError as e:  # an output file failed while committed
        error_line(str(e))
        return 2
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        quiet_stdout()
        return 0
    except OSError as e:
        if e.filename is not None or e.errno not in (errno.ENOSPC, errno.EIO, errno.EDQUOT,
                                                     errno.EFBIG, errno.EBADF):
            raise
        quiet_stdout()
        error_line(f"stdout: cannot write: {e.strerror or e}")
        return 2
