"""`shapecalc verify --train`: the executed backward's checks (train/verify.py), as a table
or one JSON document."""

from __future__ import annotations

from typing import Any

from ..model.config import ModelConfig, ShapecalcError, Workload
from ..model.errors import plural


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
    from ..render.checks import print_checks

    def _fmt(x: Any) -> str:
        return f"{x:,}" if isinstance(x, int) else str(x)

    wl, m = doc["workload"], doc["sizes"]
    title = (f"verify --train {doc['model']}: B={wl['batch']} T={wl['seq']} p={wl['tp']}, "
             f"K={plural(doc['layers_run'], 'layer')}, float64, narrowed: D={m['d_model']} "
             f"Dff={m['d_ff']} N_vocab={m['vocab_size']}; recompute {doc['recompute']}; "
             f"loss {doc['loss']:.6g}")
    def cells(c: dict[str, Any]) -> tuple[str, str]:
        if "tolerance" in c:
            return f"≤ {c['tolerance']:.0e}", f"{c['measured']:.2e}"
        return _fmt(c["symbolic"]), _fmt(c["measured"])

    print_checks(title, doc["checks"], cells)
