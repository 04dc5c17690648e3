"""Help as written, with every default: typer renders every help text through rich markup, where
`[m,k]` reads as a style tag and vanishes ("a matmul × costs 2·m·k·n"). `escape_tree` escapes the
help of a click command, its options and its subcommands once, when the command is built, so that
no help string needs escaping by hand; and it states the default of each option whose default is
None (the workload's, or the model's: SHOWN_DEFAULTS). `-h` is `--help` everywhere
(HELP_OPTIONS), and `--version` prints the version.

No rich import here: the pattern is rich.markup.escape's, so start-up stays light.
"""

from __future__ import annotations

import re
from typing import Any

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}
# what rich reads as a tag: `[` + a lowercase letter, #, / or @ … `]` (rich.markup.escape)
_TAG = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")


# What an option left out means, where its Python default is None ("command --opt" first).
SHOWN_DEFAULTS = {
    "--preset": "seed-tiny, without --config or --hf-config",
    "--config": "none", "--hf-config": "none", "--set": "none",
    "--presets-dir": "the built-in presets", "--hardware-dir": "the built-in profiles",
    "--batch": "1", "--seq": "min(2048, max_positions)", "--phase": "prefill",
    "--dtype": "bf16", "--kv-dtype": "the dtype", "--act-dtype": "the dtype",
    "--mode": "none: the widths of --dtype", "--logits": "all", "--tp": "1", "--pp": "1",
    "--ep": "1", "--mla-form": "absorbed", "--mtp": "off: the model's own step",
    "--block-size": "16", "--attention-flops": "full",
    "--mixer-flops": "transformers-torch", "--state-cache": "transformers",
    "--state-dtype": "auto: the activations' dtype",
    "--padding-mask": "no-padding-mask", "--output": "stdout", "--svg": "none",
    "--html": "none", "--gpu": "none: no fit or time rows", "--set-gpu": "none",
    "--price": "none", "--compute-dtype": "the activation dtype (a --mode's GEMM dtype)",
    "--perf": "none", "--write": "none", "--plot": "none",
    "--chart-y": "expected_tokens_per_s with --gpu, else kv_cache_bytes_per_rank",
    "verify --batch": "2", "verify --seq": "min(16, max_positions)",
    "verify --layers": "as many as fit the memory budget", "verify --memory-budget": "4",
    "explain --seq": "4 (the worked example: 3)", "fit --logits": "last",
    "fit --gpu": "none: required", "serve --gpu": "none: required",
    "fit --seq": "min(2048, max_positions; under a learned table, max_positions − 1)",
    "fit case": "none: --preset, --config or --hf-config", "hardware name": "all profiles",
    "schema which": "none: list the schemas", "presets words": "none: list every preset",
    "hardware words": "none: list every profile",
}


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
            _show_default(cmd.name, p)
        cmd._escaped = True
    from .digits import ascii_numbers

    ascii_numbers(cmd)  # `--batch ３` is refused, not batch 3
    from .once import once

    once(cmd)  # `--tp 2 --tp 4` is refused, not tp=4
    for sub in getattr(cmd, "commands", {}).values():
        escape_tree(sub)
    return cmd


def _show_default(command: str | None, p: Any) -> None:
    """An option (or optional argument) whose default is None shows what leaving it out means."""
    if p.default not in (None, "") or isinstance(p.show_default, str) or p.required:
        return
    name = p.opts[0] if p.param_type_name == "option" else p.name
    if name in ("--help", "--version"):
        return
    shown = SHOWN_DEFAULTS.get(f"{command} {name}") or SHOWN_DEFAULTS.get(name)
    if shown is not None:
        p.show_default = shown


def print_version(value: bool) -> None:
    """The eager `--version` callback: print `shapecalc VERSION` and stop."""
    if not value:
        return
    import typer

    from .. import __version__

    typer.echo(f"shapecalc {__version__}")
    raise typer.Exit(0)
