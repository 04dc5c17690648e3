"""The JSON Schemas of disaggregated serving (`serve --pd`, `serve --find-pd`): the keys
serve/disagg.py, serve/pd_search.py and cli/serve_pd.py add, each described where declared."""

from __future__ import annotations

from typing import Any

from pydantic import StrictBool, StrictInt

from ..costs.described import described, many

F = float | None

PoolLayout = described(
    "ServePdPool", "One pool's layout",
    ("tp", StrictInt, "tensor-parallel degree of each replica of the pool"),
    ("pp", StrictInt, "pipeline stages of each replica of the pool"),
    ("ep", StrictInt, "expert-parallel degree of each replica of the pool"),
    ("replicas", StrictInt, "replicas of the pool"),
    ("gpus", StrictInt, "GPUs of the pool: replicas × max(tp, ep) × pp"))

PdLayout = described(
    "ServePdLayout", "Disaggregated prefill and decode (--pd P:D): the two pools",
    ("prefill", PoolLayout, "the prefill pool: --prefill-tp/--prefill-pp, P replicas"),
    ("decode", PoolLayout, "the decode pool: --tp/--pp/--ep, D replicas"))

PoolRun = described(
    "ServePdPoolRun", "One pool over the run (first arrival to last finish)",
    ("tp", StrictInt, "tensor-parallel degree of each replica"),
    ("pp", StrictInt, "pipeline stages of each replica"),
    ("ep", StrictInt, "expert-parallel degree of each replica"),
    ("replicas", StrictInt, "replicas of the pool"),
    ("gpus", StrictInt, "GPUs of the pool"),
    ("kv_blocks_per_replica", StrictInt, "paged KV blocks of one replica of the pool"),
    ("iterations", StrictInt, "scheduler iterations of the pool, all replicas"),
    ("busy_fraction", float, "utilisation: the fraction of the run a replica of the pool spends "
     "in iterations (mean over its replicas)"),
    ("queue_mean", float, "requests waiting in the pool, time-weighted mean"),
    ("queue_max", StrictInt, "most requests waiting in the pool at once"),
    ("preemptions", StrictInt, "sequences the pool preempted"))

IntStats = described(
    "ServePdBytes", "Bytes over the requests (exact counts)",
    ("min", StrictInt, "fewest bytes of a request"), ("max", StrictInt, "most bytes of a request"),
    ("mean", float, "mean bytes a request"))

Transfer = described(
    "ServePdTransfer", "Each request's KV cache sent from its prefill replica to its decode "
    "replica: every KV group's blocks for the prompt (a sliding group its window's, an MLA "
    "latent, a mixer's fixed state) in the cache's dtype",
    ("when", str, "when the send starts, as the engines run it"),
    ("link", str, "scale-out network (the pools span more than one scale-up domain) or "
     "scale-up link"),
    ("bandwidth_bytes_per_s", float, "the link's bytes/s per GPU per direction"),
    ("latency_s", float, "the link's latency, added once a send"),
    ("bytes_per_rank", IntStats, "bytes one prefill rank of the fullest pipeline stage sends"),
    ("bytes", IntStats, "bytes of a request over every prefill rank and stage"),
    ("bytes_all_requests", StrictInt, "bytes sent over the run"))


def _summary(name: str, what: str) -> Any:
    return described(
        f"ServePdSummary{name}", f"{what}: nearest-rank percentiles, mean and maximum, s",
        ("p50", F, f"median {what}, s"), ("p90", F, f"90th percentile {what}, s"),
        ("p99", F, f"99th percentile {what}, s"), ("mean", F, f"mean {what}, s"),
        ("max", F, f"largest {what}, s"))


TtftParts = described(
    "ServePdTtftParts", "TTFT = prefill + transfer + decode's first step, each with its queue",
    ("prefill_s", _summary("Prefill", "arrival to the end of its prefill"),
     "arrival to the end of the prefill (the prefill pool's queue included)"),
    ("transfer_s", _summary("Transfer", "end of prefill to the cache on the decode side"),
     "the KV transfer (waiting for its prefill replica's link included)"),
    ("decode_first_s", _summary("DecodeFirst", "cache arrived to the first token"),
     "the decode pool's queue (for blocks, for a step) and its first step"))

Disaggregation = described(
    "ServePdRun", "A disaggregated run's pools, transfers and TTFT's parts (--pd); the "
    "top-level KV and queue keys are the decode pool's",
    ("prefill", PoolRun, "the prefill pool"), ("decode", PoolRun, "the decode pool"),
    ("kv_transfer", Transfer, "the KV caches sent"),
    ("ttft_parts", TtftParts, "TTFT's parts"))

PdMiss = described(
    "ServePdMiss", "One bound a disaggregated run missed (serve/why_pd.py)",
    ("metric", str, "ttft | tpot | itl | e2e"), ("percentile", float, "the percentile it reads"),
    ("value_s", F, "the run's value there, s"), ("target_s", float, "the bound, s"),
    ("phase", str, "where the time goes: prefill (the prefill pool, its queue included), "
     "transfer (the KV cache's send) or decode (the decode pool's steps, its queue for blocks)"),
    ("why", str, "the bound, its value and the cause, in words"))

PdReplicas = described(
    "ServePdReplicas", "A disaggregated plan's pools (--find-gpus' P:D dimension)",
    ("prefill_replicas", StrictInt, "P: prefill replicas"),
    ("decode_replicas", StrictInt, "D: decode replicas"))

Split = described(
    "ServePdSplit", "One P:D split --find-pd simulated",
    ("prefill_replicas", StrictInt, "P: prefill replicas"),
    ("decode_replicas", StrictInt, "D: decode replicas"),
    ("prefill_gpus", StrictInt, "GPUs of the prefill pool"),
    ("decode_gpus", StrictInt, "GPUs of the decode pool"),
    ("gpus", StrictInt, "GPUs of both pools"),
    ("slo_met", StrictBool, "the SLO is met"),
    ("ttft_p99_s", F, "99th percentile TTFT, s"), ("itl_p99_s", F, "99th percentile ITL, s"),
    ("prefill_busy_fraction", float, "utilisation of the prefill pool"),
    ("decode_busy_fraction", float, "utilisation of the decode pool"),
    ("goodput_requests_per_s", float, "requests per second that met the SLO"),
    ("output_tokens_per_s_per_gpu", float, "output tokens per second over both pools' GPUs"),
    ("why", str | None, "which SLO the split misses and which pool (or the transfer) is the "
     "bottleneck; null: it meets the SLO"),
    ("missed", many(PdMiss), "each bound missed: which, in which phase and why", None),
    ("preemptions", StrictInt, "sequences the decode pool preempted", None),
    ("bounds", list[F], "the split's value at each bound of the SLO (slo.bounds' order), s",
     None))

FindPd = described(
    "ServeFindPd", "The P:D split with the fewest GPUs that meets the SLO at --rate",
    ("rate", float, "the arrival rate to serve, requests/s"),
    ("plan", Split | None, "the split with the fewest GPUs that meets the SLO; null: none"),
    ("splits", many(Split), "every split simulated, by GPUs"),
    ("notes", list[str], "why the search skipped or stopped at a prefill count"))
