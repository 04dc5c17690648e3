"""Vector-Jacobian rules of the NumPy executor's Mixture-of-Experts operations (interpret/moe.py):
the routing weights' gradient back to the router logits, and the routed experts' FFNs per expert
on the pairs routed to it."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..model.forward import ACT
from .vjp import Ctx, _act, _act_grad, rule
from .weights import Shard


@rule("route")
def route(c: Ctx, dys: list[Any]) -> list[Any]:
    m, dw = c.m, dys[0]
    z, ids = c.s["z"], c.s["ids"]  # [B,T,E] logits, [B,T,k] chosen
    dz = np.zeros_like(z)
    if m.router_scoring == "topk_sigmoid":
        w = 1 / (1 + np.exp(-np.take_along_axis(z, ids, axis=-1)))
        np.put_along_axis(dz, ids, dw * w * (1 - w), axis=-1)
        return [dz[None]]
    if m.router_scoring == "softmax":
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        s = e / e.sum(axis=-1, keepdims=True)
    else:
        s = 1 / (1 + np.exp(-z))
    w = np.take_along_axis(s, ids, axis=-1)
    if m.norm_topk_prob:  # w / Σ w
        tot = w.sum(axis=-1, keepdims=True)
        dw = (dw - (dw * w / tot).sum(axis=-1, keepdims=True)) / tot
    ds = np.zeros_like(z)
    np.put_along_axis(ds, ids, dw, axis=-1)
    if m.router_scoring == "softmax":
        dz = s * (ds - (ds * s).sum(axis=-1, keepdims=True))
    else:
        dz = ds * s * (1 - s)
    return [dz[None]]


@rule("experts")
def experts(c: Ctx, dys: list[Any]) -> list[Any]:
    """The routed FFNs: combine, down, activation (and gate ⊙ up), gate and up, per expert on
    the pairs routed to it; the routing weights' gradient goes back to the router."""
    m, s, dout = c.m, c.s, dys[0]
    x, ids, w = s["x"], s["ids"], s["w"]  # [B,T,D], [B,T,k], [B,T,k]
    out = c.ops.stages_out
    layer, p = c.e.layer, c.p
    B, T, kk = ids.shape
    D, F = m.d_model, m.dff_expert
    y = out[c.stage("moe.experts.down")]  # [p,B,T,k,D]
    dw = np.zeros_like(w)
    if m.routing_on_input:  # a plain sum: every slot's output takes dout
        dY = np.broadcast_to(dout[:, :, :, None, :], y.shape)
    else:
        dY = dout[:, :, :, None, :] * w[..., None]
        dw += np.einsum("rbtd,rbtkd->btk", dout, y)
    gated = m.gated
    act = ACT[m.ffn]
    u_in = out[c.stage("moe.experts.up")]  # pre-activation (plain) or up (gated)
    g_in = out[c.stage("moe.experts.gate")] if gated else None
    scaled = out[c.stage("moe.experts.in")][0] if m.routing_on_input else None  # [B,T,k,D]
    dxin = np.zeros((B, T, kk, D))  # the input of each pair (x, or x × weight)
    dU = np.zeros((p, B, T, kk, F // p))
    for e in range(m.n_experts or 0):
        b, t, slot = np.nonzero(ids == e)
        if not b.size:
            continue
        sh = Shard((layer, "moe.experts.down", e), (F, D), "row", p, F // p, D)
        Wd = c.w.stacked(sh)
        a = s["a"][:, b, t, slot]  # what down multiplied: act(g)·u, or act(u)
        dyp = np.ascontiguousarray(dY[:, b, t, slot])
        dU[:, b, t, slot] = c.mm(dyp, Wd.transpose(0, 2, 1), "dx", "moe.experts.down")
        c.grads.shard(sh, c.mm(a.transpose(0, 2, 1), dyp, "dw", "moe.experts.down"))
        if m.expert_bias:
            c.grads.bias((layer, "moe.experts.down", e, "bias"), sh, dyp.sum(axis=1), True)
    # through the activation (and gate ⊙ up)
    if gated:
        assert g_in is not None
        ga = _act(g_in, act)
        dG = _act_grad(g_in, act, dU * u_in)
        dUp = dU * ga
        grads = [("moe.experts.gate", dG), ("moe.experts.up", dUp)]
    else:
        grads = [("moe.experts.up", _act_grad(u_in, act, dU))]
    for e in range(m.n_experts or 0):
        b, t, slot = np.nonzero(ids == e)
        if not b.size:
            continue
        xin = (x[b, t] if scaled is None else scaled[b, t, slot])[None]  # [1,n,D]
        for role, dZ in grads:
            sh = Shard((layer, role, e), (D, F), "column", p, D, F // p)
            Wz = c.w.stacked(sh)
            dz = np.ascontiguousarray(dZ[:, b, t, slot])
            dxin[b, t, slot] += c.mm(dz, Wz.transpose(0, 2, 1), "dx", role).sum(axis=0)
            c.grads.shard(sh, c.mm(xin.transpose(0, 2, 1), dz, "dw", role))
            if m.expert_bias:
                c.grads.bias((layer, role, e, "bias"), sh, dz.sum(axis=1), False)
    if scaled is not None:  # x × w per pair
        dw += np.einsum("btkd,btd->btk", dxin, x)
        dx = np.einsum("btkd,btk->btd", dxin, w)
    else:
        dx = dxin.sum(axis=2)
    return [dx[None], dw]


