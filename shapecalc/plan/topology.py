"""Where a collective's ranks sit, and what its bytes cost there: the one home of collective times.

A GPU profile gives the topology (inputs/hardware.py): G GPUs a node, a scale-up domain of D GPUs
(NVLink/NVSwitch, xGMI; D = G on HGX, 72 on GB200 NVL72) at `link_bandwidth` per GPU and
direction, and a scale-out network between domains at `scale_out_bandwidth` per GPU. Ranks are
laid out as Megatron and the engines order them: a group of g ranks with stride r occupies GPUs
o, o + r, …, o + (g−1)·r, so it stays in one domain when g·r ≤ D, and otherwise spans
n = g·r / D domains with q = g / n ranks in each.

Bytes below are B, each rank's whole buffer (its full tensor for an all-reduce, its full
gathered output for an all-gather / its full input for a reduce-scatter, everything it sends for
an all-to-all); bw is bytes/s per GPU per direction, × efficiency. Inside one domain a ring:
  all-reduce         2(g−1)/g · B / bw_up
  all-gather, reduce-scatter  (g−1)/g · B / bw_up
Across n domains hierarchically (NCCL's tree/ring over nodes, the textbook 2-level form):
  all-reduce = reduce-scatter in the domain, all-reduce of B/q across domains, all-gather in it:
               2(q−1)/q · B / bw_up + 2(n−1)/n · (B/q) / bw_out
  all-gather / reduce-scatter: half of each term.
  all-to-all: each rank sends B/g to every rank; (q−1)·B/g stays in its domain, (g−q)·B/g
              crosses; both links run at once: max((q−1)·B/g / bw_up, (g−q)·B/g / bw_out).
  send (a pipeline boundary, a KV transfer): B / bw of the link between the two GPUs.
Each adds the latency of the slowest link it crosses, once a step of the algorithm
(ring: 2(g−1) or g−1 steps; hierarchical: the inner steps at the scale-up latency plus the outer
ones at the scale-out latency; all-to-all and send: one).
"""

from __future__ import annotations

from typing import Any

from ..inputs.hardware import GPU
from ..lean import dataclass
from ..model.config import ShapecalcError


@dataclass(frozen=True)
class Topology:
    gpus_per_node: int
    domain: int  # D: GPUs one scale-up link joins
    up_bw: float  # bytes/s per GPU per direction, × efficiency
    out_bw: float
    up_lat: float  # seconds a message takes to start
    out_lat: float


def topology(gpu: GPU, efficiency: float = 1.0) -> Topology:
    """The profile's topology, its bandwidths × `efficiency` (the fraction collectives reach)."""
    return Topology(gpu.gpus_per_node, gpu.scale_up_domain or gpu.gpus_per_node,
                    gpu.link_bandwidth * efficiency, gpu.scale_out_bandwidth * efficiency,
                    gpu.scale_up_latency_s, gpu.scale_out_latency_s)


def span(topo: Topology, g: int, r: int = 1) -> tuple[int, int]:
    """(q, n): ranks in each domain and domains a group of g ranks with stride r spans."""
    if g * r <= topo.domain:
        return g, 1
    # a stride of a domain or more puts each rank in its own domain (r a multiple of D)
    if (g * r) % topo.domain or (r % topo.domain if r >= topo.domain else topo.domain % r):
        raise ShapecalcError("gpu.scale_up_domain", f"a group of {g} ranks {r} apart does not "
                             f"split evenly over domains of {topo.domain} GPUs")
    if r >= topo.domain:  # each rank in a domain of its own
        return 1, g
    n = g * r // topo.domain
    return g // n, n


def check_nodes(topo: Topology, gpus: int, field: str) -> None:
    """A layout of more GPUs than a node fills whole nodes: its count is a multiple of the node."""
    if gpus > topo.gpus_per_node and gpus % topo.gpus_per_node:
        raise ShapecalcError(field, f"{gpus} GPUs span nodes of {topo.gpus_per_node} but do not "
                             f"fill them: use a multiple of {topo.gpus_per_node}")


def all_reduce_s(topo: Topology, nbytes: float, g: int, r: int = 1) -> float:
    return _ring(topo, nbytes, g, r, 2)


def all_gather_s(topo: Topology, nbytes: float, g: int, r: int = 1) -> float:
    """Also a reduce-scatter's time: the same bytes the other way."""
    return _ring(topo, nbytes, g, r, 1)


def _ring(topo: Topology, nbytes: float, g: int, r: int, passes: int) -> float:
    if g <= 1:
        return 0.0
    q, n = span(topo, g, r)
    inner = passes * (q - 1) * (nbytes / q / topo.up_bw + topo.up_lat)
    if n == 1:
        return inner
    return inner + passes * (n - 1) * (nbytes / q / n / topo.out_bw + topo.out_lat)


def all_to_all_s(topo: Topology, nbytes: float, g: int, r: int = 1) -> float:
    """Each of g ranks sends nbytes in all, nbytes/g to every rank (itself included)."""
    if g <= 1:
        return 0.0
    q, n = span(topo, g, r)
    inner = (q - 1) * nbytes / g / topo.up_bw
    if n == 1:
        return inner + topo.up_lat
    return max(inner, (g - q) * nbytes / g / topo.out_bw) + topo.out_lat


def send_s(topo: Topology, nbytes: float, across: bool) -> float:
    """One GPU to another: over the scale-up link, or `across` domains over the network."""
    if across:
        return nbytes / topo.out_bw + topo.out_lat
    return nbytes / topo.up_bw + topo.up_lat


# DeepEP's two kernel families (deepseek-ai/DeepEP, docs/legacy.md: "Normal kernels with NVLink
# and RDMA forwarding", for training and inference prefilling; "Low-latency kernels with pure
# RDMA", for inference decoding). SGLang picks them with --deepep-mode normal|low_latency.
EP_MODES = ("normal", "low-latency")


def ep_exchange_s(topo: Topology, tokens: float, k: int, row: float, g: int,
                  mode: str = "normal") -> float:
    """One dispatch (or combine) over g expert-parallel ranks: a rank sends each of its `tokens`
    tokens to its k experts' ranks (uniform over the g), `row` bytes a copy: tokens·k·row bytes.
    low-latency: every copy off the rank goes through the NIC, (g−1)/g of them, plus one network
    latency. normal: inside one domain the all-to-all above; across n domains DeepEP sends a
    token once to each other domain its experts sit in, (n−1)·(1 − (1 − 1/n)^k) of them on
    average, over the network, and forwards it there over the scale-up link to the (q−1)/q of
    its k copies on other GPUs of a domain; both links at once, plus one network latency."""
    if mode not in EP_MODES:
        raise ShapecalcError("ep-mode", f"{mode!r} is not one of {', '.join(EP_MODES)}")
    if g <= 1 or tokens <= 0:
        return 0.0
    copies = tokens * k * row
    if mode == "low-latency":
        return (g - 1) * copies / g / topo.out_bw + topo.out_lat
    q, n = span(topo, g)
    if n == 1:
        return all_to_all_s(topo, copies, g)
    remote = tokens * row * (n - 1) * (1 - (1 - 1 / n) ** k)
    return max(remote / topo.out_bw, (q - 1) * copies / q / topo.up_bw) + topo.out_lat


def ring_bandwidth(topo: Topology, g: int) -> tuple[float, float]:
    """(bytes/s, extra s) a ring all-reduce of g contiguous ranks reaches on its per-rank
    traffic 2(g−1)/g·B, and the latency its steps across domains add to each all-reduce: inside
    one domain (up_bw, 0); across n domains the hierarchical time above over the same bytes."""
    q, n = span(topo, g) if g > 1 else (1, 1)
    if n == 1:
        return topo.up_bw, 0.0
    per_byte = (2 * (q - 1) / q / topo.up_bw + 2 * (n - 1) / n / q / topo.out_bw) / (
        2 * (g - 1) / g)
    return 1.0 / per_byte, 2 * (n - 1) * topo.out_lat


def boundary_bandwidth(topo: Topology, tp: int, stages: int) -> float:
    """bytes/s of a pipeline's boundary sends, stage i on GPUs [i·tp, (i+1)·tp): the s − 1
    boundaries' bytes (equal at each) over the link each crosses, the network where a boundary
    ends a domain."""
    if stages <= 1 or tp * stages <= topo.domain:
        return topo.up_bw
    across = sum(1 for i in range(1, stages) if (i * tp) % topo.domain == 0 or tp > topo.domain)
    per_byte = (across / topo.out_bw + (stages - 1 - across) / topo.up_bw) / (stages - 1)
    return 1.0 / per_byte


def layout_fills_nodes(gpu: GPU, wl: Any) -> None:
    """A deployment's GPUs (max(tp, ep)·pp; tp innermost) fill whole nodes once they span more
    than one: refused in one line naming the degree that takes it past a node."""
    topo = topology(gpu)
    width = max(wl.tp, wl.ep)
    flag = ("tp" if wl.tp >= wl.ep else "ep") if width > topo.gpus_per_node else "pp"
    check_nodes(topo, width * wl.pp, flag)
    if width * wl.pp > topo.gpus_per_node and width < topo.gpus_per_node and \
            topo.gpus_per_node % width:
        raise ShapecalcError(flag, f"groups of {width} GPUs do not tile nodes of "
                             f"{topo.gpus_per_node}: use a divisor of {topo.gpus_per_node}")


def link_rates(topo: Topology, tp: Any, stages: Any = 1) -> tuple[Any, Any, Any, Any]:
    """(ring bytes/s, ring latency added, boundary bytes/s, inside one domain) of steps at tp and
    `stages`: plain numbers, or NumPy arrays a point each (a sweep's rows)."""
    if not hasattr(tp, "shape") and not hasattr(stages, "shape"):
        ring, lat = ring_bandwidth(topo, int(tp))
        bound = boundary_bandwidth(topo, int(tp), int(stages))
        return ring, lat, bound, ring == bound == topo.up_bw and lat == 0.0
    import numpy as np  # a sweep's arrays: NumPy is loaded already

    tps, ss = (np.asarray(x, dtype=np.int64)
               for x in np.broadcast_arrays(np.asarray(tp), np.asarray(stages)))
    # each distinct (tp, stages) pair once (a Python loop over the rows cost a sweep ~10%),
    # found by counting where the pairs are small numbers (a sweep's: no sort of the rows)
    wide = int(ss.max(initial=0)) + 1
    keys = tps * wide + ss
    dense = keys.max(initial=0) < 1 << 20
    present = np.flatnonzero(np.bincount(keys.ravel())) if dense else np.unique(keys)
    rates = np.array([(*ring_bandwidth(topo, int(k // wide)),
                       boundary_bandwidth(topo, int(k // wide), int(k % wide)))
                      for k in present.tolist()]).reshape(-1, 3)
    inside = (rates[:, 0] == topo.up_bw) & (rates[:, 2] == topo.up_bw) & (rates[:, 1] == 0.0)
    if inside.all():  # every row in one domain: plain numbers, as before the topology
        return topo.up_bw, 0.0, topo.up_bw, True
    cols = np.column_stack([rates, inside])
    if dense:  # a row a key, read at each key
        table, at = np.zeros((int(present[-1]) + 1, 4)), keys
        table[present] = cols
    else:  # a row a pair, found by search
        table, at = cols, np.searchsorted(present, keys)
    ring_a, lat_a, bound_a, inside_a = (table[:, j].take(at) for j in range(4))
    inside = inside_a.astype(bool)
    return ring_a, lat_a, bound_a, inside
