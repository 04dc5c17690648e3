"""The golden cases: every preset, three workloads, four commands (trace, fit, compare, sweep).

`python3 -m tests.golden.cases --write` records the JSON each command prints (or its exit code and
error line) into tests/data/golden.json.gz; `--add` records only the cases the file lacks (a new
preset's), leaving every recorded one as it is. test_golden.py re-runs them and asserts the output
is unchanged, apart from keys added since (new keys may appear; no recorded value may change).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

PRESETS = sorted(p.stem for p in (Path(__file__).parents[2] / "presets" / "models").glob("*.toml"))
GPU = "h100-sxm"
# three workloads: a plain prefill, a TP decode with an fp8 cache, a TP×PP last-logits prefill
WORKLOADS = {
    "prefill": ["--batch", "1", "--seq", "512"],
    "decode-tp2": ["--batch", "4", "--seq", "1000", "--phase", "decode", "--tp", "2",
                   "--kv-dtype", "fp8"],
    "tp4-pp2": ["--batch", "2", "--seq", "128", "--tp", "4", "--pp", "2", "--dtype", "fp16",
                "--logits", "last"],
}
SWEEP = ["--batch", "1,8", "--seq", "128,1000", "--tp", "1,2", "--phase", "prefill,decode",
         "--kv-dtype", "bf16,fp8", "--gpu", GPU, "--format", "jsonl"]
PATH = Path(__file__).parents[1] / "data" / "golden.json.gz"
# the first cases of the file: the 52 presets recorded before the 2025–2026 families, their
# quantized forms and the stateful mixers; the later presets' cases (but one each) run under
# `pytest -m slow`, and so do their verify runs, to keep the default suite within its time
ORIGINAL_CASES = 520


def original_presets(golden: dict) -> set[str]:
    """The presets of the file's first ORIGINAL_CASES cases (the file keeps its order)."""
    return {key.split()[1] for key in list(golden)[:ORIGINAL_CASES]}


def argvs() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name in PRESETS:
        for wname, w in WORKLOADS.items():
            out[f"trace {name} {wname}"] = ["trace", "--preset", name, *w, "--json"]
            out[f"fit {name} {wname}"] = ["fit", "--preset", name, *_no_phase(w), "--gpu", GPU,
                                          "--json"]
            out[f"compare {name} {wname}"] = ["compare", name, *w, "--gpu", GPU, "--json"]
        out[f"sweep {name}"] = ["sweep", name, *SWEEP]
    return out


def _no_phase(w: list[str]) -> list[str]:
    # fit plans serving (prefill and decode both): it has no --phase
    i = w.index("--phase") if "--phase" in w else None
    return w if i is None else w[:i] + w[i + 2 :]


def parse(out: str, sweep: bool) -> object:
    if sweep:
        return [json.loads(line) for line in out.splitlines() if line.strip()]
    return json.loads(out)


def record(run, only: set[str] | None = None) -> dict[str, object]:
    doc: dict[str, object] = {}
    for key, argv in argvs().items():
        if only is not None and key not in only:
            continue
        code, out, err = run(argv)
        if code == 0 or (code == 1 and argv[0] in ("fit", "compare", "sweep")):  # 1: does not fit
            doc[key] = {"code": code, "json": parse(out, argv[0] == "sweep")}
        else:
            doc[key] = {"code": code, "err": err.strip()}
    return doc


def _subprocess_run(argv: list[str]) -> tuple[int, str, str]:
    import subprocess

    r = subprocess.run([sys.executable, "-m", "shapecalc", *argv], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


if __name__ == "__main__" and "--add" in sys.argv:
    old = json.loads(gzip.decompress(PATH.read_bytes()))
    new = record(_subprocess_run, set(argvs()) - set(old))
    PATH.write_bytes(gzip.compress(json.dumps({**old, **new}).encode(), mtime=0))
    print(f"{len(new)} new cases → {PATH}")
elif __name__ == "__main__" and "--write" in sys.argv:
    data = record(_subprocess_run)
    # key order kept: the golden test checks it too
    PATH.write_bytes(gzip.compress(json.dumps(data).encode(), mtime=0))
    print(f"{len(data)} cases → {PATH}")
