"""`presets`: the list of presets, and one preset's fields with the defaults it takes resolved."""

from __future__ import annotations

from rich.console import Console

from ..inputs.files import escape_controls
from ..model.config import ModelConfig
from .console import make_console
from .units import human_count


def print_presets(rows: list[tuple[str, ModelConfig, int]], console: Console | None = None
                  ) -> None:
    from .layout import split_table

    header = ["preset", "N", "D", "H", "H_kv", "Dh", "Dff", "FFN", "N_vocab", "positions",
              "params"]
    cells = [[escape_controls(name), str(m.n_layers), str(m.d_model), str(m.n_heads),
              str(m.kv_heads), str(m.dh),
              str(m.d_ff), m.ffn, str(m.vocab_size), m.positions, f"{params:,}"]
             for name, m, params in rows]
    split_table(console or make_console(), header, cells, 1,
                right=[h not in ("preset", "FFN", "positions") for h in header])


def print_model(m: ModelConfig, params: int, console: Console | None = None) -> None:
    from ..model.defaults import resolved_fields
    from .layout import kv_panel, show

    used = resolved_fields(m)  # the values a None stands for: H_kv = H, Dh = D/H, …
    rows = [(k, "", f"{used[k][0]} (default: {used[k][1]})" if k in used
             else "none" if v is None else str(v)) for k, v in m.model_dump().items()]
    rows.append(("parameters", f"{params:,}", human_count(params)))
    console = console or make_console()
    show(console, kv_panel(console, m.name, rows))
