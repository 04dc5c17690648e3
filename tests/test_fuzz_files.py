"""Hypothesis draws hostile files and outputs (issue 12): file contents (bytes, mutated TOML and
JSON, BOMs, UTF-16, duplicate keys, deep nesting), the kind of path (a file, a folder, a FIFO, a
symlink loop, a missing file), the reader (--config, --hf-config, a case, calibrate) and an output
(the input itself, a folder, a missing folder, an empty path, /dev/full, a new or existing file).

On every draw the contract holds: exit 0 (or fit's verdict 1), or exit 2 with one stderr line, no
traceback and no stdout; the input is never changed; a failed command writes nothing and leaves
no temporary file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
TINY = (ROOT / "presets" / "models" / "seed-tiny.toml").read_text(encoding="utf-8")
FIELDS = {"vocab_size": 10, "d_model": 8, "n_layers": 1, "n_heads": 2, "d_ff": 8,
          "positions": "none"}


@st.composite
def contents(draw: st.DrawFn) -> bytes:
    # valid files are drawn often: they reach the writers
    kind = draw(st.sampled_from(["toml"] * 4 + ["json"] * 2 + ["bytes", "dup", "nest", "utf16",
                                                              "control"]))
    if kind == "bytes":
        data = draw(st.binary(max_size=200))
    elif kind == "toml":
        data = TINY.encode()
    elif kind == "json":
        data = json.dumps(FIELDS).encode()
    elif kind == "dup":
        key = draw(st.sampled_from(sorted(FIELDS)))
        data = json.dumps(FIELDS)[:-1].encode() + f', "{key}": 3}}'.encode()
    elif kind == "nest":
        n = draw(st.integers(1, 5000))
        data = b'{"a": ' + b"[" * n + b"]" * n + b"}"
    elif kind == "utf16":
        data = TINY.encode("utf-16")
    else:  # a control character in a string field
        c = draw(st.sampled_from(["\x1b", "\x00", "\n", "\x7f", "\x9b"]))
        data = json.dumps({**FIELDS, "name": f"a{c}b"}).encode()
    if draw(st.integers(0, 3)) == 0:  # a mutation: cut, or bytes spliced in
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(max_size=8)) + data[at + draw(st.integers(0, 4)):]
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    return data


READERS = [("trace", "--config"), ("trace", "--hf-config"), ("fit", None), ("compare", None),
           ("calibrate", None)]
OUTPUTS = [None, "input", "input", "folder", "missing", "", "/dev/full", "new", "existing"]


def _state(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()
            if p.is_file() and not p.is_symlink() and p.stat().st_size < 2**20}


@settings(max_examples=int(os.environ.get("FUZZ_N", "120")),  # FUZZ_N=2000: a longer hunt
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=contents(), path_kind=st.sampled_from(["file"] * 6 + ["dir", "fifo", "loop",
                                                                   "missing"]),
       suffix=st.sampled_from([".toml", ".json", ""]),
       reader=st.sampled_from(READERS[:1] * 3 + READERS[1:]),
       output=st.sampled_from(OUTPUTS), fmt=st.sampled_from(["table", "json", "csv"]))
def test_fuzz_files(cli, data, path_kind, suffix, reader, output, fmt):
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        src = d / f"in{suffix}"
        if path_kind == "file":
            src.write_bytes(data)
        elif path_kind == "dir":
            src.mkdir()
        elif path_kind == "fifo":
            os.mkfifo(src)
        elif path_kind == "loop":
            os.symlink(d / "loop2", src)
            os.symlink(src, d / "loop2")
        (d / "existing.txt").write_text("keep\n")
        out = {None: None, "input": str(src), "folder": str(d), "missing": f"{d}/no/x.txt",
               "": "", "/dev/full": "/dev/full", "new": str(d / "new.txt"),
               "existing": str(d / "existing.txt")}[output]
        cmd, flag = reader
        argv = [cmd, *([flag] if flag else []), str(src)]
        if cmd == "fit":
            argv += ["--gpu", "H100-SXM"]
        if cmd != "calibrate":
            argv += ["--format", fmt] + ([] if out is None else ["--output", out])
        before = _state(d)
        r = cli(*argv)
        assert "Traceback" not in r.err
        assert r.code in ((0, 1, 2) if cmd == "fit" else (0, 2)), (r.code, r.err)
        after = _state(d)
        if path_kind == "file":
            assert src.read_bytes() == data  # the input is never changed
        if r.code == 2:
            lines = r.err.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: "), r.err
            assert r.out == "", r.out
            assert after == before  # nothing written, no temporary file left
        else:
            changed = {k for k in after if before.get(k) != after[k]}
            assert changed <= {Path(out).name} if out else not changed
        assert not [p for p in d.iterdir() if p.name.endswith(".tmp")]


# -- serve --trace: rows of any kind, through the same reader -------------------------------------
_VALUES = st.one_of(st.integers(-3, 10**20), st.floats(allow_nan=True, allow_infinity=True),
                    st.booleans(), st.none(), st.text(max_size=6), st.lists(st.integers(0, 9),
                                                                         max_size=2))
_COLUMNS = ["arrival_s", "prompt_tokens", "output_tokens"]


@st.composite
def trace_rows(draw: st.DrawFn) -> list[dict[str, object]]:
    cols = draw(st.lists(st.sampled_from([*_COLUMNS] * 3 + ["extra"]), min_size=2, max_size=5))
    if draw(st.booleans()):
        cols = [*_COLUMNS, *cols[:1]]  # often a full header, sometimes one column twice
    good = {"arrival_s": st.floats(0, 1e3), "prompt_tokens": st.integers(1, 64),
            "output_tokens": st.integers(1, 8)}
    rows = []
    for _ in range(draw(st.integers(0, 4))):
        rows.append([draw(good[c] if c in good and draw(st.booleans()) else _VALUES)
                     for c in cols])
    return [cols, *rows]


@settings(max_examples=int(os.environ.get("FUZZ_N", "30")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(table=trace_rows(), csv_file=st.booleans())
def test_fuzz_serve_trace(cli, table, csv_file):
    """Any header and any values: exit 0 or 2, one line, no traceback, nothing on stdout."""
    head, *rows = table
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / ("t.csv" if csv_file else "t.jsonl")
        if csv_file:
            p.write_text("\n".join(",".join(str(v) for v in r) for r in table) + "\n")
        else:
            text = "\n".join("{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}"
                                             for k, v in zip(head, r, strict=True)) + "}"
                             for r in rows)
            p.write_text(text + "\n")
        r = cli("serve", "--preset", "seed-tiny", "--gpu", "H100-SXM", "--trace", str(p),
                "--json")
        assert "Traceback" not in r.err
        assert r.code in (0, 2), (r.code, r.err)
        if r.code == 2:
            lines = r.err.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: trace"), r.err
            assert r.out == ""


# -- calibrate: a record's values of any kind -----------------------------------------------------
_MEASURED = Path(__file__).parent / "data" / "serving-measurements.json"
_KEYS = ["tp", "pp", "batch", "input_len", "output_len", "n_gpus", "value", "unit", "dtype",
         "metric_type", "model", "gpu", "preset", "gpu_profile", "id", "typo_key"]


@settings(max_examples=int(os.environ.get("FUZZ_N", "20")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(st.tuples(st.sampled_from(_KEYS), st.one_of(_VALUES, st.just("drop"))),
                        min_size=1, max_size=3), which=st.integers(0, 14))
def test_fuzz_calibrate_records(cli, changes, which):
    doc = json.loads(_MEASURED.read_text(encoding="utf-8"))
    rec = doc["records"][which]
    for k, v in changes:
        if v == "drop":
            rec.pop(k, None)
        else:
            rec[k] = v
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "m.json"
        p.write_text(json.dumps(doc))
        r = cli("calibrate", str(p), "--check", "--json")
        assert "Traceback" not in r.err
        assert r.code in (0, 2), (r.code, r.err)
        if r.code == 2:
            lines = r.err.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: "), r.err
            assert r.out == ""
