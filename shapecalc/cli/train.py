"""`shapecalc train`: one training step's FLOPs (forward, backward, recompute), per-rank memory
by term, the batch arithmetic, and the DP/TP/PP ledgers (shapecalc/train/report.py).

Loaded when invoked (lazy.py)."""


from typing import Annotated, Any

import typer

from ..train.frameworks import HELP as FW_HELP
from .options import (
    EP,
    PP,
    TP,
    AttnFlops,
    ConfigFile,
    Format,
    HFConfig,
    Html,
    JsonOut,
    Output,
    Preset,
    PresetsDir,
    Sets,
    Svg,
    TrainSeq,
    fail,
    resolve_model,
    resolve_workload,
)
from .plan_options import Gpu, HardwareDir, Price, SetGpu, gpu_option

FP8_HELP = ("te-delayed | te-current | te-block | mxfp8 (Blackwell) | torchao-tensor | "
            "torchao-row | deepseek")


def train(
    preset: Preset = None,
    config: ConfigFile = None,
    hf_config: HFConfig = None,
    set_: Sets = None,
    presets_dir: PresetsDir = None,
    seq: TrainSeq = None,
    micro_batch: Annotated[int | None, typer.Option(
        "--micro-batch", "--batch", "-b", help="b: sequences per micro-batch",
        show_default="1")] = None,
    grad_accum: Annotated[int | None, typer.Option(
        "--grad-accum", help="m: micro-batches accumulated per step",
        show_default="global batch ÷ (micro-batch × dp), else 1")] = None,
    global_batch: Annotated[int | None, typer.Option(
        "--global-batch", help="sequences per step: micro-batch × grad-accum × dp "
        "(checked)", show_default="micro-batch × grad-accum × dp")] = None,
    tp: TP = None,
    pp: PP = None,
    attention_flops: AttnFlops = None,
    ep: EP = None,
    dp: Annotated[int, typer.Option("--dp", help="data-parallel degree", min=1)] = 1,
    zero: Annotated[int, typer.Option(
        "--zero", help="ZeRO stage over the dp group: 0 none, 1 optimizer states, 2 + "
        "gradients, 3 + weights (FSDP); each --framework takes its own: megatron 0|1, torchtitan "
        "0|3, deepspeed 0-3 (0|1 with --pp), llm-foundry 0|2|3")] = 0,
    precision: Annotated[str, typer.Option(
        "--precision", help="mixed (bf16 + fp32 master + AdamW: 16 B/param) | fp32 (AdamW: 16 "
        "B/param) | adam8bit (bf16 + fp32 master + 8-bit m, v: 10 B/param)")] = "mixed",
    recompute: Annotated[str, typer.Option(
        "--recompute", help="none | selective (attention core, Korthikanti et al.) | full "
        "(Megatron: each layer's forward again) | torch (torch.utils.checkpoint per layer, as "
        "transformers' gradient checkpointing); megatron takes none|selective|full, torchtitan "
        "none|selective (its per-op SAC)|full|torch (one per-block checkpoint), deepspeed "
        "none|torch|full, llm-foundry none|full|torch")] = "none",
    cp: Annotated[int, typer.Option(
        "--cp", help="context-parallel degree (ring attention): each rank holds T/cp of every "
        "sequence as two load-balanced causal chunks")] = 1,
    virtual_stages: Annotated[int, typer.Option(
        "--virtual-stages", help="v: interleaved 1F1B, v model chunks per pipeline rank "
        "(bubble (p−1)/(v·m + p−1))")] = 1,
    attention: Annotated[str, typer.Option(
        "--attention", help="flash | eager: the attention kernel (flash does the causal half "
        "and fuses scale, mask and softmax; eager does the whole [T,T] and writes it)")] = "flash",
    train_tokens: Annotated[str | None, typer.Option(
        "--train-tokens", help="tokens to train on, e.g. 15000000000000 or 15e12: steps, days "
        "and GPU-hours (needs --gpu)", show_default="none")] = None,
    perf: Annotated[list[str] | None, typer.Option(
        "--perf", help="override a term of the step-time model: NAME=VALUE (repeatable; "
        "gemm_efficiency, attention_efficiency, memory_efficiency, link_efficiency, "
        "collective_latency_s, net_bandwidth in bytes/s per GPU, dp_overlap, "
        "grouped_gemm_efficiency, moe_imbalance)")] = None,
    search: Annotated[bool, typer.Option(
        "--search", help="search the fastest layout of --gpus GPUs that fits (tp, cp, pp, dp, "
        "ep, virtual stages, micro-batch, recompute, ZeRO) at --global-batch; needs --gpu")
    ] = False,
    gpus: Annotated[int | None, typer.Option(
        "--gpus", help="GPUs the search lays out (with --search)",
        show_default="none: needs --search")] = None,
    dp_overlap: Annotated[str | None, typer.Option(
        "--dp-overlap", help="share of the DP communication hidden under the backward: a "
        "fraction in [0, 1] or a policy (megatron, torchtitan, hf: 1; deepspeed, none: 0)",
        show_default="megatron")] = None,
    framework: Annotated[str | None, typer.Option(
        "--framework", help="whose memory rules (and, with --gpu, efficiency terms) the plan "
        "follows: " + FW_HELP + "; Megatron's closed form is printed beside each; --search "
        "searches every framework unless this fixes one", show_default="hf")] = None,
    fp8: Annotated[str | None, typer.Option(
        "--fp8", help="fp8 training (needs a GPU with fp8 and a framework that runs the mode): "
        + FP8_HELP, show_default="none (bf16)")] = None,
    fw_term: Annotated[list[str] | None, typer.Option(
        "--fw-term", help="override a framework memory term: NAME=VALUE (repeatable; "
        "allocator_reserve, comm_buffer_bytes, dropout, fused_ce, sac_layer_every, "
        "recompute_layernorm, recompute_moe_act, prefetch_blocks, reduce_bucket_size, "
        "max_live_parameters, prefetch_bucket_size)",
        show_default="the stated terms (docs/guides/training.md)")] = None,
    compile_: Annotated[bool, typer.Option(
        "--compile", help="torch.compile: the elementwise chains fused (the step time of "
        "torchtitan, deepspeed, llm-foundry; needs --gpu)")] = False,
    power_limit: Annotated[str | None, typer.Option(
        "--power-limit", help="watts the GPU is capped at (e.g. 500 for an H100 SXM at 500 W "
        "of 700): compute rates × (W/TDP)^(1/3); needs --gpu", show_default="the TDP")] = None,
    lora_rank: Annotated[int | None, typer.Option(
        "--lora-rank", help="LoRA: adapters of rank r on the frozen base's targeted linears "
        "(peft; train/lora.py)", show_default="none: full fine-tuning")] = None,
    lora_targets: Annotated[str | None, typer.Option(
        "--lora-targets", help="LoRA's targets, peft's module names: q,k,v,o,gate,up,down "
        "(MLA: q_a,q_b,kv_a,kv_b; fused: qkv)", show_default="every projection the model has "
        "among these")] = None,
    lora_alpha: Annotated[str | None, typer.Option(
        "--lora-alpha", help="LoRA's α: the scaling α/r (changes no shape, count or byte)",
        show_default="2·r")] = None,
    lora_dropout: Annotated[str | None, typer.Option(
        "--lora-dropout", help="lora_dropout: p > 0 keeps each adapter's dropout output and "
        "noise", show_default="0")] = None,
    lora_base: Annotated[str | None, typer.Option(
        "--lora-base", help="the frozen base: bf16 | nf4 (QLoRA: bitsandbytes NF4, double "
        "quantization)", show_default="the precision's width")] = None,
    paged_optimizer: Annotated[bool, typer.Option(
        "--paged-optimizer", help="bitsandbytes' paged AdamW: the adapters' optimizer states "
        "page to CPU RAM (counted off the GPU)")] = False,
    gpu: Gpu = None,
    hardware_dir: HardwareDir = None,
    set_gpu: SetGpu = None,
    price: Price = None,
    as_json: JsonOut = False,
    fmt: Format = "table",
    output: Output = None,
    svg: Svg = None,
    html: Html = None,
) -> None:
    from ..model.config import ShapecalcError

    try:
        from ..render.output import check_format, check_outputs
        from ..train.report import ACT_DTYPE, build_train
        from .document import emit

        fmt = check_format("json" if as_json else fmt)
        check_outputs(output=output, svg=svg, html=html)
        from .train_search import overlap_perf, refuse_search_flags, run_search

        if search or gpus is not None:
            refuse_search_flags(search, gpus, dict(
                tp=tp, pp=pp, ep=ep, dp=dp != 1, zero=zero != 0, cp=cp != 1,
                virtual_stages=virtual_stages != 1, micro_batch=micro_batch, grad_accum=grad_accum,
                recompute=recompute != "none", train_tokens=train_tokens))
        model, wbase = resolve_model(preset, config, hf_config, set_, presets_dir)
        width = ACT_DTYPE.get(precision, "bf16")
        wl = resolve_workload(wbase, batch=micro_batch if micro_batch is not None else 1,
                              seq=seq, tp=tp, pp=pp, ep=ep, dtype=width, phase="prefill",
                              logits="all", attention_flops=attention_flops)
        card = gpu_option(gpu, hardware_dir, set_gpu)
        n_tokens = _tokens(train_tokens, card is not None)
        if perf and card is None:
            raise ShapecalcError("perf", "needs --gpu: it sets the step-time model's terms")
        lora = _lora(lora_rank, lora_targets, lora_alpha, lora_dropout, lora_base,
                     paged_optimizer)
        if lora is not None:  # LoRA's step time: eager peft (hf), train/lora_time.py
            if perf or n_tokens is not None or price is not None:  # train/lora_time.py
                from ..train.lora_time import check_timed

                check_timed(recompute, zero)
            timed = [f for f, v in (("search", search or None),
                                    ("compile", compile_ or None), ("power-limit", power_limit),
                                    ("dp-overlap", dp_overlap), ("fw-term", fw_term))
                     if v is not None and v != []]
            if timed:
                raise ShapecalcError(timed[0], "with LoRA is not built yet: LoRA's step time is "
                                     "eager peft's (hf, no compile, the default DP overlap)")
        from ..train.efficiency import FUSED_ROLES
        from ..train.fwoptions import run_perf_for, train_fw_terms

        if search:  # every framework the flags apply to, unless --framework fixes one
            from .train_search import search_perf

            plan = search_perf(model, wl, card, perf, dp_overlap, framework=framework, fp8=fp8,
                               fw_term=fw_term, compile_=compile_, power_limit=power_limit,
                               precision=precision)
            code = run_search(model, wl, card, plan, gpus=gpus, global_batch=global_batch,
                              precision=precision, attention=attention, price=price, fmt=fmt,
                              output=output, svg=svg, html=html)
            raise typer.Exit(code)
        framework = framework or "hf"
        terms = train_fw_terms(framework, fw_term)
        run_perf = run_perf_for(card, perf, framework, model, wl, cp=cp, compile_=compile_,
                                power_limit=power_limit)
        tperf = overlap_perf(run_perf[0] if run_perf else None, perf, dp_overlap, framework)
        doc = build_train(model, wl, dp=dp, zero=zero, precision=precision,
                          recompute=recompute, grad_accum=grad_accum, global_batch=global_batch,
                          gpu_memory=card.memory_bytes if card else None,
                          gpu_name=card.name if card else None, cp=cp,
                          virtual=virtual_stages, attention=attention, gpu=card,
                          perf=tperf,
                          train_tokens=n_tokens, framework=framework, fw_terms=terms, fp8=fp8,
                          fused=FUSED_ROLES.get(framework, ()), lora=lora)
        if run_perf and run_perf[1] is not None and "time" in doc:
            doc["time"]["efficiency"] = run_perf[1]
        _cost(doc, card, price)
        from ..render.train import print_train

        emit(doc, fmt, output, svg, html, f"train: {model.name}", print_train)
    except ShapecalcError as e:
        fail(e)
    if doc["memory"].get("fits") is False:  # a negative verdict exits 1 (README: Exit status)
        raise typer.Exit(1)


def _cost(doc: dict[str, Any], card: Any, price: float | None) -> None:
    """time.cost from --price or the GPU's default (plan/price.py); --price needs --gpu."""
    if card is None and price is None:  # nothing to price: the planner's options stay unloaded
        return
    from ..model.config import ShapecalcError
    from ..plan.options import PlanOptions
    from ..plan.price import training_cost, with_default_price

    opts = with_default_price(PlanOptions(price=price), card)
    if card is None:
        if price is not None:
            raise ShapecalcError("price", "--price needs --gpu: the cost comes from the step time")
        return
    if opts.price is not None and doc.get("time"):
        doc["time"]["cost"] = training_cost(opts.price, opts.price_source or "--price",
                                            doc["training"]["gpus"], doc["time"])


def _lora(rank: int | None, targets: str | None, alpha: str | None, dropout: str | None,
          base: str | None, paged: bool) -> Any:
    """The LoRA flags (train/lora.py's LoraSpec), or None; a LoRA flag without --lora-rank is
    refused."""
    from ..inputs.numbers import bounded, parse_number
    from ..model.config import ShapecalcError
    from ..train.lora import LoraSpec, parse_targets

    if rank is None:
        given = [f for f, v in (("lora-targets", targets), ("lora-alpha", alpha),
                                ("lora-dropout", dropout), ("lora-base", base),
                                ("paged-optimizer", paged or None)) if v is not None]
        if given:
            raise ShapecalcError(given[0], "needs --lora-rank: it sets LoRA fine-tuning")
        return None
    if rank < 1:
        raise ShapecalcError("lora-rank", f"must be ≥ 1, not {rank}")
    a = bounded(parse_number(alpha, "lora-alpha"), "lora-alpha", 1e-9, 1e9) if alpha else 2.0 * rank
    p = bounded(parse_number(dropout, "lora-dropout"), "lora-dropout", 0, 0.999) if dropout else 0.0
    return LoraSpec(rank, parse_targets(targets or "q,k,v,o,gate,up,down"), a, p, base, paged,
                    given=targets is not None)


def _tokens(text: str | None, gpu: bool) -> int | None:
    """--train-tokens: a whole number ≥ 1, written out or as 15e12."""
    from ..model.config import ShapecalcError

    if text is None:
        return None
    if not gpu:
        raise ShapecalcError("train-tokens", "needs --gpu: the days come from the step time")
    from ..inputs.numbers import ASCII_DIGITS
    from ..model.record import INT_MAX

    if not text.isascii():  # int() and float() read ٣ and ３ as 3
        raise ShapecalcError("train-tokens", f"{text!r}: {ASCII_DIGITS}")
    try:
        n = int(text)
    except ValueError:
        try:
            x = float(text)
        except ValueError:
            raise ShapecalcError("train-tokens", f"{text!r} is not a number") from None
        if not (x == x and x not in (float("inf"), float("-inf")) and x == int(x)):
            raise ShapecalcError("train-tokens", f"{text!r} is not a whole number") from None
        n = int(x)
    if not 1 <= n <= INT_MAX:
        raise ShapecalcError("train-tokens", f"must be in 1..2⁶³−1, not {text}")
    return n


COMMANDS = {"train": train}
HELP = {"train": (
    "One training step: forward, backward and recompute FLOPs per stage and in total (exact, "
    "FlopCounterMode's convention) beside the 6·N·tokens and 6·N + 12·L·D·T approximations; "
    "per-rank memory by term (weights, gradients, optimizer states under ZeRO over dp; "
    "activations by Megatron's closed form); global batch = micro-batch × grad-accum × dp; "
    "the PP 1F1B bubble, DP gradient traffic, TP sequence-parallel and vocab-parallel traffic, "
    "CP ring passes and EP all-to-alls per step. With --gpu: the step time, MFU and HFU, "
    "tokens/s and /day, and with --train-tokens the days and GPU-hours to train.")}
