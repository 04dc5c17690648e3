"""The step time under LoRA/QLoRA (`train --lora-rank r --gpu …`), through train/time.py's step
model (its Layout and step_time: no second model): this module only builds the work it times.

Per layer, per micro-batch (m = B·T rows, one targeted linear [d_in → d_out], rank r):
  - the frozen base's GEMMs: forward 2·m·d_in·d_out, and in the backward its input gradient
    2·m·d_in·d_out only (no dW: the base is frozen), at the GEMM rate (peak × gemm_efficiency);
    the attention core forward and backward as in full training; the elementwise stages'
    memory-bound bytes as in full training (their backward still runs: dX flows through them);
  - the adapters' small GEMMs: forward A·x 2·m·d_in·r and B·(A·x) 2·m·r·d_out, backward dX and
    dW of each (2·(2·m·d_in·r + 2·m·r·d_out)): 3 × 2·m·r·(d_in + d_out) in all. One dimension
    of each is r wide, so they reach a small share of the GEMM rate: r/(r + h), the serving
    model's row-count law for a GEMM of few rows (h = gemm_half_tokens, plan/perf_defaults.py;
    train/network.py's moe_terms uses it for an expert's rows), applied to the r-wide side.
    They run in the compute dtype (HF's Trainer under bf16 autocast casts the fp32 adapters'
    matmuls to bf16);
  - the first layer's input comes from the frozen table: the input gradients its q/k/v/gate/up
    and attention do not take (train/lora.py's lora_flops) are taken off the first stage's
    GEMMs, so the time's FLOPs are lora_flops' exactly;
  - QLoRA (`--lora-base nf4`): bitsandbytes dequantises each NF4 weight to a bf16 copy before
    its matmul, in the forward and again for each input gradient (bitsandbytes,
    bitsandbytes/autograd/_functions.py, MatMul4Bit.forward: `torch.nn.functional.linear(A,
    F.dequantize_4bit(B, quant_state).to(A.dtype).t(), bias)`; MatMul4Bit.backward: `grad_A =
    torch.matmul(grad_output, F.dequantize_4bit(B, ctx.state).to(grad_output.dtype).t())`):
    memory-bound bytes, the layer's stored NF4 bytes read (model/quant.py's bnb-nf4 count) and
    2 B per weight written, twice a layer;
  - the optimizer step, once a step (full training's model leaves it out: there it is small
    beside the GEMMs; here the adapters are all that is updated): AdamW over the adapters (their
    ZeRO shard), memory-bound: it reads the fp32 weight, gradient, m and v (16 B) and writes the
    weight, m and v (12 B) per parameter (8-bit states: 2 B each way instead of 8).
DP: the adapters' fp32 gradients only (all-reduce, or reduce-scatter and all-gather of the
fp32 adapters under ZeRO-1/2), overlapped as in full training.
MFU counts the model FLOPs the doc's `flops` counts: the base's forward and input gradients
and the adapters' forward and backward (the work a LoRA step does; no dW of the base, which is
not done), without recompute; HFU adds the recompute. A full fine-tune's MFU (6·N·T-like)
is not comparable: a LoRA step does about 2/3 of its FLOPs.
Not built: ZeRO-3 (the frozen base's all-gathers), tp, pp, cp, ep (refused).
"""

from __future__ import annotations

from typing import Any

from ..inputs.hardware import GPU
from ..interpret.symbolic import stages as symbolic_stages
from ..model.config import ModelConfig, ShapecalcError, Workload, ceil_div
from ..model.plan import layer_plan
from ..model.stage import EXPERT_ROLES
from ..plan.perf_defaults import PARAMS
from .lora import LoraSpec, lora_flops, targeted
from .time import Layout, TrainPerf, Work, layer_work, step_time

ADAM_BYTES = {"fp32": 28, "8bit": 16}  # per parameter: read w, g, m, v; write w, m, v


def check_timed(recompute: str, zero: int) -> None:
    """The LoRA runs the step time is built for."""
    if recompute not in ("none", "torch"):
        raise ShapecalcError("recompute", f"{recompute} with LoRA has no step time (nor "
                             "counts): none | torch")
    if zero >= 3:
        raise ShapecalcError("zero", "3 with LoRA has no step time yet (FSDP's all-gathers of "
                             "the frozen base are not timed): 0, 1 or 2")


def adapter_efficiency(r: int) -> float:
    """r/(r + h): an r-wide GEMM's share of the GEMM rate (see the module's doc)."""
    return r / (r + PARAMS["gemm_half_tokens"])


def lora_work(model: ModelConfig, wl: Workload, spec: LoraSpec, attention: str,
              recompute: str = "none", info: dict[str, int] | None = None) -> dict[Any, Work]:
    """Work per layer kind (and 'embedding', 'head') of one micro-batch under LoRA; recompute
    none or torch (each layer's forward again, to its last saved tensor: lora.py's
    _recompute, split into the base's GEMMs, attention, elementwise bytes and adapters)."""
    out = layer_work(model, wl, "none", attention)
    flash = attention == "flash"
    st = symbolic_stages(model, wl.model_copy(
        update={"attention_flops": "causal" if flash else "full"}), 1)
    for w in out.values():  # the frozen base: each GEMM's dX only, the size of its forward
        w.gemm_bwd, w.exp_bwd = w.gemm_fwd, w.exp_fwd
    ad = targeted(model, st, spec)
    r = spec.rank
    for s in ad:
        m = s.flops // (2 * s.operands[1][0] * s.operands[1][1])
        f_ad = 2 * m * r * (s.operands[1][0] + s.operands[1][1])  # A·x and B·(A·x)
        w = out[s.kind]
        w.ad_fwd += f_ad
        w.ad_bwd += 2 * f_ad  # dX and dW of each
    rerun = _recompute(st, ad, r, out, attention) if recompute == "torch" else {}
    # the first layer's input gradients that are not taken (lora_flops counts them exactly;
    # none under torch's checkpoint, where its input takes a gradient)
    counts = _counts(model)
    total = sum((w.gemm_bwd + w.attn_bwd + w.exp_bwd + w.ad_bwd) * counts.get(k, 1)
                for k, w in out.items())
    f = lora_flops(st, ad, r, model.n_layers, recompute)
    out["embedding"].gemm_bwd -= total - f["backward_flops"] - f["recompute_flops"]
    if spec.base == "nf4":
        deq = 0
        for k, b in dequant_bytes(model, st).items():
            again = round(b * rerun.get(k, 0.0))  # the re-run linears dequantise again
            out[k].mem_fwd += b
            out[k].mem_bwd += b + again
            deq += (2 * b + again) * counts[k]
        if info is not None:
            info["dequant_bytes"] = deq
    return out


def _recompute(st: list[Any], ad: list[Any], r: int, out: dict[Any, Work], attention: str
               ) -> dict[Any, float]:
    """torch's checkpoint re-runs each layer to its last saved tensor (lora.py's _recompute):
    the re-run stages' FLOPs and elementwise bytes into the backward; the adapters re-run A·x
    and B·(A·x), or lora_A and its base only where lora_B is the last saver. Returns each
    kind's share of its linears' weights re-run (QLoRA dequantises those again)."""
    from .backward import recompute_stages
    from .time import _memory_bound

    again = recompute_stages(st, "torch")
    ids = {id(s) for s in again}
    flash = attention == "flash"
    wide: dict[Any, int] = {}
    done: dict[Any, int] = {}
    for s in st:
        if s.group == "block" and s.op == "linear" and s.role not in EXPERT_ROLES:
            wide[s.kind] = wide.get(s.kind, 0) + s.params
    for s in again:
        w = out[s.kind]
        w.add(s.role, "bwd", s.flops)
        if _memory_bound(s, flash):
            w.mem_bwd += 2 * s.bytes
        if s.op == "linear" and s.role not in EXPERT_ROLES:
            done[s.kind] = done.get(s.kind, 0) + s.params
    for s in ad:
        m, d_in, d_out = s.flops // (2 * s.operands[1][0] * s.operands[1][1]), \
            s.operands[1][0], s.operands[1][1]
        a, b = 2 * m * d_in * r, 2 * m * r * d_out
        w = out[s.kind]
        if id(s) in ids:
            w.ad_bwd += a + b
        else:  # lora_B saves last: its base and lora_A re-run
            w.gemm_bwd += s.flops
            w.ad_bwd += a
            done[s.kind] = done.get(s.kind, 0) + s.params
    return {k: done.get(k, 0) / v for k, v in wide.items() if v}


def _counts(model: ModelConfig) -> dict[Any, int]:
    kinds = layer_plan(model).kind_of
    return {k: kinds.count(k) for k in set(kinds)}


def dequant_bytes(model: ModelConfig, st: list[Any]) -> dict[int, int]:
    """QLoRA's dequantisation bytes of one pass over each layer kind: its stored NF4 bytes read
    and 2 B per weight written (see the module's doc); once forward, once for the dX."""
    from ..model.quant_tensors import weight_sums
    from ..model.quantization import DTYPE_FORMATS

    ws = weight_sums(model, st, DTYPE_FORMATS["nf4"], 1)
    kinds = layer_plan(model).kind_of
    return {k: ws.layers[kinds.index(k)] + 2 * sum(
        s.params for s in st if s.group == "block" and s.kind == k and s.op == "linear"
        and s.role not in EXPERT_ROLES) for k in set(kinds)}


def lora_time(doc: dict[str, Any], model: ModelConfig, wl: Workload, gpu: GPU,
              perf: TrainPerf, spec: LoraSpec, *, dp: int, zero: int, attention: str,
              width: int, precision: str, recompute: str, train_tokens: int | None
              ) -> dict[str, Any]:
    """The `time` block of a LoRA run: step_time over lora_work, the optimizer step, rates."""
    from .time import rates

    check_timed(recompute, zero)
    info = {"dequant_bytes": 0}
    work = lora_work(model, wl, spec, attention, recompute, info)
    eff = adapter_efficiency(spec.rank)
    lay = Layout(model, wl, gpu, perf, cp=1, dp=dp, recompute=recompute, attention=attention,
                 act_width=width, work=work, adapter_eff=eff)
    n = doc["lora"]["trainable_params"]
    accum = doc["training"]["grad_accum"]
    st = step_time(model, wl, gpu, perf, cp=1, dp=dp, accum=accum, virtual=1, zero=zero,
                   recompute=recompute, attention=attention, act_width=width,
                   placed=[(n, 0)], per_param={"weights": 4, "gradients": 4}, layout=lay)
    held = ceil_div(n, dp) if zero >= 1 else n
    opt_bytes = held * ADAM_BYTES["8bit" if precision == "adam8bit" else "fp32"]
    opt_s = opt_bytes / (gpu.hbm_bandwidth * perf.memory_efficiency)
    st["step_s"] += opt_s
    r = spec.rank
    counts = _counts(model)
    ad = sum((w.ad_fwd + w.ad_bwd) * counts[k] for k, w in work.items() if k in counts)
    st["lora"] = {"adapter_efficiency": eff,
                  "adapter_efficiency_formula": f"r/(r + gemm_half_tokens) = {r}/({r} + "
                  f"{PARAMS['gemm_half_tokens']})",
                  "adapter_flops_per_micro_batch": ad,
                  "adapter_gemm_s_per_micro_batch": ad / (lay.rates[0] * eff),
                  "optimizer_s": opt_s, "optimizer_bytes": opt_bytes,
                  "dequant_bytes_per_micro_batch": info["dequant_bytes"]}
    ps, tr = doc["flops"]["per_step"], doc["training"]
    model_flops = ps["forward_flops"] + ps["backward_flops"]
    out = {**st, **rates(st["step_s"], tr["gpus"], st["peak_flops"], model_flops,
                         model_flops + ps["recompute_flops"], tr["tokens_per_step"],
                         train_tokens)}
    out["perf"] = {k: getattr(perf, k) for k in perf.__dataclass_fields__}
    if perf.net_bandwidth is None:
        out["perf"]["net_bandwidth"] = gpu.scale_out_bandwidth
    return out

