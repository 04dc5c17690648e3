"""The framework as one of `train --search`'s dimensions (train/search.py calls these): which
frameworks a run can search, what each refuses of a layout (frameworks.framework's rules, each
failure named with its framework: "deepspeed with --pp 2: its pipeline engine refuses ZeRO-2
and ZeRO-3"), its step-time terms on a layout (train/fwoptions.run_perf_for, train/efficiency.py's
per-chip fit of that layout's GEMM shapes; its DP overlap policy, network.DP_OVERLAP; fp8's peak,
train/fp8.py) and its peak memory, through the very call `train --framework` makes
(train/fwattach.attach_framework on the stages' rows), so a layout's step and peak are train's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..inputs.hardware import GPU
from ..model.config import ModelConfig, ShapecalcError, Workload
from .efficiency import FUSED_ROLES
from .fp8 import fp8_perf
from .frameworks import FRAMEWORKS, NAMES, Framework, framework
from .fwattach import attach_framework, op_sac_flops, stage_inputs
from .fwmemory import FwTerms, fw_widths
from .fwoptions import COMPILES, train_fw_terms
from .memory import model_state
from .network import DP_OVERLAP
from .report import chunks_in_flight, in_flight_bytes
from .time import TrainPerf

PerfOf = Callable[[str, Workload, int, Any], TrainPerf]  # (framework, wl, cp, wl's stages)


def searched(fixed: str | None, *, fp8: str | None, compile_: bool, fw_terms: bool,
             precision: str) -> tuple[str, ...]:
    """The frameworks a search runs: --framework's alone, else every one the other flags apply
    to (--fp8: those that run the mode; --compile: torch modules'; --fw-term: all but hf, whose
    memory is the exact count; a precision other than mixed: hf). A fixed framework the flags
    exclude is refused by its flag."""
    if fixed is not None:
        framework(fixed, zero=0, recompute="none", pp=1, fp8=fp8)
        if fw_terms and fixed == "hf":
            train_fw_terms(fixed, ["given"])  # hf refuses any (its memory is the exact count)
        if precision != "mixed" and fixed != "hf":
            raise ShapecalcError("precision", f"{fixed} is planned in mixed precision only "
                                 f"(bf16 with fp32 master weights), not {precision!r}")
        return (fixed,)
    out = tuple(n for n in NAMES if (fp8 is None or fp8 in FRAMEWORKS[n].fp8)
                and (not compile_ or n in COMPILES) and not (fw_terms and n == "hf")
                and (precision == "mixed" or n == "hf"))
    if not out:
        raise ShapecalcError("framework", "no framework runs these flags together (--fp8, "
                             "--compile, --fw-term, --precision): fix one with --framework")
    return out


def default_perf(gpu: GPU, model: ModelConfig, base: TrainPerf) -> PerfOf:
    """Each framework's terms as `train --framework X --gpu` makes them without --perf: hf's
    `base`, the others' efficiencies on the layout's shapes; each its DP overlap policy."""
    from .fwoptions import run_perf_for

    def perf_of(name: str, wl: Workload, cp: int, stages: Any = None) -> TrainPerf:
        if name == "hf":
            return base
        got = run_perf_for(gpu, None, name, model, wl, cp=cp, compile_=False, power_limit=None,
                           stages=stages)
        assert got is not None
        return replace(got[0], dp_overlap=DP_OVERLAP.get(name, got[0].dp_overlap))

    return perf_of


def zeros(fw: Framework, zs: tuple[int, ...], recompute: str, pp: int, fp8: str | None,
          virtual: int = 1) -> tuple[list[int], list[tuple[int, str]]]:
    """The ZeRO stages fw runs on this layout, and the others with its reason."""
    ok, refused = [], []
    for z in zs:
        try:
            framework(fw.name, zero=z, recompute=recompute, pp=pp, fp8=fp8, virtual=virtual)
            ok.append(z)
        except ShapecalcError as e:
            why = e.reason if e.reason.startswith(fw.name) else f"{fw.name}: {e.reason}"
            refused.append((z, why))
    return ok, refused


class FwLayout:
    """One framework on one layout class at micro-batch b: its step-time terms and memory."""

    def __init__(self, fw: Framework, model: ModelConfig, wl: Workload, gpu: GPU,
                 perf: TrainPerf, *, recompute: str, attention: str, cp: int, full: Any,
                 terms: FwTerms, fp8: str | None) -> None:
        self.fw, self.model, self.wl, self.fp8, self.terms = fw, model, wl, fp8, terms
        self.recompute, self.attention, self.cp = recompute, attention, cp
        policy = fw.recompute[recompute]
        # per-op SAC re-runs its own GEMMs, not the attention core (report.build_train)
        self.work_rc = "none" if policy == "op" else recompute
        self.extra = self.sac_flops(model, full, policy, {"step_flops": 0}, terms)
        self.perf = fp8_perf(perf, gpu, full) if fp8 is not None else perf
        self.peak_dtype = "fp8" if fp8 else None
        self.fused = FUSED_ROLES.get(fw.name, ())
        self.inputs: Any = None

    @staticmethod
    def sac_flops(model: ModelConfig, full: Any, policy: str, flops: dict[str, Any],
                  terms: FwTerms) -> dict[Any, int] | None:
        """Per-op SAC's own recompute FLOPs (added to `flops`), per layer kind; else None."""
        return op_sac_flops(model, full, policy, flops, int(terms.sac_layer_every))

    def states(self, placed: list[tuple[int, int]], zero: int, dpc: int) -> int:
        """The largest model states of a stage's rank: a bound under the peak (framework_memory
        adds activations, gathers, the allocator's reserve and buffers to them; without fp8,
        whose copies can replace bf16 bytes), so a layout over the GPU by them alone is not
        counted further."""
        w = fw_widths(self.fw)
        return max(model_state(d, e, "mixed", zero, dpc, self.wl.ep, w)["bytes"]
                   for d, e in placed) if self.fp8 is None else 0

    def peak(self, *, zero: int, dp: int, virtual: int, accum: int,
             placed: list[tuple[int, int]], one: list[dict[str, Any]] | None, rank: Any,
             full: Any) -> int:
        """The peak rank's bytes as `train --framework` counts them (gpu_memory left out: the
        search compares it with the GPU's itself). `one`: each stage's hf saved bytes of a
        micro-batch (the frameworks whose activations are autograd's)."""
        pp = self.wl.pp
        rows = []
        for i in range(pp):
            c = chunks_in_flight(pp, i, accum, virtual)
            rows.append({"chunks_in_flight": c,
                         "activation_bytes": in_flight_bytes(c, virtual, one[i]) if one else 0})
        memory: dict[str, Any] = {"per_stage": rows, "peak_bytes": 0}
        if self.inputs is None:
            self.inputs = stage_inputs(self.model, self.wl, rank, self.fp8)
        attach_framework(memory, self.fw, self.model, self.wl, recompute=self.recompute,
                         attention=self.attention, zero=zero, dp=dp,
                         cp=self.cp, virtual=virtual, placed=placed, rank=rank, stages=full,
                         terms=self.terms, gpu_memory=None, fp8=self.fp8, inputs=self.inputs)
        return int(memory["peak_bytes"])


def train_flags(r: dict[str, Any], fp8: str | None) -> list[tuple[str, Any]]:
    """--framework (and --fp8) of a row, where not the defaults."""
    out: list[tuple[str, Any]] = []
    if r.get("framework", "hf") != "hf":
        out.append(("--framework", r["framework"]))
    if fp8 is not None:
        out.append(("--fp8", fp8))
    return out
