"""`shapecalc hardware`: the GPU profiles, listed or one shown (loaded when invoked: lazy.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from .options import JsonOut, fail
from .plan_options import HardwareDir, SetGpu


def hardware(
    words: Annotated[list[str] | None, typer.Argument(
        help="NAME or show NAME: a profile to show (none: list every profile)", metavar="NAME",
        show_default=False)] = None,
    hardware_dir: HardwareDir = None,
    set_gpu: SetGpu = None,
    as_json: JsonOut = False,
) -> None:
    from ..model.config import ShapecalcError

    try:
        from ..inputs.hardware import list_gpus, load_gpu
        from .options import matching, show_target

        name = show_target(words, "gpu")
        known = sorted(list_gpus(hardware_dir))
        shown = (words or [])[:1] == ["show"]  # `show NAME`: that one, by its exact name
        picked = None if name is None or shown else matching(name, known)
        if picked == []:  # neither a name nor a pattern that picks one: say so, with suggestions
            load_gpu(str(name), hardware_dir)
        if name is None or picked:
            if set_gpu:  # an override changes one profile: it needs that profile's name
                raise ShapecalcError("set-gpu", "changes one profile: give its NAME "
                                     "(shapecalc hardware NAME --set-gpu …)")
            gpus = [load_gpu(n, hardware_dir) for n in (known if name is None else picked or [])]
            name = None
        else:
            gpus = [load_gpu(name, hardware_dir, set_gpu)]
    except ShapecalcError as e:
        fail(e)
    if as_json:
        from .options import emit_json

        docs = [g.model_dump() for g in gpus]
        emit_json(docs[0] if name is not None else docs)
        return
    from ..render.console import make_console
    from ..render.layout import line, split_table
    from ..render.units import human_bytes, plural

    header = ["name", "memory", "bytes", "HBM B/s", "link B/s", "bf16 FLOP/s", "fp8 FLOP/s", "link"]
    rows = [[g.name, g.memory, f"{g.memory_bytes:,} ({human_bytes(g.memory_bytes)})",
             f"{g.hbm_bandwidth:.4g}", f"{g.link_bandwidth:.4g}",
             "—" if g.peak_flops.bf16 is None else f"{g.peak_flops.bf16:.4g}",
             "—" if g.peak_flops.fp8 is None else f"{g.peak_flops.fp8:.4g}", g.link]
            for g in gpus]
    console = make_console()
    split_table(console, header, rows, 1, "GPU profiles (dense peaks; link: per direction)",
                right=[h not in ("name", "link", "memory") for h in header],
                wrap=[h == "link" for h in header])
    if name is not None:
        line(console, f"source: {gpus[0].source}")
        g = gpus[0]
        line(console, f"topology: {plural(g.gpus_per_node, 'GPU')} a node, a scale-up domain of "
             f"{g.scale_up_domain or g.gpus_per_node}; network {g.scale_out_bandwidth:.4g} B/s "
             f"a GPU{' (' + g.network + ')' if g.network else ''}")


COMMANDS = {"hardware": hardware}
HELP = {"hardware": "List the GPU profiles, or show one: `hardware NAME` or `hardware show NAME` "
        "(with --set-gpu overrides)."}
