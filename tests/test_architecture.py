"""The package's structure: no import cycles, data flows down the layers, typer only in cli/,
and each file keeps to one job (a size bound)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1] / "shapecalc"
# lower layers never import higher ones
LAYERS = ["model", "reference", "inputs", "interpret", "costs", "check", "plan", "serve", "train",
          "render", "api", "cli"]


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """shapecalc modules imported anywhere in the file (lazy and type-only imports included)."""
    mod = _module(path)
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out: set[str] = set()
    tree = ast.parse(path.read_text())
    # imports under `if TYPE_CHECKING:` count too: a module that names its registry's type
    # depends on the registry
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - node.level + 1]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            if not src.startswith("shapecalc"):
                continue
            for a in node.names:  # `from . import x` may name a module
                cand = f"{src}.{a.name}"
                out.add(cand if (ROOT.parent / cand.replace(".", "/")).with_suffix(".py").exists()
                        or (ROOT.parent / cand.replace(".", "/")).is_dir() else src)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("shapecalc")}
    out.discard(mod)
    return out


def graph() -> dict[str, set[str]]:
    return {_module(p): _imports(p) for p in ROOT.rglob("*.py")}


def _layer(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_import_cycles():
    g = graph()
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(g.get(m, ())):
            if n not in g or n == "shapecalc":
                continue
            assert state.get(n) != 1, "import cycle: " + " → ".join([*path, m, n])
            if n not in state:
                visit(n, [*path, m])
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m, [])


def test_data_flows_down_the_layers():
    for mod, deps in graph().items():
        here = _layer(mod)
        if here not in LAYERS:
            continue
        for dep in deps:
            there = _layer(dep)
            if there in LAYERS:
                assert LAYERS.index(there) <= LAYERS.index(here), f"{mod} imports {dep}"


def test_typer_only_in_the_cli():
    for path in ROOT.rglob("*.py"):
        if _layer(_module(path)) == "cli":
            continue
        tree = ast.parse(path.read_text())
        names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                 for a in n.names}
        names |= {(n.module or "").split(".")[0] for n in ast.walk(tree)
                  if isinstance(n, ast.ImportFrom) and not n.level}
        assert "typer" not in names and "click" not in names, path


def test_files_stay_small():
    big = {str(p.relative_to(ROOT)): n for p in ROOT.rglob("*.py")
           if (n := len(p.read_text().splitlines())) > 450}
    assert not big, big


def test_type_only_imports_count():
    """alibi.py names NumericBase only under `if TYPE_CHECKING:`: the graph still has the edge
    (a cycle through such an import fails test_no_import_cycles)."""
    assert "shapecalc.interpret.numeric_base" in graph()["shapecalc.interpret.alibi"]
