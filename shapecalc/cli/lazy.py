"""Commands that load when used: `register` adds each as a thin forwarder; the module that
defines it is imported, and typer builds its options, only when it is invoked.

typer turns every registered command's signature into click parameters on each start; for these
commands' 20–30 options each, that would cost the start-up of every other command (`trace --json`
most of all). `shapecalc NAME --help` reaches the real command, so every option keeps its help.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import typer

from .helptext import HELP_OPTIONS, escape_tree

# name: (module under cli/, the line `shapecalc --help` lists)
COMMANDS: dict[str, tuple[str, str]] = {
    "verify": ("verify", "Run the model in NumPy and check every symbolic number against the "
               "measured one."),
    "explain": ("verify", "Walk an attention example through the executor, matrix by matrix."),
    "compare": ("plan", "Side by side, one column per case (and per --tp/--batch/--seq/--dtype "
                "value)."),
    "sweep": ("plan", "A grid over batch, seq, tp, pp, dtype, kv dtype and phase, evaluated in "
              "closed form with NumPy."),
    "fit": ("plan", "Does a model fit a GPU at tp×pp?"),
    "hardware": ("hardware", "List the GPU profiles, or show one (with --set-gpu overrides)."),
    "calibrate": ("calibrate", "Fit the expected-time model to serving measurements; write a "
                  "GPU profile."),
    "calibrate-train": ("calibrate_train", "Fit the training step-time model to published "
                        "training records; measured/predicted."),
    "serve": ("serve", "Simulate serving under load: latency percentiles, throughput, goodput, "
              "and the GPUs an SLO needs."),
    "train": ("train", "One training step: FLOPs, per-rank memory by term, batch, ledgers and "
              "(with --gpu) step time, MFU and days to train."),
}


def register(app: typer.Typer) -> None:
    for name, (_, short) in COMMANDS.items():
        app.command(
            name,
            help=short,
            short_help=short,
            add_help_option=False,
            context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        )(_forwarder(name))


def command(name: str) -> Any:
    """The real click command (for the forwarder, and for tests)."""
    module = importlib.import_module(f".{COMMANDS[name][0]}", __package__)
    sub = typer.Typer(add_completion=False, pretty_exceptions_enable=False,
                      context_settings=HELP_OPTIONS)
    sub.command(name, help=module.HELP[name])(module.COMMANDS[name])
    return escape_tree(typer.main.get_command(sub))


def _forwarder(name: str) -> Callable[[typer.Context], None]:
    def forward(ctx: typer.Context) -> None:
        prog = f"{ctx.parent.info_name if ctx.parent else 'shapecalc'} {name}"
        code = command(name).main(args=list(ctx.args), prog_name=prog, standalone_mode=False)
        if isinstance(code, int) and code:
            raise typer.Exit(code)

    forward.__name__ = name
    return forward
