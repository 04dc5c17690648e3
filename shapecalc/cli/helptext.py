"""Help as written: typer renders every help text through rich markup, where `[m,k]` reads as a
style tag and vanishes ("a matmul × costs 2·m·k·n"). `escape_tree` escapes the help of a click
command, its options and its subcommands once, when the command is built, so that no help string
needs escaping by hand; `-h` is `--help` everywhere (HELP_OPTIONS), and `--version` prints the
version.

No rich import here: the pattern is rich.markup.escape's, so start-up stays light.
"""

from __future__ import annotations

import re
from typing import Any

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}
# what rich reads as a tag: `[` + a lowercase letter, #, / or @ … `]` (rich.markup.escape)
_TAG = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")


def escape(text: str) -> str:
    """`text` with every would-be markup tag escaped (rich.markup.escape, without rich)."""
    out = _TAG.sub(lambda m: f"{m.group(1)}{m.group(1)}\\{m.group(2)}", text)
    return out + "\\" if out.endswith("\\") and not out.endswith("\\\\") else out


def escape_tree(cmd: Any) -> Any:
    """Escape the help texts of `cmd`, its parameters and its subcommands, in place, where typer
    renders them as rich markup; returns `cmd`."""
    if getattr(cmd, "rich_markup_mode", None) == "rich" and not getattr(cmd, "_escaped", False):
        for attr in ("help", "short_help", "epilog"):
            if isinstance(getattr(cmd, attr, None), str):
                setattr(cmd, attr, escape(getattr(cmd, attr)))
        for p in getattr(cmd, "params", ()):
            if isinstance(getattr(p, "help", None), str):
                p.help = escape(p.help)
        cmd._escaped = True
    for sub in getattr(cmd, "commands", {}).values():
        escape_tree(sub)
    return cmd


def print_version(value: bool) -> None:
    """The eager `--version` callback: print `shapecalc VERSION` and stop."""
    if not value:
        return
    import typer

    from .. import __version__

    typer.echo(f"shapecalc {__version__}")
    raise typer.Exit(0)
