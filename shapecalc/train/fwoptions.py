"""`train`'s framework options read and checked (--framework, --fw-term, --compile,
--power-limit): the one place the CLI turns them into train/fwmemory.py's terms and
train/efficiency.py's TrainPerf. A flag that does not apply to the run is refused."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..inputs.hardware import GPU
from ..inputs.numbers import parse_number
from ..interpret.symbolic import stages as symbolic_stages
from ..model.config import ModelConfig, ShapecalcError, Workload
from .efficiency import clock_factor, run_perf
from .fwmemory import FwTerms, fw_terms
from .time import TrainPerf, perf_for

COMPILES = ("torchtitan", "deepspeed", "llm-foundry")


def train_fw_terms(framework: str, sets: list[str] | None) -> FwTerms:
    if sets and framework == "hf":
        raise ShapecalcError("fw-term", "hf's memory is the exact autograd count; --fw-term "
                             "sets the other frameworks' terms (--framework)")
    return fw_terms(sets)


def run_perf_for(gpu: GPU | None, sets: list[str] | None, framework: str, model: ModelConfig,
                 wl: Workload, *, cp: int, compile_: bool, power_limit: str | None,
                 stages: list[Any] | None = None) -> tuple[TrainPerf, dict[str, Any] | None] | None:
    """The step-time terms: hf keeps train/time.py's fit; the other frameworks take the
    efficiencies of the GPU and the run's shapes, then any --perf override on top."""
    if gpu is None:
        for flag, given in (("compile", compile_), ("power-limit", power_limit is not None)):
            if given:
                raise ShapecalcError(flag, "needs --gpu: it sets the step time")
        return None
    if compile_ and framework not in COMPILES:
        raise ShapecalcError("compile", f"applies to {', '.join(COMPILES)} (torch modules); "
                             f"{framework}'s " + ("kernels are fused already" if
                                                  framework == "megatron" else
                                                  "step time is the fit on published figures"))
    watts = None
    if power_limit is not None:
        watts = parse_number(power_limit, "power-limit")
        if not 1 <= watts <= 10_000:
            raise ShapecalcError("power-limit", f"must be in 1..10000 W, not {power_limit}")
    user = perf_for(gpu, sets)
    if framework == "hf":
        if watts is None:
            return user, None
        c = clock_factor(gpu, watts)
        return replace(user, gemm_efficiency=user.gemm_efficiency * c,
                       attention_efficiency=user.attention_efficiency * c), None
    stages = stages or symbolic_stages(model, wl, 1)  # a search passes the micro-batch's
    perf, how = run_perf(perf_for(gpu), gpu, framework, model, wl, stages, cp, power_w=watts,
                         compile_=compile_)
    keys = {item.partition("=")[0].strip() for item in sets or []}
    return replace(perf, **{k: getattr(user, k) for k in keys}), how
