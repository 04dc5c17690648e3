"""The symbolic interpreter's Inkling operations (model/inkling.py): the residual short convs
with their fp32 windows, the relative position bias, the router with its shared sink, the
shared experts' weights and the MLP's learned scale. SymbolicOps takes these as its methods;
inkling.py (interpret/) is the executor's side.

FLOPs follow FlopCounterMode on transformers 5.24's torch path: each conv is an
aten.convolution of T + K_c − 1 outputs in prefill (padding K_c − 1) and 2 in decode ([window
K_c, new token]), 2·B·C·K_c·span; the bias profiles an aten.mm, r [B·T·H, D_rel] × [D_rel, X],
2·B·T·H·D_rel·X; the gather and the masked fill count nothing. The state: four conv windows
[B, C, K_c] a layer, in fp32 whatever the model's dtype (the convs run in fp32)."""

from __future__ import annotations

from ..model.expr import Dim, formula, sum_formula
from .symbolic_base import ELEMENTWISE, Sym, SymbolicBase, _total
from .symbolic_mamba2 import conv_span

# elementwise FLOPs of the router per routed logit (sigmoid, + the correction bias, top-k) and
# per kept weight (log-sigmoid, the softmax, × route_scale, × the learned scale)
ROUTE_EW = {"routed": ELEMENTWISE["sigmoid"] + ELEMENTWISE["add"] + ELEMENTWISE["topk"],
            "kept": ELEMENTWISE["sigmoid"] + ELEMENTWISE["softmax"] + 2 * ELEMENTWISE["scale"]}


def sym_res_conv(self: SymbolicBase, x: Sym, layer: int, role: str, name: str, channels: Dim
                 ) -> Sym:
    z, K = self.z, self.z.Kc
    span = conv_span(self, K)
    out = self._rec(role, name, "conv1d", x, flops=formula([2, z.B, channels, K, span]),
                    params=_total(channels * K), ew=ELEMENTWISE["add"],
                    note=f"x + depthwise conv (kernel K_c={K.value}, causal, fp32)",
                    operands=((z.B, channels, span), (channels, K)))
    self._rec("state.conv", "conv state", "state_cache", Sym((z.B, channels, K), "fp32"),
              note="the last K_c inputs of each channel (fp32), per sequence")
    return out


def sym_rel_bias(self: SymbolicBase, s: Sym, r: Sym, role: str, name: str, extent: Dim) -> Sym:
    B, H, Tq = s.dims[0], s.dims[1], s.dims[2]
    d = self.z.sym("D_rel", self.m.rel_dim or 0)
    self._rec(f"{role}.profiles", "relative logits r·P", "linear", self._act(B, Tq, H, extent),
              flops=formula([2, B, Tq, H, d, extent]), params=_total(d * extent),
              note="each head's D_rel-mix of the bias profiles, one per distance < X",
              operands=((B, Tq, H, d), (d, extent)))
    return self._rec(role, name, "add", s, ew=ELEMENTWISE["add"],
                     note="the bias at each key's distance (0 at X and past it)")


def sym_sink_route(self: SymbolicBase, logits: Sym, role: str, name: str, k: Dim, shared: Dim
                   ) -> tuple[Sym, Sym]:
    *rows, _ = logits.dims
    E = self.z.E
    ew = [formula([ROUTE_EW["routed"], *rows, E]), formula([ROUTE_EW["kept"], *rows, k]),
          formula([ROUTE_EW["kept"], *rows, shared])]
    routing = self._rec(role, name, "route", Sym((*rows, k), "fp32"), ew_extra=sum_formula(ew),
                        params=(1, "1"), note="top k of sigmoid + bias; softmax over the "
                        "log-sigmoids of the k and the n_s shared; × route scale × s")
    return routing, Sym((*rows, shared), self.wl.act)


def sym_bank_scale(self: SymbolicBase, u: Sym, g: Sym, role: str, name: str, n: Dim) -> Sym:
    return self._rec(role, name, "mul", u, ew=ELEMENTWISE["mul"],
                     note="each shared expert's Dff_s values × its routing weight")


def sym_learned_scale(self: SymbolicBase, x: Sym, role: str, name: str) -> Sym:
    return self._rec(role, name, "scale", x, ew=ELEMENTWISE["scale"], params=(1, "1"),
                     note="× a learned scalar")


def sym_log_scale(self: SymbolicBase, x: Sym, role: str, name: str, alpha: float, floor: int
                  ) -> Sym:
    return self._rec(role, name, "scale", x, ew=ELEMENTWISE["scale"],
                     note=f"each query row × τ = 1 + {alpha:g}·ln(max(1, (pos+1)/{floor}))")
