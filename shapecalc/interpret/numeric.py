"""The NumPy interpreter of forward(): real arrays, seeded weights, KV caches, TP and PP simulated.

Every tensor carries a leading rank axis: [p, …] for values that differ between tensor-parallel
ranks, [1, …] for values every rank holds (broadcast). So one np.matmul runs all ranks on their
shards, and `allreduce` is a sum over that axis. Each operation records a Stage measured from the
arrays themselves: the shape of one rank's array, FLOPs from the operand shapes of every matmul it
ran (2·m·k·n per matmul), elementwise FLOPs as elements × passes it made over them, parameters of
the weight arrays it used, bytes from `.nbytes` after conversion to the workload's dtype.

Weights (weights.py) are made from the full model and split there, never from the `Dim`s
forward() passes, so a wrong symbolic size shows up as a mismatch instead of being copied.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..model.config import ModelConfig, Workload
from ..model.forward import Sizes, forward
from ..model.parallel import pp_layers
from ..model.plan import LayerPlan, LayerSpec, Reach, layer_plan, mtp_spec, widened
from ..model.stage import Stage
from . import (
    alibi,
    block_sparse,
    cca,
    compressed,
    deltanet,
    dsa,
    elementwise,
    hyper,
    inkling,
    llama4,
    mamba1,
    mamba2,
    mla,
    moe,
    rotary,
    zaya,
)
from . import kda as kda_rule
from .caches import ContiguousKV, KVCache
from .numeric_base import NumericBase
from .storage import measure
from .weights import Weights

PRECISIONS: dict[str, Any] = {"float32": np.float32, "float64": np.float64, "float16": np.float16}

# -- the interpreter ------------------------------------------------------------------------------
class NumericOps(NumericBase):
    # -- structure -------------------------------------------------------------------------------
    def layers(self, plan: LayerPlan) -> Iterator[tuple[int, LayerSpec, int]]:
        n = len(plan.kind_of)
        k = n if self.n_run is None else min(n, self.n_run)
        s = self.wl.pp
        # PP: stage i runs its layers, then hands the residual stream to stage i+1. With fewer
        # layers run than stages, every layer stands for a stage.
        cuts = set((np.cumsum(pp_layers(k, s))[:-1] - 1).tolist()) if k >= s else set(range(k))
        for layer in range(k):
            kind = plan.kind_of[layer]
            self._layer, self._kind = layer, kind
            self._mixer = plan.kinds[kind].mixer
            self.m = widened(self.base, plan.kinds[kind])  # dots3: the layer's own widths
            if self.on_layer:
                self.on_layer(layer, k)
            yield layer, plan.kinds[kind], kind
            self.m = self.base
            if s > 1 and layer in cuts:
                assert self._last is not None
                self.boundaries.append(measure(self._last[0], self.wl.act))
        self._layer, self._kind = -1, None

    def group(self, g: Any) -> None:
        self._group = g

    def extra_layers(self, plan: LayerPlan, kind: int, count: int) -> Iterator[int]:
        n = len(plan.kind_of)
        for layer in range(n, n + count):  # their own weights and cache: layers N, N+1, …
            self._layer, self._kind = layer, kind
            yield layer
        self._layer, self._kind = -1, None

    # -- operations ------------------------------------------------------------------------------
    def token_ids(self, B: Any, T: Any) -> np.ndarray:
        return self._rec("input.ids", "token ids", "input", self.ids[None], dtype="int64")

    def embed(self, ids: np.ndarray, V: Any, D: Any, split: Any) -> np.ndarray:
        vp = self.m.vocab_size if self.p == 1 else self.w.vocab_rows // self.p
        key, shape = ("embedding",), (self.w.vocab_rows, self.m.d_model)
        rows = self.w.rows(key, shape, ids[0])  # [B,T,D]: the rows looked up
        params = vp * self.m.d_model  # streamed: the slice no array holds whole
        if self.w.resident:  # the rank's slice of the table really allocated
            E = self.w.get(key, shape)
            params = (E[: self.m.vocab_size] if self.p == 1 else E.reshape(self.p, vp, -1)[0]).size
        if self.p == 1:
            x = rows[None]
        else:  # rank r looks up the ids in its slice, zeros elsewhere (the all-reduce sums them)
            x = np.zeros((self.p, *rows.shape), dtype=self.dt)
            owner = ids[0] // vp
            b, t = np.indices(ids[0].shape)
            x[owner, b, t] = rows
        return self._rec("embed", "embedding", "embed", x, params=params)

    def table(self, ids: np.ndarray, role: str, name: str, V: Any, W: Any) -> np.ndarray:
        shape = (int(V.value), int(W.value))
        rows = self.w.rows((role,), shape, ids[0])  # [B,T,W], every rank alike
        x = np.broadcast_to(rows[None], (self.p, *rows.shape)).astype(self.dt)
        return self._rec(role, name, "embed", x, params=shape[0] * shape[1])

    def shared_kv(self, layer: int, B: Any, Hkv: Any, Tk: Any, Dh: Any
                  ) -> tuple[np.ndarray, np.ndarray]:
        return self._kv_of[layer]  # what layer `layer`'s kv_cache returned this step

    def layer_input(self, x: np.ndarray, layer: int, role: str, name: str) -> np.ndarray:
        return self._rec(role, name, "slice", x[:, :, layer])

    def positions(self, x: np.ndarray, kind: str, rows: int | None) -> np.ndarray:
        D = self.m.d_model
        if kind == "learned":
            assert rows is not None
            P = self.w.get(("positions",), (rows, D))
            pe, params = P[self.pos], P.size
        else:  # a fixed table, not parameters (and, by convention, not counted as work)
            half = np.arange(0, D, 2) / D
            ang = self.pos[..., None] / (10000.0**half)
            pe = np.empty((*ang.shape[:-1], D), dtype=self.dt)
            pe[..., 0::2], pe[..., 1::2] = np.sin(ang), np.cos(ang)
            params = 0
        if pe.ndim == 3:  # per-sequence positions (left padding)
            pe = pe[None]
        y = x + pe
        return self._rec("pos.add", "position add", "add", y, ew=self._el(y), params=params)

    def rope_angles(self, T: Any, Dh: Any, base: float, sliding: bool = False) -> Any:
        # the rotated width R (Dh unless partial rotary; MLA's D_r): angles [T,R/2], tables [T,R]
        # the layer type's R (Laguna's sliding layers: their own), a Dim or a plain count
        r = self.m.rot if Dh is None else int(getattr(Dh, "value", Dh))
        ang, cos, sin = rotary.tables(r, self.pos, self.dt, self.m.rope_interleaved, base)
        if ang.ndim == 3:  # per-sequence positions [B,T,Dh] → [B,1,T,Dh] against [R,B,H,T,Dh]
            cos, sin = cos[:, None], sin[:, None]
        self._rec("rope.angles", "RoPE angles (sliding layers)" if sliding else "RoPE angles",
                  "outer", ang[None], ew=ang.size, dtype="fp32")
        return cos, sin  # what rope() turns with: the layer's own table

    def scale(self, x: np.ndarray, role: str, name: str, factor: float, label: str
              ) -> np.ndarray:
        # the scores are fresh from QKᵀ and used once: scale them in place
        before = x.reshape(-1)[:256].astype(np.float64)  # the factor is measured: after/before
        y = np.multiply(x, self.dt(factor), out=x if role == "attn.scale" else None)
        out = self._rec(role, name, "scale", y, ew=self._el(y))
        self.stages[-1].extra["factor"] = elementwise.measured_factor(before, y)
        return out

    def softcap(self, x: np.ndarray, role: str, name: str, cap: float) -> np.ndarray:
        y = elementwise.softcap(x, cap, self.dt)
        return self._rec(role, name, "softcap", y, ew=3 * self._el(y))

    def norm(self, x: np.ndarray, role: str, name: str, width: Any = None,
             kind: str | None = None) -> np.ndarray:
        m, n, D = self.m, self._el(x), x.shape[-1]
        key = (self._layer, role)
        beta = m.has_norm_bias if kind is None else kind == "layernorm_beta"
        kind = "layernorm" if beta and kind else m.norm_kind(kind)  # layernorm_beta: γ and β
        plus_one = m.norm_plus_one and kind == "rmsnorm"  # Gemma: γ around 0, × (1+γ)
        g = (self.w.get((*key, "γ"), (D,), base=0.0 if plus_one else 1.0) if kind != "l2norm"
             else np.ones(1, self.dt))
        params = g.size
        y, ew = rotary.normalize(x, kind)
        if kind == "l2norm":  # Llama 4's q/k norm: no γ
            return self._rec(role, name, kind, y, ew=ew)
        y *= (1 + g) if plus_one else g
        ew += n
        if beta:
            b = self.w.get((*key, "β"), (D,))
            y += b
            ew, params = ew + n, params + b.size
        return self._rec(role, name, kind, y, ew=ew, params=params)

    def linear(self, x: np.ndarray, role: str, name: str, d_in: Any, d_out: Any, bias: bool,
               split: Any) -> np.ndarray:
        shards, b, params, row_bias, W = self.w.linear(self._layer, role, self.p)
        rows = x.shape[1:-1]
        x2 = x.reshape(x.shape[0], -1, x.shape[-1])
        if W is not None:
            y, flops = self._mm(x2, W)
            params += 0 if self.w.borrowed(role, shards[0].key) else W[0].size  # tied: no new array
        else:
            y, flops, wparams = self._streamed(x2, shards, self.w.borrowed(role, shards[0].key))
            params += wparams
        ew = 0
        if b is not None:
            if row_bias:  # a row-parallel bias is added once: on rank 0, before the all-reduce
                y[0] += b
            else:
                y += b
            ew = self._el(y)
        y = y.reshape(y.shape[0], *rows, y.shape[-1])
        # the operands one rank multiplied: its input and its [d_in, width] weight
        return self._rec(role, name, "linear", y, flops=flops, ew=ew, params=params,
                         operands=(x.shape[1:], (x.shape[-1], y.shape[-1])))

    def split(self, x: np.ndarray, parts: list[Any]) -> list[np.ndarray]:
        if self._mixer != "attention":  # a mixer's fused projection: its parts in order
            cuts = np.cumsum([int(p.value) for p in parts])
            assert cuts[-1] == x.shape[-1]
            return np.split(x, cuts[:-1], axis=-1)
        if self.m.mla:
            return mla.split(x, parts)
        dh = self.m.dh
        kv = max(1, self.m.kv_heads // self.p) * dh
        widths = [self._hq * dh, kv, kv]
        assert len(parts) == 3 and sum(widths) == x.shape[-1]
        return [x[..., :widths[0]], x[..., widths[0]:widths[0] + kv], x[..., widths[0] + kv:]]

    def split_heads(self, x: np.ndarray, role: str, name: str, heads: Any, Dh: Any
                    ) -> np.ndarray:
        R, B, T, width = x.shape
        # MLA: latents (one head), kv_b; DeepSeek-V4's indexer: its own D_I; KDA: its heads of D_k
        dh = int(Dh.value) if (self.m.mla or role in ("attn.idx.heads", "attn.bidx.q.heads")
                               or role.startswith(("kda.", "ple."))) else self.m.layer_dh(
                                   self._layer)
        if role == "attn.v.heads" and not self.m.mla and self.m.v_head_dim is not None:
            dh = self.m.v_head_dim  # values of their own width (MiMo-V2-Flash)
        r = self._rec(role, f"{name}: reshape", "reshape", x.reshape(R, B, T, width // dh, dh))
        if role == "attn.q.heads":
            self._hq = width // dh
        return self._rec(role, f"{name}: transpose", "transpose", r.transpose(0, 1, 3, 2, 4))

    def rope(self, x: np.ndarray, role: str, name: str, angles: Any) -> np.ndarray:
        cos, sin = angles  # the layer's own table (rope_angles)
        if x.ndim == 4 and cos.ndim == 4:  # MLA's k_rope [R,B,T,D_r], per-sequence positions
            cos, sin = cos[:, 0], sin[:, 0]
        y, turned = rotary.rotate(x, cos, sin, self.m.rope_interleaved)
        return self._rec(role, name, "rope", y, ew=3 * self._el(turned))

    def head_norm(self, x: np.ndarray, role: str, name: str, heads: Any) -> np.ndarray:
        full = self.m.n_heads if role == "attn.q_norm" else self.m.kv_heads  # the layer's own
        g = self.w.get((self._layer, role, "γ"), (full, x.shape[-1]), base=1.0)
        gr = rotary.head_gammas(g, x.shape[0], x.shape[2])
        y, ew = rotary.normalize(x, "layernorm")
        y *= gr
        return self._rec(role, name, "layernorm", y, ew=ew + self._el(y), params=gr[0].size)

    def kv_cache(self, k: np.ndarray, v: np.ndarray, layer: int, Tk: Any, Tc: Any
                 ) -> tuple[np.ndarray, np.ndarray]:
        dh = k.shape[-1]
        if v.shape[-1] != dh:  # values of their own width (MiMo-V2-Flash): one entry of Dh + D_v
            kv = self.cache_step(layer, (np.concatenate([k, v], axis=-1),),
                                 lambda c: c[:, 0])[:, 0]
            return kv[..., :dh], kv[..., dh:]
        back = self.cache_step(layer, (k, v))
        self._kv_of[layer] = back[:, 0], back[:, 1]  # a KV-sharing layer reads them (Gemma 4)
        return back[:, 0], back[:, 1]

    # the variants' operations live in their own modules: MLA, MoE, ALiBi, Llama 4
    mla_cache, concat, head_linear = mla.cache, mla.concat, mla.head_linear
    route, experts, alibi, temperature = moe.route, moe.experts, alibi.add_bias, llama4.temperature
    conv1d, ssd, gated_norm = mamba2.conv1d, mamba2.ssd, mamba2.gated_norm  # Mamba-2
    delta_rule = deltanet.delta_rule  # gated DeltaNet
    head_sum, topk, select_mask = dsa.head_sum, dsa.topk, dsa.select_mask  # DSA
    shared_selection, index_cache = dsa.shared_selection, dsa.index_cache
    gather, selected_matmul = dsa.gather, dsa.selected_matmul
    block_cache, block_topk = block_sparse.block_cache, block_sparse.block_topk  # block-sparse
    block_mask, block_matmul = block_sparse.block_mask, block_sparse.block_matmul
    hc_expand, hc_flatten, hc_weights = hyper.hc_expand, hyper.hc_flatten, hyper.hc_weights
    hc_collapse, hc_merge = hyper.hc_collapse, hyper.hc_merge  # hyper-connections
    shared_kv_cache, compress = compressed.shared_kv_cache, compressed.compress  # DeepSeek-V4
    cat_keys, window_mask = compressed.cat_keys, compressed.window_mask
    grouped_linear, index_select = compressed.grouped_linear, compressed.index_select
    selective_scan = mamba1.selective_scan  # Mamba-1
    kda = kda_rule.kda  # Kimi Delta Attention
    cca_residual, cca_conv, delay, head_scale = (cca.cca_residual, cca.cca_conv, cca.delay,
                                                 cca.head_scale)  # CCA (cca.py)
    affine, scaled_residual, depth_carry = zaya.affine, zaya.scaled_residual, zaya.depth_carry
    res_conv, rel_bias, sink_route = inkling.res_conv, inkling.rel_bias, inkling.sink_route
    bank_scale, learned_scale = inkling.bank_scale, inkling.learned_scale  # Inkling
    log_scale = inkling.log_scale

    def repeat_kv(self, x: np.ndarray, role: str, name: str, groups: int, heads: Any
                  ) -> np.ndarray:
        return self._rec(role, name, "repeat", np.repeat(x, self._hq // x.shape[2], axis=2))

    def transpose_last(self, x: np.ndarray, role: str, name: str) -> np.ndarray:
        return self._rec(role, name, "transpose", x.swapaxes(-1, -2))

    def matmul(self, a: np.ndarray, b: np.ndarray, role: str, name: str, causal: bool,
               window: int | None, chunk: int | None = None) -> np.ndarray:
        out, flops = self._mm(a, b)
        if causal and self.wl.attention_flops == "causal" and not self.decoding:
            # a causal kernel computes only the (query, key) pairs the masks allow
            pairs = int(np.count_nonzero(self.causal & self._window(window)
                                         & llama4.chunk_mask(self, chunk, one_row=True)))
            qk = role in ("attn.scores", "attn.index_scores")  # queries × keys
            batch = self._el(out) // (out.shape[-2] * out.shape[-1])
            flops = 2 * batch * pairs * (a.shape[-1] if qk else b.shape[-1])
        return self._rec(role, name, "matmul", out, flops=flops,
                         operands=(a.shape[1:], b.shape[1:]))

    def mask(self, s: np.ndarray, role: str, name: str, kind: str, window: int | None = None
             ) -> np.ndarray:
        if kind == "causal":
            allowed = self.causal
        elif kind == "window":
            allowed = self._window(window)
        elif kind == "chunk":
            allowed = llama4.chunk_mask(self, window)
        else:  # padding: [B,1,1,T] over the keys
            allowed = self._key_valid()[:, None, None, :]
        np.copyto(s, self.neg, where=~allowed)
        return self._rec(role, name, "mask", s, ew=self._el(s))

    def softmax(self, s: np.ndarray, role: str, name: str, sinks: Any = None) -> np.ndarray:
        params = 0
        if sinks is not None:  # each head's sink logit as one more column, dropped after
            H = self.m.n_heads  # the layer's own (layer_widths)
            full = self.w.get((self._layer, "attn.sinks"), (H,))
            mine = full.reshape(-1, s.shape[2])  # [ranks, heads of a rank]
            col = np.broadcast_to(mine[: s.shape[0], None, :, None, None], (*s.shape[:-1], 1))
            s = np.concatenate([s, col.astype(s.dtype)], axis=-1)
            params, name = mine[0].size, f"{name} (with sinks)"
        # row max, subtract, exp, row sum, divide: in place, the scores are not needed again
        s -= s.max(axis=-1, keepdims=True)
        np.exp(s, out=s)
        s /= s.sum(axis=-1, keepdims=True)
        ew = 5 * self._el(s)
        if sinks is not None:
            s = s[..., :-1]
        return self._rec(role, name, "softmax", s, ew=ew, params=params)

    def clamp(self, x: np.ndarray, role: str, name: str, lo: float | None, hi: float
              ) -> np.ndarray:
        return self._rec(role, name, "clamp", np.clip(x, lo, hi), ew=self._el(x))

    def merge_heads(self, x: np.ndarray, role: str, name: str) -> np.ndarray:
        t = self._rec(role, f"{name}: transpose", "transpose", x.transpose(0, 1, 3, 2, 4))
        R, B, T, H, dh = t.shape
        return self._rec(role, f"{name}: reshape", "reshape", t.reshape(R, B, T, H * dh))

    def add(self, a: np.ndarray, b: np.ndarray, role: str, name: str) -> np.ndarray:
        y = a + b
        return self._rec(role, name, "add", y, ew=self._el(y))

    def activation(self, x: np.ndarray, role: str, name: str, kind: str) -> np.ndarray:
        if kind == "xielu":  # α_p, α_n: the layer's two learned scalars
            a = self.w.get((self._layer, role, "α"), (2,))
            y, passes = elementwise.xielu(x, a, self.dt)
            return self._rec(role, f"{name} ({kind})", kind, y, ew=passes * self._el(y),
                             params=a.size)
        y, passes = elementwise.activation(x, kind, self.dt)
        return self._rec(role, f"{name} ({kind})", kind, y, ew=passes * self._el(y))

    def mul(self, a: np.ndarray, b: np.ndarray, role: str, name: str) -> np.ndarray:
        y = a * b
        return self._rec(role, name, "mul", y, ew=self._el(y))

    def head_gate(self, o: np.ndarray, g: np.ndarray, role: str, name: str) -> np.ndarray:
        heads = g.shape[-1]
        y = (o.reshape(*o.shape[:-1], heads, -1) * g[..., None]).reshape(o.shape)
        return self._rec(role, name, "mul", y, ew=self._el(y))

    def allreduce(self, x: np.ndarray, role: str, name: str) -> np.ndarray:
        sent = measure(x[0], self.wl.act)  # one rank's partial sum, in the activation dtype
        return self._rec(role, name, "allreduce", x.sum(axis=0, keepdims=True), nbytes=sent)

    def allgather(self, x: np.ndarray, role: str, name: str, full: Any) -> np.ndarray:
        p, vp = x.shape[0], x.shape[-1]
        g = np.moveaxis(x, 0, -2).reshape(*x.shape[1:-1], p * vp)[..., : self.m.vocab_size]
        return self._rec(role, name, "allgather", g[None])

    def last_position(self, x: np.ndarray, role: str, name: str) -> np.ndarray:
        self.full_out = x  # every position: what the mask checks compare
        return self._rec(role, name, "slice", x[:, :, -1])


# -- one step -------------------------------------------------------------------------------------
@dataclass
class Step:
    logits: np.ndarray  # [B, N_vocab]: the last position
    full: np.ndarray  # every position, as it reached the last-position slice
    stages: list[Stage]
    boundaries: list[int]  # PP hand-offs, bytes each
    kv_bytes: list[int]  # per layer run, one rank
    kv_blocks: int | None = None  # a paged cache's blocks after this step
    gemms: list[tuple[Any, Any]] = field(default_factory=list)
    routed: list[np.ndarray] = field(default_factory=list)  # each MoE layer's [B,T,k] expert ids
    ep_traffic: list[dict[str, int]] = field(default_factory=list)
    mtp_kv_bytes: int = 0  # the MTP modules' own caches (layers N, N+1, …), one rank


def step(model: ModelConfig, wl: Workload, weights: Weights, ids: np.ndarray, *,
         p: int | None = None, cache: KVCache | None = None, layers: int | None = None,
         valid: np.ndarray | None = None,
         on_layer: Callable[[int, int], None] | None = None, keep_operands: bool = False) -> Step:
    """Run forward() once (a prefill of ids [B,T], or a decode of ids [B,1] on `cache`)."""
    p = wl.tp if p is None else p
    if cache is None:
        cache = ContiguousKV(wl.kv, windows(model), weights.dtype)
    ops = NumericOps(model, wl, weights, p, ids, cache, layers=layers, valid=valid,
                     on_layer=on_layer, keep_operands=keep_operands)
    with np.errstate(over="ignore", under="ignore"):
        logits = forward(ops, model, wl, Sizes.of(model, wl, p))
    assert ops.full_out is not None
    ran = len(layer_plan(model).kind_of) if layers is None else min(layers, model.n_layers)
    mtp = sum(b for layer, b in zip(cache.held_layers(), cache.nbytes(), strict=True)
              if layer >= model.n_layers)
    return Step(logits[0], ops.full_out[0], ops.stages, ops.boundaries, cache.layer_bytes(ran),
                getattr(cache, "blocks", None), ops.gemms, ops.routed, ops.ep_traffic, mtp)


def windows(model: ModelConfig) -> list[Reach]:
    """Each layer's KV reach (None: full; W: a window; Chunk(C): chunked), for the caches."""
    plan = layer_plan(model)
    # the MTP modules' blocks (layers N, N+1, …): the last layer's kind, or their own (MiMo)
    return [*(plan.kinds[k].reach for k in plan.kind_of), *[mtp_spec(model).reach] *
            model.mtp_layers]
