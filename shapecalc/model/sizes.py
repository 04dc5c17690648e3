"""Sizes: the dims one rank works with, each carrying its symbol. forward() and every mixer or
attention variant beside it (mla.py, …) read them, so they live apart from forward.py."""

from __future__ import annotations

from typing import NamedTuple

from .config import ModelConfig, Workload, ceil_div
from .expr import Dim, Expr
from .plan import Chunk, LayerSpec, held


class Sizes(NamedTuple):
    """The dims one rank works with, each carrying its symbol (`H/p`, `T′`, …)."""

    B: Dim
    Tq: Dim  # query tokens of this step: T in prefill, 1 in decode
    Tk: Dim  # keys a full-attention query reads: T in prefill, T′ = T+1 in decode
    D: Dim
    H: Dim
    Hkv: Dim
    Dh: Dim
    Dff: Dim
    E: Dim  # routed experts (every rank holds each expert's Dff_e/p slice)
    k: Dim  # experts a token is routed to
    Dffe: Dim  # a routed expert's width (per rank)
    Dffs: Dim  # all shared experts' width, n_s·Dff_s (per rank)
    V: Dim
    N: Dim
    Dc: Dim  # MLA: the KV latent width (kv_lora_rank)
    Dq: Dim  # MLA: the query latent width (q_lora_rank)
    Dn: Dim  # MLA: a head's q/k width without RoPE
    Dr: Dim  # MLA: the decoupled RoPE width (and the RoPE width of every model)
    Dv: Dim  # MLA: a head's value width
    Hs: Dim  # Mamba-2: heads
    Ds: Dim  # Mamba-2: a head's width
    G: Dim  # Mamba-2: groups sharing B and C
    Ns: Dim  # Mamba-2: state per head channel (d_state)
    Kc: Dim  # the causal convolution's kernel
    L: Dim  # the scan's chunk
    Hqk: Dim  # gated DeltaNet: query/key heads
    Dqk: Dim  # gated DeltaNet: a query/key head's width
    Hv: Dim  # gated DeltaNet: value heads
    Dhv: Dim  # gated DeltaNet: a value head's width
    Dsc: Dim  # short conv: the channels one rank convolves (D, or D/p)
    Ks: Dim  # DSA: keys each query selects (K_sel)
    HI: Dim  # DSA: the lightning indexer's heads
    DI: Dim  # DSA: an indexer head's width
    Di: Dim  # Mamba-1: the inner width e·D
    Rdt: Dim  # Mamba-1: the rank of the Δ projection
    Kd: Dim  # CCA: the depthwise q/k conv's kernel
    Kg: Dim  # CCA: the grouped (per-head) q/k conv's kernel
    Kq: Dim  # CCA: the tokens its conv window keeps, K_d + K_g − 2
    Drt: Dim  # ZAYA's router: its hidden width
    p: int
    kv_replicated: bool
    T: int  # the workload's T
    decode: bool
    poly: bool  # only B and T are symbols; every other size is its number (the closed form)

    def sym(self, symbol: str, value: int) -> Dim:
        """A size that prints as `symbol` (a plain number in poly mode)."""
        return Dim.const(value) if self.poly else Dim.of(symbol, value)

    def keys(self, spec: LayerSpec) -> tuple[Dim, Dim]:
        """(Tk, Tc) of one layer kind: keys each query reads, tokens its cache holds after the
        step. A sliding layer's cache keeps at most W tokens, so decode reads T′ = min(T+1, W)."""
        if spec.chunk is not None and self.T + int(self.decode) > spec.chunk:
            return self._chunk_keys(spec.chunk)
        W = spec.window  # (a chunked layer within its first chunk reads as a full one)
        if not self.decode:
            return self.Tk, (self.sym("W", W) if W is not None and W < self.T else self.Tk)
        if W is not None and W < self.T + 1:
            tk = self.sym("T′", W)
        else:  # T′ = T + 1: in poly mode, that very polynomial in T
            tk = Dim(self.T + 1, Expr.sym("T") + Expr.const(1)) if self.poly else Dim.of(
                "T′", self.T + 1)
        return tk, tk

    def heads_of(self, spec: LayerSpec) -> Sizes:
        """The sizes of a layer with its own query heads H_ℓ (Laguna), else these."""
        if spec.heads is None:
            return self
        h = ceil_div(spec.heads, self.p)
        if self.poly:
            return self._replace(H=Dim.const(h))
        H = Dim.of("H_ℓ", spec.heads) if self.p == 1 else Dim(
            h, Expr.sym("H_ℓ") * Expr([((("p", -1),), 1)]))
        return self._replace(H=H)

    def _chunk_keys(self, C: int) -> tuple[Dim, Dim]:
        """A chunked layer (Llama 4): its last query reads the keys of its own chunk, T_c =
        ((n−1) mod C) + 1 of the n tokens after the step, and the cache keeps just those. Prefill
        computes all T×T scores (eager attention; the chunk mask hides the others), so its
        queries read Tk = T; decode reads T_c = (T mod C) + 1 keys."""
        n = self.T + (1 if self.decode else 0)
        c = held(Chunk(C), n)
        # in poly mode (T in one chunk's regime) a polynomial: n − C·⌊(n−1)/C⌋
        tc = Dim(c, Expr.sym("T") + Expr.const(c - self.T)) if self.poly else Dim.of("T_c", c)
        return (tc if self.decode else self.Tk), tc

    @staticmethod
    def of(model: ModelConfig, wl: Workload, p: int | None = None, poly: bool = False) -> Sizes:
        """The sizes of one rank. With `poly`, only B and T are symbols (every formula is then a
        polynomial in B and T: what the closed form reads)."""
        p = wl.tp if p is None else p
        T = wl.seq

        def of(sym: str, value: int) -> Dim:
            return Dim.const(value) if poly else Dim.of(sym, value)

        def shard(sym: str, value: int) -> Dim:
            if poly:
                return Dim.const(ceil_div(value, p))
            if p == 1:
                return Dim.of(sym, value)
            return Dim(ceil_div(value, p), Expr.sym(sym) * Expr([((("p", -1),), 1)]))

        def shard_n(n_sym: str, n: int, sym: str, value: int) -> Dim:  # n·value, split over p
            d = Dim.of(n_sym, n) * Dim.of(sym, value)
            return d if p == 1 else Dim(ceil_div(n * value, p), d.expr * Expr([((("p", -1),), 1)]))

        hkv = model.kv_heads
        replicated = p > hkv
        decode = wl.phase == "decode"
        tq = Dim.const(1) if decode else Dim.of("T", T)
        return Sizes(
            B=Dim.of("B", wl.batch),
            Tq=tq,
            Tk=Dim.of("T′", T + 1) if decode else tq,
            D=of("D", model.d_model),
            H=shard("H", model.n_heads),
            # vLLM: with fewer KV heads than ranks, every rank holds one (replicated) KV head.
            # MHA prints its KV heads as H, as the seeds do (2·N·B·H·T·Dh)
            Hkv=Dim.const(1) if replicated else shard("H" if hkv == model.n_heads else "H_kv", hkv),
            Dh=of("Dh", model.dh),
            Dff=shard("Dff", model.d_ff),
            E=of("E", model.n_experts or 0),
            k=of("k", model.experts_per_token or 0),
            Dffe=shard("Dff_e", model.dff_expert),
            Dffs=shard("Dff_s", model.n_shared_experts * model.dff_shared)
            if model.n_shared_experts == 1 or poly
            else shard_n("n_s", model.n_shared_experts, "Dff_s", model.dff_shared),
            V=shard("N_vocab", model.vocab_size),
            N=of("N", model.n_layers),
            Dc=of("D_c", model.kv_lora_rank or 0),
            Dq=of("D_q", model.q_lora_rank or 0),
            Dn=of("D_n", model.qk_nope_head_dim or 0),
            Dr=of("D_r", model.rot) if model.mla else of("Dh", model.dh),
            Dv=of("D_v", model.v_dim) if model.mla else of("Dh", model.dh),
            Hs=shard("H_s", model.ssm_heads or 0),
            Ds=of("D_s", model.ssm_head_dim or 0),
            G=shard("G", model.ssm_groups),
            Ns=of("N_s", model.ssm_state or 0),
            Kc=of("K_c", model.conv_kernel or 0),
            L=of("L", model.scan_chunk or 0),
            Hqk=shard("H_qk", model.gdn_qk_heads or 0),
            Dqk=of("D_qk", model.gdn_qk_dim or 0),
            Hv=shard("H_v", model.gdn_v_heads or 0),
            Dhv=of("D_hv", model.gdn_v_dim or 0),
            Dsc=shard("D", model.d_model),
            Ks=of("K_sel", model.index_topk or 0),
            HI=of("H_I", model.index_heads or 0),
            DI=of("D_I", model.index_head_dim or 0),
            Di=of("D_i", model.mamba_inner),
            Rdt=of("R_dt", model.mamba_dt_rank or 0),
            Kd=of("K_d", model.cca_time0 or 0),
            Kg=of("K_g", model.cca_time1 or 0),
            Kq=of("K_q", (model.cca_time0 or 0) + (model.cca_time1 or 0) - 2),
            Drt=of("D_rt", model.router_hidden or 0),
            p=p,
            kv_replicated=replicated,
            T=T,
            decode=decode,
            poly=poly,
        )
