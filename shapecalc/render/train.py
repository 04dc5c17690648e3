"""`shapecalc train` as text: FLOPs per stage and in total, memory per rank by term, batch and
ledgers. Plain lines (no rich): the numbers are exact integers with a human figure beside."""

from __future__ import annotations

from typing import Any

from .trainfw import efficiency_text, framework_lines
from .units import human_bytes, human_flops, money, plural


def _n(x: int) -> str:
    return f"{x:,d}"


def _stage_lines(stages: list[dict[str, Any]], width: int) -> list[str]:
    """The FLOPs per stage: a row a stage where that fits `width`; else the stage and its count
    over its four numbers; else one `name  number` line each (numbers whole, names uncut)."""
    heads = ("forward", "backward dX", "backward dW", "bwd elementwise")
    keys = ("forward_flops", "dx_flops", "dw_flops", "elementwise_flops")
    cells = [[_n(s[k]) for k in keys] for s in stages]
    w = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    nw = max(5, *(len(s["name"]) for s in stages))
    rw = max(4, *(len(str(s["repeat"])) for s in stages))
    nums = [" ".join(f"{x:>{w[i]}}" for i, x in enumerate(xs)) for xs in [heads, *cells]]
    if 2 + nw + 1 + rw + 1 + len(nums[0]) <= width:
        return [f"  {name:{nw}} {rep:>{rw}} {n}" for (name, rep), n in
                zip([("stage", "×"), *((s["name"], s["repeat"]) for s in stages)], nums,
                    strict=True)]
    if 4 + len(nums[0]) <= width:
        out = ["  stage × count", "    " + nums[0]]
        for s, n in zip(stages, nums[1:], strict=True):
            out += [f"  {s['name']} × {s['repeat']}", "    " + n]
        return out
    out = []
    for s, c in zip(stages, cells, strict=True):
        out.append(f"  {s['name']} × {s['repeat']}")
        out += [f"    {h}  {x}" for h, x in zip(heads, c, strict=True)]
    return out


def train_text(doc: dict[str, Any], width: int = 200) -> str:
    """The report, its lines at most `width` cells (layout.wrap_plain; numbers stay whole)."""
    tr, fl, mem, comm = doc["training"], doc["flops"], doc["memory"], doc["communication"]
    out: list[str] = []
    add = out.append
    add(f"Training step: micro-batch b={tr['micro_batch']} × grad-accum m={tr['grad_accum']} × "
        f"dp={tr['dp']} = global batch {plural(tr['global_batch'], 'sequence')} of T="
        f"{doc['workload']['seq']} ({_n(tr['tokens_per_step'])} tokens); "
        f"tp={tr['tp']} cp={tr['cp']} pp={tr['pp']} ep={tr['ep']} dp={tr['dp']} "
        f"({plural(tr['gpus'], 'GPU')})")
    add("")
    add("FLOPs of one micro-batch (whole model; matmuls, 1 multiply-add = 2 FLOPs):")
    out.extend(_stage_lines(fl["stages"], width))
    add(f"  forward    {_n(fl['forward_flops']):>22s}  {human_flops(fl['forward_flops']):>10s}  "
        f"= {fl['forward_formula']}")
    add(f"  backward   {_n(fl['backward_flops']):>22s}  {human_flops(fl['backward_flops']):>10s}"
        f"  = {fl['backward_formula']}")
    add(f"  recompute  {_n(fl['recompute_flops']):>22s}  {human_flops(fl['recompute_flops']):>10s}"
        f"  ({fl['recompute']}) = {fl['recompute_formula']}")
    add(f"  step       {_n(fl['step_flops']):>22s}  {human_flops(fl['step_flops']):>10s}")
    add(f"  elementwise (apart): forward {_n(fl['forward_elementwise_flops'])}, backward "
        f"{_n(fl['backward_elementwise_flops'])}, recompute "
        f"{_n(fl['recompute_elementwise_flops'])}")
    exact = fl["forward_backward_flops"]
    for label, key in (("6·N·tokens", "approx_6nt"), ("(6·N + 12·L·D·T)·tokens", "approx_palm")):
        v = fl[key]
        add(f"  {label:24s} {_n(v):>22s}  {v / exact:.4f} × the exact forward + backward")
    ps = fl["per_step"]
    micro = plural(tr["grad_accum"] * tr["dp"], "micro-batch", "micro-batches")
    add(f"  per step (× {micro}): {_n(ps['step_flops'])} "
        f"({human_flops(ps['step_flops'])})")
    add("")
    add(f"Memory per rank ({tr['precision']}, ZeRO-{tr['zero']} over dp={tr['dp']}: sharded "
        f"{', '.join(tr['zero_sharded']) or 'nothing'}):")
    for st in mem["per_stage"]:
        ms = st["model_state"]
        add(f"  pipeline stage {st['stage']} ({plural(st['layers'], 'layer')}, "
            f"{_n(st['params'])} params "
            f"per rank):")
        for t in ms["terms"]:
            share = "⌈P/dp⌉" if t["sharded"] else "P"
            how = (f"{share} = {_n(t['params'])} × {t['bytes_per_param']} B ({t['what']})"
                   if t["bytes_per_param"] is not None else t["what"])  # LoRA's frozen base
            add(f"    {t['term']:11s} {_n(t['bytes']):>20s} B  {human_bytes(t['bytes']):>10s}  "
                + how)
        c, v = st["chunks_in_flight"], tr["virtual_stages"]
        flight = (f"(in-flight − 1) = {c - 1} micro-batch(es)" if v == 1 else
                  f"{c} passes of a 1/{v} chunk in flight (interleaved), (c − v)/v = "
                  f"{(c - v) / v:g} micro-batches")
        add(f"    {'activations':11s} {_n(st['activation_bytes']):>20s} B  "
            f"{human_bytes(st['activation_bytes']):>10s}  exact (what autograd saves): "
            f"{flight} resident + one at its backward peak")
        add(f"    {'(Megatron)':11s} {_n(st['activation_bytes_megatron']):>20s} B  "
            f"{human_bytes(st['activation_bytes_megatron']):>10s}  "
            f"{mem['activations']['formula']} per layer × {st['layers']} layers × "
            + (f"{c}" if v == 1 else f"{c}/{v}")
            + " in flight (closed form, beside; not in the total)")
        add(f"    {'total':11s} {_n(st['bytes']):>20s} B  {human_bytes(st['bytes']):>10s}")
    out.extend(framework_lines(mem))
    line = (f"  peak: stage {mem['peak_stage']}, {_n(mem['peak_bytes'])} B "
            f"({human_bytes(mem['peak_bytes'])})")
    if "gpu" in mem:
        verdict = "fits" if mem["fits"] else "does NOT fit"
        line += (f"; {mem['gpu']} holds {human_bytes(mem['gpu_memory_bytes'])}: {verdict} "
                 f"({human_bytes(abs(mem['free_bytes']))} {'free' if mem['fits'] else 'over'})")
    add(line)
    if "largest_micro_batch" in mem:
        fw = mem.get("framework", {})
        how = (f"as {fw['name']} keeps them" if fw.get("activations") == "modules"
               else "exact activations")
        add(f"  largest micro-batch that fits: {mem['largest_micro_batch']} ({how})")
    sv = mem["saved"]
    add(f"  activations: {sv['convention']} ({sv['attention']} attention, recompute "
        f"{sv['recompute']}, {sv['dtype']}); one micro-batch on a rank holding all the layers: "
        "resident "
        f"{human_bytes(sv['resident_bytes'])}, peak {human_bytes(sv['peak_bytes'])}")
    for kind, f in sv["per_layer_none_formula"].items():
        add(f"  a layer{'' if len(sv['per_layer_none_formula']) == 1 else ' of kind ' + kind} "
            f"without recompute keeps {f} bytes = {_n(sv['per_layer_none'][kind])} B")
    add(f"  vs {mem['activations']['form']}: {sv['difference']}")
    for rule in (sv["tp_rule"], sv["cp_rule"]):
        if rule:
            add(f"  {rule}")
    add("")
    dp, tp, pp = comm["dp"], comm["tp"], comm["pp"]
    add("Communication per step per rank:")
    parts = ", ".join(f"{k} {_n(v)} B" for k, v in dp.items()
                      if k not in ("degree", "zero", "bytes_per_step", "note"))
    add(f"  DP (dp={dp['degree']}, ZeRO-{dp['zero']}): {_n(dp['bytes_per_step'])} B "
        f"({human_bytes(dp['bytes_per_step'])}): {parts}")
    sp = ", sequence parallel" if tp["sequence_parallel"] else ""
    add(f"  TP (tp={tp['degree']}{sp}): {_n(tp['bytes_per_step'])} B "
        f"({human_bytes(tp['bytes_per_step'])}): per layer {_n(tp['forward_bytes_per_layer'])} B"
        " forward (2 all-gathers + 2 reduce-scatters) and as much backward")
    ep = comm["ep"]
    if ep["degree"] > 1:
        add(f"  EP (ep={ep['degree']}, {ep['moe_layers']} MoE layers on the stage): "
            f"{_n(ep['bytes_per_step'])} B ({human_bytes(ep['bytes_per_step'])}): per layer "
            f"{_n(ep['forward_bytes_per_layer'])} B of all-to-all (dispatch + combine) forward "
            "and as much backward, every token off-rank")
    add(f"  TP vocab-parallel: embedding {_n(tp['embedding_forward_bytes'])} B forward + "
        f"{_n(tp['embedding_backward_bytes'])} B backward, LM head input "
        f"{_n(tp['head_forward_bytes'])} B + {_n(tp['head_backward_bytes'])} B, cross-entropy "
        f"{_n(tp['loss_forward_bytes'])} B (3 all-reduces of [s,b] fp32) per micro-batch")
    cp = comm["cp"]
    if cp["degree"] > 1:
        add(f"  CP (cp={cp['degree']}, ring attention, {_n(cp['tokens_per_rank'])} tokens per "
            f"rank): {_n(cp['bytes_per_step'])} B ({human_bytes(cp['bytes_per_step'])}): per "
            f"layer {_n(cp['forward_bytes_per_layer'])} B forward ((cp−1) passes of K and V), "
            f"{_n(cp['backward_bytes_per_layer'])} B backward, "
            f"{_n(cp['recompute_bytes_per_layer'])} B recompute")
    sched = "1F1B" if pp["virtual_stages"] == 1 else f"interleaved 1F1B, v={pp['virtual_stages']}"
    add(f"  PP (pp={pp['stages']}, {sched}, m={pp['micro_batches']}): bubble {pp['bubble_formula']}"
        f" = {pp['bubble_fraction']:.4f}; "
        + (f"{pp['micro_batches_in_flight_first_stage']} micro-batch(es)"
           if pp["virtual_stages"] == 1 else
           f"{pp['chunks_in_flight_first_stage']} chunk passes")
        + f" in flight on the first stage; {_n(pp['boundary_bytes_per_step'])} B across "
        "each stage boundary per step")
    if "lora" in doc:
        from .lora import lora_lines

        out += lora_lines(doc["lora"], mem)
    if "time" in doc:
        out += _time_lines(doc["time"], tr)
    from .layout import wrap_plain

    return "\n".join(wrap_plain(out, width))


def _s(x: float) -> str:
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.3f} s"


def _time_lines(ti: dict[str, Any], tr: dict[str, Any]) -> list[str]:
    pf = ti["perf"]
    st = ti["per_stage"][ti["slowest_stage"]]
    out = ["", f"Step time (expected; {ti['attention']} attention, {ti['compute_dtype']} peak "
           f"{ti['peak_flops'] / 1e12:,.1f} TFLOP/s; GEMMs at {pf['gemm_efficiency']:.2f} of "
           f"peak, attention at {pf['attention_efficiency']:.2f}, {efficiency_text(ti)}):"]
    add = out.append
    add(f"  one micro-batch on the slowest stage ({ti['slowest_stage']}): {_s(st['micro_batch_s'])}"
        f" = GEMMs {_s(st['gemm_s'])} + attention {_s(st['attention_s'])} + memory-bound "
        f"{_s(st['memory_bound_s'])}"
        + (f" + expert GEMMs {_s(st['expert_gemm_s'])} + token permutation "
           f"{_s(st['permute_s'])}" if st.get("expert_gemm_s") else "")
        + f" + TP {_s(st['tp_s'])} + CP exposed {_s(st['cp_exposed_s'])}"
        f" + EP {_s(st['ep_s'])} + PP sends {_s(st['pp_s'])}")
    add(f"  pipeline: {ti['micro_batch_slots']:g} micro-batch slots (m + (p−1)/v, v="
        f"{ti['virtual_stages']}) = {_s(ti['pipeline_s'])}; bubble {ti['bubble_formula']} = "
        f"{ti['bubble_fraction']:.4f}; DP exposed {_s(ti['dp_exposed_s'])}")
    if ti["mfu"] is None:
        add("  step: no estimate (the --perf terms make it overflow)")
        return out
    add(f"  step {_s(ti['step_s'])}: MFU {ti['mfu']:.1%} ({ti['model_tflops_per_gpu']:,.0f} "
        f"TFLOP/s per GPU of model FLOPs), HFU {ti['hfu']:.1%} (with recompute, "
        f"{ti['hardware_tflops_per_gpu']:,.0f})")
    add(f"  {ti['tokens_per_s']:,.0f} tokens/s ({ti['tokens_per_s_per_gpu']:,.1f} per GPU), "
        f"{ti['tokens_per_day']:.4g} tokens/day on {plural(tr['gpus'], 'GPU')}")
    if ti["days"] is not None:
        add(f"  {ti['train_tokens']:.4g} tokens: {ti['steps']:,d} steps, {ti['days']:,.1f} days, "
            f"{ti['gpu_hours']:,.0f} GPU-hours")
    c = ti.get("cost")
    if c is not None:
        src = c["price_source"] if c["price_source"] == "--price" else \
            c["price_source"].split(":")[0]
        add(f"  cost at ${c['price_per_gpu_hour']:g}/GPU-hour ({src}): {money(c['per_hour'])} an "
            f"hour, {money(c['per_step'])} a step, {money(c['per_million_tokens'])} per 1M tokens"
            f", {money(c['per_trillion_tokens'])} per 1T tokens"
            + ("" if c["total"] is None else f", {money(c['total'])} in all"))
    if "lora" in ti:  # train/lora_time.py: the adapters' optimizer step is timed
        lo = ti["lora"]
        add(f"  LoRA: adapters' GEMMs {lo['adapter_gemm_s_per_micro_batch'] * 1e3:.1f} ms a "
            f"micro-batch at {lo['adapter_efficiency']:.3f} of the GEMM rate (r-wide); "
            f"optimizer step {lo['optimizer_s'] * 1e3:.2f} ms; QLoRA dequantisation "
            f"{lo['dequant_bytes_per_micro_batch']:,d} B a micro-batch")
        add("  left out: data loading, failures and restarts, checkpoint saving")
    else:
        add("  left out: the optimizer step, data loading, failures and restarts, checkpoint "
            "saving")
    return out


def print_train(doc: dict[str, Any], console: Any) -> None:
    """The train report on a console (serve's emit draws it for the table, --svg and --html)."""
    console.print(train_text(doc, console.width), markup=False, highlight=False, soft_wrap=True)
