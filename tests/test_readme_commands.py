"""README.md begins with the two commands a newcomer runs; `.ci/run` runs the second one exactly;
the README is short and links into docs/."""

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


def test_readme_is_short_and_links_into_the_docs() -> None:
    """README.md is the front page (about 200 lines at most); the rest lives in docs/."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    linked = set(re.findall(r"\]\((docs/[^)#]+\.md)", text))
    assert linked and all((ROOT / p).is_file() for p in linked)
    assert {"docs/concepts.md", "docs/reference/commands.md", "docs/checked/verify.md"} <= linked
