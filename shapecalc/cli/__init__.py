"""The command line: typer commands that parse, call the library, and render."""

import gc

# A command's start-up allocates a few 10⁵ objects (modules, classes, records) and frees few
# cycles: collecting every 700 allocations walks them again and again for nothing (~3% of
# `fit --json`'s instructions); every 100,000 still bounds what a long `serve` run leaves.
gc.set_threshold(100_000, 10, 10)

from .app import main  # noqa: E402

__all__ = ["main"]
