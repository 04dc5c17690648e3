"""The shared training records (tests/data/training-measurements.json, the copy of the
project's shared calibration file that a clone carries) as `train`
inputs: the model, the GPU (with the record's --set-gpu), the step model's terms and the
published layout, for the tests that hold the planner against them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from shapecalc.inputs.hardware import load_gpu
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import ModelConfig, Workload
from shapecalc.train.time import perf_for

PATH = Path(__file__).resolve().parent / "data" / "training-measurements.json"
RECORDS: list[dict[str, Any]] = json.loads(PATH.read_text())["records"]


def record_model(rec: dict[str, Any]) -> ModelConfig:
    m = rec["model"]
    if "preset" in m:
        return load_preset(m["preset"], None)
    return ModelConfig(**{**load_preset(m["base_preset"], None).model_dump(), **m["set"]})


def record_inputs(rec: dict[str, Any]) -> dict[str, Any]:
    """What `train` takes for the record's published layout (its recorded assumptions)."""
    sc = rec.get("shapecalc", {})
    gpu = load_gpu(rec.get("gpu_profile") or rec["gpu"], None, sc.get("set_gpu"))
    perf = replace(perf_for(gpu), net_bandwidth=sc["net_bandwidth"])
    lay = rec["layout"]
    wl = Workload(batch=rec["micro_batch"], seq=rec["seq"], tp=lay["tp"], pp=lay["pp"],
                  ep=lay["ep"], attention_flops=sc.get("attention_flops", "full"))
    global_batch = rec.get("global_batch") or rec["micro_batch"] * lay["dp"] * (
        rec.get("grad_accum") or 1)
    return {"model": record_model(rec), "wl": wl, "gpu": gpu, "perf": perf,
            "layout": lay, "global_batch": global_batch, "recompute": rec["recompute"],
            "attention": sc.get("attention", "flash"), "gpus": rec["n_gpus"]}
