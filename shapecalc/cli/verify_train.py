"""`shapecalc verify --train`: the executed backward's checks (train/verify.py), as a table
or one JSON document."""

from __future__ import annotations

from typing import Any

from ..model.config import ModelConfig, ShapecalcError, Workload


def run_train(model: ModelConfig, wl: Workload, *, layers: int | None, seed: int,
              recompute: str, given: dict[str, Any]) -> dict[str, Any]:
    """The checks of `verify --train` on the narrowed model; `given`: verify's options the user
    set that a training step cannot honour (refused, never ignored)."""
    from ..train.verify import narrow, train_verify

    why = {"phase": "a training step is a prefill of the whole sequence",
           "logits": "the loss reads every position's logits",
           "precision": "the backward and its finite differences run in float64",
           "memory_budget": "the narrowed model is a few MB"}
    for field, value in given.items():
        if value is not None:
            raise ShapecalcError(field, f"verify --train does not take it: {why[field]}")
    return train_verify(narrow(model), wl, layers=layers, seed=seed, recompute=recompute)


def print_train(doc: dict[str, Any]) -> None:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    from ..render.console import make_console
    from ..render.layout import show, table_or_records

    def _fmt(x: Any) -> str:
        return f"{x:,}" if isinstance(x, int) else str(x)

    wl, m = doc["workload"], doc["sizes"]
    title = (f"verify --train {doc['model']}: B={wl['batch']} T={wl['seq']} p={wl['tp']}, "
             f"K={doc['layers_run']} layers, float64, narrowed: D={m['d_model']} "
             f"Dff={m['d_ff']} N_vocab={m['vocab_size']}; recompute {doc['recompute']}; "
             f"loss {doc['loss']:.6g}")
    table = Table(title=Text(title, style="table.title"), title_justify="left")  # not markup
    for col, just in (("check", "left"), ("symbolic", "right"), ("measured", "right"),
                      ("", "center")):
        table.add_column(col, justify=just, no_wrap=col != "check")  # type: ignore[arg-type]
    for c in doc["checks"]:
        sym = f"≤ {c['tolerance']:.0e}" if "tolerance" in c else _fmt(c["symbolic"])
        meas = f"{c['measured']:.2e}" if "tolerance" in c else _fmt(c["measured"])
        name = escape(c["name"])
        if not c["ok"] and "detail" in c:
            name += f"\n[red]{escape(c['detail'])}[/]"
        table.add_row(name, sym, meas, "[green]pass[/]" if c["ok"] else "[bold red]FAIL[/]")
    out = make_console()
    show(out, table_or_records(out, table))  # too narrow: one record a check, numbers whole
    bad = sum(not c["ok"] for c in doc["checks"])
    out.print("[green]all checks pass[/]" if not bad else f"[bold red]{bad} check(s) failed[/]")
