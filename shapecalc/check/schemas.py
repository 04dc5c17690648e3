"""The JSON Schemas of `verify --json`, `verify --train --json`, `verify --against
transformers --json` and `explain --json` (`shapecalc schema NAME`), each key described.

The rows mirror the dicts check/verify.py, train/verify.py, check/against.py and
check/explain.py build; tests validate real output against them with extra keys forbidden.
An explain document's matrices are keyed by the walk's steps (X, Q, scores, …): one schema,
additionalProperties, describes them, and `rules` says how each was computed.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, StrictBool, StrictInt

from ..costs.described import Strict, WorkloadChecked, d, described, inline, many
from ..model.config import Workload

Num = StrictInt | float | str | None  # str: a bound in words ("≤ 1e-06")


Check = described(
    "VerifyCheck", "One check: the symbolic number against the one measured",
    ("name", str, "what is checked (and at which phase and p)"),
    ("symbolic", Num, "shapecalc's symbolic number (0 for a closeness check; a bound such "
     "as ≤ 1e-06 in words)"),
    ("measured", Num, "the number NumPy measured (a closeness check: the largest difference)"),
    ("ok", StrictBool, "they agree (within tolerance where one is given)"),
    ("tolerance", float | None, "a closeness check's allowed difference", None),
    ("detail", str | None, "where a failing check first differs", None))

VerifyOut = described(
    "VerifyOut", "`verify --json`: every symbolic number checked against NumPy's",
    ("model", str, "the model's name"),
    ("workload", dict[str, Any], "the workload verified (shapecalc schema workload)"),
    ("layers_run", StrictInt, "K: the layers NumPy ran"),
    ("n_layers", StrictInt, "N: the model's layers"),
    ("extrapolated", StrictBool, "K < N: the per-layer checks extend to N"),
    ("note", str, "what was run"),
    ("precision", str, "the NumPy dtype: float32 or float64"),
    ("seed", StrictInt, "seed of the random weights and inputs"),
    ("memory_estimate_bytes", StrictInt, "the run's estimated memory"),
    ("memory_budget_bytes", StrictInt, "the memory the run may use"),
    ("weights", str, "resident (all made at once) or streamed (layer by layer)"),
    ("ok", StrictBool, "every check passed"),
    ("checks", many(Check), "each check"), base=WorkloadChecked)

Sizes = described(
    "VerifyTrainSizes", "The widths the backward ran at",
    ("d_model", StrictInt, "D"), ("d_ff", StrictInt, "Dff"),
    ("vocab_size", StrictInt, "N_vocab"), ("n_heads", StrictInt, "H"),
    ("n_kv_heads", StrictInt, "H_kv"), ("head_dim", StrictInt, "Dh"),
    ("n_experts", StrictInt | None, "E (null: no MoE)"),
    ("d_ff_expert", StrictInt, "an expert's FFN width"))

Direction = described(
    "VerifyTrainDirection", "One direction of the finite-difference check",
    ("tensors", str, "the parameter tensors perturbed"),
    ("count", StrictInt, "tensors in the group"),
    ("entries", StrictInt, "entries perturbed"),
    ("gradient", float, "⟨g,v⟩: the backward's directional derivative"),
    ("finite_difference", float, "(loss(w + h·v) − loss(w − h·v)) / 2h"),
    ("relative_error", float, "|finite_difference − gradient| / |gradient|"))

FiniteDiffs = described(
    "VerifyTrainFiniteDifferences", "The gradients against central finite differences",
    ("tolerance", float, "the largest relative error allowed"),
    ("step", float, "h"), ("floor", float, "|gradient| below which the error is absolute"),
    ("norm", str, "how the error is measured"),
    ("directions", many(Direction), "each direction"))

VerifyTrainOut = described(
    "VerifyTrainOut", "`verify --train --json`: the backward's counts against NumPy's autodiff",
    ("model", str, "the model's name"),
    ("workload", dict[str, Any], "the workload (shapecalc schema workload)"),
    ("layers_run", StrictInt, "K: the layers run"),
    ("sizes", Sizes, "the widths run"),
    ("precision", str, "the NumPy dtype (float64)"),
    ("recompute", str, "the recompute checked"),
    ("loss", float, "the cross-entropy loss of the seeded batch"),
    ("checks", many(Check), "each check"),
    ("finite_differences", FiniteDiffs | None, "the finite-difference check (null: not run)"),
    ("ok", StrictBool, "every check passed"), base=WorkloadChecked)

Versions = described("AgainstVersions", "Library versions",
                     ("torch", str, "torch's version"),
                     ("transformers", str, "transformers' version"))

AgainstWorkload = described(
    "AgainstWorkload", "What was measured", ("batch", StrictInt, "B"), ("seq", StrictInt, "T"),
    ("dtype", str, "the model's dtype"))

How = described(
    "AgainstHow", "How transformers' model was measured",
    ("device", str, "the device: meta (no memory) or cpu"),
    ("model_class", str, "transformers' model class"),
    ("attn_implementation", str, "transformers' attention implementation (eager)"),
    ("experts_implementation", str | None, "transformers' experts implementation"),
    ("mla_form", str | None, "MLA's form compared (null: no MLA)"))

FirstDifference = described(
    "AgainstFirstDifference", "The first module whose counts differ",
    ("module", str, "the module's path in transformers' model"),
    ("shapecalc", StrictInt | None, "shapecalc's count of that module"),
    ("transformers", StrictInt | None, "transformers' count of it"))

AgainstCheck = described(
    "AgainstCheck", "One quantity, shapecalc's against transformers'",
    ("name", str, "what is compared"),
    ("quantity", str, "params | prefill_flops | decode_flops | kv_cache_bytes | "
     "state_cache_bytes"),
    ("shapecalc", StrictInt, "shapecalc's number"),
    ("transformers", StrictInt, "transformers' number"),
    ("ok", StrictBool, "they are equal"),
    ("first_difference", FirstDifference | None, "where they first differ (null: nowhere)"),
    ("detail", str | None, "a failing check in words", None))

AgainstOut = described(
    "AgainstOut", "`verify --against transformers --json`: params, FLOPs and cache bytes "
    "against transformers' own model",
    ("model", str, "the model's name"), ("source", str, "the config.json compared"),
    ("against", str, "transformers"), ("versions", Versions, "the versions measured"),
    ("pinned", dict[str, str], "the versions the reference measurements were taken with"),
    ("workload", AgainstWorkload, "what was measured"),
    ("how", How, "how it was measured"),
    ("conventions", list[str], "where the two count differently, and how that is bridged"),
    ("transformers_cache_bytes", StrictInt, "transformers' cache bytes after the prefill"),
    ("checks", many(AgainstCheck), "each quantity"),
    ("ok", StrictBool, "every check passed"))

Matrix = list[list[float | None]]


class ExplainOut(Strict):
    """`explain --json`: a walk through attention (or a scan, or a top-k selection) by hand;
    every other key is one step's matrix, named as the walk names it."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"additionalProperties": {
        "type": "array", "items": {"type": "array", "items": {"type": ["number", "null"]}},
        "description": "one step's matrix (rows of numbers; null: −∞, a masked score); "
                       "rules[key] says how it is computed, shapes[key] its shape"}})
    __pydantic_extra__: dict[str, Matrix]

    example: str = d("the example walked, in words")
    shapes: dict[str, list[int]] = d("each step's shape, by its key")
    rules: dict[str, str] = d("how each step is computed, by its key")


def schemas() -> dict[str, dict[str, Any]]:
    out = {"verify": VerifyOut.model_json_schema(),
           "verify_train": VerifyTrainOut.model_json_schema(),
           "verify_against": AgainstOut.model_json_schema(),
           "explain": ExplainOut.model_json_schema()}
    for name in ("verify", "verify_train"):
        inline(out[name], "workload", Workload)
    return out
