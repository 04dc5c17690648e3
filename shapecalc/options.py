"""Command-line options shared by the commands (typer `Annotated` aliases), defined once.

cli.py and the command modules of later issues import them from here, so no command module has
to import another.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

Preset = Annotated[str | None, typer.Option("--preset", help="a preset name (shapecalc presets)")]
ConfigFile = Annotated[
    Path | None, typer.Option("--config", help="a TOML or JSON file with the model fields")
]
HFConfig = Annotated[Path | None, typer.Option("--hf-config", help="a Hugging Face config.json")]
Sets = Annotated[
    list[str] | None, typer.Option("--set", help="override a model field: field=value (repeatable)")
]
PresetsDir = Annotated[
    list[Path] | None,
    typer.Option("--presets-dir", help="another folder of presets (also $SHAPECALC_PRESETS)"),
]
Batch = Annotated[int | None, typer.Option("--batch", "-b", help="B: sequences in the batch")]
Seq = Annotated[
    int | None,
    typer.Option(
        "--seq", "-t", help="T: prompt tokens (prefill) or tokens already cached (decode)"
    ),
]
Phase = Annotated[str | None, typer.Option("--phase", help="prefill | decode")]
DtypeOpt = Annotated[
    str | None, typer.Option("--dtype", help="fp32 | bf16 | fp16 | fp8 | int8 | int4")
]
KvDtype = Annotated[str | None, typer.Option("--kv-dtype", help="KV cache dtype (default dtype)")]
ActDtype = Annotated[
    str | None, typer.Option("--act-dtype", help="activation dtype (default dtype)")
]
Logits = Annotated[str | None, typer.Option("--logits", help="all | last")]
TP = Annotated[int | None, typer.Option("--tp", help="p: tensor-parallel degree")]
PP = Annotated[int | None, typer.Option("--pp", help="s: pipeline stages")]
BlockSize = Annotated[int | None, typer.Option("--block-size", help="paged KV cache block (16)")]
AttnFlops = Annotated[
    str | None, typer.Option("--attention-flops", help="full (seeds) | causal (lower half)")
]
PaddingMask = Annotated[
    bool | None, typer.Option("--padding-mask/--no-padding-mask", help="list the padding mask")
]
JsonOut = Annotated[bool, typer.Option("--json", help="one JSON document on stdout, nothing else")]
Format = Annotated[str, typer.Option("--format", help="table | json | csv | markdown")]
Output = Annotated[
    str | None, typer.Option("--output", "-o", help="write to this file instead of stdout")
]
Svg = Annotated[str | None, typer.Option("--svg", help="also save the table as an SVG picture")]
Html = Annotated[str | None, typer.Option("--html", help="also save the table as HTML")]
