"""fit and serve price tp all-reduces and pipeline sends by where their ranks sit
(plan/topology.py: ring_bandwidth, boundary_bandwidth), worked by hand."""

from __future__ import annotations

import json

import pytest

from shapecalc.inputs.hardware import load_gpu
from shapecalc.plan.perf_defaults import PARAMS
from shapecalc.plan.topology import boundary_bandwidth, link_rates, ring_bandwidth, topology

H100 = topology(load_gpu("H100-SXM"))  # 8 a node, 450 GB/s NVLink, 50 GB/s a GPU across


def test_ring_bandwidth_inside_and_across_domains_by_hand():
    assert ring_bandwidth(H100, 8) == (450e9, 0.0)  # one node: the ring, as before topology
    # 16 ranks, 2 nodes of 8: 2·7/8 B at 450 GB/s + 2·(1/2)·(B/8) at 50 GB/s, over the ring's
    # 2·15/16 B, and 2·(2 − 1) network steps of 5 µs an all-reduce
    per_byte = (2 * 7 / 8 / 450e9 + 2 * 1 / 2 / 8 / 50e9) / (2 * 15 / 16)
    bw, lat = ring_bandwidth(H100, 16)
    assert bw == pytest.approx(1 / per_byte) and lat == pytest.approx(10e-6)


def test_boundary_bandwidth_by_hand():
    assert boundary_bandwidth(H100, 4, 2) == 450e9  # 8 GPUs: one node
    # tp = 4, 4 stages: boundaries after GPUs 4, 8, 12: the one at 8 ends node 0
    per_byte = (1 / 50e9 + 2 / 450e9) / 3
    assert boundary_bandwidth(H100, 4, 4) == pytest.approx(1 / per_byte)
    assert boundary_bandwidth(H100, 8, 2) == pytest.approx(50e9)  # each stage a node


def _decode_comm(cli, *extra: str) -> tuple[float, list[str]]:
    doc = json.loads(cli("fit", "--preset", "llama3-70b", "--gpu", "H100-SXM", "--tp", "16",
                         "--batch", "8", "--seq", "1024", "--json", *extra).out)
    return doc["expected"]["decode_terms_s"]["communication"], doc["notes"]


def test_fit_prices_tp16_across_two_nodes(cli):
    """llama3-70b at tp = 16, B = 8 decoding on 1024 tokens: 160 all-reduces (2 a layer × 80)
    of 39,321,600 ring bytes a rank in all (trace's ring_bytes_per_rank_total). Across 2 nodes
    each adds 10 µs of network steps and its bytes move at the hierarchy's rate; a 16-GPU
    NVLink domain (--set-gpu scale_up_domain=16) keeps the ring at 450 GB/s."""
    e = PARAMS["link_efficiency"]
    two, notes = _decode_comm(cli)
    one, _ = _decode_comm(cli, "--set-gpu", "scale_up_domain=16")
    per_byte = (2 * 7 / 8 / (450e9 * e) + 2 * 1 / 2 / 8 / (50e9 * e)) / (2 * 15 / 16)
    assert two - one == pytest.approx(160 * 10e-6 + 39_321_600 * (per_byte - 1 / (450e9 * e)))
    assert any("tp=16 spans 2 scale-up domains" in n for n in notes)


def test_fit_refuses_a_layout_that_does_not_fill_nodes(cli):
    r = cli("fit", "--preset", "llama3-70b", "--gpu", "H100-SXM", "--tp", "4", "--pp", "3")
    assert r.code == 2
    assert r.err.strip().splitlines() == [
        "error: pp: 12 GPUs span nodes of 8 but do not fill them: use a multiple of 8"]


def test_link_rates_take_a_sweeps_rows_each_by_its_own_layout():
    import numpy as np

    ring, lat, bound, inside = link_rates(H100, np.array([8, 16, 4]), np.array([1, 1, 4]))
    assert list(inside) == [True, False, False]
    assert ring[1] == ring_bandwidth(H100, 16)[0] and lat[1] == pytest.approx(10e-6)
    assert bound[2] == boundary_bandwidth(H100, 4, 4) and ring[2] == 450e9
    assert link_rates(H100, 8, 1) == (450e9, 0.0, 450e9, True)
    assert link_rates(H100, np.array([2, 8]), np.array([4, 1])) == (450e9, 0.0, 450e9, True)
    # each row its own layout whether the pairs are found by counting or (large) by sorting
    for stages in ([1, 4, 2, 4, 1], [1, 4, 2, 4, 1 << 18]):
        tps = np.array([8, 4, 16, 4, 1])
        got = link_rates(H100, tps, np.array(stages))
        for i, (t, s) in enumerate(zip(tps.tolist(), stages, strict=True)):
            ring_i, lat_i = ring_bandwidth(H100, t)
            assert (got[0][i], got[1][i], got[2][i]) == (
                ring_i, lat_i, boundary_bandwidth(H100, t, s)), (t, s)


@pytest.mark.slow
def test_a_sweep_prices_each_row_by_its_own_layout(cli):
    """tp = 8 (one node) and tp = 16 (two) in one sweep: each row's expected times are fit's."""
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(cli(
        "sweep", "llama3-70b", "--gpu", "H100-SXM", "--tp", "8,16", "--batch", "8", "--seq",
        "1024", "--format", "csv").out)))
    for row in rows:
        fit = json.loads(cli("fit", "--preset", "llama3-70b", "--gpu", "H100-SXM", "--tp",
                             row["tp"], "--batch", "8", "--seq", "1024", "--json").out)
        assert float(row["expected_decode_s_per_token"]) == fit["expected"]["decode_s_per_token"]
        assert float(row["expected_ttft_s"]) == fit["expected"]["ttft_s"]
    assert [r["tp"] for r in rows] == ["8", "16"]
