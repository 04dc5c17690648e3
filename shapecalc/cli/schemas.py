"""`shapecalc schema`: each output's JSON Schema by name, and what it describes.

One table: the name, the command whose output it is, and its pydantic model (the tests
validate that command's real output against the model and walk its keys against the schema).
"""

from __future__ import annotations

from typing import Any

# name → (what it describes, where its model lives)
SCHEMAS: dict[str, tuple[str, str]] = {
    "config": ("a model's fields (--config FILE, presets show --json)",
               "model.config:ModelConfig"),
    "workload": ("a workload's fields (batch, seq, dtypes, tp, ...)", "model.config:Workload"),
    "trace": ("trace --json", "costs.schemas:TraceOut"),
    "fit": ("fit --json", "plan.schemas:FitOut"),
    "compare": ("compare --json", "plan.schemas:CompareOut"),
    "sweep_row": ("one line of sweep (JSON Lines; CSV has the same columns)",
                  "plan.schemas:SweepRow"),
    "serve": ("serve --json (a simulated run)", "serve.schemas:ServeOut"),
    "serve_find_rate": ("serve --find-rate --json", "serve.schemas:ServeFindRateOut"),
    "serve_find_gpus": ("serve --find-gpus --json", "serve.schemas:ServeFindGpusOut"),
    "serve_find_pd": ("serve --find-pd --json", "serve.schemas:ServeFindPdOut"),
    "train": ("train --json", "train.schemas:TrainOut"),
    "train_search": ("train --search --json", "train.search_schemas:TrainSearchOut"),
    "verify": ("verify --json", "check.schemas:VerifyOut"),
    "verify_train": ("verify --train --json", "check.schemas:VerifyTrainOut"),
    "verify_against": ("verify --against transformers --json", "check.schemas:AgainstOut"),
    "explain": ("explain --json (also --scan, --example topk)", "check.schemas:ExplainOut"),
}


def models() -> dict[str, Any]:
    """name → the pydantic model that validates that output."""
    import importlib

    out = {}
    for name, (_, where) in SCHEMAS.items():
        mod, _, attr = where.partition(":")
        out[name] = getattr(importlib.import_module(f"shapecalc.{mod}"), attr)
    return out


def schema(name: str) -> dict[str, Any]:
    """The JSON Schema `shapecalc schema NAME` prints (config and workload inlined where an
    output carries them)."""
    from ..costs.schemas import trace_schema
    from ..plan.schemas import schemas as plan_schemas

    if name == "trace":
        return trace_schema()
    if name in ("fit", "compare", "sweep_row"):
        return plan_schemas()[name]
    if name == "train":
        from ..train.schemas import schema as train_schema

        return train_schema()
    if name.startswith(("verify", "explain")):
        from ..check.schemas import schemas as check_schemas

        return check_schemas()[name]
    return models()[name].model_json_schema()  # type: ignore[no-any-return]


def schemas() -> dict[str, dict[str, Any]]:
    return {name: schema(name) for name in SCHEMAS}
