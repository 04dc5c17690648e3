"""verify's memory: what a run will allocate, estimated from the symbolic stages before anything
is allocated, and how many layers (resident or streamed weights) fit a budget.

The budget is a fixed number (DEFAULT_BUDGET unless `--memory-budget` says otherwise), never the
machine's free memory: the layers run and whether the weights stay resident depend only on the
model, the workload and the budget, so `verify --json` is the same on every machine and every run.
The machine's available memory is read once, after the plan is made, only to refuse a plan it
cannot hold (one line, exit 2) instead of running out of memory part-way.
"""

from __future__ import annotations

import os

import numpy as np

from ..interpret import symbolic
from ..interpret.numeric import PRECISIONS
from ..model.config import ModelConfig, ShapecalcError, Workload, ceil_div

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
             resident: bool = True) -> int:
    """Bytes verify will allocate for `layers` layers: weights (all of them, or with streamed
    weights the small ones and the chunk buffers), the biggest activations it keeps alive, KV
    caches. Computed from the symbolic stages before anything is allocated."""
    item = np.dtype(PRECISIONS[precision]).itemsize
    p, T = wl.tp, wl.seq + 1
    big = wl.model_copy(update={"phase": "prefill", "seq": T, "batch": max(wl.batch, 2),
                                "logits": "all", "tp": 1})
    st = symbolic.stages(model, big, 1)
    largest = max(int(np.prod(s.shape)) for s in st)
    kv = 2 * big.batch * model.kv_heads * T * model.dh * 2
    act = 8 * largest + 4 * layers * kv
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


def plan_layers(model: ModelConfig, wl: Workload, layers: int | None, precision: str,
                budget: int, weights: str = "auto") -> tuple[int, int, bool]:
    """K layers to run, the memory estimate, and whether the weights stay resident. Resident
    weights when they fit (K given, or as many layers as fit the budget); streamed weights when
    not even that fits; a refusal when neither does."""
    N = model.n_layers
    if layers is not None and not 1 <= layers <= N:
        raise ShapecalcError("layers", f"K={layers} must be between 1 and N={N}")
    K = layers
    if K is None:
        fixed = estimate(model, wl, 0, precision)
        per = estimate(model, wl, 1, precision) - fixed
        K = max(1, min(N, (budget - fixed) // max(per, 1)))
    need = estimate(model, wl, K, precision)
    if need <= budget and weights != "streamed":
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
