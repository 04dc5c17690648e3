"""The `train` report (plain data; its dict is the `--json` contract, its keys in README): one
training step's FLOPs (forward, backward, recompute, beside the 6·N·tokens and 6·N + 12·L·D·T
approximations), per-rank memory by term, the batch arithmetic, and each parallelism's ledger.

Exact: FLOPs (backward.py, against FlopCounterMode), parameters and model-state bytes per rank
(memory.py), activation memory (saved.py, activations.py), with Megatron's closed form beside it
(Korthikanti et al. 2022, Table 2). The ledgers (DP, TP, CP, EP): train/ledgers.py; with a GPU,
the step time and its rates: train/time.py.
"""

from __future__ import annotations

from typing import Any

from ..inputs.numbers import bounded_int
from ..interpret.symbolic import stages as symbolic_stages
from ..model.config import ModelConfig, ShapecalcError, Workload, ceil_div, check, nbytes
from ..model.parallel import pp_layers
from ..model.record import INT_MAX
from ..plan.gallop import largest_ok
from .activations import (
    CP_RULE,
    TP_RULE,
    megatron_difference,
    pipeline_activations,
    saved_bytes,
)
from .backward import backward_stages, check_recompute, step_flops
from .fp8 import check_fp8, fp8_perf
from .fp8 import describe as fp8_describe
from .frameworks import framework as framework_rules
from .fwattach import attach_framework, op_sac_flops
from .fwmemory import FwTerms
from .ledgers import cp_ledger, dp_ledger, ep_ledger, tp_ledger
from .memory import PRECISIONS, ZERO_SHARDED, check_training, model_state, rank_params
from .time import TrainPerf, rates, step_time

# the activations' width under each precision (Megatron's closed form counts 16-bit ones)
ACT_DTYPE = {"mixed": "bf16", "fp32": "fp32", "adam8bit": "bf16"}


def batches(micro: int, accum: int | None, global_batch: int | None, dp: int
            ) -> tuple[int, int]:
    """(grad_accum, global_batch) with global = micro × grad_accum × dp, checked."""
    if accum is not None:
        bounded_int(accum, "grad-accum", 1, INT_MAX)
    if global_batch is not None:
        bounded_int(global_batch, "global-batch", 1, INT_MAX, "sequences")
    if accum is None:
        if global_batch is None:
            return 1, micro * dp
        if global_batch % (micro * dp):
            raise ShapecalcError("global_batch", f"{global_batch} is not a multiple of micro-batch"
                                 f" {micro} × dp {dp} = {micro * dp}")
        return global_batch // (micro * dp), global_batch
    if global_batch is not None and global_batch != micro * accum * dp:
        raise ShapecalcError("global_batch", f"{global_batch} ≠ micro-batch {micro} × grad-accum "
                             f"{accum} × dp {dp} = {micro * accum * dp}")
    return accum, micro * accum * dp


def megatron_activations(model: ModelConfig, s: int, b: int, t: int, recompute: str,
                         width: int) -> dict[str, Any]:
    """Bytes one layer keeps for its backward, by Megatron's closed form (16-bit activations,
    sequence parallelism when t > 1; Korthikanti et al. 2022, Table 2): sbh·(34 + 5·a·s/h)/t
    without recompute, 34·sbh/t with selective recompute, 2·sbh/t with full (only the layer's
    input). For other widths, scaled by width/2. A GPT layer: a 4h FFN, no GQA, dropout masks."""
    h, a = model.d_model, model.n_heads
    forms = {"none": (34 * s * b * h + 5 * a * s * s * b, "(34·s·b·h + 5·a·s²·b)"),
             "selective": (34 * s * b * h, "34·s·b·h"),
             "full": (2 * s * b * h, "2·s·b·h")}
    key = "full" if recompute == "torch" else recompute
    value, text = forms[key]
    per_layer = ceil_div(value * width, 2 * t)
    if t > 1:
        text += "/t"
    if width != 2:
        text += f" × {width}/2"
    return {"form": "Megatron closed form (Korthikanti et al. 2022, Table 2)",
            "recompute": key, "formula": text, "bytes_per_layer": per_layer}


def build_train(model: ModelConfig, wl: Workload, *, dp: int, zero: int, precision: str,
                recompute: str, grad_accum: int | None, global_batch: int | None,
                gpu_memory: int | None = None, gpu_name: str | None = None, cp: int = 1,
                virtual: int = 1, attention: str = "flash", gpu: Any = None,
                perf: TrainPerf | None = None, train_tokens: int | None = None,
                framework: str = "hf", fw_terms: FwTerms | None = None,
                fp8: str | None = None, fused: tuple[str, ...] = (),
                lora: Any = None) -> dict[str, Any]:
    check_recompute(recompute)
    if lora is not None:  # LoRA/QLoRA: train/lora.py, train/lora_report.py
        from .lora_report import check_lora

        check_lora(lora, wl, precision, recompute, cp)
        if framework != "hf" or fp8 is not None:
            raise ShapecalcError("framework" if framework != "hf" else "fp8", "with LoRA is "
                                 "not built yet: LoRA is counted as autograd runs peft (hf)")
    if fp8 is not None:
        check_fp8(fp8, gpu)
    fw = framework_rules(framework, zero=zero, recompute=recompute, pp=wl.pp, fp8=fp8,
                         virtual=virtual)
    if fw.name != "hf" and precision != "mixed":
        raise ShapecalcError("precision", f"{fw.name} is planned in mixed precision only "
                             f"(bf16 with fp32 master weights), not {precision!r}")
    check_training(model, precision, zero, dp, wl.ep)
    check_parallel(model, wl, cp, virtual)
    if wl.phase != "prefill" or wl.logits != "all":
        raise ShapecalcError("phase", "training runs the whole sequence: phase prefill, logits all")
    check(model, wl)
    b, s, t, p, ep = wl.batch, wl.seq, wl.tp, wl.pp, wl.ep
    accum, gbatch = batches(b, grad_accum, global_batch, dp)
    full = symbolic_stages(model, wl, 1)
    rank = symbolic_stages(model, wl, t) if t > 1 else full

    # -- FLOPs: one micro-batch of the whole model, then the step --------------------------------
    # per-op SAC re-runs its own GEMMs, not the attention core: its FLOPs are added to none's
    work_rc = "none" if fw.recompute[recompute] == "op" else recompute
    flops = step_flops(full, model.n_layers, work_rc)
    sac = op_sac_flops(model, full, fw.recompute[recompute], flops,
                       int((fw_terms or FwTerms()).sac_layer_every))
    params = sum(x.params * x.repeat for x in full)
    tokens = b * s
    approx6 = 6 * params * tokens
    approx_palm = (6 * params + 12 * model.n_layers * model.d_model * s) * tokens
    exact = flops["forward_flops"] + flops["backward_flops"]
    micro_batches = accum * dp
    stages_doc = [bs.as_dict() for bs in backward_stages(full)]

    # -- memory per rank, per pipeline stage -----------------------------------------------------
    # CP: a rank holds T/cp of each sequence; weights are replicated over cp and, as Megatron
    # does, the gradients are reduced and ZeRO shards over the dp·cp ranks
    dpc = dp * cp
    width = nbytes(1, ACT_DTYPE[precision])
    act = megatron_activations(model, s, b, t, recompute, width)
    act["bytes_per_layer"] = ceil_div(act["bytes_per_layer"], cp)
    layers = pp_layers(model.n_layers, p)
    # exact: what autograd saves (train/saved.py), one micro-batch per pipeline stage; with CP a
    # rank's T/cp tokens. Under 1F1B the stage's other in-flight micro-batches keep their
    # resident bytes while one goes back through its layers at its peak: the fit reads that
    sized = wl.model_copy(update={"seq": s // cp, "dtype": ACT_DTYPE[precision],
                                  "act_dtype": None})

    def exact_at(micro: int) -> list[dict[str, Any]]:
        return pipeline_activations(model, sized.model_copy(update={"batch": micro}),
                                    recompute, attention, t, layers)

    saved = exact_at(b)
    per_stage = []
    placed = rank_params(model, wl, full, rank)
    for i, (dense, experts) in enumerate(placed):
        ms = model_state(dense, experts, precision, zero, dpc, ep)
        c = chunks_in_flight(p, i, accum, virtual)
        one = saved[i]
        act_bytes = in_flight_bytes(c, virtual, one)
        per_stage.append({"stage": i, "layers": layers[i], "params": ms["params"],
                          "model_state": ms, "micro_batches_in_flight": ceil_div(c, virtual),
                          "chunks_in_flight": c,
                          "activation_bytes": act_bytes,
                          "activation_resident_bytes": ceil_div(c * one["resident_bytes"],
                                                                virtual),
                          "activation_bytes_megatron": ceil_div(
                              act["bytes_per_layer"] * layers[i] * c, virtual),
                          "bytes": ms["bytes"] + act_bytes})
    peak = max(per_stage, key=lambda x: x["bytes"])
    whole = saved_bytes(model, sized, recompute, attention, tp=t)
    memory: dict[str, Any] = {"per_stage": per_stage, "peak_stage": peak["stage"],
                              "peak_bytes": peak["bytes"], "activations": act,
                              "saved": _saved_doc(model, whole, saved, act, t, cp)}
    if gpu_memory is not None:
        memory.update(gpu=gpu_name, gpu_memory_bytes=gpu_memory,
                      fits=peak["bytes"] <= gpu_memory, free_bytes=gpu_memory - peak["bytes"])

        def fits(micro: int) -> bool:
            return all(x["model_state"]["bytes"] + in_flight_bytes(x["chunks_in_flight"],
                                                                    virtual, a) <= gpu_memory
                       for x, a in zip(per_stage, exact_at(micro), strict=True))

        memory["largest_micro_batch"] = largest_ok(fits, 1, (1 << 40) - 1)
    attach_framework(memory, fw, model, wl, recompute=recompute, attention=attention,
                     zero=zero, dp=dp, cp=cp, virtual=virtual, placed=placed, rank=rank,
                     stages=full, terms=fw_terms or FwTerms(), gpu_memory=gpu_memory,
                     fp8=fp8)

    # -- communication per step per rank ---------------------------------------------------------
    dense, experts = placed[peak["stage"]]
    comm = {"dp": dp_ledger(dense, experts, precision, zero, dpc, ep),
            "ep": ep_ledger(model, wl, peak["stage"], accum, ACT_DTYPE[precision], cp),
            "tp": tp_ledger(b, s // cp, model.d_model, t, layers[peak["stage"]], accum, width,
                            peak["stage"] == 0, peak["stage"] == p - 1),
            "cp": cp_ledger(model, b, s, t, cp, layers[peak["stage"]], accum,
                            ACT_DTYPE[precision], recompute),
            "pp": {"stages": p, "micro_batches": accum,
                   "virtual_stages": virtual,
                   "bubble_fraction": (p - 1) / (virtual * accum + p - 1),
                   "bubble_formula": "(p−1)/(m+p−1)" if virtual == 1 else "(p−1)/(v·m+p−1)",
                   "micro_batches_in_flight_first_stage": min(p, accum),
                   "chunks_in_flight_first_stage": chunks_in_flight(p, 0, accum, virtual),
                   "boundary_bytes_per_micro_batch": nbytes(b * s * model.d_model,
                                                            ACT_DTYPE[precision]) if p > 1 else 0,
                   "boundary_bytes_per_step": 2 * accum * nbytes(
                       b * s * model.d_model, ACT_DTYPE[precision]) if p > 1 else 0}}
    doc = {
        "model": model.model_dump(),
        "workload": wl.model_dump(),
        "training": {"micro_batch": b, "grad_accum": accum, "dp": dp, "global_batch": gbatch,
                     "tokens_per_step": gbatch * s, "tp": t, "pp": p, "ep": ep,
                     "gpus": t * cp * p * dp, "cp": cp, "virtual_stages": virtual,
                     "zero": zero, "precision": precision,
                     "bytes_per_param": {x.name: x.bytes_per_param
                                         for x in PRECISIONS[precision]},
                     "zero_sharded": list(ZERO_SHARDED[zero]), "recompute": recompute},
        "flops": {**flops, "params": params, "tokens_per_micro_batch": tokens,
                  "approx_6nt": approx6, "approx_6nt_formula": "6·N·tokens",
                  "approx_palm": approx_palm,
                  "approx_palm_formula": "(6·N + 12·L·D·T)·tokens",
                  "forward_backward_flops": exact,
                  "per_step": {k: flops[k] * micro_batches for k in (
                      "forward_flops", "backward_flops", "recompute_flops", "step_flops",
                      "backward_convention_only_flops")},
                  "stages": stages_doc},
        "memory": memory,
        "communication": comm,
    }
    if fp8 is not None:
        doc["training"]["fp8"] = fp8_describe(fp8)
    if lora is not None:
        from .lora_report import apply_lora

        apply_lora(doc, model, wl, lora, precision=precision, zero=zero, dp=dp,
                   attention=attention, act=ACT_DTYPE[precision], gpu_memory=gpu_memory,
                   recompute=recompute)
        if gpu is not None and zero < 3:  # train/lora_time.py
            from .lora_time import lora_time

            doc["time"] = lora_time(doc, model, wl, gpu, perf or TrainPerf(), lora, dp=dp,
                                    zero=zero, attention=attention, width=width,
                                    precision=precision, recompute=recompute,
                                    train_tokens=train_tokens)
    elif gpu is not None:
        tperf = perf or TrainPerf()
        if fp8 is not None:  # the fp8 GEMMs at the fp8 peak (train/fp8.py)
            tperf = fp8_perf(tperf, gpu, full)
        doc["time"] = _time(model, wl, gpu, tperf, doc, placed, cp=cp, dp=dp,
                            accum=accum, virtual=virtual, zero=zero, precision=precision,
                            recompute=work_rc, attention=attention, width=width,
                            train_tokens=train_tokens, extra_gemm=sac,
                            peak_dtype="fp8" if fp8 else None, fused=fused)
    return doc


def _saved_doc(model: ModelConfig, whole: dict[str, Any], stages: list[dict[str, Any]],
               act: dict[str, Any], t: int, cp: int) -> dict[str, Any]:
    """`memory.saved`: the exact count (one micro-batch on one rank holding every layer, and on
    each pipeline stage) beside Megatron's closed form, and why they differ."""
    keep = ("convention", "measured_families", "attention", "recompute", "dtype", "tp",
            "per_layer", "per_layer_none", "per_layer_none_formula", "layer_input_bytes",
            "outside_bytes", "head_bytes", "held_bytes", "resident_bytes", "peak_bytes",
            "per_stage", "tensors", "held")
    layer = max(whole["per_layer"].values(), default=0)
    return {**{k: whole[k] for k in keep},
            "pipeline_stages": [{k: x[k] for k in ("resident_bytes", "peak_bytes", "held_bytes",
                                                   "outside_bytes")} for x in stages],
            "fit_reads": "peak: (in-flight − 1) × resident + the peak of the micro-batch going "
            "back through its layers",
            "tp_rule": TP_RULE if t > 1 else "", "cp_rule": CP_RULE if cp > 1 else "",
            "megatron_bytes_per_layer": act["bytes_per_layer"],
            "difference": megatron_difference(model, layer, act["bytes_per_layer"],
                                              whole["attention"], whole["recompute"])}


def chunks_in_flight(p: int, i: int, m: int, v: int) -> int:
    """Micro-batch passes through a model chunk (layers/v of the stage's layers) that pipeline
    stage i holds at most, each keeping its saved tensors until its backward. Plain 1F1B (v = 1):
    min(p − i, m). Interleaved (Megatron's schedule): the warm-up forwards, (p−i−1)·2 + (v−1)·p
    capped at m·v, and the steady state's one forward before each backward; all m·v when m = p
    (warm-up only). On the first stage that is p·(1 + (p−1)/(p·v)) micro-batches' worth, the
    factor Korthikanti et al. 2022 give."""
    if v == 1:
        return min(p - i, m)
    if m == p:
        return m * v
    warm = min((p - i - 1) * 2 + (v - 1) * p, m * v)
    return warm + (warm < m * v)


def in_flight_bytes(c: int, v: int, one: dict[str, Any]) -> int:
    """c chunk passes in flight, each 1/v of a micro-batch's resident bytes (chunks of equal
    layers; the embedding's and head's bytes spread alike), one of them at its backward peak:
    (c − v)/v micro-batches resident + one at its peak (v = 1: (c − 1)·resident + peak)."""
    return ceil_div((c - v) * one["resident_bytes"], v) + one["peak_bytes"]


def check_parallel(model: ModelConfig, wl: Workload, cp: int, virtual: int) -> None:
    """CP splits each sequence into 2·cp load-balanced causal chunks; interleaving needs a
    pipeline and at least v layers on every stage."""
    if cp < 1:
        raise ShapecalcError("cp", f"must be ≥ 1, not {cp}")
    if cp > 1 and wl.seq % (2 * cp):
        raise ShapecalcError("cp", f"T={wl.seq} is not a multiple of 2·cp = {2 * cp}: each "
                             "rank holds two equal causal chunks")
    if virtual < 1:
        raise ShapecalcError("virtual_stages", f"must be ≥ 1, not {virtual}")
    if virtual > 1 and (wl.pp == 1 or min(pp_layers(model.n_layers, wl.pp)) < virtual):
        raise ShapecalcError("virtual_stages", f"v={virtual} needs pp > 1 and at least v layers "
                             "on every pipeline stage")


def _time(model: ModelConfig, wl: Workload, gpu: Any, perf: TrainPerf, doc: dict[str, Any],
          placed: list[tuple[int, int]], *, cp: int, dp: int, accum: int, virtual: int,
          zero: int, precision: str, recompute: str, attention: str, width: int,
          train_tokens: int | None, extra_gemm: dict[Any, int] | None = None,
          peak_dtype: str | None = None, fused: tuple[str, ...] = ()) -> dict[str, Any]:
    """The `time` block: train/time.py's step model and the rates that follow."""
    st = step_time(model, wl, gpu, perf, cp=cp, dp=dp, accum=accum, virtual=virtual, zero=zero,
                   recompute=recompute, attention=attention, act_width=width, placed=placed,
                   per_param={x.name: x.bytes_per_param for x in PRECISIONS[precision]},
                   extra_gemm=extra_gemm, peak_dtype=peak_dtype, fused=fused)
    ps, tr = doc["flops"]["per_step"], doc["training"]
    # what the kernels run: FlopCounterMode's convention-only count is not work (MFU)
    model_flops = ps["forward_flops"] + ps["backward_flops"] - ps["backward_convention_only_flops"]
    out = {**st, **rates(st["step_s"], tr["gpus"], st["peak_flops"], model_flops,
                         model_flops + ps["recompute_flops"], tr["tokens_per_step"],
                         train_tokens)}
    out["perf"] = {k: getattr(perf, k) for k in perf.__dataclass_fields__}
    if perf.net_bandwidth is None:  # the profile's, as the topology used it
        out["perf"]["net_bandwidth"] = gpu.scale_out_bandwidth
    return out
