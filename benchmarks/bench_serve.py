"""`serve` side by side: the closed-form simulator, the same without fast-forward, and a naive
per-iteration trace (the symbolic interpreter run for each iteration's mix), in one run.

- the issue's speed case: 10,000 requests of 2048-in/500-out on one replica of llama3-70b tp=4
  (H100-SXM), at t = 0 (max load) and at 3 requests/s: wall time, simulated iterations/s and
  requests/s, and the run's CPU time (user + sys; issue 22: ≤ 0.5 s with every feature off);
- the same workload on a sliding-window (gpt-oss-120b), a chunked (llama4-scout) and a hybrid
  (nemotron-nano-9b-v2) model;
- the same runs stepped one iteration at a time (no fast-forward of pure-decode runs);
- the naive per-iteration trace: `build_trace` (the symbolic interpreter) for a decode step of
  each of a sample of the run's iterations (B = its decodes, T = their mean cache), its
  iterations/s and the time the whole run would take at that rate;
- pipeline parallelism (tp=4 pp=2: two micro-batches in flight, serve/pipeline.py) on the
  same workload: its CPU time beside the run's with every feature off (issue 22: ≤ 2×);
- expert parallelism with data-parallel attention (qwen3-30b-a3b, tp=1 ep=8 on one node and
  ep=16 over two: 8 and 16 attention ranks, each its own scheduler; plan/ep.py) on the same
  workload, at max load and at 3 requests/s an attention rank (each scheduler loaded as the
  base's one; at 3 requests/s in all each rank would decode alone, a step per token): its CPU
  time beside the run's with every feature off (issue 22: ≤ 2×);
- disaggregated prefill and decode (--pd 1:1, each pool one tp=4 replica, serve/disagg.py):
  both pools' runs and the KV transfers, CPU time beside the no-feature run's (issue 22: ≤ 2×);
- speculative decoding (a llama3.2-1b draft, k = 3) on the same workload, likewise (≤ 2×);
- the speed case under `--engine sglang`, `trtllm` and `trtllm-max-utilization` (CPU time:
  ≤ 0.5 s as with no profile);
- a `--find-gpus` search (llama3-70b, 20 requests/s, 2048/256, SLO ttft=1s,itl=50ms, serve's
  default 1000 requests) over every kind (serve/search_dims.py): tp, pp, replicas, the token
  budget (8192, 2048, 512) and the P:D split (ep and speculative k have one value here: a dense
  model, no draft): its CPU time (user + sys; issue 22: ≤ 5 s) and simulations.

    python benchmarks/bench_serve.py [naive-sample-iterations]
    python -m benchmarks.bench_serve find-gpus    # the --find-gpus case alone
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hardware import load_gpu
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import Workload
from shapecalc.plan.options import PlanOptions
from shapecalc.serve import disagg, sim
from shapecalc.serve import workload as W
from shapecalc.serve.search_dims import search_gpus

MODEL, GPU, TP = "llama3-70b", "h100-sxm", 4
N, PROMPT, OUTPUT = 10_000, 2048, 500


def simulate(dep: sim.Deployment, reqs: list[W.Request], fast: bool
             ) -> tuple[float, dict, float]:
    """Wall seconds, metrics, and CPU seconds (user + sys, this process) of the run (the engine
    made beforehand: its closed form and cost coefficients are a per-deployment setup)."""
    eng = sim.engine(dep)
    t0, c0 = time.perf_counter(), time.process_time()
    reps, seqs = sim.run(dep, reqs, eng=eng, trace=not fast)
    m = sim.metrics(dep, eng, reps, seqs, sim.SLO(), reqs, None)
    cpu = time.process_time() - c0
    for rep in reps:
        rep.schedule.clear()
    return time.perf_counter() - t0, m, cpu


def pipelined(dep: sim.Deployment, base: dict[float | None, float]) -> None:
    """tp=4 pp=2 on the speed case's workload: CPU seconds against the run with no feature."""
    pdep = sim.Deployment(dep.model, dep.wl.model_copy(update={"pp": 2}), dep.gpu, dep.opts)
    for label, rate in (("max load", None), ("3 req/s", 3.0)):
        reqs = W.generate(N, rate, W.Lengths("fixed", PROMPT), W.Lengths("fixed", OUTPUT), 0)
        wall, m, cpu = simulate(pdep, reqs, True)
        it = m["iterations"]
        print(f"{'tp=4 pp=2, ' + label:<34}{wall:>9.2f}{it:>12,}{it / wall:>12,.0f}"
              f"{N / wall:>10,.0f}{cpu:>9.3f}   (× {cpu / base[rate]:.2f} of pp=1's CPU; "
              f"{m['throughput']['output_tokens_per_s']:,.0f} output tokens/s)")


def expert_parallel(base: dict[float | None, float]) -> None:
    """qwen3-30b-a3b with EP and data-parallel attention on the speed case's workload: CPU
    seconds against the run with no feature."""
    from shapecalc.plan.ep import EPPlan

    model = load_preset("qwen3-30b-a3b")
    # the same model and rates without the feature: ep replicas of tp=1 behind the router (as
    # many schedulers, no all-to-all)
    plain: dict[tuple[int, float | None], float] = {}
    for ep in (8, 16):
        pdep = sim.Deployment(model, Workload(seq=1, tp=1, logits="last"), load_gpu(GPU),
                              PlanOptions(), replicas=ep)
        for rate in (None, 3.0 * ep):
            reqs = W.generate(N, rate, W.Lengths("fixed", PROMPT), W.Lengths("fixed", OUTPUT),
                              0)
            plain[ep, rate] = simulate(pdep, reqs, True)[2]
    for ep, mode in ((8, "normal"), (16, "low-latency")):
        edep = sim.Deployment(model, Workload(seq=1, tp=1, ep=ep, logits="last"), load_gpu(GPU),
                              PlanOptions(), ep_plan=EPPlan(mode))
        # at 3 requests/s an attention rank (3·ep in all): each scheduler's load as the base's
        for label, rate, key in (("max load", None, None), (f"{3 * ep} req/s", 3.0 * ep, 3.0)):
            reqs = W.generate(N, rate, W.Lengths("fixed", PROMPT), W.Lengths("fixed", OUTPUT),
                              0)
            wall, m, cpu = simulate(edep, reqs, True)
            it = m["iterations"]
            print(f"{f'qwen3-30b-a3b ep={ep}, ' + label:<34}{wall:>9.2f}{it:>12,}"
                  f"{it / wall:>12,.0f}{N / wall:>10,.0f}{cpu:>9.3f}   (× {cpu / base[key]:.2f}"
                  f" of the no-feature CPU, × {cpu / plain[ep, rate]:.2f} of {ep} replicas "
                  f"tp=1 without ep; {m['throughput']['output_tokens_per_s']:,.0f} output "
                  "tokens/s)")


def disaggregated(dep: sim.Deployment, base: dict[float | None, float]) -> None:
    """--pd 1:1 (a prefill and a decode replica, each tp=4) on the speed case's workload: CPU
    seconds of both pools' runs and the transfers against the run with no feature."""
    pd = disagg.PD(dep, dep)
    for label, rate in (("max load", None), ("3 req/s", 3.0)):
        reqs = W.generate(N, rate, W.Lengths("fixed", PROMPT), W.Lengths("fixed", OUTPUT), 0)
        eng = disagg.engines(pd)
        t0, c0 = time.perf_counter(), time.process_time()
        res = disagg.run(pd, reqs, eng)
        m = disagg.metrics(pd, res, sim.SLO(), reqs, rate)
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        it = m["iterations"] + m["disaggregation"]["prefill"]["iterations"]
        print(f"{'--pd 1:1 tp=4, ' + label:<34}{wall:>9.2f}{it:>12,}{it / wall:>12,.0f}"
              f"{N / wall:>10,.0f}{cpu:>9.3f}   (× {cpu / base[rate]:.2f} of the no-feature "
              f"CPU; {m['throughput']['output_tokens_per_s']:,.0f} output tokens/s)")


def speculative(dep: sim.Deployment, base: dict[float | None, float]) -> None:
    """Speculative decoding (a llama3.2-1b draft, k = 3, its default α) on the speed case's
    workload: CPU seconds against the run with no feature (issue 22: ≤ 2×)."""
    from shapecalc.serve.draft import model_draft
    from shapecalc.serve.spec import make_spec
    from shapecalc.serve.specsched import Speculation

    spec = make_spec("draft", 3, None, 0)
    assert spec is not None
    sp = Speculation(spec, model_draft(load_preset("llama3.2-1b"), dep.model, "draft-preset"))
    sdep = sim.Deployment(dep.model, dep.wl, dep.gpu, dep.opts, spec=sp)
    for label, rate in (("max load", None), ("3 req/s", 3.0)):
        reqs = W.generate(N, rate, W.Lengths("fixed", PROMPT), W.Lengths("fixed", OUTPUT), 0)
        wall, m, cpu = simulate(sdep, reqs, True)
        it = m["iterations"]
        print(f"{'spec k=3 (1B draft), ' + label:<34}{wall:>9.2f}{it:>12,}{it / wall:>12,.0f}"
              f"{N / wall:>10,.0f}{cpu:>9.3f}   (× {cpu / base[rate]:.2f} of the plain run's "
              f"CPU; {m['throughput']['output_tokens_per_s']:,.0f} output tokens/s)")


def engines_case(dep: sim.Deployment) -> None:
    """The speed case under each engine profile (serve/engines.py): prefill-first steps,
    no-evict admission and the terms under load (issue 23: ≤ 0.5 s CPU as with none)."""
    from dataclasses import replace

    from shapecalc.serve.engines import profile

    for name in ("sglang", "trtllm", "trtllm-max-utilization"):
        edep = replace(dep, profile=profile(name))
        for label, rate in (("max load", None), ("3 req/s", 3.0)):
            reqs = W.generate(N, rate, W.Lengths("fixed", PROMPT), W.Lengths("fixed", OUTPUT), 0)
            wall, m, cpu = simulate(edep, reqs, True)
            it = m["iterations"]
            print(f"{name + ', ' + label:<34}{wall:>9.2f}{it:>12,}"
                  f"{it / wall:>12,.0f}{N / wall:>10,.0f}{cpu:>9.3f}")


def find_gpus(dep: sim.Deployment) -> None:
    """--find-gpus over every kind (`python -m benchmarks.bench_serve find-gpus`: only this)."""
    reqs_rate, slo = 20.0, sim.parse_slo("ttft=1s,itl=50ms")
    t0, c0 = time.perf_counter(), time.process_time()
    # every kind (serve/search_dims.py): tp, pp, the budgets, replicas and the P:D split
    out = search_gpus(dep, reqs_rate, 1000, W.Lengths("fixed", PROMPT),
                      W.Lengths("fixed", 256), 0, None, slo, None, None, None, None, False,
                      False, None)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    plan = out["plan"]
    print(f"--find-gpus at {reqs_rate:g} req/s, 2048/256, ttft=1s,itl=50ms, 1000 requests: "
          f"{cpu:.2f} s CPU ({wall:.1f} s wall), {len(out['frontier'])} simulations; plan: "
          f"{plan and plan['gpus']} GPUs ({plan and plan['replicas']} × tp={plan and plan['tp']}"
          f" pp={plan and plan['pp']}, max_batched_tokens="
          f"{plan and plan['max_batched_tokens']}, pd={plan and plan.get('pd')})")


def main() -> None:
    model = load_preset(MODEL)
    wl = Workload(seq=1, tp=TP, logits="last")
    dep = sim.Deployment(model, wl, load_gpu(GPU), PlanOptions())
    if sys.argv[1:] == ["find-gpus"]:
        find_gpus(dep)
        return
    sample = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    print(f"{MODEL} tp={TP} on {GPU}, {N:,} requests of {PROMPT}-in/{OUTPUT}-out, one replica")
    print(f"{'case':<34}{'wall s':>9}{'iterations':>12}{'iter/s':>12}{'req/s':>10}"
          f"{'CPU s':>9}")
    base = {}
    for label, rate in (("max load (all at t=0)", None), ("3 requests/s", 3.0)):
        reqs = W.generate(N, rate, W.Lengths("fixed", PROMPT), W.Lengths("fixed", OUTPUT), 0)
        wall, m, cpu = simulate(dep, reqs, True)
        base[rate] = cpu
        it = m["iterations"]
        print(f"{'closed form, ' + label:<34}{wall:>9.2f}{it:>12,}{it / wall:>12,.0f}"
              f"{N / wall:>10,.0f}{cpu:>9.3f}")
        wall2, m2, _ = simulate(dep, reqs, False)
        print(f"{'  step by step':<34}{wall2:>9.2f}{m2['iterations']:>12,}"
              f"{m2['iterations'] / wall2:>12,.0f}{N / wall2:>10,.0f}   "
              f"(fast-forward ×{wall2 / wall:.1f})")
        # the naive per-iteration trace, on a sample of this run's decode mixes
        rng = random.Random(0)
        mixes = [(rng.randint(1, 256), rng.randint(PROMPT, PROMPT + OUTPUT))
                 for _ in range(sample)]
        t0 = time.perf_counter()
        for b, t in mixes:
            build_trace(model, Workload(batch=b, seq=t, phase="decode", tp=TP, logits="last"))
        per = (time.perf_counter() - t0) / sample
        print(f"{'  naive per-iteration trace':<34}{per * it:>9.0f}{it:>12,}{1 / per:>12,.0f}"
              f"{N / (per * it):>10,.2f}   (extrapolated from {sample} iterations; "
              f"closed form ×{per * it / wall:,.0f})")
    # every model in the scheduler: a sliding-window model, a chunked one and a hybrid, the same
    # workload (window frees, chunk wraps and state slots are events the fast-forward stops at)
    for name, tp in (("gpt-oss-120b", 4), ("llama4-scout", 4), ("nemotron-nano-9b-v2", 1)):
        wdep = sim.Deployment(load_preset(name), Workload(seq=1, tp=tp, logits="last"),
                              load_gpu(GPU), PlanOptions())
        for label, rate in (("max load", None), ("3 req/s", 3.0)):
            reqs = W.generate(N, rate, W.Lengths("fixed", PROMPT), W.Lengths("fixed", OUTPUT),
                              0)
            wall, m, cpu = simulate(wdep, reqs, True)
            it = m["iterations"]
            print(f"{name + ' tp=' + str(tp) + ', ' + label:<34}{wall:>9.2f}{it:>12,}"
                  f"{it / wall:>12,.0f}{N / wall:>10,.0f}{cpu:>9.3f}")
    pipelined(dep, base)
    expert_parallel(base)
    disaggregated(dep, base)
    speculative(dep, base)
    engines_case(dep)
    find_gpus(dep)


if __name__ == "__main__":
    main()
