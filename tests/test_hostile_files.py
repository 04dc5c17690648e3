"""Hostile files, outputs, streams and bytes (issue 12, "Hostile input"): every case exits 2 with
one stderr line naming the field, no traceback, nothing on stdout, and no file written or
overwritten that the user did not ask for.

Decided here (README, "Hostile input"): an existing output file IS overwritten, like `>`, but only
when the command succeeds, atomically (a temporary file in the same folder, then os.replace); an
output that is one of the command's inputs is refused. A UTF-8 byte-order mark is accepted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_errors import _one_clean_line

from shapecalc.inputs import files

ROOT = Path(__file__).resolve().parents[1]
TINY = (ROOT / "presets" / "models" / "seed-tiny.toml").read_text(encoding="utf-8")
HF_LLAMA = (ROOT / "tests" / "data" / "hf" / "llama2-7b.json").read_text(encoding="utf-8")
GPU = (ROOT / "presets" / "hardware" / "H100-SXM.toml").read_text(encoding="utf-8")


def _contract(r, field: str, *words: str) -> str:
    line = _one_clean_line(r)
    assert line.startswith(f"error: {field}"), line
    for w in words:
        assert w in line, (w, line)
    return line


def _snapshot(folder: Path) -> dict[str, object]:
    """Every file under `folder` and its bytes (nothing written, nothing left behind)."""
    def state(p: Path) -> object:
        st = p.stat()
        return (st.st_size, st.st_mtime_ns) if st.st_size > 2**20 else p.read_bytes()

    return {str(p.relative_to(folder)): state(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.is_symlink()}


# ── input files ──────────────────────────────────────────────────────────────────────────────────

def _hostile(tmp: Path, kind: str, suffix: str) -> tuple[Path, str]:
    """A hostile input file of `kind`, and a word its error line must hold."""
    p = tmp / f"hostile{suffix}"
    if kind == "missing":
        return p, "not found"
    if kind == "directory":
        p.mkdir()
        return p, "directory"
    if kind == "fifo":
        os.mkfifo(p)
        return p, "FIFO"
    if kind == "dev-zero":
        return Path("/dev/zero"), "device"
    if kind == "symlink-loop":
        os.symlink(tmp / f"other{suffix}", p)
        os.symlink(p, tmp / f"other{suffix}")
        return p, "symlink loop"
    if kind == "huge":
        with open(p, "wb") as f:  # 100 MB, sparse: refused by its size, never read
            f.truncate(100 * 2**20)
        return p, "MiB"
    data = {
        "empty": b" \n",
        "binary": bytes(range(256)) * 4,
        "non-utf8": b'name = "caf\xe9"\n',
        "utf16": "vocab_size = 1\n".encode("utf-16"),
        "nul": b'name = "a"\x00\n',
        "deep-json": b"[" * 100_000 + b"]" * 100_000,
        "deep-toml": b"a = " + b"[" * 100_000 + b"]" * 100_000,
        "syntax": b"{nope" if suffix == ".json" else b"d_model = = 3\n",
        "duplicate": b'{"vocab_size": 10, "vocab_size": 20}',
    }[kind]
    p.write_bytes(data)
    word = {"empty": "empty", "binary": "", "non-utf8": "UTF-8", "utf16": "UTF-16", "nul": "",
            "deep-json": "nested", "deep-toml": "nested", "syntax": "valid",
            "duplicate": "duplicate key 'vocab_size'"}[kind]
    if {"deep-json": ".json", "duplicate": ".json", "deep-toml": ".toml"}.get(kind, suffix) \
            != suffix:
        word = "valid"  # JSON in a .toml file, or TOML in a .json one
    return p, word


KINDS = ["missing", "directory", "fifo", "dev-zero", "symlink-loop", "huge", "empty", "binary",
         "non-utf8", "utf16", "nul", "deep-json", "deep-toml", "syntax", "duplicate"]
# (command line with {} for the file, the field, the file's suffix)
READERS = [
    (["trace", "--config", "{}"], "config", ".json"),
    (["trace", "--config", "{}"], "config", ".toml"),
    (["trace", "--hf-config", "{}"], "hf-config", ".json"),
    (["fit", "--gpu", "H100-SXM", "{}"], "", ".json"),  # a case file: config or case
    (["calibrate", "{}"], "calibrate", ".json"),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("argv", "field", "suffix"), READERS,
                         ids=[f"{a[0]}-{f or 'case'}{s}" for a, f, s in READERS])
def test_hostile_input_files(cli, tmp_path, kind, argv, field, suffix):
    path, word = _hostile(tmp_path, kind, suffix)
    if kind == "symlink-loop" and argv[0] == "fit":
        word = ""  # a case that names no existing file reads as a preset name or a missing file
    if kind == "directory" and field in ("hf-config", ""):
        word = "config.json"  # a folder is where an HF config.json is looked for
    before = _snapshot(tmp_path)
    r = cli(*[str(path) if a == "{}" else a for a in argv])
    line = _one_clean_line(r)
    assert line.startswith("error: ") and field in line and word in line, line
    assert "Traceback" not in r.err
    assert _snapshot(tmp_path) == before


def test_hostile_preset_and_hardware_folders(cli, tmp_path):
    d = tmp_path / "presets"
    d.mkdir()
    (d / "dup.json").write_text('{"vocab_size": 10, "d_model": 8, "d_model": 16}')
    _contract(cli("trace", "--presets-dir", str(d), "--preset", "dup"), "config",
              "duplicate key 'd_model'")
    os.mkfifo(d / "pipe.toml")
    _contract(cli("trace", "--presets-dir", str(d), "--preset", "pipe"), "config", "FIFO")
    _contract(cli("trace", "--presets-dir", str(tmp_path / "nope")), "presets-dir",
              "folder not found")
    _contract(cli("presets", "--presets-dir", str(tmp_path / "nope")), "presets-dir")
    hw = tmp_path / "hw"
    hw.mkdir()
    (hw / "X1.toml").write_bytes(b"\xef\xbb\xbf" + GPU.encode() + b"\n[peak_flops]\n")
    _contract(cli("hardware", "X1", "--hardware-dir", str(hw)), "gpu", "valid TOML")
    _contract(cli("hardware", "--hardware-dir", str(tmp_path / "nohw")), "hardware-dir",
              "folder not found")


def test_presets_dir_before_show_is_read(cli, tmp_path):
    """`presets --presets-dir X show NAME` reads X (the flag before the subcommand)."""
    (tmp_path / "mine.toml").write_text(TINY.replace("d_ff = 32", "d_ff = 48"))
    for argv in (["presets", "--presets-dir", str(tmp_path), "show", "mine", "--json"],
                 ["presets", "show", "mine", "--presets-dir", str(tmp_path), "--json"]):
        r = cli(*argv)
        assert r.code == 0, r.err
        assert r.json()["d_ff"] == 48
    _contract(cli("presets", "--presets-dir", str(tmp_path / "nope"), "show", "seed-tiny"),
              "presets-dir", "folder not found")


def test_utf8_bom_is_accepted(cli, tmp_path):
    plain, bom = tmp_path / "plain.toml", tmp_path / "bom.toml"
    plain.write_text(TINY, encoding="utf-8")
    bom.write_bytes(b"\xef\xbb\xbf" + TINY.encode())
    a, b = cli("trace", "--config", str(plain), "--json"), cli("trace", "--config", str(bom),
                                                              "--json")
    assert a.code == b.code == 0, b.err
    assert a.json()["totals"] == b.json()["totals"]
    hf = tmp_path / "hf.json"
    hf.write_bytes(b"\xef\xbb\xbf" + HF_LLAMA.encode())
    assert cli("trace", "--hf-config", str(hf), "--json").json()["totals"]["params"] == 6738415616


def test_reader_limits_in_process(tmp_path):
    """The reader's own checks, below the CLI: 64 levels of nesting pass, 65 do not."""
    ok = tmp_path / "ok.json"
    ok.write_text("[" * 64 + "]" * 64)
    assert files.read_json(ok, "f") == json.loads("[" * 64 + "]" * 64)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 65 + "]" * 65)
    with pytest.raises(files.ShapecalcError, match="nested more than 64"):
        files.read_json(deep, "f")
    assert files.escape_controls("a\nb\x1b[31m\x00") == "a\\nb\\x1b[31m\\x00"


# ── writers ──────────────────────────────────────────────────────────────────────────────────────

def _writer_cases(tmp: Path) -> list[tuple[list[str], str, str]]:
    """(argv, field, word): each must fail before writing anything."""
    cfg, keep = tmp / "m.toml", tmp / "keep.txt"
    (tmp / "link.toml").symlink_to(cfg)
    (tmp / "folder").mkdir()
    return [
        (["trace", "--config", str(cfg), "--output", str(cfg)], "output", "input"),
        (["trace", "--config", str(tmp / "link.toml"), "--svg", str(cfg)], "svg", "input"),
        (["trace", "--config", str(cfg), "--html", f"{tmp}/folder/../m.toml"], "html", "input"),
        (["sweep", str(cfg), "-o", str(cfg)], "output", "input"),
        (["compare", str(cfg), "--format", "csv", "-o", str(cfg)], "output", "input"),
        (["fit", "--config", str(cfg), "--gpu", "H100-SXM", "--json", "-o", str(cfg)], "output",
         "input"),
        (["trace", "--output", str(keep), "--svg", f"{tmp}/missing/x.svg"], "svg",
         "folder not found"),
        (["trace", "--output", str(keep), "--html", str(tmp / "folder")], "html", "directory"),
        (["trace", "--svg", ""], "svg", "empty path"),
        (["trace", "--format", "csv", "--output", ""], "output", "empty path"),
        (["trace", "--output", str(keep), "--svg", str(keep)], "svg", "also the --output"),
        (["trace", "--output", "/dev/full"], "output", "No space left"),
        (["trace", "--json", "--output", "/dev/full"], "output", "No space left"),
        (["sweep", "seed-tiny", "--batch", "1..8", "-o", "/dev/full"], "output", "No space"),
        (["trace", "--output", f"{tmp}/new\nline/x.txt"], "output", "new\\nline"),
        (["trace", "--output", f"{tmp}/keep.txt/x.txt"], "output", "Not a directory"),
        (["trace", "--output", "/proc/shapecalc-nope.txt"], "output", "cannot write"),
    ]


@pytest.mark.parametrize("i", range(17))
def test_bad_outputs_write_nothing(cli, tmp_path, i):
    (tmp_path / "m.toml").write_text(TINY)
    (tmp_path / "keep.txt").write_text("keep me\n")
    argv, field, word = _writer_cases(tmp_path)[i]
    before = _snapshot(tmp_path)
    _contract(cli(*argv), field, word)
    assert _snapshot(tmp_path) == before  # no file changed, no temporary file left


def test_existing_output_is_overwritten_atomically(cli, tmp_path):
    out = tmp_path / "out.json"
    out.write_text("old\n")
    out.chmod(0o640)
    r = cli("trace", "--json", "--output", str(out), "--svg", str(tmp_path / "t.svg"))
    assert r.code == 0 and r.out == "", r.err
    assert json.loads(out.read_text())["model"]["name"] == "seed-tiny"
    assert (out.stat().st_mode & 0o777) == 0o640  # the file's mode is kept
    assert (tmp_path / "t.svg").read_text().startswith("<svg")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "t.svg"]
    # a failing command (bad --batch, after the outputs were named) leaves them as they were
    before = _snapshot(tmp_path)
    _contract(cli("trace", "--batch", "0", "--output", str(out), "--svg",
                  str(tmp_path / "t.svg")), "batch")
    assert _snapshot(tmp_path) == before
    # fit's "does not fit" (exit 1) is a verdict: its output is written
    r = cli("fit", "llama3.1-405b", "--gpu", "H100-SXM", "--json", "-o", str(out))
    assert r.code == 1 and json.loads(out.read_text())["fits"] is False


def test_inputs_are_those_of_this_command(cli, tmp_path):
    """A file read by an earlier command (same process) may be this command's output."""
    cfg = tmp_path / "m.toml"
    cfg.write_text(TINY)
    assert cli("trace", "--config", str(cfg), "--json").code == 0
    r = cli("trace", "--format", "csv", "--output", str(cfg))
    assert r.code == 0, r.err
    assert cfg.read_text().startswith("group,")


def test_symlinked_output_writes_through(cli, tmp_path):
    real = tmp_path / "real.csv"
    real.write_text("old\n")
    (tmp_path / "link.csv").symlink_to(real)
    assert cli("trace", "--format", "csv", "-o", str(tmp_path / "link.csv")).code == 0
    assert (tmp_path / "link.csv").is_symlink() and real.read_text().startswith("group,")


# ── streams and bytes ────────────────────────────────────────────────────────────────────────────

def _run(*args: str, env: dict[str, str] | None = None, stdout=subprocess.PIPE):
    e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "shapecalc", *args], cwd=ROOT, env=e,
                          stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=60)


@pytest.mark.parametrize("args", [["trace"], ["trace", "--json"],
                                  ["sweep", "seed-tiny", "--batch", "1..64"]])
def test_full_stdout_is_one_line(args):
    with open("/dev/full", "w") as full:
        r = _run(*args, stdout=full)
    assert r.returncode == 2, r.stderr
    assert r.stderr == "error: stdout: cannot write: No space left on device\n"


def test_closed_stdout_is_one_line(tmp_path):
    """`>&-`: Python's sys.stdout is None; writing to it is one line, an --output file works."""
    e = {**os.environ, "PYTHONPATH": str(ROOT)}
    py = f"{sys.executable} -m shapecalc"
    r = subprocess.run(f"{py} trace >&-", shell=True, cwd=ROOT, env=e, text=True,
                       stderr=subprocess.PIPE, timeout=60)
    assert r.returncode == 2 and r.stderr == "error: stdout: cannot write: stdout is closed\n"
    out = tmp_path / "t.csv"
    r = subprocess.run(f"{py} trace --format csv -o {out} >&-", shell=True, cwd=ROOT, env=e,
                       text=True, stderr=subprocess.PIPE, timeout=60)
    assert r.returncode == 0 and r.stderr == "" and out.read_text().startswith("group,")


@pytest.mark.parametrize("args", [["trace"], ["sweep", "seed-tiny", "--batch", "1..4096"],
                                  ["compare", "seed-tiny", "--batch", "1..64"]])
def test_broken_pipe_is_quiet(args):
    e = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-m", "shapecalc", *args], cwd=ROOT, env=e,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.readline()
    p.stdout.close()  # `| head -1`
    err = p.stderr.read().decode()
    p.stderr.close()
    assert p.wait(timeout=60) == 0 and err == "", err


def test_ascii_stdout_degrades_symbols():
    env = {"PYTHONIOENCODING": "ascii"}
    r = _run("trace", env=env)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "2*B*T*D*H*Dh" in r.stdout and "x N = 1 layer" in r.stdout
    lines = r.stdout.splitlines()
    # one character for one: every row is as wide as its table's border
    assert {len(x) for x in lines if x.startswith("|")} <= {len(x) for x in lines
                                                          if x.startswith("+")}
    r = _run("trace", "--json", env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["model"]["name"] == "seed-tiny"
    r = _run("trace", "--batch", "0", env=env)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "batch" in r.stderr


@pytest.mark.parametrize("source", ["toml", "json", "set"])
def test_control_bytes_never_reach_the_terminal(cli, tmp_path, source):
    evil = "evil\x1b[31mRED\x00"
    if source == "toml":
        f = tmp_path / "m.toml"
        f.write_text('name = "evil\\u001b[31mRED\\u0000"\n' + TINY)
        r = cli("trace", "--config", str(f))
    elif source == "json":
        f = tmp_path / "m.json"
        f.write_text(json.dumps({"name": evil, "vocab_size": 10, "d_model": 8, "n_layers": 1,
                                 "n_heads": 2, "d_ff": 8, "positions": "none"}))
        r = cli("trace", "--config", str(f))
    else:
        r = cli("trace", "--set", f"name={evil}")
    _contract(r, "name", "control character", "\\x1b")
    assert "\x1b" not in r.err and "\x00" not in r.err


def test_derived_names_and_paths_are_escaped(cli, tmp_path):
    # a file named with ESC and a newline: its name (the stem) prints escaped
    f = tmp_path / "a\x1b[2Jb\nc.toml"
    f.write_text(TINY)
    r = cli("trace", "--config", str(f), "--json")
    assert r.code == 0 and r.json()["model"]["name"] == "a\\x1b[2Jb\\nc"
    r = cli("trace", "--config", str(f))
    assert r.code == 0 and "\x1b[2J" not in r.out
    # a missing path with a newline: one escaped line
    _contract(cli("trace", "--config", f"{tmp_path}/x\ny.toml"), "config", "x\\ny.toml")
    # a bidirectional override is refused like a control character; other unicode is a name
    _contract(cli("trace", "--set", "name=ab\u202ecd"), "name", "\\u202e")
    r = cli("trace", "--set", "name=héllo 模型", "--json")
    assert r.json()["model"]["name"] == "héllo 模型"
    # a name that is not valid rich markup prints as it is
    r = cli("trace", "--set", "name=x [/bold] [red]")
    assert r.code == 0 and "x [/bold] [red]" in r.out


def test_calibrate_write_checks_its_folder(cli, tmp_path):
    # two of the published records (one GPU): the folder rules, not the fit, are under test
    data = json.loads((ROOT / "tests" / "data" / "serving-measurements.json").read_text())
    data["records"] = [r for r in data["records"] if r["id"] in (
        "trt090-tput-h100-llama2-7b-b896-128-128", "trt090-ttft-h100-llama2-7b-isl128")]
    meas = tmp_path / "two.json"
    meas.write_text(json.dumps(data))
    (tmp_path / "keep.txt").write_text("keep\n")
    _contract(cli("calibrate", str(meas), "--write", str(tmp_path / "keep.txt")), "write",
              "not a directory")
    hw = tmp_path / "hw"
    assert cli("calibrate", str(meas), "--write", str(hw), "--json").code == 0
    before = _snapshot(tmp_path)
    # the profiles it reads from --hardware-dir are inputs: --write into that folder is refused
    _contract(cli("calibrate", str(meas), "--hardware-dir", str(hw), "--write", str(hw)),
              "write", "input")
    assert _snapshot(tmp_path) == before
