"""`shapecalc serve`: simulate a serving deployment under load (shapecalc/serve/).

Loaded when invoked (lazy.py)."""


import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from .document import emit
from .options import (
    EP,
    PP,
    TP,
    ActDtype,
    BlockSize,
    ConfigFile,
    DtypeOpt,
    Format,
    HFConfig,
    Html,
    JsonOut,
    KvDtype,
    Mode,
    Output,
    Preset,
    PresetsDir,
    Sets,
    Svg,
    fail,
)
from .plan_options import (
    ComputeDtype,
    Gpu,
    HardwareDir,
    PerfSets,
    Price,
    SetGpu,
    Utilization,
)


def serve(
    preset: Preset = None,
    config: ConfigFile = None,
    hf_config: HFConfig = None,
    set_: Sets = None,
    presets_dir: PresetsDir = None,
    gpu: Gpu = None,
    hardware_dir: HardwareDir = None,
    set_gpu: SetGpu = None,
    tp: TP = None,
    pp: PP = None,
    ep: EP = None,
    dtype: DtypeOpt = None,
    kv_dtype: KvDtype = None,
    act_dtype: ActDtype = None,
    mode: Mode = None,
    block_size: BlockSize = None,
    utilization: Utilization = 0.9,
    price: Price = None,
    compute_dtype: ComputeDtype = None,
    perf: PerfSets = None,
    max_batched_tokens: Annotated[int | None, typer.Option(
        "--max-batched-tokens", help="tokens one iteration schedules (vLLM's "
        "--max-num-batched-tokens; chunked prefill); --find-gpus searches 2048 and 512 below it "
        "unless it is given", show_default="8192")] = None,
    max_num_seqs: Annotated[int, typer.Option(
        "--max-num-seqs", help="most sequences a replica runs at once (vLLM's --max-num-seqs)")
    ] = 256,
    kv_blocks: Annotated[int | None, typer.Option(
        "--kv-blocks", help="KV-cache blocks per replica (default: what fit's memory model "
        "leaves)", show_default="fit's memory model")] = None,
    shared_prefix: Annotated[int, typer.Option(
        "--shared-prefix", help="tokens of a system prompt every request starts with, cached "
        "once (prefix caching); 0: none")] = 0,
    replicas: Annotated[int, typer.Option("--replicas", help="replicas behind the router")] = 1,
    ep_mode: Annotated[str | None, typer.Option(
        "--ep-mode", help="with --ep: DeepEP's normal (NVLink + RDMA forwarding, for prefill) "
        "| low-latency (pure RDMA, for decode) dispatch and combine | auto (SGLang's: normal "
        "for a step with prefill, low-latency for a pure decode step)",
        show_default="normal")] = None,
    ep_imbalance: Annotated[str | None, typer.Option(
        "--ep-imbalance", help="with --ep: the busiest expert GPU's share of the routed tokens "
        "× ep", show_default="1: balanced")] = None,
    redundant_experts: Annotated[int | None, typer.Option(
        "--redundant-experts", help="with --ep: EPLB's extra expert copies (ep divides the "
        "experts plus these; each GPU holds (E + N)/ep)", show_default="0")] = None,
    router: Annotated[str, typer.Option(
        "--router", help="round-robin | least-loaded (fewest requests queued or running)")
    ] = "round-robin",
    rate: Annotated[float | None, typer.Option(
        "--rate", help="arrivals per second", show_default="all requests at t=0 (maximum load)")
    ] = None,
    arrivals: Annotated[str, typer.Option(
        "--arrivals", help="poisson | gamma:CV (gaps with that coefficient of variation)")
    ] = "poisson",
    concurrency: Annotated[int | None, typer.Option(
        "--concurrency", help="a closed loop of this many users (instead of --rate)",
        show_default="none: open loop")] = None,
    prompt: Annotated[str | None, typer.Option(
        "--prompt-tokens", help="prompt tokens: N, uniform:LO,HI or lognormal:MEAN,SIGMA",
        show_default="2048")] = None,
    output_tokens: Annotated[str | None, typer.Option(
        "--output-tokens", help="output tokens: N, uniform:LO,HI or lognormal:MEAN,SIGMA",
        show_default="256")] = None,
    dataset: Annotated[str | None, typer.Option(
        "--dataset", help="a named workload's lengths: sharegpt | openorca | sonnet | random "
        "(presets/datasets/serving.json: what each follows and cites)",
        show_default="none")] = None,
    requests: Annotated[int | None, typer.Option(
        "--requests", help="requests to simulate", show_default="1000")] = None,
    trace: Annotated[Path | None, typer.Option(
        "--trace", help="a JSONL or CSV file of arrival_s, prompt_tokens, output_tokens (instead "
        "of --rate, --prompt-tokens, --output-tokens and --requests)",
        show_default="none: drawn")] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, help="the workload's random seed")] = 0,
    slo: Annotated[str | None, typer.Option(
        "--slo", help="bounds on percentiles: ttft=1s,itl=50ms (p99 of each), METRIC_pQ=TIME "
        "(ttft, tpot: MLPerf's per-request (e2e − TTFT)/(output − 1), itl: every gap, e2e; "
        "e.g. ttft_p99=2s,tpot_p99=200ms), or mlperf-server | mlperf-interactive; goodput "
        "counts the requests within every bound, --find-* need each percentile within it",
        show_default="none")] = None,
    find_rate: Annotated[bool, typer.Option(
        "--find-rate", help="bisect for the highest --rate that meets the SLO")] = False,
    pd: Annotated[str | None, typer.Option(
        "--pd", help="disaggregated prefill and decode: P:D replicas of a prefill pool "
        "(--prefill-tp/--prefill-pp) and a decode pool (--tp/--pp/--ep), each request's KV cache "
        "sent between them; with --find-gpus, the split searched at every layout",
        show_default="none: aggregated")] = None,
    prefill_tp: Annotated[int | None, typer.Option(
        "--prefill-tp", help="tensor-parallel degree of each prefill replica (with --pd or "
        "--find-pd)", show_default="--tp")] = None,
    prefill_pp: Annotated[int | None, typer.Option(
        "--prefill-pp", help="pipeline stages of each prefill replica (with --pd or --find-pd)",
        show_default="--pp")] = None,
    find_pd: Annotated[bool, typer.Option(
        "--find-pd", help="the P:D split of prefill and decode replicas with the fewest GPUs "
        "that serves --rate within the SLO, and which pool bounds each other split")] = False,
    engine_: Annotated[str | None, typer.Option(
        "--engine", help="the engine whose scheduler and terms under load the run follows: "
        "vllm | sglang | trtllm | trtllm-max-utilization, or NAME@VERSION where a calibration "
        "has versions (serve/engines.json)", show_default="vllm")] = None,
    find_gpus: Annotated[bool, typer.Option(
        "--find-gpus", help="the fewest GPUs that serve --rate within the SLO, and the frontier "
        "explored: tp, pp, replicas, the token budget, ep with data-parallel attention (MoE), "
        "the P:D split and speculative k (with --draft); --tp, --pp, --ep, "
        "--max-batched-tokens, --pd and --spec-k given fix theirs")] = False,
    draft: Annotated[str | None, typer.Option(
        "--draft", help="speculative decoding's draft: draft (a smaller model: --draft-preset or "
        "--draft-config), eagle3 (an EAGLE-3 head: --draft-config its config.json) or mtp (the "
        "model's own MTP layers)", show_default="none: no speculation")] = None,
    draft_preset: Annotated[str | None, typer.Option(
        "--draft-preset", help="the draft model (--draft draft), a preset",
        show_default="none")] = None,
    draft_config: Annotated[Path | None, typer.Option(
        "--draft-config", help="the draft model's config (TOML, or a Hugging Face config.json), "
        "or an EAGLE-3 head's config.json (--draft eagle3)", show_default="none")] = None,
    spec_k: Annotated[int | None, typer.Option(
        "--spec-k", help="draft tokens a step; the target verifies k + 1 (--find-gpus and "
        "--find-rate search 1 … 4 without it)", show_default="none: searched, or required with "
        "--draft")] = None,
    acceptance: Annotated[str | None, typer.Option(
        "--acceptance", help="the probability a draft token is accepted: one rate (0.7) or one "
        "per position (0.8,0.6,0.5)", show_default="a published figure per --draft kind")
    ] = None,
    emit_engine: Annotated[str | None, typer.Option(
        "--emit", help="print the plan (as given, or found by --find-gpus) as the engine's "
        "launch command instead of the report: vllm, sglang, trtllm or dynamo",
        show_default="none: the report")] = None,
    as_json: JsonOut = False,
    fmt: Format = "table",
    output: Output = None,
    svg: Svg = None,
    html: Html = None,
) -> None:
    from ..model.config import ShapecalcError

    try:
        from ..render.output import check_format, check_outputs
        from ..serve import sim
        from ..serve import workload as W
        from .options import resolve_model, resolve_workload
        from .plan_options import gpu_option, plan_opts

        if not gpu:
            raise ShapecalcError("gpu", "serve needs --gpu NAME (see: shapecalc hardware)")
        if find_rate and find_gpus:
            raise ShapecalcError("find-rate", "give --find-rate or --find-gpus, not both")
        if rate is not None and concurrency is not None:
            raise ShapecalcError("concurrency", "give --rate or --concurrency, not both")
        from . import serve_flags

        serve_flags.check(trace=trace, rate=rate, concurrency=concurrency, arrivals=arrivals,
                          router=router, replicas=replicas, pd=pd, find_rate=find_rate,
                          find_gpus=find_gpus, find_pd=find_pd, prompt=prompt,
                          output_tokens=output_tokens, requests=requests)
        from . import serve_pd

        serve_pd.check(pd, find_pd, prefill_tp, prefill_pp, replicas=replicas,
                       find_rate=find_rate, find_gpus=find_gpus, concurrency=concurrency,
                       rate=rate, trace=trace, shared_prefix=shared_prefix)
        fmt = check_format("json" if as_json else fmt)
        if emit_engine is not None and (fmt != "table" or output or svg or html):
            raise ShapecalcError("emit", "prints the launch command in place of the report: "
                                 "leave out --json, --format, --output, --svg and --html")
        if emit_engine is not None and find_rate:  # it found a rate, not a deployment
            raise ShapecalcError("emit", "launches a deployment (as given, or found by "
                                 "--find-gpus or --find-pd); --find-rate finds a rate: leave "
                                 "out --find-rate or --emit")
        for flag, v in (("ep-mode", ep_mode), ("redundant-experts", redundant_experts)):
            if emit_engine is not None and v is not None:  # no emitted flag sets them
                raise ShapecalcError(flag, f"--emit does not set it in the engine's launch "
                                     f"(the engine runs its own default): leave out --{flag}")
        check_outputs(output=output, svg=svg, html=html)
        output_token_count(output)
        if dataset is not None:
            from ..serve.datasets import dataset as named

            for flag, given in (("--prompt-tokens", prompt is not None),
                                ("--output-tokens", output_tokens is not None),
                                ("--trace", trace is not None)):
                if given:
                    raise ShapecalcError("dataset", f"sets the request lengths; leave out {flag}")
            entry = named(dataset)
            prompt, output_tokens = entry["prompt"], entry["output"]
        prompt, output_tokens = prompt or "2048", output_tokens or "256"
        requests = 1000 if requests is None else requests
        from ..plan.price import with_default_price

        mbt_given = max_batched_tokens is not None  # given: fixed, not searched
        opts = plan_opts(utilization, 1.0, 1.0, 1.0, price, compute_dtype,
                         "flash", 8192 if max_batched_tokens is None else max_batched_tokens,
                         perf)
        hw = gpu_option(gpu, hardware_dir, set_gpu)
        opts = with_default_price(opts, hw)
        model, wbase = resolve_model(preset, config, hf_config, set_, presets_dir)
        wbase = {k: v for k, v in wbase.items() if k not in ("batch", "seq", "phase")}
        wl = resolve_workload({"logits": "last", **wbase}, mode, dtype=dtype, kv_dtype=kv_dtype,
                              act_dtype=act_dtype, tp=tp, pp=pp, ep=ep, block_size=block_size)
        from ..plan.ep import ep_plan
        from ..serve.engines import profile
        from ..serve.speccli import speculation

        prof = profile(engine_)
        if shared_prefix and not prof.prefix_caching:
            raise ShapecalcError("shared-prefix", f"--engine {prof.label} caches no prefix "
                                 "(prefix caching off): leave out --shared-prefix")
        plan = ep_plan(model, wl, ep_mode, ep_imbalance, redundant_experts)
        from . import serve_search

        sp = speculation(model, wl, draft, draft_preset, draft_config, serve_search.spec_k(
            spec_k, draft, acceptance, find_gpus or find_rate), acceptance, seed, presets_dir)
        if sp is not None and (pd is not None or find_pd):
            raise ShapecalcError("draft", "speculative decoding with --pd or --find-pd is not "
                                 "simulated: leave out one of them")
        if sp is not None and prof.name != "vllm":  # specsched.py follows vLLM V1's scheduler
            raise ShapecalcError("draft", f"speculative decoding is simulated under vLLM's "
                                 f"scheduler: leave out --engine {prof.label} or --draft")
        dep = sim.Deployment(model, wl, hw, opts, replicas, router, max_num_seqs, kv_blocks,
                             shared_prefix, spec=sp, ep_plan=plan,
                             profile=None if prof.name == "vllm" else prof)
        target = sim.parse_slo(slo)
        plens = W.parse_lengths(prompt, "prompt-tokens")
        olens = W.parse_lengths(output_tokens, "output-tokens")
        cv = W.parse_arrivals(arrivals)
        serve_flags.check_seed(sp is not None or (trace is None and (
            rate is not None or find_rate or find_gpus or find_pd
            or plens.kind != "fixed" or olens.kind != "fixed")))
        head = {"model": model.name, "gpu": hw.name, "deployment_is": "as given",
                "deployment": {"tp": wl.tp, "pp": wl.pp, "ep": wl.ep, "replicas": replicas,
                               "gpus": dep.gpus, "router": router, "dtype": wl.dtype,
                               "kv_dtype": wl.kv, "act_dtype": wl.act,
                               "block_size": wl.block_size, "max_num_seqs": max_num_seqs,
                               "max_batched_tokens": opts.max_batched_tokens,
                               "shared_prefix": shared_prefix,
                               "attention_ranks": dep.attention_ranks,
                               "ep_mode": plan and plan.mode,
                               "ep_imbalance": plan and plan.imbalance,
                               "redundant_experts": plan.redundant if plan else 0},
                "workload": {"requests": requests, "rate": rate, "arrivals": arrivals,
                             "concurrency": concurrency, "prompt": prompt,
                             "output": output_tokens,
                             "trace": None if trace is None else str(trace), "seed": seed,
                             "dataset": None if dataset is None else dataset.strip().lower()},
                "slo": target.head(), "engine": prof.doc()}
        split = None if pd is None and not find_pd else serve_pd.pools(dep, pd, prefill_tp,
                                                                        prefill_pp)
        if sp is not None:
            head["deployment"]["speculative"] = sp.spec.doc()
        if find_rate or find_gpus or find_pd:
            probes = 0
            with _progress("searching", None) as bar:
                def tick() -> None:
                    nonlocal probes
                    probes += 1
                    bar(probes, 0)

                if find_pd:
                    assert rate is not None
                    doc = serve_pd.find(split, head, rate, requests, plens, olens, seed, cv,
                                        target, tick)
                elif find_rate:  # searches speculative k too (serve_search.py)
                    doc = serve_search.find_rate(dep, head, requests, plens, olens, seed, cv,
                                                 target, tick, spec_k is not None,
                                                 ep is not None)
                else:  # every kind; a flag given fixes its dimension (serve_search.py)
                    assert rate is not None
                    from ..serve.disagg import parse_pd

                    doc = serve_search.find_gpus(
                        dep, head, rate, requests, plens, olens, seed, cv, target, tick,
                        tp=tp is not None, pp=pp is not None,
                        mbt=opts.max_batched_tokens if mbt_given else None, ep=ep is not None,
                        k=spec_k is not None, split=None if pd is None else parse_pd(pd))
        else:
            if trace is not None:
                reqs = W.read_trace(trace)
                arrival_rate = None
            else:
                reqs = W.generate(requests, rate, plens, olens, seed, cv)
                arrival_rate = rate
            if split is not None:
                doc = serve_pd.simulate(split, head, reqs, target, arrival_rate)
            else:
                eng = sim.engine(dep)
                with _progress("simulating", len(reqs)) as bar:
                    reps, seqs = sim.run(dep, reqs, concurrency, bar, eng=eng)
                doc = {**head, "command": "simulate",
                       "kv_blocks_per_replica": eng.cfg.num_blocks,
                       "kv_tokens_per_replica": eng.cfg.num_blocks * eng.cfg.block_size,
                       "kv_pool": sim.pool_doc(eng), "perf_terms": eng.cost.pp.as_dict(),
                       **sim.metrics(dep, eng, reps, seqs, target, reqs, arrival_rate)}
        if emit_engine is not None and doc["command"] != "simulate" and verdict(doc) is False:
            # a search that found nothing: the given plan is not one to launch (any kind)
            raise ShapecalcError("emit", "no explored deployment meets the SLO: no plan to emit")

        if emit_engine is not None:
            from ..serve.emit_pd import emit_text  # a P:D plan's pools too

            sys.stdout.write(emit_text(emit_engine, doc, dep, sp, preset or config
                                       or hf_config, draft_preset or draft_config) + "\n")
            return
        from ..render.serve import print_serve
        from ..render.serve_pd import print_pd, print_search

        emit(doc, fmt, output, svg, html, f"serve: {model.name} on {hw.name}",
             print_search if doc["command"] == "find-gpus" else print_serve if split is None
             else print_pd)
    except ShapecalcError as e:
        fail(e)
    if verdict(doc) is False:  # a negative verdict exits 1 (README: Exit status)
        raise typer.Exit(1)


def output_token_count(output: str | None) -> None:
    """--output is the report's file, as in every command; a count there meant --output-tokens."""
    from ..inputs.numbers import parse_number
    from ..model.config import ShapecalcError

    if output is None or output == "-":
        return
    head = output.split(":", 1)[0].strip().lower()
    try:
        parse_number(output, "output")
        number = True
    except ShapecalcError:
        number = False
    if number or head in ("uniform", "lognormal"):
        raise ShapecalcError("output", f"{output!r} is a token count: --output is the file the "
                             "report is written to; give the output tokens with --output-tokens")


def verdict(doc: dict[str, Any]) -> bool | None:
    """Whether the run met its SLO (a simulation given --slo), found a rate or found a plan;
    None when there was nothing to meet."""
    if doc["command"] == "find-rate":
        return doc["find_rate"]["rate"] is not None
    if doc["command"] == "find-gpus":
        return doc["find_gpus"]["plan"] is not None
    if doc["command"] == "find-pd":
        return doc["find_pd"]["plan"] is not None
    if not doc["slo"]["bounds"]:
        return None
    return bool(doc["slo_met"])


class _progress:
    """A rich progress bar on stderr, only when stderr is a terminal; else a no-op."""

    def __init__(self, what: str, total: int | None):
        self.what, self.total = what, total
        self.bar: Any = None

    def __enter__(self) -> Callable[[int, int], None]:
        if not sys.stderr.isatty():
            return lambda done, total: None
        from rich.console import Console
        from rich.progress import Progress

        self.bar = Progress(console=Console(stderr=True), transient=True)
        self.bar.start()
        task = self.bar.add_task(self.what, total=self.total)
        return lambda done, total: self.bar.update(task, completed=done)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


HELP = {"serve": "Simulate a serving deployment under load: continuous batching (vLLM-like: "
        "chunked prefill, paged KV cache with fit's blocks, preemption by recompute, prefix "
        "caching) on --replicas of tp×pp GPUs, each iteration timed by the calibrated expected-"
        "time model. Prints TTFT, inter-token and end-to-end latency percentiles, throughput, "
        "goodput under --slo, preemptions, and KV-cache utilisation and queue length over "
        "time. --find-rate and --find-gpus search. --pd P:D disaggregates prefill and decode "
        "(each request's KV cache sent over the topology); --find-pd finds the split. "
        "--draft/--spec-k decode speculatively. Leaves out: tokenizer, sampling cost."}
COMMANDS: dict[str, Callable[..., Any]] = {"serve": serve}
