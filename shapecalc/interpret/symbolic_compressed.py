"""The symbolic rules of DeepSeek-V4's attention (model/compressed.py): the one K=V cache, the
hca compressor (its entries, cached like keys, and its buffer, a state), the window mask and
the grouped output projection.

Elementwise convention of the compressor, per element of the windows [B,n,m′,Dh] it pools:
8 (+ position bias, softmax 5, × kv and the sum over the window: 2); each entry's RMSNorm with γ
4 per element and RoPE 3 per turned element (R of Dh)."""

from __future__ import annotations

from ..model.expr import Dim, Expr, formula
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


def sym_compress(self: SymbolicBase, kv: Sym, gate: Sym, layer: int, ratio: int) -> Sym:
    z, m = self.z, self.m
    before, after, buf = entries(z, ratio)
    new = _count(self, "n_new", after - before)
    n = _count(self, "⌊T/m′⌋" if not z.decode else "⌊T′/m′⌋", after)
    b = _count(self, "T mod m′", buf, tokens_less=buf)
    r = z.sym("m′", ratio)
    one = Dim.const(1)
    self._rec("attn.hca.pool", "compressor pool (softmax over m′)", "compress",
              self._act(z.B, new, z.Dh), ew_extra=formula([POOL_EW, z.B, new, r, z.Dh]),
              params=_total(r * z.Dh), note="position bias [m′,Dh]")
    self._rec("attn.hca.norm", "compressor norm", "rmsnorm", self._act(z.B, new, z.Dh),
              ew=ELEMENTWISE["rmsnorm"] + 1, params=_total(z.Dh), note="γ over Dh")
    R = z.sym("R", m.rot)
    self._rec("attn.hca.rope", "RoPE entries", "rope", self._act(z.B, new, z.Dh),
              ew_extra=formula([ELEMENTWISE["rope"], z.B, new, R]),
              note="at each window's first position")
    self._rec("state.hca", "compressor buffer (kv, gate)", "state_cache",
              self._act(Dim.const(2), z.B, b, z.Dh), note="an unfinished window's tokens")
    kvd = self.wl.kv
    if self.wl.phase == "prefill":
        self._rec("kv.entries.write", "KV cache write (entries)", "kv_cache",
                  Sym((z.B, n, z.Dh), kvd), note="compressed entries")
    else:
        self._rec("kv.entries.append", "KV cache append (entries)", "kv_append",
                  Sym((z.B, new, z.Dh), kvd), note="compressed entries")
        self._rec("kv.entries.read", "KV cache read (entries)", "kv_cache",
                  Sym((z.B, n, z.Dh), kvd), note="compressed entries")
    return self._act(z.B, one, n, z.Dh)


def sym_cat_keys(self: SymbolicBase, a: Sym, b: Sym, role: str, name: str) -> Sym:
    d = a.dims
    return self._rec(role, name, "concat", self._act(*d[:-2], d[-2] + b.dims[-2], d[-1]))


def sym_window_mask(self: SymbolicBase, s: Sym, role: str, name: str, window: int | None,
                    ratio: int | None) -> Sym:
    note = f"keys older than W={window}" + (f", entries not yet closed (m′={ratio})"
                                            if ratio else "") + " masked"
    return self._rec(role, name, "mask", s, ew=ELEMENTWISE["mask"], note=note)


def sym_grouped_linear(self: SymbolicBase, x: Sym, role: str, name: str, groups: Dim,
                       d_in: Dim, d_out: Dim) -> Sym:
    rows = x.dims[:-1]
    return self._rec(role, name, "linear", self._act(*rows, groups * d_out),
                     flops=formula([2, *rows, d_in, d_out]), params=_total(d_in * d_out),
                     note=f"{groups.value} groups: each H·Dh/g → d_g")
