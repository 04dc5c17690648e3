"""The command line: typer commands that parse, call the library, and render."""

from .app import main

__all__ = ["main"]
