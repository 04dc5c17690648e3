"""User-supplied text is text, never rich markup (issue 12): a model, preset, case or GPU named
like a markup tag (`[red]x`, `[bold]`) prints literally in every table, title and header, at a
wide and a narrow width (the narrow layouts, records and split tables, print names too)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODEL = "[red]zq"  # a valid opening tag: rich would print `zq` in red
BARE = "[bold]"  # a name that is only a tag: rich would print nothing
GPU = "[blue]gw"


@pytest.fixture
def dirs(tmp_path):
    """A presets folder with models named MODEL and BARE (their files too) and a hardware
    folder with a GPU named GPU."""
    presets, hardware = tmp_path / "p", tmp_path / "h"
    presets.mkdir()
    hardware.mkdir()
    tiny = [line for line in (ROOT / "presets/models/seed-tiny.toml").read_text().splitlines()
            if not line.startswith(("[published]", "params", "source"))]
    for name in (MODEL, BARE):
        (presets / f"{name}.toml").write_text(f'name = "{name}"\n' + "\n".join(tiny) + "\n")
    gpu = (ROOT / "presets/hardware/H100-SXM.toml").read_text()
    lines = [f'name = "{GPU}"' if line.startswith("name =") else line
             for line in gpu.splitlines()]
    (hardware / f"{GPU}.toml").write_text("\n".join(lines) + "\n")
    return str(presets), str(hardware)


def commands(p: str, h: str) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """name: (argv, the literal texts its output must hold)."""
    pd, hd = ("--presets-dir", p), ("--hardware-dir", h)
    serve = ("--rate", "1", "--prompt-tokens", "16", "--output-tokens", "4", "--requests", "5")
    return {
        "trace": (("trace", "--preset", MODEL, *pd), (MODEL,)),
        "trace-bare": (("trace", "--preset", BARE, *pd), (BARE,)),
        "presets": (("presets", *pd), (MODEL, BARE)),
        "presets-show": (("presets", "show", MODEL, *pd), (MODEL,)),
        "fit": (("fit", MODEL, "--gpu", GPU, *pd, *hd), (MODEL, GPU)),
        "compare": (("compare", MODEL, BARE, "--gpu", GPU, *pd, *hd), (MODEL, BARE)),
        "sweep": (("sweep", MODEL, BARE, "--batch", "1,2", "--format", "table", "--gpu", GPU,
                   *pd, *hd), (MODEL, BARE)),
        "chart": (("compare", MODEL, "--batch", "1,2", "--chart", *pd), (MODEL,)),
        "verify": (("verify", "--preset", MODEL, *pd), (MODEL,)),
        "verify-train": (("verify", "--train", "--preset", MODEL, *pd), (MODEL,)),
        "explain": (("explain", "--preset", MODEL, *pd), (MODEL,)),
        "train": (("train", "--preset", MODEL, "--gpu", GPU, *pd, *hd), (GPU,)),
        "serve": (("serve", "--preset", MODEL, "--gpu", GPU, *serve, *pd, *hd), (MODEL, GPU)),
        "hardware": (("hardware", *hd), (GPU,)),
        "hardware-show": (("hardware", "show", GPU, *hd), (GPU,)),
    }


NAMES = list(commands("p", "h"))


@pytest.mark.parametrize("width", (200, 40))
@pytest.mark.parametrize("name", NAMES)
def test_names_print_literally(cli, monkeypatch, dirs, name, width):
    args, want = commands(*dirs)[name]
    monkeypatch.setenv("COLUMNS", str(width))
    r = cli(*args)
    assert r.code == 0, r.err
    flat = " ".join(r.out.split())  # a narrow layout may wrap a title between words
    for text in want:
        assert text in flat, (name, width, text, r.out[:600])
    for tag, word in (("[red]", "zq"), ("[blue]", "gw")):  # nowhere with its tag eaten
        assert flat.count(word) == flat.count(tag + word), (name, width, word, r.out[:600])


def test_the_check_can_fail(cli, monkeypatch, dirs):
    """Negative control: printed as markup, the name loses its tag (what the test looks for)."""
    from rich.console import Console

    c = Console(width=80, file=__import__("io").StringIO(), color_system=None)
    c.print(f"{MODEL} on {GPU}")
    flat = c.file.getvalue()
    assert MODEL not in flat and flat.count("zq") != flat.count("[red]zq")
