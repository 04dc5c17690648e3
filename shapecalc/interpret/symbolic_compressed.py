"""The symbolic rules of DeepSeek-V4's attention (model/compressed.py): the one K=V cache, the
hca compressor (its entries, cached like keys, and its buffer, a state), the window mask and
the grouped output projection.

Elementwise convention of the compressor, per element of the windows [B,n,m′,Dh] it pools:
8 (+ position bias, softmax 5, × kv and the sum over the window: 2); each entry's RMSNorm with γ
4 per element and RoPE 3 per turned element (R of Dh)."""

from __future__ import annotations

from ..model.expr import Dim, Expr, formula, sum_formula
from .symbolic_base import ELEMENTWISE, Sym, SymbolicBase, _total

POOL_EW = 8  # + position bias, softmax (5), × kv, + over the window


def entries(z: object, ratio: int) -> tuple[int, int, int]:
    """(entries before the step, after it, tokens in the buffer after it)."""
    T, dec = z.T, int(z.decode)  # type: ignore[attr-defined]
    return (T // ratio if dec else 0), (T + dec) // ratio, (T + dec) % ratio


def _count(self: SymbolicBase, symbol: str, value: int, tokens_less: int | None = None) -> Dim:
    """A count that is constant within a closed-form regime (entries), or T − j·m′ there
    (`tokens_less`: the buffer's tokens, T + decode − j·m′)."""
    if not self.z.poly:
        return Dim.of(symbol, value) if value else Dim.const(0)
    if tokens_less is None:
        return Dim.const(value)
    return Dim(value, Expr.sym("T") + Expr.const(value - self.z.T))


def sym_shared_kv_cache(self: SymbolicBase, kv: Sym, layer: int, Tk: Dim, Tc: Dim) -> Sym:
    z = self.z
    self.cache_stages((z.B, Dim.const(1)), z.Dh, Tk, Tc, "K = V: one tensor")
    if self.wl.phase == "prefill":
        return kv
    return self._act(z.B, Dim.const(1), Tk, z.Dh)


def sym_compress(self: SymbolicBase, kv: Sym, gate: Sym, layer: int, ratio: int,
                 part: str = "hca") -> Sym:
    z, m = self.z, self.m
    before, after, buf = entries(z, ratio)
    mark = "m′" if part == "hca" else "m"
    new = _count(self, "n_new", after - before)
    n = _count(self, f"⌊T/{mark}⌋" if not z.decode else f"⌊T′/{mark}⌋", after)
    b = _count(self, f"T mod {mark}", buf, tokens_less=buf)
    r = z.sym(mark, ratio)
    overlap = part != "hca"
    w = kv.dims[-1] if not overlap else (
        z.sym("D_I", m.csa_index_head_dim or 0) if part == "idx" else z.Dh)
    slots = r * 2 if overlap else r
    name = {"hca": "compressor", "csa": "compressor", "idx": "indexer compressor"}[part]
    self._rec(f"attn.{part}.pool", f"{name} pool (softmax over {'2m' if overlap else 'm′'})",
              "compress", self._act(z.B, new, w),
              ew_extra=formula([POOL_EW, z.B, new, slots, w]),
              params=_total(r * kv.dims[-1]), note=f"position bias [{mark},{kv.dims[-1].symbol}]")
    self._rec(f"attn.{part}.norm", f"{name} norm", "rmsnorm", self._act(z.B, new, w),
              ew=ELEMENTWISE["rmsnorm"] + 1, params=_total(w), note=f"γ over {w.symbol}")
    R = z.sym("R", m.rot)
    self._rec(f"attn.{part}.rope", f"RoPE {name} entries", "rope", self._act(z.B, new, w),
              ew_extra=formula([ELEMENTWISE["rope"], z.B, new, R]),
              note="at each window's first position")
    self._rec(f"state.{part}", f"{name} buffer (kv, gate)", "state_cache",
              self._act(Dim.const(2), z.B, b, kv.dims[-1]), note="an unfinished window's tokens")
    if overlap:  # the last window's first half, for the next window (its gate biased: fp32)
        o = _count(self, mark, ratio if after else 0)
        self._rec(f"state.{part}.overlap", f"{name} overlap kv", "state_cache",
                  self._act(z.B, o, w), note="the last window's first half")
        self._rec(f"state.{part}.overlap", f"{name} overlap gate", "state_cache",
                  Sym((z.B, o, w), "fp32"), note="+ position bias: fp32")
    kvd = self.wl.kv
    if self.wl.phase == "prefill":
        self._rec(f"kv.entries.{part}.write", f"KV cache write ({name} entries)", "kv_cache",
                  Sym((z.B, n, w), kvd), note="compressed entries")
    else:
        self._rec(f"kv.entries.{part}.append", f"KV cache append ({name} entries)", "kv_append",
                  Sym((z.B, new, w), kvd), note="compressed entries")
        self._rec(f"kv.entries.{part}.read", f"KV cache read ({name} entries)", "kv_cache",
                  Sym((z.B, n, w), kvd), note="compressed entries")
    return self._act(z.B, Dim.const(1), n, w)


def sym_index_select(self: SymbolicBase, q: Sym, k: Sym, w: Sym, ratio: int, topk: int) -> Sym:
    B, HI, T, DI = q.dims
    n = k.dims[-2]
    scores = self._rec("attn.idx.scores", "indexer scores q·kᵀ", "matmul",
                       Sym((B, T, HI, n), "fp32"), flops=formula([2, B, T, HI, n, DI]),
                       operands=((B, T, HI, DI), (B, Dim.const(1), DI, n)))
    self._rec("attn.idx.relu", "indexer ReLU, × 1/√D_I", "relu", scores, ew=2)
    parts = [formula([2, B, T, HI, n]), formula([1, *w.dims])]
    weighed = self._rec("attn.idx.weigh", "Σ_h w_h·scores", "combine", Sym((B, T, n), "fp32"),
                        ew_extra=sum_formula(parts), note="w × 1/√H_I; × scores, summed")
    self._rec("attn.idx.mask", "entries not yet closed masked", "mask", weighed, ew=1)
    K = self.z.sym("K_sel", topk) if topk <= n.value else n
    return self._rec("attn.idx.topk", f"top-{topk} entries", "topk", Sym((B, T, K), "int64"),
                     ew_extra=formula([ELEMENTWISE["topk"], B, T, n]),
                     note="one comparison per score")


def sym_cat_keys(self: SymbolicBase, a: Sym, b: Sym, role: str, name: str) -> Sym:
    d = a.dims
    return self._rec(role, name, "concat", self._act(*d[:-2], d[-2] + b.dims[-2], d[-1]))


def sym_window_mask(self: SymbolicBase, s: Sym, role: str, name: str, window: int | None,
                    ratio: int | None, selected: Sym | None = None) -> Sym:
    note = f"keys older than W={window}" + (f", entries not yet closed ({ratio})"
                                            if ratio else "") + " masked"
    if selected is not None:
        note += ", entries not selected (top K_sel) masked"
    return self._rec(role, name, "mask", s, ew=ELEMENTWISE["mask"], note=note)


def sym_grouped_linear(self: SymbolicBase, x: Sym, role: str, name: str, groups: Dim,
                       d_in: Dim, d_out: Dim) -> Sym:
    rows = x.dims[:-1]
    return self._rec(role, name, "linear", self._act(*rows, groups * d_out),
                     flops=formula([2, *rows, d_in, d_out]), params=_total(d_in * d_out),
                     note=f"{groups.value} groups: each H·Dh/g → d_g")
