"""Collectives priced by where their ranks sit (plan/topology.py), worked by hand."""

import pytest

from shapecalc.inputs.hardware import load_gpu
from shapecalc.model.config import ShapecalcError
from shapecalc.plan.topology import (
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
    check_nodes,
    send_s,
    span,
    topology,
)

H100 = topology(load_gpu("H100-SXM"))  # 8 a node, 450 GB/s NVLink, 50 GB/s a GPU between nodes


def test_an_all_to_all_across_two_nodes_by_hand():
    # 16 ranks, 8 a node: each sends 16 GB in all, 1 GB to every rank. 7 GB stay in the node
    # (7e9 / 450e9 = 15.56 ms), 8 GB cross (8e9 / 50e9 = 160 ms): the network sets the time,
    # plus one scale-out latency (5 µs).
    assert span(H100, 16) == (8, 2)
    assert all_to_all_s(H100, 16e9, 16) == pytest.approx(0.160005, rel=1e-12)
    # 8 ranks in one node, 8 GB each: the 7 GB to the other 7 ranks over NVLink only
    assert all_to_all_s(H100, 8e9, 8) == pytest.approx(7e9 / 450e9 + 2e-6, rel=1e-12)


def test_a_ring_inside_a_node_and_a_hierarchy_across_nodes():
    # 8 ranks in a node, 1 GB each: 2·7/8 GB at 450 GB/s plus 14 steps of 2 µs
    assert all_reduce_s(H100, 1e9, 8) == pytest.approx(2 * 7 / 8 * 1e9 / 450e9 + 14 * 2e-6)
    # 16 ranks over 2 nodes: the node's ring as above, then 2·1 steps of (1 GB / 8) / 2 at 50 GB/s
    two = 2 * 7 / 8 * 1e9 / 450e9 + 14 * 2e-6 + 2 * (1e9 / 8 / 2 / 50e9 + 5e-6)
    assert all_reduce_s(H100, 1e9, 16) == pytest.approx(two)
    assert all_gather_s(H100, 1e9, 8) == pytest.approx(7 / 8 * 1e9 / 450e9 + 7 * 2e-6)
    assert all_reduce_s(H100, 1e9, 1) == 0.0


def test_a_strided_group_spans_nodes_by_its_stride():
    # a dp group of 4 with tp = 8 inside it: every rank in its own node
    assert span(H100, 4, 8) == (1, 4)
    assert all_reduce_s(H100, 1e9, 4, 8) == pytest.approx(2 * 3 * (1e9 / 4 / 50e9 + 5e-6))
    with pytest.raises(ShapecalcError, match="split evenly"):
        span(H100, 3, 4)  # 12 GPUs do not fill whole nodes of 8


def test_an_nvl72_domain_keeps_72_gpus_on_the_scale_up_link():
    nvl = topology(load_gpu("B200", sets=["scale_up_domain=72", "gpus_per_node=4"]))
    assert span(nvl, 64) == (64, 1)
    assert send_s(nvl, 1e9, across=False) == pytest.approx(1e9 / nvl.up_bw + nvl.up_lat)


def test_a_layout_across_nodes_fills_whole_nodes():
    check_nodes(H100, 16, "gpus")
    check_nodes(H100, 4, "gpus")
    with pytest.raises(ShapecalcError, match="gpus: 12 GPUs span nodes of 8"):
        check_nodes(H100, 12, "gpus")


def test_topology_fields_are_checked_and_overridable():
    assert load_gpu("H100-SXM", sets=["scale_out_bandwidth=25GB/s"]).scale_out_bandwidth == 25e9
    with pytest.raises(ShapecalcError, match="scale_up_domain"):
        load_gpu("H100-SXM", sets=["scale_up_domain=12"])
    with pytest.raises(ShapecalcError, match="whole number"):
        load_gpu("H100-SXM", sets=["gpus_per_node=7.5"])
    with pytest.raises(ShapecalcError, match="not a unit"):
        load_gpu("H100-SXM", sets=["scale_out_latency_s=5GB/s"])
