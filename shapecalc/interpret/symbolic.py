"""The symbolic interpreter: every tensor is a list of `Dim`s; every operation records a Stage.

FLOPs come from the operand dims (a matmul [m,k]×[k,n] is 2·m·k·n, 1 multiply-add = 2 FLOPs),
so formulas such as `2·B·H·T²·Dh` are derived, never typed. Elementwise work is counted per
element with the constants in `ELEMENTWISE` and kept apart from the matmul FLOPs.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any, Literal

from ..model.config import ModelConfig, Workload
from ..model.expr import Dim, expr_of, formula, sum_formula
from ..model.forward import ACT, Sizes, clamped, forward
from ..model.plan import LayerPlan, LayerSpec, layer_kv_heads, widened
from ..model.stage import SPLIT_NOTE, Group, Split, Stage
from .symbolic_base import ELEMENTWISE, Sym, SymbolicBase, _half, _total

QK_ROLES = ("attn.scores", "attn.index_scores")  # the score matmuls: queries × keys

__all__ = ["ELEMENTWISE", "Sym", "SymbolicOps", "stages"]


VARIANTS: dict[str, tuple[str, str]] = {}  # SymbolicOps' method → (module, function name)


class _Variant:
    """A method of SymbolicOps that lives in symbolic_<module>.py as sym_<name>: the module is
    imported on the first call's lookup, and the function then replaces this on the class."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __set_name__(self, owner: type, attr: str) -> None:
        self.owner, self.attr = owner, attr
        VARIANTS[attr] = (self.module, self.name)  # the table stays once the class holds fn

    def __get__(self, obj: object, owner: type) -> Any:
        fn = getattr(importlib.import_module(f".symbolic_{self.module}", __package__),
                     f"sym_{self.name}")
        setattr(self.owner, self.attr, fn)
        return fn if obj is None else fn.__get__(obj, owner)


def _variants(module: str, *names: str) -> tuple[Any, ...]:
    return tuple(_Variant(module, n) for n in names)


class SymbolicOps(SymbolicBase):
    # -- structure ---------------------------------------------------------------------------
    def layers(self, plan: LayerPlan) -> Iterator[tuple[int, LayerSpec, int]]:
        # Layers of one kind are alike: record one block per kind, marked ×count, so an 80-layer
        # trace stays short.
        for kind, (spec, count) in enumerate(zip(plan.kinds, plan.counts, strict=True)):
            self._repeat, self._kind = count, kind
            self.m = widened(self.base, spec)  # dots3: the layer's own widths
            yield plan.first_layer(kind), spec, kind
        self._repeat, self._kind, self.m = 1, None, self.base

    def group(self, g: Group) -> None:
        self._group = g

    def extra_layers(self, plan: LayerPlan, kind: int, count: int) -> Iterator[int]:
        self._repeat, self._kind = count, kind  # alike: one block marked ×count
        yield len(plan.kind_of)
        self._repeat, self._kind = 1, None

    # -- operations --------------------------------------------------------------------------
    def token_ids(self, B: Dim, T: Dim) -> Sym:
        return self._rec("input.ids", "token ids", "input", Sym((B, T), "int64"))

    def embed(self, ids: Sym, V: Dim, D: Dim, split: Split) -> Sym:
        m = self.m
        note = SPLIT_NOTE[split] if self.wl.tp > 1 else ""
        if m.tie_embeddings:
            note = (note + ", " if note else "") + "shared with the LM head"
        return self._rec(
            "embed",
            "embedding",
            "embed",
            self._act(*ids.dims, D),
            params=formula([V, D]),
            note=note,
            split=split,
        )

    def table(self, ids: Sym, role: str, name: str, V: Dim, W: Dim) -> Sym:
        return self._rec(role, name, "embed", self._act(*ids.dims, W), params=formula([V, W]),
                         note="replicated" if self.wl.tp > 1 else "")

    def shared_kv(self, layer: int, B: Dim, Hkv: Dim, Tk: Dim, Dh: Dim) -> tuple[Sym, Sym]:
        kv = self._act(B, Hkv, Tk, Dh)
        return kv, kv

    def layer_input(self, x: Sym, layer: int, role: str, name: str) -> Sym:
        B, _, T, w = x.dims
        return self._rec(role, name, "slice", Sym((B, T, w), x.dtype), note="view")

    def positions(self, x: Sym, kind: str, rows: int | None) -> Sym:
        if kind == "learned":
            assert rows is not None
            return self._rec("pos.add", "position add", "add", x, ew=ELEMENTWISE["add"],
                             params=formula([self.z.sym("P", rows), self.z.D]),
                             note=f"learned table [P,D], P = max_positions = {rows}")
        return self._rec("pos.add", "position add", "add", x, ew=ELEMENTWISE["add"],
                         note="sinusoidal")

    def rope_angles(self, T: Dim, Dh: Dim, base: float, sliding: bool = False) -> Sym:
        # positions ⊗ inverse frequencies → [T,Dh/2] angles, an elementwise outer product (as
        # transformers ≥ 5 computes it; FlopCounterMode counts no matmul here)
        which = f"the sliding layers, θ={base:g}" if sliding else "all layers"
        return self._rec("rope.angles", "RoPE angles (sliding layers)" if sliding else
                         "RoPE angles", "outer", Sym((T, _half(Dh)), "fp32"),
                         ew=ELEMENTWISE["mul"], note=f"once per forward, shared by {which}")

    def scale(self, x: Sym, role: str, name: str, factor: float, label: str) -> Sym:
        self._rec(role, name, "scale", x, ew=ELEMENTWISE["scale"], note=f"× {label}")
        self.stages[-1].extra["factor"] = factor  # verify measures it on the arrays
        return x

    def softcap(self, x: Sym, role: str, name: str, cap: float) -> Sym:
        return self._rec(role, name, "softcap", x, ew=ELEMENTWISE["softcap"],
                         note=f"{cap:g}·tanh(x/{cap:g})")

    def norm(self, x: Sym, role: str, name: str, width: Dim | None = None,
             kind: str | None = None) -> Sym:
        m = self.m
        beta = m.has_norm_bias if kind is None else kind == "layernorm_beta"
        kind = "layernorm" if beta and kind else m.norm_kind(kind)  # layernorm_beta: γ and β
        if kind == "l2norm":  # Llama 4's q/k norm, nanochat's every norm: RMS without γ
            return self._rec(role, name, kind, x, ew=ELEMENTWISE["rmsnorm"],
                             note="RMS over each head's Dh, no weights" if width is None or
                             len(x.dims) == 4 else f"RMS over {width.symbol}, no weights")
        per = ELEMENTWISE[kind] + 1 + int(beta)
        p = _total((self.z.D if width is None else width) * (2 if beta else 1))
        over = "" if width is None else (
            " over each head's Dh" if len(x.dims) == 4 else f" over {width.symbol}")
        note = ("γ, β" if beta else "γ") + over
        note += " (× (1+γ))" if m.norm_plus_one and kind == "rmsnorm" else ""
        return self._rec(role, name, kind, x, ew=per, params=p, note=note)

    def temperature(self, q: Sym, role: str, name: str, beta: float = 0.1, floor: int = 8192,
                    shift: int = 1) -> Sym:
        # one factor per query position (without the shift's +1: one pass fewer), then q × its
        # position's factor
        pos = "pos+1" if shift else "pos"
        return self._rec(role, name, "scale", q, ew=ELEMENTWISE["mul"],
                         ew_extra=formula([ELEMENTWISE["temperature"] - (not shift), self.z.Tq]),
                         note=f"q × (1 + {beta:g}·ln(1 + ⌊({pos})/{floor}⌋)) per position"
                         + (" (NoPE)" if shift else ""))

    def linear(self, x: Sym, role: str, name: str, d_in: Dim, d_out: Dim, bias: bool,
               split: Split) -> Sym:
        rows = x.dims[:-1]
        out = self._act(*rows, d_out)
        tied = role == "head.lm" and self.m.tie_embeddings
        shared = role == "mtp.head" and self.m.mtp_shared_head  # the model's LM head
        w = Dim.const(0) if tied or shared else d_in * d_out
        params = _total(w + (d_out if bias else 0))
        note = SPLIT_NOTE[split] if self.wl.tp > 1 else ""
        if tied:
            note = (note + ", " if note else "") + "tied: weights counted at the embedding"
        if shared:
            note = (note + ", " if note else "") + "the model's LM head: counted there"
        if bias and split == "row" and self.z.p > 1:
            note += ", bias added once after the all-reduce"
        return self._rec(
            role,
            name,
            "linear",
            out,
            flops=formula([2, *rows, d_in, d_out]),
            params=params,
            note=note,
            ew_extra=formula([*rows, d_out]) if bias else (0, "0"),
            split=split,
            operands=((*rows, d_in), (d_in, d_out)),
        )

    def split(self, x: Sym, parts: list[Dim]) -> list[Sym]:
        # a view of the fused output: the next stages (split heads) show each part
        return [Sym((*x.dims[:-1], p), x.dtype) for p in parts]

    def split_heads(self, x: Sym, role: str, name: str, heads: Dim, Dh: Dim) -> Sym:
        B, T = x.dims[0], x.dims[1]
        r = self._rec(role, f"{name}: reshape", "reshape", Sym((B, T, heads, Dh), x.dtype),
                      note="view")
        return self._rec(role, f"{name}: transpose", "transpose", Sym((B, heads, T, Dh), r.dtype))

    def rope(self, x: Sym, role: str, name: str, angles: Sym) -> Sym:
        m = self.m
        # the layer's table turns every dim it reaches (Gemma 4's global layers: all of Dh_g;
        # Laguna's sliding layers: their own R); a block indexer wider than it turns R of D_I;
        # MLA's k_rope/q_rope are written as its R
        r = 2 * angles.dims[-1].value
        if x.dims[-1].value <= r and not m.mla:
            return self._rec(role, name, "rope", x, ew=ELEMENTWISE["rope"])
        # partial rotary: only the first R of Dh turn; the rest pass through
        R = self.z.sym("R" if r == m.rot else "R_s", r)
        return self._rec(role, name, "rope", x,
                         ew_extra=formula([ELEMENTWISE["rope"], *x.dims[:-1], R]),
                         note=f"first R={r} of Dh={m.dh}")

    def head_norm(self, x: Sym, role: str, name: str, heads: Dim) -> Sym:
        return self._rec(role, name, "layernorm", x, ew=ELEMENTWISE["layernorm"] + 1,
                         params=_total(heads * self.z.Dh), note="γ per head, over each head's Dh")

    def kv_cache(self, k: Sym, v: Sym, layer: int, Tk: Dim, Tc: Dim) -> tuple[Sym, Sym]:
        z = self.z
        B, hkv, _, dh = k.dims  # the layer's own KV heads (MiMo-V2-Flash's sliding layers)
        dv = v.dims[-1]
        note = "K and V; replicated KV head" if z.p > layer_kv_heads(self.m, layer) else "K and V"
        if dv == dh:
            self.cache_stages((Dim.const(2), B, hkv), dh, Tk, Tc, note)
        else:  # values of their own width: one entry of Dh + D_v a head
            self.cache_stages((B, hkv), dh + dv, Tk, Tc, note)
        if self.wl.phase == "prefill":
            return k, v
        return self._act(B, hkv, Tk, dh), self._act(B, hkv, Tk, dv)

    # The variants' operations, each in its own module (symbolic_<module>.py, sym_<name>),
    # imported the first time a model calls one (_Variant): a plain decoder loads none of them.
    # Multi-head Latent Attention (interpret/mla.py, beside the executor's)
    mla_cache, concat, head_linear = _variants("mla", "cache", "concat", "head_linear")
    conv1d, ssd, gated_norm = _variants("mamba2", "conv1d", "ssd", "gated_norm")  # Mamba-2
    (delta_rule,) = _variants("deltanet", "delta_rule")  # gated DeltaNet
    # DeepSeek Sparse Attention
    head_sum, topk, select_mask = _variants("dsa", "head_sum", "topk", "select_mask")
    shared_selection, index_cache = _variants("dsa", "shared_selection", "index_cache")
    gather, selected_matmul = _variants("dsa", "gather", "selected_matmul")
    block_cache, block_topk, block_mask, block_matmul = _variants(  # block-sparse
        "block_sparse", "block_cache", "block_topk", "block_mask", "block_matmul")
    hc_expand, hc_flatten, hc_weights, hc_collapse, hc_merge = _variants(  # hyper-connections
        "hyper", "hc_expand", "hc_flatten", "hc_weights", "hc_collapse", "hc_merge")
    # DeepSeek-V4's attention
    shared_kv_cache, compress = _variants("compressed", "shared_kv_cache", "compress")
    cat_keys, window_mask = _variants("compressed", "cat_keys", "window_mask")
    grouped_linear, index_select = _variants("compressed", "grouped_linear", "index_select")
    (selective_scan,) = _variants("mamba1", "selective_scan")  # Mamba-1
    (kda,) = _variants("kda", "kda")  # Kimi Delta Attention
    cca_residual, cca_conv, delay, head_scale = _variants(  # CCA
        "cca", "cca_residual", "cca_conv", "delay", "head_scale")
    affine, scaled_residual, depth_carry = _variants(  # ZAYA
        "zaya", "affine", "scaled_residual", "depth_carry")
    res_conv, rel_bias, sink_route, bank_scale, learned_scale, log_scale = _variants(  # Inkling
        "inkling", "res_conv", "rel_bias", "sink_route", "bank_scale", "learned_scale",
        "log_scale")

    def repeat_kv(self, x: Sym, role: str, name: str, groups: int, heads: Dim) -> Sym:
        d = x.dims
        return self._rec(role, name, "repeat", Sym((d[0], heads, d[2], d[3]), x.dtype),
                         note=f"each KV head serves {groups} query heads")

    def transpose_last(self, x: Sym, role: str, name: str) -> Sym:
        d = x.dims
        return self._rec(role, name, "transpose", Sym((*d[:-2], d[-1], d[-2]), x.dtype),
                         note="view")

    def matmul(self, a: Sym, b: Sym, role: str, name: str, causal: bool, window: int | None,
               chunk: int | None = None) -> Sym:
        batch, (mm, kk), nn = a.dims[:-2], a.dims[-2:], b.dims[-1]
        out = self._act(*batch, mm, nn)
        inner = kk if role in QK_ROLES else nn  # Dh
        triangle = causal and self.wl.phase == "prefill"  # a causal kernel's lower triangle
        if triangle and self.wl.attention_flops == "causal":
            return self._rec(role, name, "matmul", out,
                             flops=formula([*batch, *self._pairs(window, chunk), inner]),
                             note="causal half: lower triangle only", operands=(a.dims, b.dims))
        # QKᵀ lists its factors query, key, width so that it reads 2·B·H·T²·Dh as the seeds do
        order = [mm, nn, kk] if role in QK_ROLES else [mm, kk, nn]
        out = self._rec(role, name, "matmul", out, flops=formula([2, *batch, *order]),
                        operands=(a.dims, b.dims))
        if triangle and self.z.poly:  # the closed form plans times on the triangle: this pass
            self.stages[-1].poly_causal = expr_of(  # gives it too (no second pass)
                formula([*batch, *self._pairs(window, chunk), inner])[1])
        return out

    def _pairs(self, window: int | None, chunk: int | None) -> list[Dim]:
        """2 × the (query, key) pairs a causal kernel reads, as factors: Σ_i min(i+1, W)."""
        T = self.z.Tq
        if chunk is not None and chunk < T.value:
            # q whole chunks of C and a last one of r = T − q·C (1 ≤ r ≤ C) tokens:
            # 2·pairs = q·C·(C+1) + r·(r+1)
            q = (T.value - 1) // chunk
            r = T + (-q * chunk)
            return [r * (r + 1) + q * chunk * (chunk + 1)]
        if window is None or window >= T.value:
            return [T, T + 1]
        w = self.z.sym("W", window)
        return [w, T * 2 + w * -1 + 1]

    def mask(self, s: Sym, role: str, name: str,
             kind: Literal["causal", "padding", "window", "chunk"],
             window: int | None = None) -> Sym:
        d = s.dims
        one = Dim.const(1)
        shown = {
            "causal": (one, one, d[-2], d[-1]),
            "padding": (d[0], one, one, d[-1]),
            "window": (one, one, d[-2], d[-1]),
            "chunk": (one, one, d[-2], d[-1]),
        }[kind]
        note = f"mask {'[B,1,1,T]' if kind == 'padding' else '[1,1,T,T]'} broadcast to the scores"
        if kind == "window":
            note = f"keys older than W={window} masked; " + note
        if kind == "chunk":
            note = f"keys outside the query's chunk of C={window} masked; " + note
        out = self._rec(role, name, "mask", s, ew=ELEMENTWISE["mask"], note=note)
        self.stages[-1].extra["mask_dims"] = [x.symbol for x in shown]
        return out

    def alibi(self, s: Sym, role: str, name: str) -> Sym:
        # the bias table (slope × distance) is fixed, like a sinusoidal table: not counted
        return self._rec(role, name, "alibi", s, ew=ELEMENTWISE["add"],
                         note="+ per-head slope × key distance, broadcast to the scores")

    def softmax(self, s: Sym, role: str, name: str, sinks: Dim | None = None) -> Sym:
        if sinks is None:
            return self._rec(
                role, name, "softmax", s, ew=ELEMENTWISE["softmax"],
                note="over keys, row max subtracted",
            )
        # one more column per row: the head's sink logit, dropped after the softmax
        *rows, keys = s.dims
        return self._rec(role, f"{name} (with sinks)", "softmax", s,
                         ew_extra=formula([ELEMENTWISE["softmax"], *rows, keys + 1]),
                         params=_total(sinks), note="over keys and the head's sink")

    def route(self, logits: Sym, role: str, name: str, k: Dim, by_id: bool = False) -> Sym:
        m, (*rows, E) = self.m, logits.dims
        scoring = m.router_scoring
        if by_id:  # hash routing: the k experts looked up by token id, the scores weigh them
            parts = [formula([ELEMENTWISE[scoring], *rows, E])]
            if m.norm_topk_prob:
                parts.append(formula([2, *rows, k]))
            return self._rec(role, f"{name} ({scoring}, by token id)", "route",
                             Sym((*rows, k), "fp32"), ew_extra=sum_formula(parts),
                             note=f"{scoring} over E; the {k.value} experts of each token id "
                             "(tid2eid, a buffer)")
        if scoring == "topk_sigmoid":  # Llama 4: top k of the logits, a sigmoid of those k
            parts = [formula([ELEMENTWISE["topk"], *rows, E]),
                     formula([ELEMENTWISE["sigmoid"], *rows, k])]
            return self._rec(role, f"{name} (top-k, sigmoid)", "route", Sym((*rows, k), "fp32"),
                             ew_extra=sum_formula(parts),
                             note=f"top-{k.value} of the logits, sigmoid of those {k.value}")
        bias = int(m.routing_bias)  # AFMoE: scores + a bias of E choose (a pass, E parameters)
        buf = int(m.router_hidden is not None)  # ZAYA: + its balancing biases (a buffer)
        parts = [formula([ELEMENTWISE[scoring] + bias + buf, *rows, E]),
                 formula([ELEMENTWISE["topk"], *rows, E])]
        if m.norm_topk_prob:  # the k weights summed, then divided
            parts.append(formula([2, *rows, k]))
        note = f"{scoring} over E, top-{k.value}" + (", renormalised" if m.norm_topk_prob else "")
        return self._rec(role, f"{name} ({scoring}, top-k)", "route", Sym((*rows, k), "fp32"),
                         ew_extra=sum_formula(parts), note=note, params=_total(E * bias))

    def experts(self, h: Sym, routing: Sym, D: Dim, E: Dim, k: Dim, Dffe: Dim) -> Sym:
        m = self.m
        rows = h.dims[:-1]
        pair = (*rows, k)  # (token, expert) pairs: each token runs k experts
        bias = m.expert_bias

        def mats(role: str, name: str, d_in: Dim, d_out: Dim, split: Split) -> Sym:
            # E experts' matrices, of which each token multiplies by k
            out = self._act(*pair, d_out)
            note = f"{E.value} experts, {k.value} per token"
            if self.z.p > 1:
                note += f", each expert {SPLIT_NOTE[split]}"
            return self._rec(
                role, name, "linear", out, flops=formula([2, *pair, d_in, d_out]),
                params=_total(E * d_in * d_out + (E * d_out if bias else 0)),
                ew_extra=formula([*pair, d_out]) if bias else (0, "0"), split=split,
                note=note, operands=((*pair, d_in), (E, d_in, d_out)))

        act = ACT[m.ffn]
        if m.routing_on_input:  # Llama 4: each (token, expert) input × its routing weight
            self._rec("moe.experts.in", "experts: input × routing weight", "mul",
                      self._act(*pair, D), ew=ELEMENTWISE["mul"])
        if m.gated:
            g = mats("moe.experts.gate", "experts: gate", D, Dffe, "column")
            u = mats("moe.experts.up", "experts: up", D, Dffe, "column")
            if m.swiglu_limit is not None:
                g, u = clamped(self, m, "moe.experts", g, u)
            a = self._rec("moe.experts.act", f"experts: activation ({act})", act, g,
                          ew=ELEMENTWISE[act])
            u = self._rec("moe.experts.mul", "experts: gate ⊙ up", "mul", a,
                          ew=ELEMENTWISE["mul"])
        else:
            u = mats("moe.experts.up", "experts: up", D, Dffe, "column")
            u = self._rec("moe.experts.act", f"experts: activation ({act})", act, u,
                          ew=ELEMENTWISE[act])
        mats("moe.experts.down", "experts: down", Dffe, D, "row")
        if m.routing_on_input:  # the weights were applied to the inputs: a plain sum
            return self._rec("moe.combine", "combine (sum)", "combine", self._act(*rows, D),
                             ew_extra=formula([ELEMENTWISE["add"], *pair, D]),
                             note="each token's k expert outputs summed")
        return self._rec("moe.combine", "combine (weighted sum)", "combine", self._act(*rows, D),
                         ew=0, ew_extra=formula([ELEMENTWISE["combine"], *pair, D]),
                         note="each token's k expert outputs × their routing weights")

    def clamp(self, x: Sym, role: str, name: str, lo: float | None, hi: float) -> Sym:
        to = f"[{lo:g}, {hi:g}]" if lo is not None else f"≤ {hi:g}"
        return self._rec(role, name, "clamp", x, ew=ELEMENTWISE["clamp"], note=f"clamp {to}")

    def merge_heads(self, x: Sym, role: str, name: str) -> Sym:
        B, H, T, Dh = x.dims
        t = self._rec(role, f"{name}: transpose", "transpose", Sym((B, T, H, Dh), x.dtype))
        return self._rec(role, f"{name}: reshape", "reshape", Sym((B, T, H * Dh), t.dtype),
                         note="view")

    def add(self, a: Sym, b: Sym, role: str, name: str) -> Sym:
        return self._rec(role, name, "add", a, ew=ELEMENTWISE["add"])

    def activation(self, x: Sym, role: str, name: str, kind: str) -> Sym:
        if kind == "xielu":  # its two learned scalars α_p, α_n (replicated on every rank)
            return self._rec(role, f"{name} ({kind})", kind, x, ew=ELEMENTWISE[kind],
                             params=(2, "2"), note="α_p, α_n")
        return self._rec(role, f"{name} ({kind})", kind, x, ew=ELEMENTWISE[kind])

    def mul(self, a: Sym, b: Sym, role: str, name: str) -> Sym:
        return self._rec(role, name, "mul", a, ew=ELEMENTWISE["mul"])

    def head_gate(self, o: Sym, g: Sym, role: str, name: str) -> Sym:
        return self._rec(role, name, "mul", o, ew=ELEMENTWISE["mul"], note="one gate a head")

    def allreduce(self, x: Sym, role: str, name: str) -> Sym:
        return self._rec(role, name, "allreduce", x, note="sum of the p partial results")

    def allgather(self, x: Sym, role: str, name: str, full: Dim) -> Sym:
        return self._rec(role, name, "allgather", Sym((*x.dims[:-1], full), x.dtype),
                         note="each rank's vocabulary slice")

    def last_position(self, x: Sym, role: str, name: str) -> Sym:
        d = x.dims
        return self._rec(role, name, "slice", Sym((d[0], d[-1]), x.dtype), note="x[:, -1, :]")


def stages(model: ModelConfig, wl: Workload, p: int = 1, poly: bool = False) -> list[Stage]:
    """The stage list of one forward step; with p > 1, of one tensor-parallel rank. With `poly`,
    each stage also carries its FLOPs, elementwise FLOPs and elements as polynomials in B and T
    (`Stage.poly`)."""
    z = Sizes.of(model, wl, p, poly=poly)
    ops = SymbolicOps(model, wl, z)
    forward(ops, model, wl, z)
    return ops.stages
