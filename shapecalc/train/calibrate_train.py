"""`shapecalc calibrate-train FILE`: the shared training records (step time, tokens/s per GPU,
peak memory) against `train --framework`, and the fit of train/efficiency.py's per-GPU terms.

What each record ran, beyond its own fields, is read from its own text (setup_of): the
framework whose memory rules apply (by its source), the power limit its quote states,
torch.compile and fp8 (by its precision); a recipe's override is stated with the file it quotes
(RECIPES: gpt-oss-120b's micro-batch and Megatron's recompute modules). Nothing is set per
record to match its figure: the fit has two terms per GPU chip (e_gemm, e_attn) and two shared
by all (gemm_half_dim, attention_half_seq), each the grid point of least squared log error over
the records' time figures.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from ..inputs import files
from ..inputs.hardware import load_gpu
from ..inputs.sources import load_preset
from ..interpret.symbolic import stages as symbolic_stages
from ..model.config import ModelConfig, ShapecalcError, Workload
from .efficiency import FITTED, FUSED_ROLES, run_perf
from .fwmemory import fw_terms
from .report import build_train
from .time import TrainPerf, perf_for

GIB = 1 << 30
G_RANGE, A_RANGE = (50, 95), (30, 90)  # the fit's grid, in hundredths
TIME_KEYS = ("step_s", "tokens_per_s_per_gpu")
KEYS = (*TIME_KEYS, "memory_gib")

# what each source ran, read from the record's own text (source, precision, quote_context),
# so records of the same kinds held back run the same way: the framework by the source
FRAMEWORK_BY_SOURCE = (("Reducing Activation Recomputation", "megatron"),
                       ("torchtitan", "torchtitan"), ("llm-foundry", "llm-foundry"),
                       ("Megatron-Bridge", "megatron"), ("Megatron", "megatron"))
# the power limit a source states ("We used the default 500W power limit": torchtitan)
POWER = re.compile(r"(\d{3,4}) ?W power limit")
COMPILED = ("torch.compile",)
# the fp8 recipe a precision field names: torchtitan's "torchao Float8" at 9dec370 is torchao's
# tensorwise recipe with the fp8 FSDP all-gather (enable_fsdp_float8_all_gather); NeMo's FP8-CS
# is TE's current scaling, FP8-MX MXFP8, FP8-DS DeepSeek's blocks
FP8 = (("torchao Float8", "torchao-tensor"), ("FP8-CS", "te-current"), ("FP8-MX", "mxfp8"),
       ("FP8-DS", "deepseek"))
# a record whose recipe states more than its table (the recipe file quoted)
RECIPES: dict[str, dict[str, Any]] = {
    "megatron-bridge-gptoss120b-h100-bf16": {
        "micro_batch": 1, "fw_terms": ["recompute_layernorm=1", "recompute_moe_act=1"],
        "why": "NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/gpt_oss/"
        "gpt_oss_workload_base_configs.py: GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V1 = BASE "
        "(micro_batch_size=1) with pipeline_model_parallel_size=4, recompute_modules="
        "['layernorm', 'moe_act'] (the table's MBS 4 and GA 2 disagree with its GBS 512 and "
        "dp 16; the recipe's micro-batch is used)"}}


def load_records(path: Path) -> list[dict[str, Any]]:
    data = files.loads(files.read_text(path, "file"), "JSON", path, "file")
    recs = data.get("records") if isinstance(data, dict) else None
    if not isinstance(recs, list) or not recs:
        raise ShapecalcError("file", f"{path}: expected {{\"records\": [...]}}")
    from .train_records import check_records

    check_records(recs)
    return recs


def setup_of(rec: dict[str, Any]) -> dict[str, Any]:
    """What the record ran: its framework (by its source), power limit, torch.compile and fp8
    (by its own text), and any recipe override with the file it quotes."""
    source, precision = str(rec.get("source", "")), str(rec.get("precision", ""))
    fw = next((f for key, f in FRAMEWORK_BY_SOURCE if key in source), None)
    if fw is None:
        raise ShapecalcError("file", f"record {rec.get('id')!r}: no framework known for its "
                             f"source {source[:60]!r}")
    power = POWER.search(str(rec.get("quote_context", "")))
    out: dict[str, Any] = {"framework": fw, "power_w": float(power.group(1)) if power else None,
                           "compile": any(c in precision for c in COMPILED),
                           "fp8": next((m for k, m in FP8 if k in precision), None),
                           "why": f"{fw} (the record's source)"}
    out.update(RECIPES.get(rec.get("id", ""), {}))
    return out


def _model(rec: dict[str, Any]) -> ModelConfig:
    m = rec["model"]
    if "preset" in m:
        return load_preset(m["preset"], None)
    return ModelConfig(**{**load_preset(m["base_preset"], None).model_dump(), **m["set"]})


def run_record(rec: dict[str, Any], fitted: dict[str, tuple[float, float]] | None = None,
               shape: dict[str, float] | None = None) -> dict[str, Any]:
    """The record through `train --framework`: predicted figures and the verdict. A refusal
    of what the record gives (`tp: does not divide H`, a model field) names the record."""
    from .train_records import within

    with within(rec):
        return _run_record(rec, fitted, shape)


def _run_record(rec: dict[str, Any], fitted: dict[str, tuple[float, float]] | None,
                shape: dict[str, float] | None) -> dict[str, Any]:
    st = setup_of(rec)
    sc, lay = rec["shapecalc"], rec["layout"]
    gpu = load_gpu(rec.get("gpu_profile") or rec["gpu"], None, sc.get("set_gpu"))
    micro = st.get("micro_batch", rec["micro_batch"])
    wl = Workload(batch=micro, seq=rec["seq"], tp=lay["tp"], pp=lay["pp"], ep=lay["ep"],
                  attention_flops=sc["attention_flops"])
    model = _model(rec)
    cp = lay["cp"]
    base = TrainPerf(**{**perf_for(gpu).__dict__, "net_bandwidth": sc["net_bandwidth"]})
    stages = symbolic_stages(model, wl.model_copy(update={"seq": wl.seq}), 1)
    perf, how = run_perf(base, gpu, st["framework"], model, wl, stages, cp,
                         power_w=st.get("power_w"), compile_=st["compile"], fitted=fitted,
                         shape=shape)
    doc = build_train(model, wl, dp=lay["dp"], zero=lay["zero"], precision="mixed",
                      recompute=rec["recompute"], grad_accum=None,
                      global_batch=rec["global_batch"], cp=cp, virtual=lay["virtual_stages"],
                      attention=sc["attention"], gpu=gpu, perf=perf,
                      gpu_memory=gpu.memory_bytes, gpu_name=gpu.name,
                      framework=st["framework"], fw_terms=fw_terms(st.get("fw_terms")),
                      fp8=st["fp8"], fused=FUSED_ROLES.get(st["framework"], ()))
    t, mem = doc["time"], doc["memory"]
    pred = {"step_s": t["step_s"], "tokens_per_s_per_gpu": t["tokens_per_s_per_gpu"],
            "memory_gib": mem["peak_bytes"] / GIB, "mfu": t["mfu"], "hfu": t["hfu"],
            "tflops_per_gpu": t["model_tflops_per_gpu"]}
    # the time figures of fp8 rows are not compared (their records exclude them)
    compared = [k for k in KEYS if k in rec["measured"] and k in rec["compare"]]
    rows = [{"key": k, "measured": rec["measured"][k], "predicted": pred[k],
             "ratio": rec["measured"][k] / pred[k]} for k in compared]
    # measured but left out by the record (fp8 rows' tokens/s): shown, not in the summary
    shown = [{"key": k, "measured": rec["measured"][k], "predicted": pred[k],
              "ratio": rec["measured"][k] / pred[k]} for k in KEYS
             if k in rec["measured"] and k not in compared]
    slow = t["per_stage"][t["slowest_stage"]]
    timed = [r for r in rows if r["key"] in TIME_KEYS]
    # the step's parts the fit rescales (the measured figure as a step time)
    step_parts = {"micro_s": slow["micro_batch_s"], "gemm_s": slow["gemm_s"],
                  "attention_s": slow["attention_s"], "slots": t["micro_batch_slots"],
                  "dp_exposed_s": t["dp_exposed_s"],
                  "measured_step_s": t["step_s"] * timed[0]["ratio"] ** (
                      1 if timed[0]["key"] == "step_s" else -1)} if timed else None
    return {"id": rec["id"], "framework": st["framework"], "gpu": gpu.name,
            "fits": mem["fits"], "peak_gib": mem["peak_bytes"] / GIB, "rows": rows,
            "efficiency": how, "setup_source": st["why"], "time": step_parts,
            "not_compared": shown}


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in ("time", "memory_gib"):
        logs = [math.log(r["ratio"]) for x in results for r in x["rows"]
                if (r["key"] in TIME_KEYS if k == "time" else r["key"] == k)]
        out[k] = {"n": len(logs),
                  "rms_log": math.sqrt(sum(v * v for v in logs) / len(logs)) if logs else 0.0,
                  "worst_ratio": math.exp(max(logs, key=abs)) if logs else 1.0}
    out["not_fitting"] = [x["id"] for x in results if not x["fits"]]
    return out


def fit(records: list[dict[str, Any]]) -> tuple[dict[str, tuple[float, float]],
                                                dict[str, float]]:
    """Per chip, (e_gemm, e_attn) on a 0.01 grid, for each of a few shared (gemm_half_dim,
    attention_half_seq): the least summed squared log error of the time figures. One run of
    each record per shape gives its step's GEMM and attention seconds; a step at other
    efficiencies is those seconds rescaled (both are ∝ 1/efficiency), the rest unchanged."""
    best: tuple[float, Any, Any] = (float("inf"), None, None)
    for half_dim in (64.0, 128.0, 256.0, 512.0):
        for half_seq in (256.0, 512.0, 1024.0, 2048.0):
            shape = {"gemm_half_dim": half_dim, "attention_half_seq": half_seq}
            runs = [run_record(r, FITTED, shape) for r in records]
            table, loss = {}, 0.0
            for chip in FITTED:
                mine = [x for x in runs if x["efficiency"]["chip"] == chip and x["time"]]
                table[chip], chip_loss = _grid(mine, FITTED[chip])
                loss += chip_loss
            if loss < best[0]:
                best = (loss, table, shape)
    return best[1], best[2]


def _grid(runs: list[dict[str, Any]], at: tuple[float, float]
          ) -> tuple[tuple[float, float], float]:
    best = (float("inf"), at)
    for gi in range(G_RANGE[0], G_RANGE[1] + 1):  # physical bounds: no GEMM reaches its
        for ai in range(A_RANGE[0], A_RANGE[1] + 1):  # peak; FlashAttention reaches ≥ 30 %
            g, a = gi / 100, ai / 100
            loss = 0.0
            for x in runs:
                t = x["time"]
                micro = (t["micro_s"] + t["gemm_s"] * (at[0] / g - 1)
                         + t["attention_s"] * (at[1] / a - 1))
                step = t["slots"] * micro + t["dp_exposed_s"]
                loss += math.log(t["measured_step_s"] / step) ** 2
            if loss < best[0]:
                best = (loss, (g, a))
    return best[1], best[0]


def report_text(results: list[dict[str, Any]], summ: dict[str, Any]) -> str:
    lines = ["| record | framework | GPU | figure | measured | predicted | measured/predicted |",
             "|---|---|---|---|---:|---:|---:|"]
    for x in results:
        for r in x["rows"]:
            lines.append(f"| {x['id']} | {x['framework']} | {x['gpu']} | {r['key']} | "
                         f"{r['measured']:,.4g} | {r['predicted']:,.4g} | {r['ratio']:.3f} |")
    for x in results:
        for r in x["not_compared"]:
            lines.append(f"| {x['id']} | {x['framework']} | {x['gpu']} | {r['key']} (not "
                         f"compared) | {r['measured']:,.4g} | {r['predicted']:,.4g} | "
                         f"{r['ratio']:.3f} |")
    for k in ("time", "memory_gib"):
        s = summ[k]
        lines.append(f"{k}: {s['n']} figures, rms log ratio {s['rms_log']:.3f}, worst "
                     f"measured/predicted {s['worst_ratio']:.3f}")
    lines.append("not fitting: " + (", ".join(summ["not_fitting"]) or "none"))
    return "\n".join(lines)
