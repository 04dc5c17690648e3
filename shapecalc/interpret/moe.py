"""The NumPy interpreter's Mixture-of-Experts operations: real routing (a router, its scores,
the top k), and each expert run on exactly the tokens routed to it, so the FLOPs measured are
the routed work whatever the routing. NumericOps (numeric.py) calls these with itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..model.forward import ACT, clamped
from .storage import measure
from .weights import Shard

if TYPE_CHECKING:
    from .numeric_base import NumericBase


class Routing(NamedTuple):
    """The k experts each token goes to ([B,T,k] ids) and their routing weights."""

    weights: np.ndarray
    ids: np.ndarray


def route(self: NumericBase, logits: np.ndarray, role: str, name: str, k: Any,
          by_id: bool = False) -> Routing:
    m = self.m
    kk = m.experts_per_token or 0
    z = logits[0]  # the router is replicated: every rank has the same logits
    n = z.size
    if by_id:  # hash routing: a fixed table of k distinct experts per token id
        ids = tid2eid(self.ids, kk, m.n_experts or 0)
        scores, ew = _scores(m.router_scoring, z)
        w = np.take_along_axis(scores, ids, axis=-1)
        if m.norm_topk_prob:
            w = w / w.sum(axis=-1, keepdims=True)
            ew += 2 * w.size
        self._rec(role, f"{name} ({m.router_scoring}, by token id)", "route", w[None], ew=ew,
                  dtype="fp32")
        self.routed.append(ids)
        return Routing(w, ids)
    if m.router_scoring == "topk_sigmoid":  # Llama 4: top k of the logits, sigmoid of those k
        ids = np.argsort(-z, axis=-1, kind="stable")[..., :kk]
        w = 1 / (1 + np.exp(-np.take_along_axis(z, ids, axis=-1)))
        self._rec(role, f"{name} (top-k, sigmoid)", "route", w[None], ew=n + 4 * w.size,
                  dtype="fp32")
        self.routed.append(ids)
        return Routing(w, ids)
    scores, ew = _scores(m.router_scoring, z)
    params = 0
    choice = scores
    if m.routing_bias:  # AFMoE: scores + a learned bias of E choose; the scores weigh
        bias = self.w.get((self._layer, role, "bias"), (z.shape[-1],))
        choice, ew, params = scores + bias, ew + n, bias.size
    if m.router_hidden is not None:  # ZAYA's balancing biases (a buffer): −1 on the skip
        choice = scores + np.eye(z.shape[-1])[-1] * -1.0
        ew += n
    ids = np.argsort(-choice, axis=-1, kind="stable")[..., :kk]  # top-k: one pass a score
    w = np.take_along_axis(scores, ids, axis=-1)
    ew += n
    if m.norm_topk_prob:
        w = w / w.sum(axis=-1, keepdims=True)
        ew += 2 * w.size
    self._rec(role, f"{name} ({m.router_scoring}, top-k)", "route", w[None], ew=ew,
              dtype="fp32", params=params)
    self.routed.append(ids)
    return Routing(w, ids)

def _scores(scoring: str, z: np.ndarray) -> tuple[np.ndarray, int]:
    """The router's scores of logits z and their elementwise FLOPs (passes × elements)."""
    if scoring == "softmax":
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True), 5 * z.size
    if scoring == "sqrtsoftplus":  # DeepSeek-V4: √log(1 + eˣ)
        return np.sqrt(np.logaddexp(0, z)), 4 * z.size
    return 1 / (1 + np.exp(-z)), 4 * z.size


def tid2eid(ids: np.ndarray, k: int, E: int) -> np.ndarray:
    """[B,T] token ids → [B,T,k] distinct experts: the executor's stand-in for the checkpoint's
    frozen table (any table of k distinct experts per id costs the same)."""
    return (ids[..., None] * 7919 + np.arange(k)) % E


def experts(self: NumericBase, h: np.ndarray, routing: Routing, D: Any, E: Any, k: Any, Dffe: Any
            ) -> np.ndarray:
    m = self.m
    x = h[0]  # [B,T,D]: the FFN norm's output, the same on every rank
    B, T, kk = routing.ids.shape
    gated = m.gated
    width = m.dff_expert // self.p
    bias = m.expert_bias
    E = m.n_experts or 0
    ep = self.wl.ep  # expert parallelism (with p = 1): expert e lives on rank e // (E/ep)
    if ep > 1:
        _dispatch(self, routing, x, E, ep)

    def run(role: str, name: str, inputs: np.ndarray | None, d_in: int, d_out: int,
            row: bool) -> np.ndarray:
        # every expert on the tokens routed to it; out[r, b, t, slot] is that pair's result
        out = np.zeros((self.p, B, T, kk, d_out if row else d_out // self.p), dtype=self.dt)
        flops = 0
        for e in range(m.n_experts or 0):
            b, t, slot = np.nonzero(routing.ids == e)
            sh = _expert_shard(self, role, e, d_in, d_out, row)
            if not b.size:
                continue
            xin = x[None, b, t] if inputs is None else inputs[:, b, t, slot]
            if self.w.resident:
                y, f = self._mm(xin, self.w.stacked(sh))
            else:  # made chunk by chunk, never whole
                y, f, _ = self._streamed(xin, [sh], False)
            flops += f
            if bias:
                full = self.w.get((self._layer, role, e, "bias"), (d_out,))
                y[0 if row else slice(None)] += full if row else full.reshape(self.p, 1, -1)
            out[:, b, t, slot] = y
        ew = self._el(out) if bias else 0
        # E experts' rank-0 operands (sizes of the shards this rank multiplies by)
        params = (m.n_experts or 0) * sh.d_in * sh.width
        if bias:
            params += (m.n_experts or 0) * (d_out if row else d_out // self.p)
        return self._rec(role, name, "linear", out, flops=flops, ew=ew, params=params,
                         operands=((B, T, kk, d_in // self.p if row else d_in),
                                   (m.n_experts or 0, d_in // self.p if row else d_in,
                                    d_out if row else d_out // self.p)))

    act = ACT[m.ffn]
    D_ = m.d_model
    w = routing.weights.astype(self.dt)
    scaled = None
    if m.routing_on_input:  # Llama 4: each pair's input × its weight; the outputs are summed
        scaled = self._rec("moe.experts.in", "experts: input × routing weight", "mul",
                           (x[:, :, None, :] * w[..., None])[None],
                           ew=B * T * kk * D_)
        w = np.ones_like(w)
    if gated:
        g = run("moe.experts.gate", "experts: gate", scaled, D_, m.dff_expert, False)
        u = run("moe.experts.up", "experts: up", scaled, D_, m.dff_expert, False)
        if m.swiglu_limit is not None:
            g, u = clamped(self, m, "moe.experts", g, u)
        u = self.mul(self.activation(g, "moe.experts.act", "experts: activation", act), u,
                     "moe.experts.mul", "experts: gate ⊙ up")
    else:
        u = run("moe.experts.up", "experts: up", scaled, D_, m.dff_expert, False)
        u = self.activation(u, "moe.experts.act", "experts: activation", act)
    assert u.shape[-1] == width
    y = run("moe.experts.down", "experts: down", u, m.dff_expert, D_, True)
    if ep > 1:  # combine: each rank's partial sum over its own experts' pairs, then summed
        owner = routing.ids // (E // ep)
        parts = [np.einsum("rbtkd,btk->rbtd", y, np.where(owner == r, w, 0)) for r in range(ep)]
        out = np.sum(parts, axis=0)
    else:
        out = np.einsum("rbtkd,btk->rbtd", y, w)
    if m.routing_on_input:  # a plain sum of the k outputs
        return self._rec("moe.combine", "combine (sum)", "combine", out, ew=self._el(y))
    return self._rec("moe.combine", "combine (weighted sum)", "combine", out,
                     ew=2 * self._el(y))

def _dispatch(self: NumericBase, routing: Routing, x: np.ndarray, E: int, ep: int) -> None:
    """What expert parallelism moves in one MoE layer, measured on the arrays: each sequence's
    tokens live on replica b mod ep (data-parallel attention); every (token, expert) pair whose
    expert lives elsewhere is sent there (dispatch) and its output sent back (combine)."""
    b = np.arange(routing.ids.shape[0])[:, None, None]
    owner = routing.ids // (E // ep)
    sent = x[np.nonzero(owner != b % ep)[:2]]  # the token rows each off-rank pair moves
    every = np.broadcast_to(x[:, :, None, :], (*routing.ids.shape, x.shape[-1]))
    self.ep_traffic.append({
        "pairs": int(routing.ids.size), "off_rank": int(sent.shape[0]),
        "bytes_every_pair": 2 * measure(every, self.wl.act),
        "bytes_off_rank": 2 * measure(sent, self.wl.act),
    })


def _expert_shard(self: NumericBase, role: str, e: int, d_in: int, d_out: int, row: bool
                  ) -> Shard:
    p = self.p
    if row:  # down: rows split, rank r holds its Dff_e slice
        return Shard((self._layer, role, e), (d_in, d_out), "row", p, d_in // p, d_out)
    return Shard((self._layer, role, e), (d_in, d_out), "column", p, d_in, d_out // p)
