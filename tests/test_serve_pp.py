"""serve's pipeline parallelism (serve/pipeline.py): a 2-stage schedule of 3 micro-batches by
hand, its steady state against the closed form, and the throughput pp adds at saturation."""

from __future__ import annotations

import pytest

from shapecalc.costs.scalar import SCALARS
from shapecalc.inputs.hardware import load_gpu
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import Workload
from shapecalc.plan.options import PlanOptions
from shapecalc.plan.perf import step_seconds
from shapecalc.serve import sim
from shapecalc.serve import workload as W
from shapecalc.serve.pipeline import bubble, round_terms, schedule

H100 = load_gpu("h100-sxm")


def test_two_stage_schedule_of_three_micro_batches_by_hand():
    """Stage 0 takes 2 s a micro-batch, stage 1 takes 1 s, a crossing 0.5 s:
    mb0 [0,2] → [2.5,3.5]; mb1 [2,4] → [4.5,5.5]; mb2 [4,6] → [6.5,7.5]. Span 7.5 s =
    (3 − 1)·2 + 2 + 0.5 + 1; busy 3·2 + 3·1 = 9 of 2·7.5 stage-seconds: bubble 0.4."""
    rows = schedule([2.0, 1.0], 3, 0.5)
    assert rows == [[(0.0, 2.0), (2.5, 3.5)], [(2.0, 4.0), (4.5, 5.5)],
                    [(4.0, 6.0), (6.5, 7.5)]]
    assert bubble(rows) == pytest.approx(0.4)


@pytest.mark.parametrize(("link", "period"), [(0.5, 4.0), (3.0, 6.0)])
def test_steady_state_round_is_the_closed_form(link, period):
    """Two micro-batches in flight, round after round: mb0's second round enters stage 0 at
    max(3.5, 4) = 4 (the fullest stage paces: 2·2 s), unless the round trip 2 + link + 1 is
    longer. round_terms gives the same period from one micro-batch's terms (3 s of compute
    through both stages, f = 2/3 of it on stage 0, plus the link)."""
    rows = schedule([2.0, 1.0], 2, link, rounds=20)
    assert rows[-2][-1][1] - rows[-4][-1][1] == pytest.approx(period)
    mb = (3.0, 0.0, link, 0.0)
    assert step_seconds(round_terms(mb, link, 2, 2 / 3), SCALARS) == pytest.approx(period)


def _run(pp, n=600):
    wl = Workload(seq=1, tp=4, pp=pp, logits="last")
    dep = sim.Deployment(load_preset("llama3-70b"), wl, H100, PlanOptions())
    eng = sim.engine(dep)
    reqs = W.generate(n, None, W.Lengths("fixed", 2048), W.Lengths("fixed", 256), 0)
    reps, seqs = sim.run(dep, reqs, eng=eng)
    return dep, eng, sim.metrics(dep, eng, reps, seqs, sim.SLO(), reqs, None)


def test_pp2_on_8_gpus_gives_at_least_1_5x_tp4_at_saturation():
    """llama3-70b on H100-SXM, every request at t = 0: tp=4 pp=2 on 8 GPUs keeps two
    micro-batches in flight, each stage reading half the weights, against tp=4 on 4."""
    d1, e1, m1 = _run(1)
    d2, e2, m2 = _run(2)
    assert (d1.gpus, d2.gpus) == (4, 8)
    ratio = m2["throughput"]["output_tokens_per_s"] / m1["throughput"]["output_tokens_per_s"]
    assert ratio >= 1.5, ratio
    # one sequence alone gains nothing: its round is the whole pipeline, plus one crossing of
    # its token's residual (D = 8192 values in bf16) over the link
    cross = 8192 * 2 / (H100.link_bandwidth * e2.cost.pp.link_efficiency)
    assert e2.cost.decode(1, 2048) == pytest.approx(e1.cost.decode(1, 2048) + cross, rel=1e-12)


def test_fast_forward_equals_stepping_with_a_pipeline():
    """A pure-decode stretch is affine in the growing cache at pp > 1 too: the fast-forward's
    iterations and times equal stepping one at a time."""
    wl = Workload(seq=1, tp=4, pp=2, logits="last")
    dep = sim.Deployment(load_preset("llama3-70b"), wl, H100, PlanOptions())
    reqs = W.generate(150, 3.0, W.Lengths("fixed", 1500), W.Lengths("fixed", 300), 0)
    runs = []
    for stepped in (False, True):
        reps, seqs = sim.run(dep, reqs, eng=sim.engine(dep), trace=stepped)
        runs.append(([d for r in reps for d in r.durs], [s.finish for s in seqs]))
    assert len(runs[0][0]) == len(runs[1][0])
    assert runs[0][1] == pytest.approx(runs[1][1], rel=1e-12)
