"""The JSON Schemas of `serve --json` (`shapecalc schema serve`): the three forms, simulate,
find-rate and find-gpus, share a head; each key is described where it is declared.

The rows mirror the dicts cli/serve.py, serve/sim.py (metrics, pool_doc) and serve/search.py
build; tests validate real output against them with extra keys forbidden.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import StrictBool, StrictInt

from ..costs.described import described, many
from ..plan.schemas import PRICE_ROWS, PerfTermsOut
from .schemas_pd import Disaggregation, FindPd, PdLayout, PdReplicas

F = float | None


def _summary(name: str, what: str) -> Any:
    return described(
        f"ServeSummary{name}", f"{what}: nearest-rank percentiles, mean and maximum, in "
        "seconds (null when no request has one)",
        ("p50", F, f"median {what}, s"), ("p90", F, f"90th percentile {what}, s"),
        ("p99", F, f"99th percentile {what}, s"), ("mean", F, f"mean {what}, s"),
        ("max", F, f"largest {what}, s"))


SpecHead = described(
    "ServeSpeculative", "Speculative decoding's settings (serve/spec.py)",
    ("draft", str, "the draft: draft (a model), eagle3 (an EAGLE-3 head) or mtp"),
    ("k", StrictInt, "draft tokens a step; the target verifies k + 1"),
    ("acceptance", list[float], "the probability each draft position is accepted"),
    ("acceptance_source", str, "--acceptance, or the published figure of the default"),
    ("expected_tokens_per_step", float, "1 + Σ_i Π_{j≤i} α_j: tokens a step emits on average"))

SpecRow = described(
    "ServeSpeculativeBatch", "One batch size's decode step, plain and speculative",
    ("batch", StrictInt, "sequences decoding"), ("itl_s", float, "plain decode step, s"),
    ("spec_itl_s", float, "speculative step (verify + draft passes), s"),
    ("tpot_s", float, "plain time per output token, s"),
    ("spec_tpot_s", float, "speculative step / expected tokens a step, s"),
    ("tokens_per_s", float, "plain output tokens/s"),
    ("spec_tokens_per_s", float, "speculative output tokens/s"),
    ("speedup", float, "spec_tokens_per_s / tokens_per_s"),
    ("regime", str, "the verify step's bound: memory-bound (speculation helps) or "
     "compute-bound (it costs once the speedup falls below 1)"))

SpecRun = described(
    "ServeSpeculativeRun", "Speculative decoding in the run (serve/specsched.py)",
    *[(k, t, d) for k, t, d in (
        ("draft", str, "the draft kind"), ("k", StrictInt, "draft tokens a step"),
        ("acceptance", list[float], "the acceptance of each draft position"),
        ("acceptance_source", str, "--acceptance, or the published figure of the default"),
        ("expected_tokens_per_step", float, "tokens a step emits on average"))],
    ("draft_model", str, "the draft as shapecalc counts it"),
    ("mean_decode_batch", float, "sequences a decode step of the run verifies, on average"),
    ("regime", str, "the verify's bound at that batch: memory-bound (speculation helps) or "
     "compute-bound"),
    ("speedup_at_mean_batch", float, "speculative over plain output tokens/s at that batch, "
     "on context_tokens cached tokens"),
    ("draft_weight_bytes_per_rank", StrictInt, "the draft's weights on a rank, bytes"),
    ("draft_kv_bytes_per_token_per_rank", StrictInt, "the draft's KV bytes a token on a rank"),
    ("simulated_tokens_per_step", F, "tokens the simulated decode steps drew, a step"),
    ("context_tokens", StrictInt, "cached tokens of by_batch's steps (the mean prompt)"),
    ("by_batch", many(SpecRow), "the decode step at each batch size, powers of 2 up to the "
     "decode-only ceiling"))

Deployment = described(
    "ServeDeployment", "The deployment simulated (find-gpus: the plan found, when one is)",
    ("tp", StrictInt, "tensor-parallel degree p of each replica"),
    ("pp", StrictInt, "pipeline stages s of each replica"),
    ("ep", StrictInt, "expert-parallel degree of each replica"),
    ("replicas", StrictInt, "replicas behind the router"),
    ("gpus", StrictInt, "GPUs of the deployment: replicas × max(tp, ep) × pp"),
    ("router", str, "how requests go to replicas: round-robin | least-loaded"),
    ("dtype", str, "weight dtype"), ("kv_dtype", str, "KV-cache dtype"),
    ("act_dtype", str, "activation dtype"),
    ("block_size", StrictInt, "tokens per paged KV block"),
    ("max_num_seqs", StrictInt, "most sequences a replica runs at once (vLLM's max_num_seqs)"),
    ("max_batched_tokens", StrictInt | None, "most tokens one iteration schedules (vLLM's "
     "max_num_batched_tokens; chunked prefill)"),
    ("shared_prefix", StrictInt, "tokens of a system prompt every request starts with, cached "
     "once (prefix caching); 0: none"),
    ("attention_ranks", StrictInt, "data-parallel attention ranks of a replica, ep/tp (1 without "
     "ep): each its own scheduler, batch and KV pool (plan/ep.py)"),
    ("ep_mode", str | None, "how dispatch and combine move: DeepEP's normal (NVLink + RDMA), "
     "low-latency (pure RDMA), or auto (normal with prefill, low-latency in pure decode); null "
     "without ep"),
    ("ep_imbalance", float | None, "the busiest expert GPU's share × ep (1: balanced); null "
     "without ep"),
    ("redundant_experts", StrictInt, "EPLB's extra expert copies spread with the experts"),
    ("pd", PdLayout, "disaggregated prefill and decode (--pd, --find-pd): the two pools; then "
     "tp, pp, ep and replicas are the decode pool's and gpus both pools'", None),
    ("speculative", SpecHead | None, "speculative decoding (with --draft; absent without)",
     None))

ServeWorkload = described(
    "ServeWorkload", "The requests as given on the command line",
    ("requests", StrictInt, "--requests as given (with --trace the file's rows are run: the "
     "run's own count is the top-level requests)"),
    ("rate", F, "arrivals per second (--rate); null: all at t=0, a closed loop or a trace"),
    ("arrivals", str, "the gaps between arrivals: poisson | gamma:CV"),
    ("concurrency", StrictInt | None, "users of a closed loop (--concurrency); null: open loop"),
    ("prompt", str, "prompt tokens as given: N, uniform:LO,HI or lognormal:MEAN,SIGMA, either "
     "with ,max=N (or the --dataset's)"),
    ("output", str, "output tokens as given: N, uniform:LO,HI or lognormal:MEAN,SIGMA, either "
     "with ,max=N (or the --dataset's)"),
    ("trace", str | None, "the trace file read (--trace); null: generated requests"),
    ("seed", StrictInt, "seed of the generated arrivals and lengths"),
    ("dataset", str | None, "the named workload whose lengths prompt and output are (--dataset: "
     "sharegpt | openorca | sonnet | random); null: none"))

SloBound = described(
    "ServeSloBound", "One bound of the SLO: a definition's percentile held to a time",
    ("metric", str, "the definition it reads: ttft | tpot (MLPerf's per-request (e2e − TTFT) / "
     "(output − 1)) | itl (every gap) | e2e"),
    ("percentile", float, "the nearest-rank percentile of that definition, (0, 100]"),
    ("target_s", float, "the most it may be, s"),
    ("reads", str, "what the definition reads, in words"))

SloOut = described(
    "ServeSlo", "The service-level objective (--slo); null times: no target",
    ("ttft_s", F, "the p99 time-to-first-token target (ttft= or ttft_p99=), s"),
    ("itl_s", F, "the p99 inter-token-latency target (itl= or itl_p99=), s"),
    ("percentile", StrictInt, "the percentile ttft_s and itl_s read (99)"),
    ("name", str | None, "the named set given (mlperf-server | mlperf-interactive); null: none"),
    ("bounds", many(SloBound), "every bound, by definition then percentile"))

KvGroupOut = described(
    "ServeKvGroup", "One KV cache group of the pool (vLLM V1's hybrid KV cache manager)",
    ("window", StrictInt | None, "W of a sliding-window group; null otherwise"),
    ("chunk", StrictInt | None, "C of a chunked-attention group; null otherwise"),
    ("units_per_block", StrictInt, "pool units one block of this group takes"))

KvPool = described(
    "ServeKvPool", "One replica's KV pool on its fullest pipeline stage, in units of unit_bytes",
    ("groups", many(KvGroupOut), "the KV groups: full attention, each window, each chunk"),
    ("state_units_per_sequence", StrictInt, "units one running sequence's mixer states take "
     "(0: no stateful mixer)"),
    ("units", StrictInt, "units of the pool"), ("unit_bytes", StrictInt, "bytes of one unit"))

Throughput = described(
    "ServeThroughput", "Rates over the run: first arrival to last finish",
    ("requests_per_s", float, "requests finished per second"),
    ("input_tokens_per_s", float, "prompt tokens per second"),
    ("output_tokens_per_s", float, "output tokens per second"),
    ("requests_per_s_per_gpu", float, "requests_per_s over the deployment's GPUs"),
    ("input_tokens_per_s_per_gpu", float, "input_tokens_per_s over the deployment's GPUs"),
    ("output_tokens_per_s_per_gpu", float, "output_tokens_per_s over the deployment's GPUs"))

GoodSlo = described("ServeGoodputSlo", "The targets a good request meets (the tightest bound "
                    "of each definition, on the request's own value)",
                    ("ttft_s", F, "its TTFT at most this, s (null: any)"),
                    ("itl_s", F, "its mean time per output token (TPOT) at most this: the "
                     "tightest ITL or TPOT bound, s (null: any)"),
                    ("e2e_s", F, "its end-to-end latency at most this, s (null: any)"))

Goodput = described(
    "ServeGoodput", "Requests that met the SLO, each on its own",
    ("slo", GoodSlo, "the targets each request is held to"),
    ("requests_per_s", float, "good requests per second over the run"),
    ("fraction", float, "good requests over all requests"))

MeanMax = described("ServeKvUtilization", "Fraction of the KV pool in use, time-weighted",
                    ("mean", float, "mean over the run and the replicas"),
                    ("max", float, "largest of any replica at any iteration"))

Queue = described("ServeQueue", "Requests waiting (arrived, not yet running), all replicas",
                  ("mean", float, "time-weighted mean"), ("max", StrictInt, "most at once"))

Littles = described(
    "ServeLittlesLaw", "Little's law as a check of the simulation: L = λ·W",
    ("mean_in_flight", float, "L: time-weighted mean of requests waiting or running"),
    ("arrival_rate_x_mean_latency", F, "λ·W: --rate × mean end-to-end latency (null without "
     "a rate)"))

Saturated = described(
    "ServeSaturated", "One replica's decode-only ceiling: the most sequences decoding at once "
    "at the shortest prompt (no run exceeds it)",
    ("max_decode_batch", StrictInt, "sequences decoding at once (max_num_seqs or the blocks; "
     "under EP, over the replica's attention ranks)"),
    ("decode_step_s", float, "seconds of one decode iteration at that batch (with --draft: the "
     "verify and the draft's passes)"),
    ("output_tokens_per_s", float, "max_decode_batch / decode_step_s (with --draft: × the "
     "expected tokens a step)"))

Timeline = described(
    "ServeTimeline", "The run in equal spans of [0, last finish], time-weighted",
    ("t_s", list[float], "the middle of each span, s"),
    ("kv_utilization", list[float], "fraction of the KV pool in use (mean over replicas)"),
    ("waiting", list[float], "requests waiting, all replicas"),
    ("running", list[float], "requests running, all replicas"))

ServeCost = described(
    "ServeCost", "What the deployment costs at a price per GPU-hour (plan/price.py): it costs "
    "GPUs × price an hour, busy or not; each rate divides that by what the run served",
    *PRICE_ROWS,
    ("per_million_input_tokens", F, "dollars per million input tokens, the whole cost charged "
     "to them"),
    ("per_million_output_tokens", F, "dollars per million output tokens, the whole cost "
     "charged to them"),
    ("per_request", F, "dollars per finished request"),
    ("per_request_at_slo", F, "dollars per request that met the SLO (goodput)"))

BoundOut = described(
    "ServeSloBoundResult", "One bound of the SLO against the run",
    ("metric", str, "ttft | tpot | itl | e2e"),
    ("percentile", float, "the percentile it reads"),
    ("target_s", float, "the most it may be, s"),
    ("value_s", F, "the run's value at that percentile, s (null: no sample, e.g. TPOT of "
     "one-token answers)"),
    ("met", StrictBool, "value_s ≤ target_s (or no sample)"))

Miss = described(
    "ServeMiss", "One bound a deployment missed, read from its run's own steps (serve/why.py)",
    ("metric", str, "ttft | tpot | itl | e2e"), ("percentile", float, "the percentile it reads"),
    ("value_s", F, "the run's value there, s"), ("target_s", float, "the bound, s"),
    ("phase", str, "where the time goes: prefill (chunks sharing decode steps, or the prefill "
     "itself), decode (the decode steps, preemptions) or queue (waiting for a slot)"),
    ("why", str, "the bound, its value and the cause, in words"))

LatencyDef = described(
    "ServeLatencyDefinition", "One latency definition over the run (serve/slo.py)",
    ("reads", str, "what it reads, in words"),
    ("requests", StrictInt, "requests in the distribution"),
    ("excluded", StrictInt, "requests left out: one-token answers have no TPOT and no gap"),
    ("summary", dict[str, F], "nearest-rank percentiles (p50, p90, p95, p99 and any a bound "
     "reads, e.g. p99.9), mean and max, s"))

Latency = described(
    "ServeLatency", "Each SLO definition's distribution",
    ("ttft", LatencyDef, "time to first token: arrival to first token"),
    ("tpot", LatencyDef, "MLPerf's time per output token: (e2e − TTFT) / (output − 1) of each "
     "request"),
    ("itl", LatencyDef, "inter-token latency: every gap, all requests pooled"),
    ("e2e", LatencyDef, "end-to-end latency: arrival to last token"))

_RUN = (
    ("requests", StrictInt, "requests simulated"),
    ("duration_s", float, "seconds from the first arrival to the last finish"),
    ("iterations", StrictInt, "scheduler iterations (engine steps), all replicas"),
    ("ttft_s", _summary("Ttft", "time to first token"), "time to first token: arrival to "
     "first token"),
    ("itl_s", _summary("Itl", "inter-token latency"), "inter-token latency: the gap before each "
     "output token after the first (a preemption's gap included)"),
    ("tpot_s", _summary("Tpot", "time per output token"), "time per output token of each request: "
     "(finish − first token) / (output − 1)"),
    ("e2e_s", _summary("E2e", "end-to-end latency"), "end-to-end latency: arrival to last token"),
    ("throughput", Throughput, "what the deployment delivered"),
    ("goodput", Goodput, "the requests that met the SLO"),
    ("slo_met", StrictBool, "every bound of the SLO is met"),
    ("slo_percentile", StrictInt, "the percentile of the SLO's ttft_s and itl_s (99)"),
    ("slo_bounds", many(BoundOut), "each bound of the SLO against the run"),
    ("latency", Latency, "each SLO definition's distribution"),
    ("slo_missed", many(Miss), "each bound missed: which, in which phase and why (empty: met)"),
    ("preemptions", StrictInt, "sequences preempted (their KV blocks freed, recomputed later)"),
    ("kv_utilization", MeanMax, "fraction of the KV pool in use"),
    ("queue", Queue, "requests waiting"),
    ("littles_law", Littles, "Little's law, a check of the simulation"),
    ("saturated_per_replica", Saturated, "one replica's decode-only ceiling"),
    ("timeline", Timeline, "the run over time"),
    ("cost", ServeCost | None, "what it costs (with a price: --price or the profile's)", None),
    ("disaggregation", Disaggregation, "with --pd: each pool, the KV transfers and TTFT's parts",
     None),
    ("speculative", SpecRun | None, "speculative decoding (with --draft)", None))

RunOut = described("ServeRun", "One simulated run's metrics", *_RUN)

Probe = described(
    "ServeProbe", "One rate find-rate simulated",
    ("rate", float, "arrivals per second"), ("slo_met", StrictBool, "the SLO is met there"),
    ("ttft_p99_s", F, "99th percentile TTFT, s"), ("itl_p99_s", F, "99th percentile ITL, s"),
    ("goodput_requests_per_s", float, "requests per second that met the SLO"),
    ("missed", list[str], "each bound missed there: which, in which phase and why"),
    ("bounds", list[F], "the run's value at each bound of the SLO (slo.bounds' order), s"))

FindRate = described(
    "ServeFindRate", "The highest arrival rate that meets the SLO (bisection over simulations)",
    ("rate", F, "the highest rate found to meet the SLO, requests/s; null: none does"),
    ("reason", str, "how the search ended"),
    ("ceiling_requests_per_s", float, "the decode-only ceiling, the search's upper end"),
    ("probes", many(Probe), "every rate simulated, in order"),
    ("at_rate", RunOut | None, "the run at the rate found (or the best probe)"),
    ("spec_k", StrictInt, "with --draft and no --spec-k: the speculative k whose rate is the "
     "highest", None),
    ("by_spec_k", list[dict[str, Any]], "each k tried and its rate (spec_k, rate)", None),
    ("layout", dict[str, Any] | None, "a MoE model without --ep: the layout whose rate is the "
     "highest on the given GPUs (ep, replicas)", None),
    ("by_layout", list[dict[str, Any]], "each layout tried on the given GPUs and its best rate "
     "(ep, replicas, rate; null: it does not fit)", None),
    ("notes", list[str], "a layout tried that the GPUs cannot hold, and why", None))

PlanRow = described(
    "ServePlanRow", "One deployment find-gpus simulated",
    ("tp", StrictInt, "tensor-parallel degree"), ("pp", StrictInt, "pipeline stages"),
    ("ep", StrictInt, "expert-parallel degree"), ("replicas", StrictInt, "replicas"),
    ("gpus", StrictInt, "GPUs: replicas × max(tp, ep) × pp"),
    ("slo_met", StrictBool, "the SLO is met"),
    ("ttft_p99_s", F, "99th percentile TTFT, s"), ("itl_p99_s", F, "99th percentile ITL, s"),
    ("goodput_requests_per_s", float, "requests per second that met the SLO, all replicas"),
    ("output_tokens_per_s_per_gpu", float, "output tokens per second per GPU"),
    ("preemptions", StrictInt, "sequences preempted"),
    ("cost_per_hour", F, "dollars an hour: gpus × the price (null: no price)", None),
    ("max_batched_tokens", StrictInt, "the token budget of each iteration (a searched "
     "dimension unless --max-batched-tokens is given)"),
    ("missed", many(Miss), "each bound missed: which, in which phase and why"),
    ("meets_with", str | None, "a value of one dimension that meets the SLO with the rest kept "
     "(e.g. --max-batched-tokens 512 meets it); null: met, or none explored"),
    ("bounds", list[F], "the run's value at each bound of the SLO (slo.bounds' order), s"),
    ("spec_k", StrictInt | None, "speculative draft tokens a step (a searched dimension with "
     "--draft unless --spec-k is given); null: no speculation", None),
    ("pd", PdReplicas | None, "a disaggregated candidate's pools (each of tp, pp, ep; replicas "
     "and gpus are both pools'); null: aggregated", None))

FindGpus = described(
    "ServeFindGpus", "The fewest GPUs that meet the SLO at --rate: for each candidate of the "
    "named dimensions (tp, pp, max_batched_tokens) the fewest replicas, each simulated on its "
    "share of the traffic",
    ("rate", float, "the arrival rate to serve, requests/s"),
    ("plan", PlanRow | None, "the deployment with the fewest GPUs that meets the SLO; null: none"),
    ("plan_simulated", PlanRow | None, "that plan simulated whole: all replicas behind the "
     "router"),
    ("frontier", many(PlanRow), "every deployment simulated"),
    ("notes", list[str], "why a candidate was left out or stopped"))

EngineOut = described(
    "ServeEngine", "The engine profile the run follows (serve/engines.py, engines.json)",
    ("profile", str, "NAME or NAME@VERSION, as --engine takes it"),
    ("name", str, "vllm | sglang | trtllm | trtllm-max-utilization"),
    ("version", str | None, "the calibrated version whose terms the run uses; null: none"),
    ("engine", str, "the engine (and harness) the profile describes"),
    ("order", str, "decode-first (every running sequence decodes, the budget left prefills) | "
     "prefill-first (a step that can prefill holds no decodes)"),
    ("capacity", str, "evict (preempt by recompute when the cache runs out) | no-evict (start a "
     "request only when its whole prompt and output fit)"),
    ("attention", str, "overlapped (KV reads share max(compute, memory) with the GEMMs) | "
     "separate (attention's KV time adds to the step)"),
    ("prefix_caching", StrictBool, "whether --shared-prefix applies"),
    ("kv_memory", str, "of-total (--utilization of the GPU's memory) | of-free (of what the "
     "weights and workspace leave)"),
    ("defaults", dict[str, int], "the engine's documented defaults (max_batched_tokens, "
     "max_num_seqs)"),
    ("terms", dict[str, float], "its terms under load (step_overhead_s, sequence_overhead_s, "
     "request_overhead_s, perf terms its kernels override), fitted by calibrate on load tests"))

_HEAD = (
    ("model", str, "the model's name"), ("gpu", str, "the GPU profile"),
    ("engine", EngineOut, "the engine profile (--engine; vllm by default)"),
    ("deployment_is", str, "what `deployment` holds: as given, or the plan --find-gpus found"),
    ("deployment", Deployment, "the deployment"), ("workload", ServeWorkload, "the requests"),
    ("slo", SloOut, "the service-level objective"))

ServeOut = described(
    "ServeOut", "`serve --json`: a simulated run",
    *_HEAD, ("command", Literal["simulate"], "which form of serve wrote this: simulate"),
    ("kv_blocks_per_replica", StrictInt, "paged KV blocks of one replica (--kv-blocks or what "
     "fit's memory model leaves; under EP, of each attention rank: each its own pool)"),
    ("kv_tokens_per_replica", StrictInt, "token slots of those blocks: blocks × block_size"),
    ("kv_pool", KvPool, "the replica's KV pool: groups and mixer states"),
    ("perf_terms", PerfTermsOut, "the performance model's terms the step times use"),
    *_RUN)

ServeFindRateOut = described(
    "ServeFindRateOut", "`serve --find-rate --json`",
    *_HEAD, ("command", Literal["find-rate"], "which form of serve wrote this: find-rate"),
    ("find_rate", FindRate, "the search and its result"))

ServeFindGpusOut = described(
    "ServeFindGpusOut", "`serve --find-gpus --json`",
    *_HEAD, ("command", Literal["find-gpus"], "which form of serve wrote this: find-gpus"),
    ("find_gpus", FindGpus, "the search and its result"))


ServeFindPdOut = described(
    "ServeFindPdOut", "`serve --find-pd --json`",
    *_HEAD, ("command", Literal["find-pd"], "which form of serve wrote this: find-pd"),
    ("find_pd", FindPd, "the search and its result"))


def schemas() -> dict[str, dict[str, Any]]:
    return {"serve": ServeOut.model_json_schema(),
            "serve_find_rate": ServeFindRateOut.model_json_schema(),
            "serve_find_gpus": ServeFindGpusOut.model_json_schema(),
            "serve_find_pd": ServeFindPdOut.model_json_schema()}
