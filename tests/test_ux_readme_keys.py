"""Issue 12, defect 6: every JSON key and path the README mentions is in the real output.

- Each ```json block of the README is run (the backticked `shapecalc … --json` command just above
  it) and must be contained in the real document: the same nesting, keys and values.
- In every paragraph that speaks of JSON output (`--json`, JSON Lines), each backticked
  word that looks like a key (`kv_cache_bytes`) or a path (`parallel.tp.degree`) must be a key, a
  path from the top of a real document, or a string value of one (a stage `role` such as
  `attn.scores`), over the real outputs of trace, fit, compare, sweep, verify and explain.
"""

from __future__ import annotations

import json
import re
import shlex
from functools import lru_cache
from pathlib import Path

import pytest
from jsondiff import contains

README = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
GPU = "H100-SXM"
# one document of each command, with every optional section present (tp > 1 for rank_stages,
# a price for the cost keys, an MoE preset for the routed-expert keys)
OUTPUTS = {
    "trace": ["trace", "--preset", "qwen3-30b-a3b", "--tp", "2", "--pp", "2", "--seq", "64",
              "--per-rank", "--json"],
    "trace-windows": ["trace", "--preset", "gemma2-9b", "--seq", "64", "--json"],
    "fit": ["fit", "--preset", "llama3-8b", "--gpu", GPU, "--price", "2", "--json"],
    "compare": ["compare", "llama3-8b@tp=2,kv_dtype=fp8", "--gpu", GPU, "--price", "2",
                "--json"],
    "sweep": ["sweep", "llama3-8b", "--gpu", GPU, "--price", "2", "--format", "jsonl"],
    "verify": ["verify", "--json"],
    "verify-train": ["verify", "--train", "--json"],
    "explain": ["explain", "--json"],
    "explain-scan": ["explain", "--scan", "--json"],
    "serve": ["serve", "--preset", "llama3-8b", "--gpu", GPU, "--rate", "2", "--prompt-tokens",
              "512", "--output-tokens", "32", "--requests", "30", "--slo", "ttft=1s,itl=50ms",
              "--json"],
    "serve-find-rate": ["serve", "--preset", "llama3-8b", "--gpu", GPU, "--prompt-tokens", "512",
                        "--output-tokens", "32", "--requests", "30", "--slo", "ttft=1s,itl=50ms",
                        "--max-batched-tokens", "1024", "--find-rate", "--json"],
    "serve-find-gpus": ["serve", "--preset", "llama3-8b", "--gpu", GPU, "--rate", "2",
                        "--prompt-tokens", "512", "--output-tokens", "32", "--requests", "30",
                        "--slo", "ttft=1s,itl=50ms", "--max-batched-tokens", "1024",
                        "--find-gpus", "--json"],
    "train": ["train", "--preset", "llama3-8b", "--seq", "64", "--gpu", GPU, "--json"],
}  # and verify --against transformers, from a stored record (_against: no torch needed)
KEYLIKE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _paragraphs(text: str) -> list[str]:
    """The README's prose paragraphs (code blocks left out)."""
    prose = re.sub(r"```.*?```", "\n\n", text, flags=re.S)
    return [p for p in re.split(r"\n\s*\n", prose) if p.strip()]


def _walk(doc: object, path: str, paths: set[str], values: set[str]) -> None:
    if isinstance(doc, dict):
        for k, v in doc.items():
            p = f"{path}.{k}" if path else k
            paths.add(p)
            _walk(v, p, paths, values)
    elif isinstance(doc, list):
        for v in doc:
            _walk(v, path, paths, values)
    elif isinstance(doc, str):
        values.add(doc)


@pytest.fixture(scope="module")
def universe(request):
    """(paths from the top of each document, key names, string values) of the real outputs."""
    from shapecalc.cli import main

    docs = [_against()]
    for argv in OUTPUTS.values():
        out = _run(main, argv)
        docs += [json.loads(line) for line in out.splitlines() if line.strip()] \
            if argv[0] == "sweep" else [json.loads(out)]
    paths: set[str] = set()
    values: set[str] = set()
    for d in docs:
        _walk(d, "", paths, values)
    return paths, {p.rpartition(".")[2] for p in paths}, values


def _against() -> dict:
    """`verify --against transformers --json` without torch: shapecalc against a stored
    meta-device record (tests/data/against_reference.json), one check failing so that
    `first_difference` and `detail` are filled in."""
    import tempfile

    from shapecalc.check.against import compare, workload
    from shapecalc.inputs.hf import load_hf_config

    case = json.loads((Path(__file__).parent / "data" / "against_reference.json").read_text())[
        "cases"]["gpt_oss_e8_k3_sliding4"]
    rec = case["measured"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(case["hf_config"]))
        m = load_hf_config(path)
    m = m.model_copy(update={"sliding_window": m.sliding_window - 1})
    doc = compare(m, workload(m, rec["batch"], rec["seq"], rec["dtype"]), rec, str(path))
    assert not doc["ok"] and doc["conventions"]
    return json.loads(json.dumps(doc))


def _run(main, argv: list[str]) -> str:
    import contextlib
    import io
    import sys

    buf = io.StringIO()
    old = sys.argv
    sys.argv = ["shapecalc", *argv]
    try:
        with contextlib.redirect_stdout(buf):
            try:
                main()
            except SystemExit as e:
                assert e.code in (0, None, 1), (argv, e.code)  # 1: a negative verdict
    finally:
        sys.argv = old
    return buf.getvalue()


@lru_cache
def json_blocks() -> list[tuple[list[str], object]]:
    """(argv, the document shown) of every ```json block, the command the nearest backticked
    `shapecalc … --json` above it."""
    out = []
    for m in re.finditer(r"```json\n(.*?)```", README, flags=re.S):
        before = README[: m.start()]
        cmds = re.findall(r"`shapecalc ([^`]*--json[^`]*)`", before)
        assert cmds, "a ```json block with no command above it"
        out.append((shlex.split(cmds[-1]), json.loads(m.group(1))))
    return out


def test_readme_has_json_blocks():
    assert json_blocks(), "the README shows at least one JSON document"


@pytest.mark.parametrize("i", range(len(json_blocks())))
def test_readme_json_block_is_the_real_output(cli, i):
    argv, shown = json_blocks()[i]
    r = cli(*argv)
    assert r.code == 0, r.err
    bad = contains(shown, r.json(), strict=False)
    assert bad is None, f"shapecalc {' '.join(argv)}: {bad}"


# sections about the code, not its output: the API block is run by tests/test_api.py
NOT_OUTPUT = ("## Python API", "## Architecture", "## Benchmarks", "## Tests")
# backticked names in those paragraphs that are other programs' (not JSON keys)
FOREIGN = {"max_num_batched_tokens"}  # vLLM's engine argument, named beside --max-batched-tokens
COMMANDS = {"trace", "fit", "compare", "sweep", "verify", "explain", "presets", "hardware",
            "schema", "calibrate", "serve", "train"}


def json_paragraphs() -> list[str]:
    """Paragraphs about the JSON the commands write (`--json`, JSON Lines)."""
    sections = re.split(r"\n(?=## )", README)
    prose = "\n\n".join(s for s in sections if not s.startswith(NOT_OUTPUT))
    return [p for p in _paragraphs(prose) if "--json" in p or "JSON Lines" in p]


def _python_module(token: str) -> bool:
    """A dotted name of an importable Python module (`html.parser`): code, not a JSON path."""
    import importlib.util

    if "." not in token:
        return False
    try:
        return importlib.util.find_spec(token) is not None
    except (ImportError, ValueError):
        return False


def test_readme_names_only_real_keys(universe):
    paths, keys, values = universe
    bad = []
    for para in json_paragraphs():
        for token in re.findall(r"`([^`\n]+)`", para):
            # a JSON sketch such as `{"checks": [{"name", "symbolic"}, …]}`: its quoted keys
            bad += [k for k in re.findall(r'"([A-Za-z_][A-Za-z0-9_]*)"', token)
                    if k not in keys]
            if (not KEYLIKE.fullmatch(token) or token.endswith((".py", ".json", ".toml"))
                    or token in COMMANDS or token in FOREIGN or _python_module(token)):
                continue  # flags, commands, shapes, file names, `html.parser`
            ok = (token in values or (token in paths if "." in token else token in keys))
            if not ok:
                bad.append(token)
    assert not bad, f"README names JSON keys the output does not have: {sorted(set(bad))}"


def test_the_check_can_fail(universe):
    """A misspelt key and the issue's `"parallel.tp"` as one key are caught."""
    paths, keys, _ = universe
    assert "parallel.tp.degree" in paths and "parallel.tp" in paths
    assert "kv_cache_byte" not in keys
    assert _python_module("html.parser") and not _python_module("parallel.tp")
    real = {"parallel": {"tp": {"degree": 4}}}
    assert contains({"parallel.tp": {"degree": 4}}, real, strict=False) is not None
    assert contains({"parallel": {"tp": {"degree": 4}}}, real, strict=False) is None
