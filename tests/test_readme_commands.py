"""README.md begins with the two commands a newcomer runs; `.ci/run` runs the second one exactly."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    block = re.search(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert block, "README.md has no sh block"
    return [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_readme_begins_with_install_and_test_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert text.index("```sh") < text.index("\n## "), "the commands come before any section"
    install, tests = _readme_commands()
    assert install.startswith("python3 -m pip install -e .") and "shapecalc" in install
    assert "pytest" in tests


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert _readme_commands()[1] in ci
