"""An option that takes one value is given once: click keeps the last of `--tp 2 --tp 4` (and of
`--acceptance 0.7 --acceptance 0.5`) and silently drops the others, so a script that appends a
flag to a command line runs something else than either value says. Each command's parser refuses
a repeat in one line naming the flag and both values; repeatable options (`--set`, `--perf`,
`--set-gpu`: `multiple`) and on/off flags (`--json --json` means the same) are left as they are."""

from __future__ import annotations

from typing import Any


def _repeats(order: list[Any], args: list[str]) -> None:
    from typer.core import _click

    seen: set[str | None] = set()
    for p in order:
        if getattr(p, "param_type_name", "") != "option" or p.multiple or p.is_flag or p.count:
            continue
        if p.name in seen:
            names = (*p.opts, *p.secondary_opts)
            given = [a.partition("=")[2] if "=" in a else args[i + 1] if i + 1 < len(args)
                     else "" for i, a in enumerate(args) if a.partition("=")[0] in names]
            flag = max(p.opts, key=len)
            raise _click.exceptions.UsageError(
                f"{flag.lstrip('-')}: {flag} is given more than once "
                f"({', '.join(repr(v) for v in given)}): give it once")
        seen.add(p.name)


def once(cmd: Any) -> None:
    """Make `cmd`'s parser (not its subcommands') refuse a one-value option given twice."""
    if getattr(cmd, "_once", False) or not hasattr(cmd, "make_parser"):
        return
    make = cmd.make_parser

    def make_parser(ctx: Any) -> Any:
        parser = make(ctx)
        parse = parser.parse_args

        def parse_args(args: list[str]) -> Any:
            given = list(args)  # the parser consumes its list
            opts, largs, order = parse(args=args)
            _repeats(order, given)
            return opts, largs, order

        parser.parse_args = parse_args
        return parser

    cmd.make_parser = make_parser
    cmd._once = True


def given(name: str) -> bool:
    """Whether the running command's option `name` (its parameter name) was typed, not left at
    its default: a flag whose default is a value (`--router round-robin`) is refused where it
    does not apply only when the user gave it."""
    from typer._click.globals import get_current_context

    ctx = get_current_context(silent=True)
    source = ctx.get_parameter_source(name) if ctx is not None else None
    return source is not None and source.name == "COMMANDLINE"
