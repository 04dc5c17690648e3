"""verify's memory: what a run will allocate, estimated from the symbolic stages before anything
is allocated, and how many layers (resident or streamed weights) fit a budget.

The budget is a fixed number (DEFAULT_BUDGET unless `--memory-budget` says otherwise), never the
machine's free memory: the layers run and whether the weights stay resident depend only on the
model, the workload and the budget, so `verify --json` is the same on every machine and every run.
The machine's available memory is read once, after the plan is made, only to refuse a plan it
cannot hold (one line, exit 2) instead of running out of memory part-way.
"""

from __future__ import annotations

import math
import os

import numpy as np

from ..interpret import symbolic
from ..interpret.numeric import PRECISIONS
from ..model.config import ModelConfig, ShapecalcError, Workload, ceil_div
from ..model.plan import layer_plan

GiB = 1 << 30
CHUNK = 1 << 26  # bytes of one streamed weight chunk
# verify's default memory budget: a constant, so the plan (K layers, resident or streamed weights)
# is the same on every machine. 4 GiB holds one real-width layer of every preset up to llama2-13b
# with resident weights; bigger ones stream theirs (still one layer in a few hundred MiB).
DEFAULT_BUDGET = 4 * GiB


def available_memory() -> int:
    """Bytes the machine can still give (MemAvailable); only ever used to refuse a plan."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


MAX_BUDGET_GIB = 2**30  # 1 EiB: more than any machine, and still exact in bytes


def budget_bytes(gib: float) -> int:
    """--memory-budget GiB → bytes; a budget is a positive, finite number of GiB."""
    if not (isinstance(gib, (int, float)) and 0 < gib <= MAX_BUDGET_GIB):  # refuses nan too
        raise ShapecalcError("memory-budget", f"must be a number of GiB in (0, {MAX_BUDGET_GIB:,}]"
                             f", not {gib}")
    return int(gib * GiB)


def default_budget() -> int:
    """The budget when none is given: DEFAULT_BUDGET, whatever the machine's free memory."""
    return DEFAULT_BUDGET


# -- memory ---------------------------------------------------------------------------------------
def estimate(model: ModelConfig, wl: Workload, layers: int, precision: str = "float32",
             resident: bool = True, tape: bool = False) -> int:
    """Bytes verify will allocate for `layers` layers: weights (all of them, or with streamed
    weights the small ones and the chunk buffers), the biggest activations it keeps alive, KV
    caches; with `tape` (verify --train) also every stage output of every layer, which the
    backward keeps. Computed from the symbolic stages before anything is allocated."""
    item = np.dtype(PRECISIONS[precision]).itemsize
    p, T = wl.tp, wl.seq + 1
    big = wl.model_copy(update={"phase": "prefill", "seq": T, "batch": max(wl.batch, 2),
                                "logits": "all", "tp": 1})
    st = symbolic.stages(model, big, 1)
    largest = max(math.prod(s.shape) for s in st)
    # the paged cache's pools hold whole blocks: ⌈T/block_size⌉·block_size token slots
    kv = 2 * big.batch * model.kv_heads * ceil_div(T, wl.block_size) * wl.block_size * model.dh * 2
    act = 8 * largest + 4 * layers * kv
    if tape:  # each layer's stage outputs (of its largest kind), and the embedding's and head's
        sizes = [(s.kind, s.group, math.prod(s.shape)) for s in st]
        kinds = {k for k, g, _ in sizes if g == "block"}
        act += layers * max((sum(n for k, g, n in sizes if g == "block" and k == kind)
                             for kind in kinds), default=0)
        act += sum(n for _, g, n in sizes if g != "block")
    if not resident:  # norms, biases, position table; three chunk buffers
        small = sum(s.params for s in st if s.op not in ("linear", "embed"))
        small += sum(s.shape[-1] for s in st if s.op == "linear") * 2
        return (small + act) * item + 3 * CHUNK + 64 * (1 << 20)
    # one layer of the largest kind (the symbolic list records one block per kind)
    kinds = {s.kind for s in st if s.group == "block"}
    block = max(sum(s.params for s in st if s.kind == k) for k in kinds)
    other = sum(s.params for s in st if s.group != "block")
    other += (ceil_div(model.vocab_size, p) * p - model.vocab_size) * model.d_model * 2
    w = other + layers * block
    qkv = model.d_model * (model.n_heads + 2 * model.kv_heads) * model.dh
    if model.fused_qkv:  # fused matrices are concatenated copies (p = 1 and p ranks)
        w += layers * qkv * 2
    if model.kv_heads < p:  # replicated KV heads are copies
        w += layers * 2 * p * model.d_model * model.dh
    return (w + act) * item + 64 * (1 << 20)


# -- time -----------------------------------------------------------------------------------------
# A run's time, estimated as its memory is: from the symbolic counts, so the same on every machine
# (never measured). Rates of a loaded 2-core machine (measured on gpt2, llama3.2-1b, qwen2.5-7b,
# and 1,000 tiny layers); WORK_BUDGET_S bounds a run whose K the budget chooses (no --layers).
RUNS = 12  # forward runs of K layers verify makes: prefill and decode contiguous and paged, the
#            full T+1, the causal check, three padding runs, and two more at p ranks or ep
VALUES_PER_S = 3e8  # random weight values made
FLOPS_PER_S = 5e10  # matmul FLOPs
LAYER_RUN_S = 1e-3  # one layer of one run: the Python around the arrays
WORK_BUDGET_S = 120.0


def work_seconds(model: ModelConfig, wl: Workload, layers: int, resident: bool = True) -> float:
    """Estimated seconds of verify's runs over `layers` layers: weight values made (resident: once;
    streamed: every run makes them again), matmul FLOPs, and each layer's overhead per run."""
    T = wl.seq + 1
    big = wl.model_copy(update={"phase": "prefill", "seq": T, "batch": max(wl.batch, 2),
                                "logits": "all", "tp": 1})
    st = symbolic.stages(model, big, 1)
    kinds = {s.kind for s in st if s.group == "block"}

    def per_kind(f: str) -> int:
        return max(sum(getattr(s, f) for s in st if s.group == "block" and s.kind == k)
                   for k in kinds)

    other_p = sum(s.params for s in st if s.group != "block")
    other_f = sum(s.flops for s in st if s.group != "block")
    made = (other_p + layers * per_kind("params")) * (1 if resident else RUNS)
    flops = RUNS * (other_f + layers * per_kind("flops"))
    return made / VALUES_PER_S + flops / FLOPS_PER_S + RUNS * layers * LAYER_RUN_S


def check_layers(model: ModelConfig, layers: int | None) -> None:
    """K layers, when given: every kind of layer runs once (the first plan.covering() hold every
    kind) and at most the model's N."""
    if layers is None:
        return
    covering = layer_plan(model).covering()
    if layers < 1:
        raise ShapecalcError("layers", f"K={layers} must be between 1 and N={model.n_layers}")
    if layers < covering:
        raise ShapecalcError(
            "layers", f"K={layers} runs only some kinds of layer; the first "
            f"{covering} layers hold every kind, so run at least that many")
    if layers > model.n_layers:
        raise ShapecalcError("layers", f"K={layers} must be between 1 and N={model.n_layers}")


def plan_layers(model: ModelConfig, wl: Workload, layers: int | None, precision: str,
                budget: int, weights: str = "auto", least: int = 1) -> tuple[int, int, bool]:
    """K layers to run, the memory estimate, and whether the weights stay resident. Resident
    weights when they fit (K given, or as many layers as fit the budget); streamed weights when
    not even that fits; a refusal when neither does. Without --layers, K (at least `least`) also
    keeps the run within WORK_BUDGET_S, or the run is refused."""
    N = model.n_layers
    check_layers(model, layers)
    if model.vocab_size < 2:  # the causal check changes later tokens to other token ids
        raise ShapecalcError("vocab_size", f"verify needs at least 2 token ids, got "
                             f"{model.vocab_size}")
    K = layers
    if K is None:
        fixed = estimate(model, wl, 0, precision)
        per = estimate(model, wl, 1, precision) - fixed
        K = max(least, min(N, (budget - fixed) // max(per, 1)))
    need = estimate(model, wl, K, precision)
    resident = need <= budget and weights != "streamed"
    if layers is None:  # bound the time the budget chose: fewer layers, or a refusal
        t0 = work_seconds(model, wl, 0, resident)
        t1 = work_seconds(model, wl, 1, resident) - t0
        K = max(least, min(K, int((WORK_BUDGET_S - t0) // max(t1, 1e-9))))
        secs = work_seconds(model, wl, K, resident)
        if secs > WORK_BUDGET_S:
            raise ShapecalcError(
                "layers", f"verify of {K} layer{'s' if K > 1 else ''} at real width would take "
                f"about {secs:,.0f} s (estimated: {'resident' if resident else 'streamed'} "
                f"weights made, FLOPs), more than the {WORK_BUDGET_S:.0f} s a run without "
                f"--layers may; give --layers {K} to run it anyway, or verify a smaller model")
        need = estimate(model, wl, K, precision)
        resident = need <= budget and weights != "streamed"
    if resident:
        return K, _fits_machine(need, K, wl, budget), True
    streamed = estimate(model, wl, K, precision, resident=False)
    if streamed <= budget and weights != "resident":
        return K, _fits_machine(streamed, K, wl, budget), False
    raise ShapecalcError(
        "memory",
        f"verify needs about {min(need, streamed) / GiB:.1f} GiB for --layers {K} at batch "
        f"{wl.batch}, seq {wl.seq}, but the budget is {budget / GiB:.1f} GiB; lower "
        "--layers, --batch or --seq (or raise --memory-budget)")


def _fits_machine(need: int, K: int, wl: Workload, budget: int) -> int:
    """`need` if the machine has that much available; else a refusal, before any allocation.
    The plan itself never follows free memory: a smaller machine refuses, it does not adapt."""
    have = available_memory()
    if need > have:
        raise ShapecalcError(
            "memory",
            f"verify needs about {need / GiB:.1f} GiB for --layers {K} at batch {wl.batch}, "
            f"seq {wl.seq} (budget {budget / GiB:.1f} GiB), but this machine has only "
            f"{have / GiB:.1f} GiB available; lower --layers, --batch or --seq, or "
            "--memory-budget (a smaller one runs fewer layers or streams the weights)")
    return need
