from __future__ import annotations

import json
import sys
from dataclasses import dataclass

import pytest


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run `shapecalc ARGS` in-process through the real entry point (exit codes included)."""
    from shapecalc.cli import main

    def run(*args: str) -> Result:
        monkeypatch.setattr(sys, "argv", ["shapecalc", *args])
        capsys.readouterr()
        try:
            main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run
