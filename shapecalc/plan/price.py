"""Cost from a price per GPU-hour: the one home of its formulas (fit's cost per 1M tokens is
memory.py's, the same rule: the deployment's $/s over its tokens/s).

The price is `--price`, else the GPU profile's `price_per_gpu_hour` (an on-demand rate from a
dated public page, `price_source`); the output says which. A serving deployment of G GPUs costs
G·price an hour whether busy or not; each rate below divides that by what it served over the
run (first arrival … last finish): $ per million input tokens and per million output tokens each
charge the whole cost to that kind of token (the rates a provider would have to ask to cover it
from one side alone), $ per request over every finished request, and $ per request at the SLO
over the requests that met it (goodput)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..inputs.hardware import GPU
from .options import PlanOptions


def with_default_price(opts: PlanOptions, gpu: GPU | None) -> PlanOptions:
    """opts with the profile's price where --price was not given, and where it came from."""
    if opts.price is not None:
        return replace(opts, price_source="--price")
    if gpu is None or gpu.price_per_gpu_hour is None:
        return opts
    return replace(opts, price=gpu.price_per_gpu_hour,
                   price_source=f"{gpu.name} profile default: {gpu.price_source}")


def serving_cost(price: float, source: str, gpus: int, throughput: dict[str, Any],
                 goodput_rps: float | None) -> dict[str, Any]:
    """`cost` of a serve run: $/hour of the deployment and its rates (module doc)."""
    per_hour = price * gpus
    per_s = per_hour / 3600.0

    def per(rate: float | None, scale: float = 1.0) -> float | None:
        return per_s / rate * scale if rate else None

    return {"price_per_gpu_hour": price, "price_source": source, "gpus": gpus,
            "per_hour": per_hour,
            "per_million_input_tokens": per(throughput["input_tokens_per_s"], 1e6),
            "per_million_output_tokens": per(throughput["output_tokens_per_s"], 1e6),
            "per_request": per(throughput["requests_per_s"]),
            "per_request_at_slo": per(goodput_rps)}


def training_cost(price: float, source: str, gpus: int, time: dict[str, Any]
                  ) -> dict[str, Any]:
    """`time.cost` of train: the job's $/hour, $ a step, $ per million and per trillion trained
    tokens and, with --train-tokens, the whole run (its GPU-hours × price)."""
    step, tps = time["step_s"], time["tokens_per_s"]
    per_hour = price * gpus
    return {"price_per_gpu_hour": price, "price_source": source, "gpus": gpus,
            "per_hour": per_hour,
            "per_step": None if step is None else per_hour / 3600.0 * step,
            "per_million_tokens": None if not tps else per_hour / 3600.0 / tps * 1e6,
            "per_trillion_tokens": None if not tps else per_hour / 3600.0 / tps * 1e12,
            "total": None if time["gpu_hours"] is None else time["gpu_hours"] * price}
